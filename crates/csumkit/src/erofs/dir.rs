//! erofs directories: blocks of 12-byte dirents followed by their names.
//!
//! | offset | size | field                                   |
//! |-------:|-----:|-----------------------------------------|
//! | 0      | 8    | `nid`                                   |
//! | 8      | 2    | `nameoff`: start of the name in the block |
//! | 10     | 1    | `file_type`                             |
//! | 11     | 1    | reserved                                |
//!
//! The first dirent's `nameoff / 12` is the block's dirent count; a name
//! ends where the next begins, the last one at the block end or a NUL.

use super::{corrupt, Image, Inode};
use crate::le::{le16, le64};
use crate::Error;

const DIRENT: usize = 12;

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Name bytes (no NUL).
    pub name: Vec<u8>,
    /// Target nid.
    pub nid: u64,
    /// `EROFS_FT_*` file type.
    pub file_type: u8,
}

impl Image<'_> {
    /// Every entry of directory `dir`, in on-media order (with `.` and `..`).
    ///
    /// # Errors
    /// [`Error::Invalid`] if `dir` is not a directory; [`Error::Corrupt`] for
    /// malformed blocks.
    pub fn read_dir(&self, dir: &Inode) -> Result<Vec<DirEntry>, Error> {
        if !dir.is_dir() {
            return Err(Error::Invalid { what: "path", detail: format!("nid {} is not a directory", dir.nid) });
        }
        let mut entries = Vec::new();
        let data = self.data(dir)?;
        for (b, block) in data.chunks(self.sb.block_size as usize).enumerate() {
            let where_ = format!("directory nid {} block {b}", dir.nid);
            if block.len() < DIRENT {
                return Err(corrupt(&where_, format!("{} bytes, shorter than one dirent", block.len())));
            }
            let first = usize::from(le16(block, 8));
            if first % DIRENT != 0 || first == 0 || first > block.len() {
                return Err(corrupt(&where_, format!("first name offset {first} is not a dirent table end")));
            }
            let count = first / DIRENT;
            for i in 0..count {
                let d = &block[i * DIRENT..(i + 1) * DIRENT];
                let start = usize::from(le16(d, 8));
                let end = if i + 1 < count {
                    usize::from(le16(block, (i + 1) * DIRENT + 8))
                } else {
                    let rest = block.get(start..).unwrap_or(&[]);
                    start + rest.iter().position(|&c| c == 0).unwrap_or(rest.len())
                };
                if start < first || end < start || end > block.len() || end - start > 255 || end == start {
                    return Err(corrupt(&where_, format!("dirent {i} name [{start}, {end}) is invalid")));
                }
                entries.push(DirEntry { name: block[start..end].to_vec(), nid: le64(d, 0), file_type: d[10] });
            }
        }
        Ok(entries)
    }

    /// The inode at `path` (absolute or relative to the root; `/` is root).
    ///
    /// # Errors
    /// [`Error::Invalid`] when a component does not exist or is not a
    /// directory; [`Error::Corrupt`] for damaged metadata.
    pub fn lookup(&self, path: &str) -> Result<Inode, Error> {
        let mut inode = self.inode(self.sb.root_nid)?;
        for component in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            if !inode.is_dir() {
                return Err(Error::Invalid {
                    what: "path",
                    detail: format!("{path}: not a directory before {component:?}"),
                });
            }
            let found = self.read_dir(&inode)?.into_iter().find(|e| e.name == component.as_bytes());
            let entry = found
                .ok_or_else(|| Error::Invalid { what: "path", detail: format!("{path}: {component:?} not found") })?;
            inode = self.inode(entry.nid)?;
        }
        Ok(inode)
    }

    /// Every inode reachable from the root, once each (hard links are
    /// listed under their first path), in depth-first order.
    ///
    /// # Errors
    /// As [`read_dir`](Self::read_dir); [`Error::Corrupt`] when the tree has
    /// more directories than the superblock has inodes (a cycle).
    pub fn walk(&self) -> Result<Vec<(String, Inode)>, Error> {
        let mut seen = std::collections::HashSet::new();
        let root = self.inode(self.sb.root_nid)?;
        seen.insert(root.nid);
        let mut out = Vec::new();
        let mut stack = vec![("/".to_string(), root)];
        while let Some((path, inode)) = stack.pop() {
            if out.len() as u64 > self.sb.inos.max(1) {
                return Err(corrupt("directory tree", format!("more than the superblock's {} inodes", self.sb.inos)));
            }
            if inode.is_dir() {
                let mut children = Vec::new();
                for entry in self.read_dir(&inode)? {
                    if entry.name == b"." || entry.name == b".." || !seen.insert(entry.nid) {
                        continue;
                    }
                    let name = String::from_utf8_lossy(&entry.name);
                    let child_path = if path == "/" { format!("/{name}") } else { format!("{path}/{name}") };
                    children.push((child_path, self.inode(entry.nid)?));
                }
                stack.extend(children.into_iter().rev());
            }
            out.push((path, inode));
        }
        Ok(out)
    }
}
