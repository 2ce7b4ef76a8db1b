//! POSIX ACLs kept in step with the mode, judged against the kernel's
//! ext4: the same steps run on two twin images — csumfs's library on one,
//! the kernel (a read-write loop mount, syscalls) on the other — and each
//! step's errno, then every file's mode and xattrs as the kernel reads
//! them back, must agree; `e2fsck -fn` judges csumfs's image. The steps:
//! access ACLs that set the mode (one the mode says exactly is not
//! stored), `chmod` under an ACL with a named user (the mask must follow,
//! or the user keeps access), default ACLs inherited by new files and
//! directories instead of the umask, a default ACL on a file, and the
//! kernel's refusals of malformed values.

mod common;

use common::xattrs::{kernel_xattr_names, kernel_xattrs, vfs_acl};
use common::{assert_clean, have_e2fsprogs, kernel_mount_with, mke2fs, with_kernel_mount, Scratch};
use csumfs::{InheritedAcls, NewInode, Options, SetAttr, Volume, XattrMode};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const ACCESS: &str = "system.posix_acl_access";
const DEFAULT: &str = "system.posix_acl_default";
const NO_ID: u32 = u32::MAX;

enum Step {
    /// A file (`touch`: mode 0666) or directory (`mkdir`: 0777) at a path,
    /// under a umask.
    File(&'static str, u16),
    Dir(&'static str, u16),
    SetXattr(&'static str, &'static str, Vec<u8>),
    Chmod(&'static str, u16),
    /// Owner and group.
    Chown(&'static str, u32, u32),
    /// An access ACL (`setfacl --set`, its entries as the value says) set
    /// by user 1000 in group 1000, with group 0 among its supplementary
    /// groups or none.
    SetAclAsUser(&'static str, &'static str, Vec<u8>, bool),
}

/// The user the steps act as where not root.
const USER: u32 = 1000;

fn steps() -> Vec<Step> {
    use Step::*;
    let (u, g, m, o) = (0x01, 0x04, 0x10, 0x20);
    let named = |tag: u16, perm: u16, id: u32| (tag, perm, id);
    vec![
        File("same", 0o022),
        // Says what the mode can: the mode becomes 0740, nothing stored.
        SetXattr("same", ACCESS, vfs_acl(&[(u, 7, NO_ID), (g, 4, NO_ID), (o, 0, NO_ID)])),
        File("named", 0o022),
        // A named user: stored; the group bits are the mask's (rw).
        SetXattr(
            "named",
            ACCESS,
            vfs_acl(&[(u, 6, NO_ID), named(0x02, 6, 1000), (g, 4, NO_ID), (m, 6, NO_ID), (o, 4, NO_ID)]),
        ),
        // The mask must become ---: user 1000 loses access.
        Chmod("named", 0o600),
        // No mask: the group entry takes the group bits.
        Chmod("nomask", 0o750),
        Dir("inherit", 0o022),
        // An access ACL first (its entry ahead of the default one), then
        // the default ACL the new inodes take.
        SetXattr(
            "inherit",
            ACCESS,
            vfs_acl(&[(u, 7, NO_ID), (g, 5, NO_ID), named(0x08, 7, 100), (m, 7, NO_ID), (o, 5, NO_ID)]),
        ),
        SetXattr(
            "inherit",
            DEFAULT,
            vfs_acl(&[(u, 7, NO_ID), named(0x02, 7, 1000), (g, 5, NO_ID), (m, 7, NO_ID), (o, 5, NO_ID)]),
        ),
        // No umask under a default ACL: the ACL narrowed to 0666 / 0777.
        File("inherit/file", 0o077),
        Dir("inherit/dir", 0o077),
        File("inherit/dir/deeper", 0o022),
        Dir("plain", 0o027),
        // A default ACL whose entries the mode can say: a new file stores none.
        SetXattr("plain", DEFAULT, vfs_acl(&[(u, 6, NO_ID), (g, 4, NO_ID), (o, 0, NO_ID)])),
        File("plain/file", 0o022),
        // A default ACL on a file: EACCES; empty, nothing to do.
        SetXattr("same", DEFAULT, vfs_acl(&[(u, 7, NO_ID), (g, 4, NO_ID), (o, 0, NO_ID)])),
        SetXattr("same", DEFAULT, Vec::new()),
        // Malformed: too short, another version, a partial entry, no
        // other, a named user who is no one, bits past rwx, out of order.
        SetXattr("named", ACCESS, vec![2, 0]),
        SetXattr("named", ACCESS, {
            let mut v = vfs_acl(&[(u, 6, NO_ID), (g, 4, NO_ID), (o, 4, NO_ID)]);
            v[0] = 1;
            v
        }),
        SetXattr("named", ACCESS, [vfs_acl(&[(u, 6, NO_ID), (g, 4, NO_ID), (o, 4, NO_ID)]), vec![0; 7]].concat()),
        SetXattr("named", ACCESS, vfs_acl(&[(u, 6, NO_ID), (g, 4, NO_ID)])),
        SetXattr(
            "named",
            ACCESS,
            vfs_acl(&[(u, 6, NO_ID), named(0x02, 6, NO_ID), (g, 4, NO_ID), (m, 6, NO_ID), (o, 4, NO_ID)]),
        ),
        SetXattr("named", ACCESS, vfs_acl(&[(u, 0o16, NO_ID), (g, 4, NO_ID), (o, 4, NO_ID)])),
        SetXattr("named", ACCESS, vfs_acl(&[(g, 4, NO_ID), (u, 6, NO_ID), (o, 4, NO_ID)])),
        SetXattr("named", ACCESS, vfs_acl(&[(u, 6, NO_ID), named(0x02, 6, 7), (g, 4, NO_ID), (o, 4, NO_ID)])),
        // The mask, not the group entry, sets the group bits (0570).
        File("masked", 0o022),
        SetXattr(
            "masked",
            ACCESS,
            vfs_acl(&[(u, 5, NO_ID), named(0x02, 7, 1000), (g, 1, NO_ID), (m, 7, NO_ID), (o, 0, NO_ID)]),
        ),
        Chmod("masked", 0o751),
        // The header alone removes the ACL; the mode stays.
        File("cleared", 0o022),
        SetXattr(
            "cleared",
            ACCESS,
            vfs_acl(&[(u, 6, NO_ID), (g, 4, NO_ID), named(0x08, 4, 100), (m, 4, NO_ID), (o, 0, NO_ID)]),
        ),
        SetXattr("cleared", ACCESS, vfs_acl(&[])),
        // A set-group-ID file of user 1000 in group 0: an access ACL its
        // owner sets clears S_ISGID unless the owner is in group 0
        // (`posix_acl_update_mode`).
        File("sgid_out", 0o022),
        Chown("sgid_out", USER, 0),
        Chmod("sgid_out", 0o2770),
        SetAclAsUser("sgid_out", "u::rwx,u:1001:r,g::rwx,m::rwx,o::-", sgid_acl(), false),
        File("sgid_in", 0o022),
        Chown("sgid_in", USER, 0),
        Chmod("sgid_in", 0o2770),
        SetAclAsUser("sgid_in", "u::rwx,u:1001:r,g::rwx,m::rwx,o::-", sgid_acl(), true),
    ]
}

/// The sgid steps' ACL, as `setfacl` passes it.
fn sgid_acl() -> Vec<u8> {
    vfs_acl(&[(0x01, 7, NO_ID), (0x02, 4, 1001), (0x04, 7, NO_ID), (0x10, 7, NO_ID), (0x20, 0, NO_ID)])
}

/// Runs the steps through csumfs's library; each step's errno (0: done).
fn run_csumfs(image: &Path) -> Vec<i32> {
    let mut v = Volume::open(image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let mut results = Vec::new();
    for step in steps() {
        let result = match step {
            Step::File(path, umask) | Step::Dir(path, umask) => {
                let dir = matches!(step, Step::Dir(..));
                let (parent, name) = path.rsplit_once('/').map_or(("", path), |(p, n)| (p, n));
                let parent = v.resolve(&format!("/{parent}")).unwrap().ino;
                let asked = if dir { 0o040_777 } else { 0o100_666 };
                let (mode, acls) = v.acl_create(parent, asked, umask).unwrap();
                let new = NewInode { mode, uid: 0, gid: 0 };
                let made =
                    if dir { v.mkdir(parent, name.as_bytes(), new) } else { v.create(parent, name.as_bytes(), new) };
                v.store_inherited_acls(made.unwrap().ino, &acls).map(drop)
            }
            Step::SetXattr(path, name, ref value) => {
                let ino = v.resolve(&format!("/{path}")).unwrap().ino;
                v.setxattr(ino, name, value, XattrMode::Either).map(drop)
            }
            Step::Chmod(path, mode) => {
                let ino = v.resolve(&format!("/{path}")).unwrap().ino;
                v.set_attr(ino, SetAttr { mode: Some(mode), ..SetAttr::default() }).map(drop)
            }
            Step::Chown(path, uid, gid) => {
                let ino = v.resolve(&format!("/{path}")).unwrap().ino;
                v.set_attr(ino, SetAttr { uid: Some(uid), gid: Some(gid), ..SetAttr::default() }).map(drop)
            }
            Step::SetAclAsUser(path, _, ref value, in_group) => {
                let ino = v.resolve(&format!("/{path}")).unwrap().ino;
                v.setxattr_by(ino, ACCESS, value, XattrMode::Either, in_group).map(drop)
            }
        };
        results.push(result.map_or_else(|e| e.errno(), |()| 0));
    }
    v.sync().unwrap();
    results
}

/// Runs the steps through the kernel on its read-write mount at `mnt`.
fn run_kernel(mnt: &Path) -> Vec<i32> {
    let c = |path: &str| CString::new(mnt.join(path).as_os_str().as_bytes()).unwrap();
    let errno = |rc: i32| if rc == 0 { 0 } else { std::io::Error::last_os_error().raw_os_error().unwrap() };
    let mut results = Vec::new();
    for step in steps() {
        results.push(match step {
            Step::File(path, umask) | Step::Dir(path, umask) => {
                let make = if matches!(step, Step::Dir(..)) { "mkdir" } else { "touch" };
                let script = format!("umask {umask:o} && {make} \"$1\"");
                let made = Command::new("sh").args(["-c", &script, "sh"]).arg(mnt.join(path)).status().unwrap();
                assert!(made.success(), "kernel: {make} {path}");
                0
            }
            Step::SetXattr(path, name, ref value) => {
                let name = CString::new(name).unwrap();
                // SAFETY: valid path, name and value of the given length.
                errno(unsafe { libc::setxattr(c(path).as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) })
            }
            Step::Chmod(path, mode) => {
                // SAFETY: a valid path.
                errno(unsafe { libc::chmod(c(path).as_ptr(), libc::mode_t::from(mode)) })
            }
            Step::Chown(path, uid, gid) => {
                // SAFETY: a valid path.
                errno(unsafe { libc::chown(c(path).as_ptr(), uid, gid) })
            }
            Step::SetAclAsUser(path, spec, _, in_group) => {
                let groups = if in_group { "--groups=0" } else { "--clear-groups" };
                let set = Command::new("setpriv")
                    .args([&format!("--reuid={USER}"), &format!("--regid={USER}"), groups, "setfacl", "--set", spec])
                    .arg(mnt.join(path))
                    .status()
                    .unwrap();
                assert!(set.success(), "kernel: setfacl as user {USER} on {path}");
                0
            }
        });
    }
    results
}

/// Every path's mode and xattrs as the kernel reads them at `mnt`.
fn kernel_view(mnt: &Path) -> BTreeMap<String, (u32, BTreeMap<std::ffi::OsString, Vec<u8>>)> {
    let mut out = BTreeMap::new();
    for path in [
        "same",
        "named",
        "inherit",
        "inherit/file",
        "inherit/dir",
        "inherit/dir/deeper",
        "plain",
        "plain/file",
        "masked",
        "nomask",
        "cleared",
        "sgid_out",
        "sgid_in",
    ] {
        let full = mnt.join(path);
        let mode = std::fs::symlink_metadata(&full).unwrap().permissions().mode();
        out.insert(path.to_string(), (mode, kernel_xattrs(&full)));
    }
    out
}

#[test]
fn acls_keep_the_mode_in_step_as_the_kernels_ext4_does() {
    // setfacl sets the twin's ACLs as another user (setpriv: util-linux).
    if !have_e2fsprogs() || common::tool_in("setfacl", "acl").is_none() {
        return;
    }
    let scratch = Scratch::new("acl");
    let (ours, theirs) = (scratch.0.join("csumfs.img"), scratch.0.join("kernel.img"));
    mke2fs(&ours, "4096", "16M");
    // An access ACL without a mask (nothing named: a tool other than the
    // kernel stored it), in ext4's encoding: owner rw, group r, other r.
    let stored: [(&str, &[u8]); 1] = [("nomask", &[1, 0, 0, 0, 1, 0, 6, 0, 4, 0, 4, 0, 0x20, 0, 4, 0])];
    for (file, value) in stored {
        let raw = scratch.0.join(format!("{file}.bin"));
        std::fs::write(&raw, value).unwrap();
        common::debugfs_write(&ours, &format!("write /dev/null {file}"));
        common::debugfs_write(&ours, &format!("ea_set -r -f {} /{file} {ACCESS}", raw.display()));
    }
    std::fs::copy(&ours, &theirs).unwrap();
    let our_results = run_csumfs(&ours);
    assert_clean(&ours, "ACLs set, inherited and chmodded");
    {
        // As ext4_symlink: a symlink is 0777, no umask, no ACL, even under
        // a default ACL.
        let v = Volume::open(&ours, Options::default()).unwrap();
        let inherit = v.resolve("/inherit").unwrap().ino;
        assert_eq!(v.acl_create(inherit, 0o120_777, 0o077).unwrap(), (0o120_777, InheritedAcls::default()));
    }
    {
        // And takes none (ext4's symlinks have no ACL operations).
        let mut v = Volume::open(&ours, Options { write: true, ..Options::default() }).unwrap();
        let link = v.symlink(v.resolve("/").unwrap().ino, b"link", b"same", 0, 0).unwrap().ino;
        let owner_only = vfs_acl(&[(0x01, 6, NO_ID), (0x04, 4, NO_ID), (0x20, 4, NO_ID)]);
        for name in [ACCESS, DEFAULT] {
            let refused = v.setxattr(link, name, &owner_only, XattrMode::Either).unwrap_err();
            assert_eq!(refused.errno(), libc::EOPNOTSUPP, "{name} on a symlink");
        }
        v.unlink(v.resolve("/").unwrap().ino, b"link").unwrap();
        v.sync().unwrap();
    }
    assert_clean(&ours, "ACLs refused on a symlink");
    let mnt = scratch.0.join("mnt");
    if !kernel_mount_with(&theirs, &mnt, "loop") {
        return;
    }
    let kernel = std::panic::catch_unwind(|| (run_kernel(&mnt), kernel_view(&mnt)));
    common::kernel_umount(&mnt);
    let (kernel_results, kernel_view_of_theirs) = kernel.unwrap_or_else(|p| std::panic::resume_unwind(p));
    for (i, (ours, theirs)) in our_results.iter().zip(&kernel_results).enumerate() {
        assert_eq!(ours, theirs, "step {i}: errno (csumfs, kernel)");
    }
    let refused = kernel_results.iter().filter(|&&e| e != 0).count();
    assert_eq!(refused, 9, "the kernel refuses the malformed values and the default ACL on a file, nothing else");
    let mut ours_seen = None;
    with_kernel_mount(&ours, &mnt, std::panic::AssertUnwindSafe(|| ours_seen = Some(kernel_view(&mnt))));
    let ours_seen = ours_seen.expect("the kernel mounted csumfs's image after mounting its twin");
    for (path, want) in &kernel_view_of_theirs {
        assert_eq!(&ours_seen[path], want, "{path}: (mode, xattrs) as the kernel reads csumfs's image vs its own");
    }
    let sgid = |path: &str| ours_seen[path].0 & 0o7777;
    assert_eq!((sgid("sgid_out"), sgid("sgid_in")), (0o770, 0o2770), "S_ISGID cleared outside the group only");
    let (mode, attrs) = &ours_seen["named"];
    assert_eq!(
        (mode & 0o777, attrs[std::ffi::OsStr::new(ACCESS)][28..32].to_vec()),
        (0o600, vec![0x10, 0, 0, 0]),
        "chmod 600 empties the mask"
    );
}

/// ACL values on disk that are not ACLs (e2fsck does not look inside
/// them), written raw by debugfs: the kernel lists every name, reads a
/// 2-byte value and one naming a user without the mask `posix_acl_valid`
/// requires as `EINVAL`, and the header alone as no ACL (`ENODATA`) —
/// csumfs answers the same, and none stops a listing.
#[test]
fn stored_acls_that_are_not_are_read_as_the_kernel_reads_them() {
    if !have_e2fsprogs() || common::tool("debugfs").is_none() {
        return;
    }
    let scratch = Scratch::new("acl-damaged");
    let image = scratch.0.join("d.img");
    mke2fs(&image, "4096", "16M");
    let values = [
        ("short", vec![1u8, 0]),
        ("header", vec![1, 0, 0, 0]),
        ("named_no_mask", vec![1, 0, 0, 0, 1, 0, 6, 0, 2, 0, 4, 0, 0xE8, 3, 0, 0, 4, 0, 4, 0, 0x20, 0, 4, 0]),
    ];
    for (file, value) in &values {
        let raw = scratch.0.join(format!("{file}.bin"));
        std::fs::write(&raw, value).unwrap();
        common::debugfs_write(&image, &format!("write /dev/null {file}"));
        common::debugfs_write(&image, &format!("ea_set -r -f {} /{file} {ACCESS}", raw.display()));
    }
    assert_clean(&image, "raw ACL values");
    let v = Volume::open(&image, Options::default()).unwrap();
    let ours: Vec<(Vec<std::ffi::OsString>, i32)> = values
        .iter()
        .map(|(file, _)| {
            let inode = v.resolve(&format!("/{file}")).unwrap();
            let errno = v.getxattr(&inode, ACCESS).map_or_else(|e| e.errno(), |_| 0);
            (v.xattr_names(&inode).unwrap(), errno)
        })
        .collect();
    assert_eq!(ours.iter().map(|(_, e)| *e).collect::<Vec<_>>(), [libc::EINVAL, libc::ENODATA, libc::EINVAL]);
    let header = v.resolve("/header").unwrap();
    assert!(v.xattrs(&header).unwrap().is_empty(), "the header alone has no value to list");
    let mnt = scratch.0.join("mnt");
    let mut theirs = Vec::new();
    with_kernel_mount(
        &image,
        &mnt,
        std::panic::AssertUnwindSafe(|| {
            for (file, _) in &values {
                let path = mnt.join(file);
                let c = CString::new(path.as_os_str().as_bytes()).unwrap();
                let name = CString::new(ACCESS).unwrap();
                let mut buf = [0u8; 64];
                // SAFETY: valid path, name and buffer.
                let rc = unsafe { libc::getxattr(c.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
                let errno = if rc >= 0 { 0 } else { std::io::Error::last_os_error().raw_os_error().unwrap() };
                theirs.push((kernel_xattr_names(&path), errno));
            }
        }),
    );
    if !theirs.is_empty() {
        assert_eq!(ours, theirs, "(names listed, getxattr errno): csumfs vs the kernel");
    }
}
