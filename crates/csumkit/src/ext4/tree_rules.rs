//! The directory tree as e2fsck's passes 2–4 judge it: each entry's
//! record, name, inode number and file type; `.` and `..` where they
//! belong; every directory named once, by the directory its `..` names;
//! every in-use inode named, its link count what the tree says. The scan
//! feeds [`Tree`] one directory block at a time; [`Tree::judge`] runs
//! after the last, when every inode's mode and links are known.

use super::inode_rules::{dirent_type, S_IFDIR};
use crate::le::{le16, le32};
use std::collections::HashMap;

/// The root directory's inode.
pub(super) const ROOT: u64 = 2;
/// `EXT4_LINK_MAX`: a directory with more links counts 1 (`dir_nlink`).
const LINK_MAX: u64 = 65_000;

/// One directory entry of a block or inline region.
pub(super) struct Entry<'a> {
    pub at: usize,
    pub inode: u64,
    pub rec_len: usize,
    pub name: &'a [u8],
    pub file_type: u8,
    /// The byte after the name in its record (0 when the record ends there).
    pub after_name: u8,
}

/// The entries of `data[..end]`: each record inside the region, 4-aligned,
/// long enough for its name, the last ending exactly at `end` (named
/// `end_name` in messages). Inode numbers are checked by the caller.
pub(super) fn entries<'a>(data: &'a [u8], end: usize, end_name: &str) -> Result<Vec<Entry<'a>>, String> {
    let mut list = Vec::new();
    let mut at = 0usize;
    // Each record is at least 12 bytes: the walk is bounded by `end`.
    while at < end {
        if at + 8 > end {
            return Err(format!("a directory entry at byte {at} runs into {end_name}"));
        }
        // 64 KiB blocks spell a 65536-byte record 0 or 65535
        // (`ext4_rec_len_from_disk`); with a tail no record is that long,
        // so those are as wrong as any other length that does not fit.
        let rec_len = usize::from(le16(data, at + 4));
        let name_len = usize::from(data[at + 6]);
        if rec_len < 12 || !rec_len.is_multiple_of(4) || at + rec_len > end {
            return Err(format!("directory entry at byte {at}: record length {rec_len} does not fit the block"));
        }
        if 8 + name_len > rec_len {
            return Err(format!("directory entry at byte {at}: a {name_len}-byte name in a {rec_len}-byte record"));
        }
        let name = &data[at + 8..at + 8 + name_len];
        let after_name = if 8 + name_len < rec_len { data[at + 8 + name_len] } else { 0 };
        let (inode, file_type) = (u64::from(le32(data, at)), data[at + 7]);
        list.push(Entry { at, inode, rec_len, name, file_type, after_name });
        at += rec_len;
    }
    Ok(list)
}

/// A name held by two entries of one block (e2fsck: "Duplicate entry").
fn duplicate_name(list: &[Entry]) -> Option<String> {
    let mut names = std::collections::HashSet::new();
    let twice = list.iter().filter(|e| e.inode != 0).find(|e| !names.insert(e.name))?;
    Some(format!("the name at byte {} is already in the block", twice.at))
}

/// What the scan learns of the tree.
#[derive(Default)]
pub(super) struct Tree {
    /// In-use inodes whose links the tree must account for: links, type.
    pub nodes: HashMap<u64, (u16, u16)>,
    /// Entries naming each inode (not `.` or `..`), and the first
    /// directory holding one.
    named: HashMap<u64, (u64, u64)>,
    /// Each directory's `..`.
    dotdot: HashMap<u64, u64>,
    /// (directory, inode, file type) of each entry, judged by [`judge`](Self::judge).
    types: Vec<(u64, u64, u8)>,
}

/// Why a directory or inode is damaged, from [`Tree::judge`].
pub(super) struct Verdict {
    pub damage: HashMap<u64, String>,
    /// Any disagreement between the tree and link counts: a directory
    /// block whose checksum is wrong may be its cause, wherever it is.
    pub disagreement: Option<String>,
}

impl Tree {
    /// Takes the entries of one directory block (`logical` 0 holds `.`
    /// and `..`). Returns why the block's own content is wrong.
    pub(super) fn block(&mut self, dir: u64, logical: u64, list: &[Entry], first_ino: u64) -> Option<String> {
        let mut damage = duplicate_name(list);
        for (k, e) in list.iter().enumerate() {
            let why = if logical == 0 && k < 2 {
                self.dot_entry(dir, k, e, first_ino)
            } else {
                self.named_entry(dir, e, first_ino)
            };
            damage = damage.or(why);
        }
        if logical == 0 && list.len() < 2 {
            damage = damage.or(Some("block 0 lacks its '.' and '..' entries".into()));
        }
        damage
    }

    /// `.` (entry 0: this directory, a 12-byte record) or `..` (entry 1).
    fn dot_entry(&mut self, dir: u64, k: usize, e: &Entry, first_ino: u64) -> Option<String> {
        let want: &[u8] = if k == 0 { b"." } else { b".." };
        if e.name != want {
            return Some(format!("entry {k} of block 0 is not '{}'", String::from_utf8_lossy(want)));
        }
        if e.after_name != 0 {
            return Some(format!("'{}' is not NUL-terminated", String::from_utf8_lossy(want)));
        }
        if k == 0 {
            if e.inode != dir || e.rec_len != 12 {
                return Some(format!(
                    "'.' names inode {} in a {}-byte record (this directory: {dir}, 12 bytes)",
                    e.inode, e.rec_len
                ));
            }
        } else if e.inode != ROOT && e.inode < first_ino {
            return Some(format!("'..' names reserved inode {}", e.inode));
        } else if dir == ROOT && e.inode != ROOT {
            return Some(format!("the root's '..' names inode {}", e.inode));
        } else {
            self.dotdot.insert(dir, e.inode);
        }
        // e2fsck judges the file type of `.` and `..` as of any entry.
        self.types.push((dir, e.inode, e.file_type));
        None
    }

    fn named_entry(&mut self, dir: u64, e: &Entry, first_ino: u64) -> Option<String> {
        if e.inode == 0 {
            return None;
        }
        let at = e.at;
        if e.name.is_empty() {
            return Some(format!("the entry at byte {at} has an empty name"));
        }
        if e.name == b"." || e.name == b".." {
            return Some(format!("a second '{}' at byte {at}", String::from_utf8_lossy(e.name)));
        }
        if e.name.iter().any(|&c| c == b'/' || c == 0) {
            return Some(format!("the name at byte {at} holds a '/' or NUL"));
        }
        if e.inode == ROOT || e.inode < first_ino {
            return Some(format!("the entry at byte {at} names reserved inode {}", e.inode));
        }
        let named = self.named.entry(e.inode).or_insert((0, dir));
        named.0 += 1;
        self.types.push((dir, e.inode, e.file_type));
        None
    }

    /// An inline directory's parent (its first four bytes) and entries.
    pub(super) fn inline(&mut self, dir: u64, parent: u64, list: &[Entry], first_ino: u64) -> Option<String> {
        self.dotdot.insert(dir, parent);
        let reserved = (parent != ROOT && parent < first_ino).then(|| format!("its parent is reserved inode {parent}"));
        let damage = reserved.or_else(|| duplicate_name(list));
        list.iter().map(|e| self.named_entry(dir, e, first_ino)).fold(damage, Option::or)
    }

    /// The tree against the inodes, once every block was fed: file types
    /// (`filetype`: the entry's must match; otherwise it must be 0), names
    /// of directories, `..`, link counts.
    pub(super) fn judge(&self, filetype: bool) -> Verdict {
        let mut damage: HashMap<u64, String> = HashMap::new();
        let mut note = |inum: u64, why: String| {
            damage.entry(inum).or_insert(why);
        };
        for &(dir, child, file_type) in &self.types {
            let Some(&(_, t)) = self.nodes.get(&child) else { continue };
            let want = if filetype { dirent_type(t) } else { 0 };
            if file_type != want {
                note(dir, format!("its entry for inode {child} has file type {file_type}, the inode's is {want}"));
            }
        }
        let mut subdirs: HashMap<u64, u64> = HashMap::new();
        for (&dir, &parent) in &self.dotdot {
            if self.nodes.get(&dir).is_some_and(|&(_, t)| t == S_IFDIR) {
                *subdirs.entry(parent).or_default() += 1;
            }
        }
        let mut disagreement = None;
        let mut nodes: Vec<_> = self.nodes.iter().collect();
        nodes.sort_unstable_by_key(|(inum, _)| **inum);
        for (&inum, &(links, t)) in nodes {
            let (named, parent) = self.named.get(&inum).copied().unwrap_or((0, 0));
            let why = if inum != ROOT && named == 0 {
                Some("in use but named by no directory entry".to_string())
            } else if t == S_IFDIR && inum != ROOT && named != 1 {
                Some(format!("a directory named by {named} entries"))
            } else if t == S_IFDIR && inum != ROOT && self.dotdot.get(&inum) != Some(&parent) {
                Some(format!("its '..' names {:?}, but directory {parent} holds it", self.dotdot.get(&inum)))
            } else {
                let counted = if t == S_IFDIR { named + 1 + subdirs.get(&inum).copied().unwrap_or(0) } else { named };
                let counted = if t == S_IFDIR && counted > LINK_MAX { 1 } else { counted };
                (u64::from(links) != counted).then(|| format!("link count {links}, but the tree holds {counted}"))
            };
            if let Some(why) = why {
                disagreement.get_or_insert_with(|| format!("inode {inum}: {why}"));
                note(inum, why);
            }
        }
        Verdict { damage, disagreement }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(inode: u32, rec_len: u16, name: &[u8], file_type: u8) -> Vec<u8> {
        let mut r = inode.to_le_bytes().to_vec();
        r.extend_from_slice(&rec_len.to_le_bytes());
        r.extend_from_slice(&[name.len() as u8, file_type]);
        r.extend_from_slice(name);
        r.resize(usize::from(rec_len), 0);
        r
    }

    /// A two-directory tree: root (2) holding `d` (12) holding `f` (13).
    fn tree(f_links: u16, d_type: u8) -> (Tree, Option<String>) {
        let mut t = Tree::default();
        t.nodes.insert(2, (3, S_IFDIR));
        t.nodes.insert(12, (2, S_IFDIR));
        t.nodes.insert(13, (f_links, super::super::inode_rules::S_IFREG));
        let root = [record(2, 12, b".", 2), record(2, 12, b"..", 2), record(12, 40, b"d", d_type)].concat();
        let d = [record(12, 12, b".", 2), record(2, 12, b"..", 2), record(13, 40, b"f", 1)].concat();
        let mut local = None;
        for (dir, block) in [(2, &root), (12, &d)] {
            let list = entries(block, block.len(), "the end").unwrap();
            local = local.or(t.block(dir, 0, &list, 11));
        }
        (t, local)
    }

    #[test]
    fn a_consistent_tree_has_no_damage() {
        let (t, local) = tree(1, 2);
        assert!(local.is_none());
        let verdict = t.judge(true);
        assert!(verdict.damage.is_empty() && verdict.disagreement.is_none());
    }

    #[test]
    fn link_counts_and_file_types_that_disagree_are_damage() {
        let (t, _) = tree(2, 2);
        let verdict = t.judge(true);
        assert!(verdict.damage[&13].contains("link count 2"));
        assert!(verdict.disagreement.is_some());
        let (t, _) = tree(1, 1);
        assert!(t.judge(true).damage[&2].contains("file type 1"));
        // Without the filetype feature every entry's type is 0.
        assert!(t.judge(false).damage.contains_key(&2));
    }

    #[test]
    fn names_with_slash_or_nul_and_misplaced_dots_are_damage() {
        let mut t = Tree::default();
        for bad in [&b"a/b"[..], b"a\0", b".."] {
            let block = record(13, 24, bad, 1);
            let list = entries(&block, block.len(), "the end").unwrap();
            assert!(t.block(12, 1, &list, 11).is_some(), "{bad:?}");
        }
        let block = [record(13, 12, b".", 2), record(2, 12, b"..", 2)].concat();
        let list = entries(&block, block.len(), "the end").unwrap();
        assert!(t.block(12, 0, &list, 11).unwrap().contains("'.' names inode 13"));
    }

    /// As e2fsck's pass 2: `.` and `..` end in a NUL, the root's `..` is
    /// the root, a `..` never names a reserved inode, a name is in a block once.
    #[test]
    fn dots_and_duplicate_names_are_judged() {
        let judge = |dir: u64, block: Vec<u8>| {
            let list = entries(&block, block.len(), "the end").unwrap();
            Tree::default().block(dir, 0, &list, 11)
        };
        let dot = record(12, 12, b".", 2);
        let mut unterminated = dot.clone();
        unterminated[9] = b'x';
        assert!(judge(12, [unterminated, record(2, 12, b"..", 2)].concat()).unwrap().contains("NUL"));
        assert!(judge(12, [dot.clone(), record(7, 12, b"..", 2)].concat()).unwrap().contains("reserved inode 7"));
        let root = [record(2, 12, b".", 2), record(12, 12, b"..", 2)].concat();
        assert!(judge(2, root).unwrap().contains("the root's '..'"));
        let twice = [dot, record(2, 12, b"..", 2), record(13, 12, b"f", 1), record(14, 12, b"f", 1)].concat();
        assert!(judge(12, twice).unwrap().contains("already in the block"));
    }
}
