//! Kernel-format fast commits written for `fsync` (Linux
//! `fs/ext4/fast_commit.c`): on a filesystem with `fast_commit` whose
//! journal csumfs writes, a sync whose changes since the last full commit
//! are all of kinds the kernel's replay rebuilds appends their records to
//! the journal's fast-commit area (`store/image_journal.rs`) instead of a
//! jbd2 transaction of every block they touched.
//!
//! The changes are tracked as the kernel's `ext4_fc_track_*` track them:
//! the operations a fast commit can carry — creating a file, FIFO or
//! socket, writing or truncating a file, changing its attributes, linking,
//! unlinking, renaming a non-directory — run as an eligible scope
//! ([`Volume::fast_eligible`]) and note the inodes they change, the file
//! blocks whose mapping changed and each name added or removed, in order.
//! A change made outside such a scope (a directory made or removed, an
//! xattr, a flag, a block-mapped file migrated…), an operation undone, or
//! data that went through the journal makes every sync until the next
//! full commit a full one, as the kernel's `ext4_fc_mark_ineligible` does.
//!
//! The records (`fast_records`), in the kernel's order: each name change,
//! a created inode's `INODE` and ranges before its `CREAT`; then every
//! inode changed, its ranges (`ADD_RANGE` for mapped blocks, `DEL_RANGE`
//! for holes) and its `INODE`. Directories are not tracked — the replay
//! adds and removes their entries itself — nor inodes freed since.
//! A fast commit leaves the changes pending: the next full commit logs
//! their blocks, and home blocks never run ahead of it.

use crate::error::Error;
use crate::inode::table::FLAG_EXTENTS;
use crate::volume::Volume;
use csumkit::ext4::jbd2::fast_commit::{self, Tlv, TAG_CREAT};
use std::collections::BTreeMap;

const FLAG_INLINE_DATA: u32 = 0x1000_0000;

/// What the next fast commit must carry.
#[derive(Default)]
pub(crate) struct FastTrack {
    /// Eligible operations under way (nested ones count once each).
    pub(crate) scope: u32,
    /// Why the changes since the last full commit need a full one.
    pub(crate) ineligible: Option<&'static str>,
    /// Inodes changed since the last commit, with the file blocks
    /// `[first, last]` whose mapping changed.
    inodes: BTreeMap<u32, Option<(u64, u64)>>,
    /// Names added and removed since the last commit, in order:
    /// (tag, directory, inode, name).
    dentries: Vec<(u16, u32, u32, Vec<u8>)>,
}

impl FastTrack {
    /// A change outside every eligible scope: the next commit is a full one.
    pub(crate) fn noted(&mut self) {
        if self.scope == 0 {
            self.ineligible.get_or_insert("a change fast commits do not carry");
        }
    }

    /// A full commit carries everything: tracking begins again.
    pub(crate) fn full_commit(&mut self) {
        self.ineligible = None;
        self.inodes.clear();
        self.dentries.clear();
    }

    /// A fast commit carried the changes tracked.
    fn fast_commit(&mut self) {
        self.inodes.clear();
        self.dentries.clear();
    }
}

impl Volume {
    fn fast_track(&mut self) -> Option<&mut FastTrack> {
        self.redo.as_mut().and_then(|r| r.fast.as_mut())
    }

    /// Runs `op` as an operation a fast commit can carry (its changes
    /// tracked by the calls below).
    pub(crate) fn fast_eligible<T>(&mut self, op: impl FnOnce(&mut Volume) -> Result<T, Error>) -> Result<T, Error> {
        if let Some(track) = self.fast_track() {
            track.scope += 1;
        }
        let result = op(self);
        if let Some(track) = self.fast_track() {
            track.scope -= 1;
        }
        result
    }

    /// The changes since the last full commit need one, for `reason`.
    pub(crate) fn fast_ineligible(&mut self, reason: &'static str) {
        if let Some(track) = self.fast_track() {
            track.ineligible.get_or_insert(reason);
        }
    }

    /// Inode `ino` changed (inside an eligible scope).
    pub(crate) fn fast_track_inode(&mut self, ino: u32) {
        if let Some(track) = self.fast_track().filter(|t| t.scope > 0) {
            track.inodes.entry(ino).or_insert(None);
        }
    }

    /// File blocks `[from, to)` of inode `ino` were mapped or unmapped.
    pub(crate) fn fast_track_range(&mut self, ino: u32, from: u64, to: u64) {
        if to <= from {
            return;
        }
        if let Some(track) = self.fast_track().filter(|t| t.scope > 0) {
            let range = track.inodes.entry(ino).or_insert(None);
            *range = Some(match *range {
                Some((first, last)) => (first.min(from), last.max(to - 1)),
                None => (from, to - 1),
            });
        }
    }

    /// Name `name` of `ino` in `dir` added (`tag` CREAT or LINK) or
    /// removed (UNLINK).
    pub(crate) fn fast_track_dentry(&mut self, tag: u16, dir: u32, ino: u32, name: &[u8]) {
        if let Some(track) = self.fast_track().filter(|t| t.scope > 0) {
            track.dentries.push((tag, dir, ino, name.to_vec()));
        }
    }

    /// The records of a fast commit carrying every change since the last
    /// commit; `None` when one cannot (the reason is counted).
    pub(crate) fn fast_records(&mut self) -> Result<Option<Vec<Tlv>>, Error> {
        let Some(redo) = self.redo.as_ref() else { return Ok(None) };
        let Some(track) = redo.fast.as_ref() else { return Ok(None) };
        let logged_data = !redo.logged_data.is_empty();
        if track.ineligible.is_some() || logged_data {
            return Ok(None);
        }
        let (dentries, inodes) = (track.dentries.clone(), track.inodes.clone());
        let mut out = Vec::new();
        let mut ranges_done = std::collections::BTreeSet::new();
        for (tag, dir, ino, name) in &dentries {
            if *tag == TAG_CREAT {
                match self.fast_inode_records(*ino, inodes.get(ino).copied().flatten(), true, &mut out)? {
                    Some(true) => {
                        ranges_done.insert(*ino);
                    }
                    Some(false) => continue, // freed since: nothing to create
                    None => return Ok(None),
                }
            }
            out.push(fast_commit::dentry(*tag, *dir, *ino, name));
        }
        for (&ino, &range) in &inodes {
            let range = if ranges_done.contains(&ino) { None } else { range };
            if self.fast_inode_records(ino, range, false, &mut out)?.is_none() {
                return Ok(None);
            }
        }
        Ok(Some(out))
    }

    /// Appends inode `ino`'s ranges over `range` and its `INODE` record to
    /// `out` — the `INODE` first for a created one (`created`): the
    /// kernel's replay maps ranges only into an inode in use, and counts
    /// `i_blocks` at each `INODE`, which the loop over the changed inodes
    /// writes again after. `Some(false)`: nothing to carry (freed, or a
    /// directory); `None`: a kind of inode the replay cannot rebuild.
    fn fast_inode_records(
        &mut self,
        ino: u32,
        range: Option<(u64, u64)>,
        created: bool,
        out: &mut Vec<Tlv>,
    ) -> Result<Option<bool>, Error> {
        let inode = self.inode(ino)?;
        if inode.links == 0 || inode.is_dir() {
            return Ok(Some(false));
        }
        let kind = inode.mode & 0o170_000;
        let mapped = inode.flags & FLAG_EXTENTS != 0 && inode.flags & FLAG_INLINE_DATA == 0;
        // Files by their extents; FIFOs and sockets hold nothing in
        // `i_block`, which the replay does not copy (a symlink's target, a
        // device's number would be lost).
        let ok = match kind {
            0o100_000 => mapped,
            0o010_000 | 0o140_000 => true,
            _ => false,
        };
        if !ok {
            self.fast_ineligible("a symlink, device or non-extent file changed");
            return Ok(None);
        }
        let size = self.layout.inode_size as usize;
        let len = if size > 128 { (128 + inode.extra_isize()).min(size) } else { 128 };
        let record = fast_commit::inode(ino, &inode.raw[..len]);
        if created {
            out.push(record.clone());
        }
        if let Some((first, last)) = range.filter(|_| mapped) {
            // ext4's last file block is 2^32 - 2 (`EXT_MAX_BLOCKS` - 1): a
            // truncate unmaps up to it.
            let last = last.min(0xFFFF_FFFE);
            let runs = self.runs(&inode)?;
            let mut cur = first;
            for run in runs.iter().filter(|r| r.logical + r.len > first && r.logical <= last) {
                if run.logical > cur {
                    out.push(fast_commit::del_range(ino, cur as u32, (run.logical - cur) as u32));
                    cur = run.logical;
                }
                let end = (run.logical + run.len).min(last + 1);
                let max = if run.uninit { 32767 } else { 32768 };
                while cur < end {
                    let n = (end - cur).min(max);
                    let pblk = run.physical + (cur - run.logical);
                    out.push(fast_commit::add_range(ino, cur as u32, n as u16, pblk, run.uninit));
                    cur += n;
                }
            }
            if cur <= last {
                out.push(fast_commit::del_range(ino, cur as u32, (last + 1 - cur) as u32));
            }
        }
        if !created {
            out.push(record);
        }
        Ok(Some(true))
    }

    /// After a fast commit of [`fast_records`](Self::fast_records) was staged.
    pub(crate) fn fast_committed(&mut self) {
        if let Some(track) = self.fast_track() {
            track.fast_commit();
        }
    }
}
