//! The kernel's view of a tree (`scripts/kernel-view.py`: JSON, one entry
//! per path) as the judge of a csumfs volume: every path resolves to the
//! same inode number, mode, owner, size, link count, symlink target,
//! xattrs and content CRC-32, and every directory lists exactly the
//! kernel's children.

use csumfs::{Error, Volume};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The parsed view in the gzipped JSON file at `path`.
pub fn load(path: &Path) -> Vec<Value> {
    let out = Command::new("gzip").arg("-dc").arg(path).output().expect("gzip");
    assert!(out.status.success(), "gzip -dc {}", path.display());
    let view: Value = serde_json::from_slice(&out.stdout).unwrap();
    view.as_array().unwrap().clone()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Panics, naming the image (`name`), the path and the field, where
/// `volume` differs from the kernel's `view`.
pub fn assert_as_the_kernel_shows(volume: &Volume, view: &[Value], name: &str) {
    let mut children: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for seen in view {
        let path = seen["path"].as_str().unwrap();
        let at = |what: &str| format!("{name} {path}: {what}");
        let inode = volume.resolve(path).unwrap_or_else(|e| panic!("{}", at(&e.to_string())));
        assert_eq!(u64::from(inode.ino), seen["ino"].as_u64().unwrap(), "{}", at("inode number"));
        assert_eq!(u64::from(inode.mode), seen["mode"].as_u64().unwrap(), "{}", at("mode"));
        assert_eq!(u64::from(inode.uid), seen["uid"].as_u64().unwrap(), "{}", at("uid"));
        assert_eq!(u64::from(inode.gid), seen["gid"].as_u64().unwrap(), "{}", at("gid"));
        assert_eq!(inode.size, seen["size"].as_u64().unwrap(), "{}", at("size"));
        assert_eq!(u64::from(inode.links), seen["nlink"].as_u64().unwrap(), "{}", at("links"));
        if let Some(target) = seen["target"].as_str() {
            assert_eq!(volume.read_link(&inode).unwrap(), target.as_bytes(), "{}", at("symlink target"));
        }
        if let Some(crc) = seen["crc32"].as_u64() {
            let content = volume.read_all(&inode).unwrap_or_else(|e| panic!("{}", at(&e.to_string())));
            assert_eq!(u64::from(crc32fast::hash(&content)), crc, "{}", at("content"));
        }
        let kernel: BTreeMap<String, String> = seen["xattrs"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
        let ours: BTreeMap<String, String> =
            volume.xattrs(&inode).unwrap().into_iter().map(|(k, v)| (k.into_string().unwrap(), hex(&v))).collect();
        assert_eq!(ours, kernel, "{}", at("xattrs"));
        for (xname, value) in &kernel {
            assert_eq!(&hex(&volume.getxattr(&inode, xname).unwrap()), value, "{}", at(xname));
        }
        let absent = volume.getxattr(&inode, "security.selinux").unwrap_err();
        assert_eq!(absent.errno(), Error::NoData(String::new()).errno(), "{}", at("absent xattr"));
        if path != "/" {
            let (parent, child) = path.rsplit_once('/').unwrap();
            let parent = if parent.is_empty() { "/" } else { parent };
            children.entry(parent.to_string()).or_default().insert(child.to_string());
        }
        if inode.is_dir() {
            children.entry(path.to_string()).or_default();
        }
    }
    for (dir, kernel) in &children {
        let inode = volume.resolve(dir).unwrap();
        let ours: BTreeSet<String> = volume
            .read_dir(&inode)
            .unwrap_or_else(|e| panic!("{name} {dir}: {e}"))
            .into_iter()
            .map(|e| String::from_utf8(e.name).unwrap())
            .filter(|n| n != "." && n != ".." && !(dir == "/" && n == "lost+found" && !kernel.contains(n)))
            .collect();
        assert_eq!(&ours, kernel, "{name} {dir}: entries");
    }
}
