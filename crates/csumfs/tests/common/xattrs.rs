//! xattrs as the kernel lists and reads them (through a mount), and POSIX
//! ACLs in the VFS encoding the tests set.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// An ACL in the VFS encoding: (tag, perm, id) entries.
pub fn vfs_acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut out = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// The names the kernel's `llistxattr` gives for `path` (any bytes).
pub fn kernel_xattr_names(path: &Path) -> Vec<OsString> {
    let mut names = vec![0u8; 65536];
    // SAFETY: valid path and buffer of the given size.
    let n = unsafe { libc::llistxattr(c_path(path).as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "llistxattr {}: {}", path.display(), std::io::Error::last_os_error());
    names[..n as usize].split(|&b| b == 0).filter(|n| !n.is_empty()).map(|n| OsString::from_vec(n.to_vec())).collect()
}

/// Every xattr of `path` as the kernel returns it.
pub fn kernel_xattrs(path: &Path) -> BTreeMap<OsString, Vec<u8>> {
    let c = c_path(path);
    let mut out = BTreeMap::new();
    for name in kernel_xattr_names(path) {
        let cname = CString::new(name.as_bytes()).unwrap();
        let mut value = vec![0u8; 65536];
        // SAFETY: valid path, name and buffer.
        let len = unsafe { libc::lgetxattr(c.as_ptr(), cname.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        assert!(len >= 0, "lgetxattr {name:?}: {}", std::io::Error::last_os_error());
        value.truncate(len as usize);
        out.insert(name, value);
    }
    out
}
