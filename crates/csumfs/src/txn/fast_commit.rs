//! ext4 fast commits replayed on a volume (Linux `fs/ext4/fast_commit.c`,
//! `ext4_fc_replay`): after the journal's full transactions are home, each
//! record the scan (`csumkit::ext4::jbd2::fast_commit::scan`) found under a
//! good tail is applied in order —
//! - `INODE`: the kernel's copy of the inode written over it, all but its
//!   `i_block` (the extent tree stays as the records build it), and the
//!   inode marked in use;
//! - `ADD_RANGE` / `DEL_RANGE`: file blocks mapped to the logged disk
//!   blocks, or unmapped, through the extent tree; blocks no longer mapped
//!   are freed, mapped ones marked in use;
//! - `CREAT` / `LINK` / `UNLINK`: the name added (a new directory given its
//!   `.` and `..`) or removed, a name already there or already gone being
//!   no error (a replay stopped and begun again).
//!
//! Then every inode a record touched gets its `i_blocks` from its mapping,
//! and one left without links is freed. Every disk block the records map
//! is marked in use before the first record, so that no node or directory
//! block the replay allocates can land on one.
//!
//! Where the kernel's replay (Linux 6.18) leaves what e2fsck calls damage
//! — a directory created in a fast commit with one link, its parent's
//! count and the group's directory count unchanged — this replay leaves
//! the counts e2fsck would set.

use crate::error::Error;
use crate::format::dir_block::{file_type, new_dir_block};
use crate::inode::table::{Inode, FLAG_EXTENTS};
use crate::space::grow::Fill;
use crate::space::map::Run;
use crate::volume::Volume;
use csumkit::ext4::fields::{
    BG_ITABLE_UNUSED_HI, BG_ITABLE_UNUSED_LO, BG_USED_DIRS_HI, BG_USED_DIRS_LO, EXT_MAGIC, I_BLOCK, I_BLOCKS_HIGH,
    I_BLOCKS_LO, I_FLAGS, I_GENERATION, I_LINKS_COUNT, I_MODE, I_SIZE_LO,
};
use csumkit::ext4::jbd2::fast_commit::Record;
use csumkit::ext4::Group;
use csumkit::le::{le16, le32, put16, put32};
use std::collections::BTreeSet;

const FLAG_INLINE_DATA: u32 = 0x1000_0000;
const S_IFDIR: u16 = 0o040_000;

fn bad(detail: String) -> Error {
    crate::error::corrupt("fast commit", detail)
}

impl Volume {
    /// Applies the fast-commit `records` in order, as the kernel's replay
    /// does. Returns how many were applied.
    ///
    /// # Errors
    /// [`Error::Format`] for a record naming an inode or block outside the
    /// filesystem, or a structure the replay cannot change (an inline or
    /// block-mapped file's blocks); the volume's own errors.
    pub(crate) fn replay_fast_commits(&mut self, records: &[Record]) -> Result<usize, Error> {
        let mut touched = BTreeSet::new();
        for record in records {
            if let Record::AddRange { pblk, len, .. } = record {
                self.set_blocks(*pblk, u64::from(*len), true)?;
            }
        }
        for record in records {
            match record {
                Record::Inode { ino, raw } => {
                    self.replay_inode(*ino, raw)?;
                    touched.insert(*ino);
                }
                Record::AddRange { ino, lblk, len, pblk, unwritten } => {
                    let run =
                        Run { logical: u64::from(*lblk), len: u64::from(*len), physical: *pblk, uninit: *unwritten };
                    self.replay_map(*ino, u64::from(*lblk), u64::from(*len), Some(run))?;
                    touched.insert(*ino);
                }
                Record::DelRange { ino, lblk, len } => {
                    self.replay_map(*ino, u64::from(*lblk), u64::from(*len), None)?;
                    touched.insert(*ino);
                }
                Record::Create { parent, ino, name } => {
                    self.replay_create(*parent, *ino, name)?;
                    touched.insert(*ino);
                    touched.insert(*parent);
                }
                Record::Link { parent, ino, name } => {
                    if self.replay_link(*parent, *ino, name)? {
                        self.add_links(*ino, 1)?;
                    }
                    touched.insert(*ino);
                }
                Record::Unlink { parent, ino, name } => {
                    if self.replay_unlink(*parent, *ino, name)? {
                        self.add_links(*ino, -1)?;
                        if self.inode(*ino)?.links == 0 {
                            // Freed now, as the kernel's replay evicts it: a
                            // later record may give the number a new inode.
                            self.replay_finish_inode(*ino)?;
                        }
                    }
                    touched.insert(*ino);
                }
            }
        }
        for ino in touched {
            self.replay_finish_inode(ino)?;
        }
        Ok(records.len())
    }

    fn checked_ino(&self, ino: u32) -> Result<(), Error> {
        if ino == 0 || u64::from(ino) > self.layout.inodes_count {
            return Err(bad(format!("inode {ino} outside the filesystem's {}", self.layout.inodes_count)));
        }
        Ok(())
    }

    /// `INODE`: the logged bytes over the inode but its `i_block`.
    fn replay_inode(&mut self, ino: u32, logged: &[u8]) -> Result<(), Error> {
        self.checked_ino(ino)?;
        let size = self.layout.inode_size as usize;
        if logged.len() < 128 || logged.len() > size {
            return Err(bad(format!("inode {ino}: {} logged bytes", logged.len())));
        }
        let at = self.inode_offset(ino)?;
        let free = !self.inode_in_use(ino)?;
        let mut raw = self.bytes(at, size, &|| format!("inode {ino}"))?.to_vec();
        if free {
            // A free inode's old mapping is no one's: the records build a new one.
            raw[I_BLOCK..I_BLOCK + 60].fill(0);
        }
        raw[..I_BLOCK].copy_from_slice(&logged[..I_BLOCK]);
        raw[I_GENERATION..logged.len()].copy_from_slice(&logged[I_GENERATION..]);
        let flags = le32(&raw, I_FLAGS);
        if flags & FLAG_INLINE_DATA != 0 {
            raw[I_BLOCK..I_BLOCK + 60].copy_from_slice(&logged[I_BLOCK..I_BLOCK + 60]);
        } else if flags & FLAG_EXTENTS != 0 && le16(&raw, I_BLOCK) != EXT_MAGIC {
            // An empty extent root: magic, 0 entries, room for 4, depth 0.
            raw[I_BLOCK..I_BLOCK + 60].fill(0);
            put16(&mut raw, I_BLOCK, EXT_MAGIC);
            put16(&mut raw, I_BLOCK + 4, 4);
        }
        let is_dir = le16(&raw, I_MODE) & 0o170_000 == S_IFDIR;
        self.write_raw_inode(ino, raw)?;
        self.mark_inode_used(ino, is_dir)
    }

    /// `ADD_RANGE` (`put`) or `DEL_RANGE` (`None`) over `len` file blocks
    /// from `lblk`.
    fn replay_map(&mut self, ino: u32, lblk: u64, len: u64, put: Option<Run>) -> Result<(), Error> {
        self.checked_ino(ino)?;
        let inode = self.inode(ino)?;
        let to = (lblk + len).min(1 << 32);
        let put: Vec<Run> = put.into_iter().collect();
        let (_, removed) = self.remap(&inode, lblk, to, &put)?;
        for old in removed {
            // Blocks the new run maps again stay in use.
            for (start, n) in minus(old.physical, old.len, &put) {
                self.set_blocks(start, n, false)?;
            }
        }
        for run in &put {
            self.set_blocks(run.physical, run.len, true)?;
        }
        Ok(())
    }

    /// `CREAT`: the inode (replayed before) marked in use, a directory
    /// given its first block, and its name in `parent`.
    fn replay_create(&mut self, parent: u32, ino: u32, name: &[u8]) -> Result<(), Error> {
        self.replay_dir(parent, name)?;
        self.checked_ino(ino)?;
        let inode = self.inode(ino)?;
        let is_dir = inode.is_dir();
        self.mark_inode_used(ino, is_dir)?;
        if is_dir && self.runs(&inode)?.is_empty() {
            let inode = self.grow(inode, 0, 1, Fill::Nothing)?;
            let bs = self.layout.block_size as usize;
            let block = new_dir_block(bs, inode.csum_seed, &[(ino, 2, b"."), (parent, 2, b"..")]);
            let physical = self.runs(&inode)?[0].physical;
            self.store_unread(physical * bs as u64, &block)?;
            self.edit_inode(&inode, |r| put32(r, I_SIZE_LO, bs as u32))?;
        }
        let added = self.replay_link(parent, ino, name)?;
        let links = if is_dir { 2 } else { 1 };
        let inode = self.inode(ino)?;
        self.edit_inode(&inode, |r| put16(r, I_LINKS_COUNT, links))?;
        if added && is_dir {
            self.add_links(parent, 1)?;
        }
        Ok(())
    }

    /// Directory `parent` of a dentry record, with blocks to change, and
    /// `name` a name it can hold.
    fn replay_dir(&self, parent: u32, name: &[u8]) -> Result<Inode, Error> {
        self.checked_ino(parent)?;
        let dir = self.inode(parent)?;
        if !dir.is_dir() || dir.flags & FLAG_INLINE_DATA != 0 {
            return Err(bad(format!("inode {parent} names entries but is not a directory with blocks")));
        }
        let bad_name = name.is_empty() || name.len() > 255 || name.iter().any(|&b| b == b'/' || b == 0);
        if bad_name || name == b"." || name == b".." {
            return Err(bad(format!(
                "directory {parent}: the name {:?} cannot be an entry",
                String::from_utf8_lossy(name)
            )));
        }
        Ok(dir)
    }

    /// `parent`'s entry `name` → `ino`, unless the name is there already.
    /// Whether it was added.
    fn replay_link(&mut self, parent: u32, ino: u32, name: &[u8]) -> Result<bool, Error> {
        let dir = self.replay_dir(parent, name)?;
        self.checked_ino(ino)?;
        if self.lookup(&dir, name).is_ok() {
            return Ok(false);
        }
        let mode = self.inode(ino)?.mode;
        self.add_entry(&dir, name, ino, file_type(mode))?;
        Ok(true)
    }

    /// `parent`'s entry `name` removed, if it names `ino`. Whether it was.
    fn replay_unlink(&mut self, parent: u32, ino: u32, name: &[u8]) -> Result<bool, Error> {
        let dir = self.replay_dir(parent, name)?;
        match self.lookup(&dir, name) {
            Ok(entry) if entry.ino == ino => {
                self.remove_entry(&dir, name)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn add_links(&mut self, ino: u32, delta: i32) -> Result<(), Error> {
        let inode = self.inode(ino)?;
        let links = (i32::from(inode.links) + delta).clamp(0, i32::from(u16::MAX)) as u16;
        self.edit_inode(&inode, |r| put16(r, I_LINKS_COUNT, links))?;
        Ok(())
    }

    /// After the records: `i_blocks` from the mapping (data, tree, xattr
    /// block), every mapped block in use; an inode left without links freed.
    fn replay_finish_inode(&mut self, ino: u32) -> Result<(), Error> {
        let Ok(inode) = self.inode(ino) else { return Ok(()) };
        if inode.links == 0 && !self.inode_in_use(ino)? {
            return Ok(()); // freed already, by its last unlink
        }
        let mapped = inode.flags & FLAG_INLINE_DATA == 0 && inode.flags & FLAG_EXTENTS != 0;
        let (runs, tree) =
            if mapped { (self.runs(&inode)?, self.tree_blocks(&inode)?) } else { (Vec::new(), Vec::new()) };
        // In use first, so that freeing an inode left without links finds
        // every bit it clears set, whatever the records said before.
        for run in &runs {
            self.set_blocks(run.physical, run.len, true)?;
        }
        for &block in &tree {
            self.set_blocks(block, 1, true)?;
        }
        if inode.links == 0 {
            self.mark_inode_used(ino, inode.is_dir())?;
            return self.release(inode);
        }
        if !mapped {
            return Ok(());
        }
        let blocks = runs.iter().map(|r| r.len).sum::<u64>() + tree.len() as u64 + u64::from(inode.file_acl != 0);
        let sectors = blocks * (self.layout.block_size / 512);
        self.edit_inode(&inode, |r| {
            put32(r, I_BLOCKS_LO, sectors as u32);
            put16(r, I_BLOCKS_HIGH, (sectors >> 32) as u16);
        })?;
        Ok(())
    }

    /// Whether inode `ino`'s bit is set in its group's bitmap.
    fn inode_in_use(&mut self, ino: u32) -> Result<bool, Error> {
        let l = self.layout.clone();
        let (g, index) = l.inode_group(u64::from(ino));
        let group = l.group(&self.map, g)?;
        if group.inode_uninit() {
            return Ok(false);
        }
        let bitmap = self.block(group.inode_bitmap, &|| format!("group {g} inode bitmap"))?;
        Ok(bitmap[(index / 8) as usize] >> (index % 8) & 1 == 1)
    }

    /// Inode `ino` marked in use in its group, counted as the kernel's
    /// `ext4_mark_inode_used` counts it; nothing if it is already.
    pub(crate) fn mark_inode_used(&mut self, ino: u32, is_dir: bool) -> Result<(), Error> {
        let l = self.layout.clone();
        let (g, index) = l.inode_group(u64::from(ino));
        let mut group = l.group(&self.map, g)?;
        if group.inode_uninit() {
            self.init_inode_bitmap(&group)?;
            group = l.group(&self.map, g)?;
        }
        let bitmap = self.block(group.inode_bitmap, &|| format!("group {g} inode bitmap"))?;
        if bitmap[(index / 8) as usize] >> (index % 8) & 1 == 1 {
            return Ok(());
        }
        self.flip_bits(&group, true, index, 1, true)?;
        self.note_inode_taken(&group, index, is_dir)?;
        self.edit_superblock(0, -1)
    }

    /// Disk blocks `start..start + len` marked in use (`used`) or free,
    /// only the bits not so already, group by group.
    pub(crate) fn set_blocks(&mut self, start: u64, len: u64, used: bool) -> Result<(), Error> {
        let l = self.layout.clone();
        if start < l.first_data_block || start.checked_add(len).is_none_or(|end| end > l.blocks_count) {
            return Err(bad(format!("blocks {start}..{} outside the filesystem", start.saturating_add(len))));
        }
        let (mut b, end) = (start, start + len);
        while b < end {
            let g = (b - l.first_data_block) / l.blocks_per_group;
            let group_start = l.first_data_block + g * l.blocks_per_group;
            let n = end.min(group_start + l.blocks_per_group) - b;
            let mut group = l.group(&self.map, g)?;
            if group.block_uninit() {
                self.init_block_bitmap(&group)?;
                group = l.group(&self.map, g)?;
            }
            let bitmap = self.block(group.block_bitmap, &|| format!("group {g} block bitmap"))?;
            let first = b - group_start;
            let is_used = |bit: u64| bitmap[(bit / 8) as usize] >> (bit % 8) & 1 == 1;
            // Runs of bits that are not yet as wanted.
            let mut runs = Vec::new();
            let mut bit = first;
            while bit < first + n {
                if is_used(bit) == used {
                    bit += 1;
                    continue;
                }
                let run_start = bit;
                while bit < first + n && is_used(bit) != used {
                    bit += 1;
                }
                runs.push((run_start, bit - run_start));
            }
            for (first, count) in runs {
                self.flip_bits(&group, false, first, count, used)?;
                self.edit_superblock(if used { -(count as i64) } else { count as i64 }, 0)?;
            }
            b += n;
        }
        Ok(())
    }

    /// Writes inode `ino` whole from `raw`, its checksum computed in full
    /// (its generation, which seeds the checksum, may have changed).
    fn write_raw_inode(&mut self, ino: u32, mut raw: Vec<u8>) -> Result<Inode, Error> {
        use csumkit::ext4::checksum::{inode_checksum, inode_has_csum_hi, inode_seed, INODE_CSUM_HI, INODE_CSUM_LO};
        let seed = inode_seed(self.layout.csum_seed, ino, &raw);
        let crc = inode_checksum(&raw, seed).1;
        put16(&mut raw, INODE_CSUM_LO, crc as u16);
        if inode_has_csum_hi(&raw) {
            put16(&mut raw, INODE_CSUM_HI, (crc >> 16) as u16);
        }
        let at = self.inode_offset(ino)?;
        self.store(at, &raw)?;
        self.written_inode(ino, raw, seed)
    }

    /// The descriptor counts of an inode just marked in use: a directory
    /// more, and the inodes past the last one used fewer.
    pub(crate) fn note_inode_taken(&mut self, group: &Group, index: u64, is_dir: bool) -> Result<(), Error> {
        let l = self.layout.clone();
        let wide = l.desc_size >= 0x40;
        self.edit_descriptor(group, |d| {
            if is_dir {
                let dirs = u32::from(le16(d, BG_USED_DIRS_LO))
                    | if wide { u32::from(le16(d, BG_USED_DIRS_HI)) << 16 } else { 0 };
                put16(d, BG_USED_DIRS_LO, (dirs + 1) as u16);
                if wide {
                    put16(d, BG_USED_DIRS_HI, ((dirs + 1) >> 16) as u16);
                }
            }
            // bg_itable_unused: inodes past the last one ever used.
            let unused = u32::from(le16(d, BG_ITABLE_UNUSED_LO))
                | if wide { u32::from(le16(d, BG_ITABLE_UNUSED_HI)) << 16 } else { 0 };
            let unused_now = (l.inodes_per_group - index - 1) as u32;
            if unused_now < unused {
                put16(d, BG_ITABLE_UNUSED_LO, unused_now as u16);
                if wide {
                    put16(d, BG_ITABLE_UNUSED_HI, (unused_now >> 16) as u16);
                }
            }
        })
    }
}

/// The parts of disk blocks `start..start + len` that no run of `put` maps.
fn minus(start: u64, len: u64, put: &[Run]) -> Vec<(u64, u64)> {
    let mut pieces = vec![(start, start + len)];
    for run in put {
        let (a, b) = (run.physical, run.physical + run.len);
        pieces = pieces
            .into_iter()
            .flat_map(|(s, e)| {
                let mut out = Vec::new();
                if s < a.min(e) {
                    out.push((s, a.min(e)));
                }
                if b.max(s) < e {
                    out.push((b.max(s), e));
                }
                out
            })
            .collect();
    }
    pieces.into_iter().map(|(s, e)| (s, e - s)).collect()
}

#[cfg(test)]
mod tests {
    use super::minus;
    use crate::space::map::Run;

    #[test]
    fn minus_leaves_what_no_run_covers() {
        let run = |physical, len| Run { logical: 0, len, physical, uninit: false };
        assert_eq!(minus(10, 10, &[]), vec![(10, 10)]);
        assert_eq!(minus(10, 10, &[run(12, 3)]), vec![(10, 2), (15, 5)]);
        assert_eq!(minus(10, 10, &[run(0, 100)]), vec![]);
        assert_eq!(minus(10, 10, &[run(15, 10)]), vec![(10, 5)]);
    }
}
