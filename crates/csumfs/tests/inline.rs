//! Inline data (`inline_data`): files and directories mke2fs wrote inline
//! (`mke2fs -d`), changed through csumfs — written, truncated, given
//! xattrs (one named as the inline content is, kept), entries added,
//! removed and moved, a directory moved to another
//! parent — each moving its content to a block first as the kernel does;
//! then `e2fsck -fn` clean and the kernel reading the result.

mod common;

use common::{assert_clean, have_e2fsprogs, tool, with_kernel_mount, Scratch};
use csumfs::{NewInode, Options, RenameMode, Volume, XattrMode, ROOT};
use std::process::Command;

const FLAG_INLINE_DATA: u32 = 0x1000_0000;
const FILE: NewInode = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
const DIR: NewInode = NewInode { mode: 0o040_755, uid: 0, gid: 0 };

#[test]
fn inline_files_and_directories_mke2fs_wrote_are_changed_and_stay_valid() {
    if !have_e2fsprogs() {
        return;
    }
    for bs in ["4096", "1024"] {
        let scratch = Scratch::new(&format!("inline-{bs}"));
        let src = scratch.0.join("src");
        for dir in ["d/sub", "d2", "d3"] {
            std::fs::create_dir_all(src.join(dir)).unwrap();
        }
        let thirty = b"thirty bytes of inline text..\n".to_vec();
        let hundred: Vec<u8> = (0..100u8).map(|i| b'a' + i % 26).collect();
        std::fs::write(src.join("a"), &thirty).unwrap();
        std::fs::write(src.join("b"), &hundred).unwrap(); // past i_block: in system.data
        std::fs::write(src.join("c"), b"c").unwrap();
        std::fs::write(src.join("e"), b"").unwrap();
        std::fs::write(src.join("d/x"), b"x").unwrap();
        std::fs::write(src.join("d/y"), b"y").unwrap();
        std::fs::write(src.join("d2/z"), b"z").unwrap();
        // An xattr whose name is the inline content's (in another
        // namespace): mke2fs copies it; moving the content out keeps it.
        let a_path = std::ffi::CString::new(src.join("a").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a valid path, name and value.
        let rc = unsafe { libc::setxattr(a_path.as_ptr(), c"user.data".as_ptr(), b"kept".as_ptr().cast(), 4, 0) };
        assert_eq!(rc, 0, "setxattr on the source: {}", std::io::Error::last_os_error());
        let image = scratch.0.join("img");
        let out = Command::new(tool("mke2fs").unwrap())
            .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,^has_journal,inline_data", "-I", "256", "-b", bs])
            .arg("-d")
            .arg(&src)
            .arg(&image)
            .arg("16M")
            .output()
            .unwrap();
        assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));

        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let ino = |v: &Volume, path: &str| v.resolve(path).unwrap().ino;
        for path in ["/a", "/b", "/c", "/e", "/d", "/d/sub", "/d2", "/d3"] {
            assert_ne!(v.resolve(path).unwrap().flags & FLAG_INLINE_DATA, 0, "{bs}: mke2fs wrote {path} inline");
        }
        let (a, b, c, e) = (ino(&v, "/a"), ino(&v, "/b"), ino(&v, "/c"), ino(&v, "/e"));
        let (d, d2, sub) = (ino(&v, "/d"), ino(&v, "/d2"), ino(&v, "/d/sub"));
        let mtime_before = v.inode(b).unwrap().mtime;
        assert_eq!(v.getxattr(&v.inode(a).unwrap(), "user.data").unwrap(), b"kept", "{bs}: mke2fs copied it");
        // Listed as the kernel lists them: user.data is, system.data (the
        // inline content) is not.
        let listed = v.xattrs(&v.inode(a).unwrap()).unwrap();
        assert_eq!(listed, [("user.data".into(), b"kept".to_vec())], "{bs}: xattrs of /a");
        assert_eq!(v.xattr_names(&v.inode(a).unwrap()).unwrap(), ["user.data"], "{bs}: xattr names of /a");
        v.write(a, 30, b" and more").unwrap();
        assert_eq!(v.getxattr(&v.inode(a).unwrap(), "user.data").unwrap(), b"kept", "{bs}: kept past uninlining");
        v.write(b, 10, b"XYZ").unwrap();
        v.truncate(e, 5000).unwrap();
        let c_mtime = v.inode(c).unwrap().mtime;
        v.setxattr(c, "user.k", b"value", XattrMode::Create).unwrap();
        // Moving the content out to make room changes no byte of it.
        assert_eq!(v.inode(c).unwrap().mtime, c_mtime, "{bs}: setxattr kept c's mtime, nanoseconds too");
        let new = v.create(d, b"new", FILE).unwrap();
        v.write(new.ino, 0, b"made in an inline directory").unwrap();
        v.unlink(d2, b"z").unwrap();
        v.rename(d, b"x", d2, b"x2", RenameMode::Replace).unwrap();
        v.rename(d, b"sub", ROOT, b"sub2", RenameMode::Replace).unwrap(); // its `..` changes
        v.mkdir(sub, b"deeper", DIR).unwrap();
        v.rmdir(ROOT, b"d3").unwrap(); // an inline directory freed as it is
        v.sync().unwrap();
        for i in [a, b, c, e, d, d2, sub] {
            assert_eq!(v.inode(i).unwrap().flags & FLAG_INLINE_DATA, 0, "{bs}: inode {i} moved to a block");
        }
        assert!(v.inode(b).unwrap().mtime.sec >= mtime_before.sec);
        drop(v);
        assert_clean(&image, &format!("changing inline inodes at {bs}-byte blocks"));
        // debugfs, another reader: no inline content left behind in an xattr.
        for path in ["/a", "/b", "/c", "/d", "/d2", "/sub2"] {
            let out =
                Command::new(tool("debugfs").unwrap()).args(["-R", &format!("ea_list {path}")]).arg(&image).output();
            let text = String::from_utf8_lossy(&out.unwrap().stdout).into_owned();
            assert!(!text.contains("system.data"), "{bs}: {path} keeps its inline xattr:\n{text}");
        }

        let mut want_a = thirty.clone();
        want_a.extend_from_slice(b" and more");
        let mut want_b = hundred.clone();
        want_b[10..13].copy_from_slice(b"XYZ");
        let check = |read: &dyn Fn(&str) -> Vec<u8>, names: &dyn Fn(&str) -> Vec<String>| {
            assert_eq!(read("a"), want_a);
            assert_eq!(read("b"), want_b);
            assert_eq!(read("e"), vec![0u8; 5000]);
            assert_eq!(read("d/new"), b"made in an inline directory");
            assert_eq!(read("d2/x2"), b"x");
            assert_eq!(names("d"), ["new", "y"]);
            assert_eq!(names("d2"), ["x2"]);
            assert_eq!(names("sub2"), ["deeper"]);
            assert!(!names("").contains(&"d3".to_string()));
        };
        let v = Volume::open(&image, Options::default()).unwrap();
        let read = |p: &str| v.read_all(&v.resolve(&format!("/{p}")).unwrap()).unwrap();
        let names = |p: &str| {
            let mut n: Vec<String> = v
                .read_dir(&v.resolve(&format!("/{p}")).unwrap())
                .unwrap()
                .into_iter()
                .map(|e| String::from_utf8_lossy(&e.name).into_owned())
                .filter(|n| n != "." && n != ".." && n != "lost+found")
                .collect();
            n.sort();
            n
        };
        check(&read, &names);
        assert_eq!(v.getxattr(&v.resolve("/c").unwrap(), "user.k").unwrap(), b"value");
        assert_eq!(v.resolve("/sub2/..").unwrap().ino, ROOT);
        drop(v);
        let mnt = scratch.0.join("mnt");
        with_kernel_mount(&image, &mnt, || {
            let read = |p: &str| std::fs::read(mnt.join(p)).unwrap();
            let names = |p: &str| {
                let mut n: Vec<String> = std::fs::read_dir(mnt.join(p))
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| n != "lost+found")
                    .collect();
                n.sort();
                n
            };
            check(&read, &names);
        });
    }
}

#[test]
fn inline_content_is_read_from_system_data_not_an_xattr_named_like_it() {
    // The kernel appends in-inode xattrs: `user.data` set on an empty file
    // comes before the `system.data` its first write makes, so reading the
    // first entry named "data" would take the wrong one.
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("inline-order");
    let image = scratch.0.join("img");
    let out = Command::new(tool("mke2fs").unwrap())
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,^has_journal,inline_data", "-I", "256", "-b", "4096"])
        .arg(&image)
        .arg("16M")
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
    let content: Vec<u8> = (0..100u8).map(|i| b'A' + i % 26).collect();
    let (mnt, mut wrote) = (scratch.0.join("mnt"), false);
    common::with_kernel_mount_with(
        &image,
        &mnt,
        "loop",
        std::panic::AssertUnwindSafe(|| {
            let f = mnt.join("f");
            std::fs::write(&f, b"").unwrap();
            let path = std::ffi::CString::new(f.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid path, name and value.
            let rc = unsafe { libc::setxattr(path.as_ptr(), c"user.data".as_ptr(), b"kept".as_ptr().cast(), 4, 0) };
            assert_eq!(rc, 0, "setxattr: {}", std::io::Error::last_os_error());
            std::fs::write(&f, &content).unwrap();
            wrote = true;
        }),
    );
    if !wrote {
        return;
    }
    let v = Volume::open(&image, Options::default()).unwrap();
    let inode = v.resolve("/f").unwrap();
    assert_ne!(inode.flags & FLAG_INLINE_DATA, 0, "the kernel wrote f inline");
    assert_eq!(v.read_all(&inode).unwrap(), content, "60 bytes in i_block, 40 in system.data");
    assert_eq!(v.getxattr(&inode, "user.data").unwrap(), b"kept");
}
