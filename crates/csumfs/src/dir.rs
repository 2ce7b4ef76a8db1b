//! Directories: entries of every leaf block (checksum tails verified), of
//! inline directories, and lookups through the htree index when the
//! directory has one.

use crate::error::{corrupt, Error};
use crate::inode::{Inode, FLAG_INDEX, FLAG_INLINE_DATA};
use crate::le::{le16, le32};
use crate::volume::Volume;
use csumkit::crc32c;

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Name bytes.
    pub name: Vec<u8>,
    /// Inode number.
    pub ino: u32,
    /// `EXT4_FT_*` (1 file, 2 dir, 3 chr, 4 blk, 5 fifo, 6 sock, 7 symlink).
    pub file_type: u8,
}

impl Volume {
    /// Every entry of directory `dir` (with `.` and `..`), in on-media order.
    ///
    /// # Errors
    /// [`Error::NotDir`]; [`Error::Checksum`] for a leaf block's checksum;
    /// [`Error::Corrupt`] for entries that overrun their block.
    pub fn read_dir(&self, dir: &Inode) -> Result<Vec<DirEntry>, Error> {
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {}", dir.ino)));
        }
        let mut out = Vec::new();
        if dir.flags & FLAG_INLINE_DATA != 0 {
            let data = self.inline_data(dir)?;
            out.push(DirEntry { name: b".".to_vec(), ino: dir.ino, file_type: 2 });
            out.push(DirEntry { name: b"..".to_vec(), ino: le32(&data, 0), file_type: 2 });
            // i_block after the parent, then system.data: each a run of dirents.
            let split = 60.min(data.len());
            parse_entries(&data[4..split], dir.ino, &mut out)?;
            parse_entries(&data[split..], dir.ino, &mut out)?;
            return Ok(out);
        }
        let bs = self.layout.block_size;
        for run in self.runs(dir)? {
            for k in 0..run.len {
                let (logical, physical) = (run.logical + k, run.physical + k);
                let block = self.block(physical, &|| format!("directory {} block {physical}", dir.ino))?;
                if dir.flags & FLAG_INDEX != 0 && is_index_block(block, logical, bs) {
                    // The root's "." and ".." precede its index; nodes hold none.
                    if logical == 0 {
                        for at in [0, 12] {
                            let (ino, name_len) = (le32(block, at), usize::from(block[at + 6]).min(4));
                            out.push(DirEntry { name: block[at + 8..at + 8 + name_len].to_vec(), ino, file_type: 2 });
                        }
                    }
                    continue;
                }
                self.verify_leaf(dir, physical, block)?;
                parse_entries(&block[..bs as usize - 12], dir.ino, &mut out)?;
            }
        }
        Ok(out)
    }

    /// The entry `name` of `dir`: through the htree index when it has one
    /// (one leaf block read), else by scanning.
    ///
    /// # Errors
    /// [`Error::NotFound`]; [`Error::NameTooLong`]; as [`read_dir`](Self::read_dir).
    pub fn lookup(&self, dir: &Inode, name: &[u8]) -> Result<DirEntry, Error> {
        let shown = || String::from_utf8_lossy(name).into_owned();
        if name.len() > 255 {
            return Err(Error::NameTooLong(shown()));
        }
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {}", dir.ino)));
        }
        if dir.flags & FLAG_INDEX != 0 && dir.flags & FLAG_INLINE_DATA == 0 {
            if name == b"." || name == b".." {
                // Outside the index, at the start of the root block (as
                // the kernel's `__ext4_find_entry` looks for them): `..`'s
                // record spans the root's index data.
                let root = self.runs(dir)?.first().filter(|r| r.logical == 0).map(|r| r.physical);
                let root = root.ok_or_else(|| corrupt(format!("directory {}", dir.ino), "no block 0"))?;
                let block = self.block(root, &|| format!("directory {} htree root", dir.ino))?;
                return find_entry(block, dir.ino, name)?.ok_or_else(|| Error::NotFound(shown()));
            }
            if let Some(found) = self.htree_lookup(dir, name)? {
                return Ok(found);
            }
            return Err(Error::NotFound(shown()));
        }
        if dir.flags & FLAG_INLINE_DATA != 0 {
            return self.read_dir(dir)?.into_iter().find(|e| e.name == name).ok_or_else(|| Error::NotFound(shown()));
        }
        // A linear directory: each leaf scanned in place, up to the name.
        let bs = self.layout.block_size as usize;
        for run in self.runs(dir)? {
            for physical in run.physical..run.physical + run.len {
                let block = self.block(physical, &|| format!("directory {} block {physical}", dir.ino))?;
                self.verify_leaf(dir, physical, block)?;
                if let Some(found) = find_entry(&block[..bs - 12], dir.ino, name)? {
                    return Ok(found);
                }
            }
        }
        Err(Error::NotFound(shown()))
    }

    /// The inode at `path` (absolute; symlinks are not followed).
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::NotDir`] naming the path; as
    /// [`lookup`](Self::lookup).
    pub fn resolve(&self, path: &str) -> Result<Inode, Error> {
        let mut inode = self.inode(crate::inode::ROOT)?;
        for component in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            if !inode.is_dir() {
                return Err(Error::NotDir(path.to_string()));
            }
            let entry = self.lookup(&inode, component.as_bytes()).map_err(|e| match e {
                Error::NotFound(_) => Error::NotFound(path.to_string()),
                other => other,
            })?;
            inode = self.inode(entry.ino)?;
        }
        Ok(inode)
    }

    fn verify_leaf(&self, dir: &Inode, physical: u64, block: &[u8]) -> Result<(), Error> {
        let bs = block.len();
        let tail = &block[bs - 12..];
        let has_tail = le32(tail, 0) == 0 && le16(tail, 4) == 12 && tail[6] == 0 && tail[7] == 0xDE;
        if !has_tail {
            return Err(corrupt(format!("directory {} block {physical}", dir.ino), "no checksum tail"));
        }
        let key = (physical, dir.csum_seed);
        if self.verified_leaves.lock().expect("verified leaves").contains(&key) {
            return Ok(());
        }
        let computed = crc32c::raw_update(dir.csum_seed, &block[..bs - 12]);
        self.verify(&|| format!("directory {} block {physical}", dir.ino), le32(tail, 8), computed)?;
        let mut verified = self.verified_leaves.lock().expect("verified leaves");
        if verified.len() >= VERIFIED_LEAVES_MAX {
            verified.clear();
        }
        verified.insert(key);
        Ok(())
    }

    /// Walks the index from the root to the leaf that holds `name`'s hash
    /// (and on through leaves that continue a hash collision).
    fn htree_lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<DirEntry>, Error> {
        let bs = self.layout.block_size;
        let runs = self.runs(dir)?;
        let physical = |logical: u64| {
            runs.iter()
                .find(|r| (r.logical..r.logical + r.len).contains(&logical))
                .map(|r| r.physical + logical - r.logical)
                .ok_or_else(|| corrupt(format!("directory {}", dir.ino), format!("no block {logical}")))
        };
        let what = || format!("directory {} htree", dir.ino);
        let root = self.block(physical(0)?, &what)?;
        let (version, info_len, levels) = (root[0x1C], usize::from(root[0x1D]), root[0x1E]);
        // The root stores the signed version (0–2); the superblock's flag
        // makes it unsigned (3–5 stored directly mean the same).
        let unsigned = (3..=5).contains(&version) || self.hash.unsigned;
        let setup = crate::hash::HashSetup { unsigned, ..self.hash };
        let base = if (3..=5).contains(&version) { version - 3 } else { version };
        let hash = setup.hash(base, name);
        let Some((hash, _)) = hash else {
            return Err(corrupt(what(), format!("hash version {version}")));
        };
        if info_len != 8 || levels >= self.htree_levels() {
            return Err(corrupt(what(), format!("dx_root info length {info_len}, {levels} indirect levels")));
        }
        let mut node = root;
        let mut count_at = 0x18 + info_len;
        // The index path: each level's chosen entry and the rest of its node.
        let mut path: Vec<(Vec<u8>, usize, usize)> = Vec::new();
        let mut leaf = 0u64;
        for level in 0..=levels {
            let (limit, count) = (usize::from(le16(node, count_at)), usize::from(le16(node, count_at + 2)));
            if count == 0 || count > limit || count_at + 8 * limit > bs as usize {
                return Err(corrupt(what(), format!("count {count} / limit {limit} at level {level}")));
            }
            // The last entry whose hash is <= ours (entry 0 covers hash 0).
            let mut chosen = 0;
            for e in 1..count {
                if le32(node, count_at + 8 * e) <= hash {
                    chosen = e;
                } else {
                    break;
                }
            }
            let block = u64::from(le32(node, count_at + 8 * chosen + 4)) & 0x0FFF_FFFF;
            path.push((node.to_vec(), count_at, chosen));
            if level == levels {
                leaf = block;
                break;
            }
            node = self.block(physical(block)?, &what)?;
            count_at = 8;
        }
        loop {
            let p = physical(leaf)?;
            let block = self.block(p, &what)?;
            self.verify_leaf(dir, p, block)?;
            if let Some(found) = find_entry(&block[..bs as usize - 12], dir.ino, name)? {
                return Ok(Some(found));
            }
            // A collision run continues into the next leaf when the next
            // index entry has the same hash with its low bit set.
            let Some((node, count_at, chosen)) = path.last_mut() else { return Ok(None) };
            let count = usize::from(le16(node, *count_at + 2));
            if *chosen + 1 >= count {
                return Ok(None);
            }
            let next_hash = le32(node, *count_at + 8 * (*chosen + 1));
            if next_hash & 1 == 0 || next_hash & !1 != hash {
                return Ok(None);
            }
            *chosen += 1;
            leaf = u64::from(le32(node, *count_at + 8 * *chosen + 4)) & 0x0FFF_FFFF;
        }
    }

    /// Index levels a tree may have (the kernel's `ext4_dir_htree_level`).
    pub(crate) fn htree_levels(&self) -> u8 {
        if self.layout.features.incompat & csumkit::ext4::Features::INCOMPAT_LARGEDIR != 0 {
            3
        } else {
            2
        }
    }
}

/// A block of the index: the root (logical 0) or an interior node (one
/// empty entry spanning the block).
pub(crate) fn is_index_block(block: &[u8], logical: u64, bs: u64) -> bool {
    let rec_len = |raw: u16| if raw == 0 || raw == 65535 && bs == 65536 { 65536 } else { u64::from(raw) };
    logical == 0 || le32(block, 0) == 0 && rec_len(le16(block, 4)) == bs
}

/// Leaves remembered as verified; past this many the memory starts again.
const VERIFIED_LEAVES_MAX: usize = 1 << 20;

/// Live entries (inode not 0) of a run of dirents.
fn parse_entries(area: &[u8], dir: u32, out: &mut Vec<DirEntry>) -> Result<(), Error> {
    each_entry(area, dir, |ino, name, file_type| {
        out.push(DirEntry { name: name.to_vec(), ino, file_type });
        false
    })
    .map(|_| ())
}

/// The live entry `name` of a run of dirents, found in place.
fn find_entry(area: &[u8], dir: u32, name: &[u8]) -> Result<Option<DirEntry>, Error> {
    let mut found = None;
    each_entry(area, dir, |ino, entry, file_type| {
        let hit = entry == name;
        if hit {
            found = Some(DirEntry { name: name.to_vec(), ino, file_type });
        }
        hit
    })?;
    Ok(found)
}

/// Calls `visit(ino, name, file_type)` for each live entry of a run of
/// dirents, every record checked, until it returns true; whether it did.
fn each_entry(area: &[u8], dir: u32, mut visit: impl FnMut(u32, &[u8], u8) -> bool) -> Result<bool, Error> {
    let mut at = 0usize;
    while at + 8 <= area.len() {
        let ino = le32(area, at);
        let raw = le16(area, at + 4);
        let rec_len = if raw == 0 || raw == 65535 && area.len() >= 65524 { 65536 } else { usize::from(raw) };
        let name_len = usize::from(area[at + 6]);
        if rec_len < 8 || at + rec_len > area.len() || 8 + name_len > rec_len {
            return Err(corrupt(format!("directory {dir}"), format!("entry at {at}: record length {rec_len}")));
        }
        if ino != 0 {
            let name = area
                .get(at + 8..at + 8 + name_len)
                .ok_or_else(|| corrupt(format!("directory {dir}"), format!("entry at {at}: name overruns")))?;
            if visit(ino, name, area[at + 7]) {
                return Ok(true);
            }
        }
        at += rec_len;
    }
    Ok(false)
}
