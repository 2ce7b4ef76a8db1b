//! Data checksums on the volume: what a data write, a free and a read do
//! to the checksums of the blocks they touch, and the offline scrub. The
//! checksums' store (the sidecar, its tree and intent list) is
//! `store/data_sums.rs`.

use crate::error::Error;
use crate::inode::table::Inode;
use crate::stats::Stats;
use crate::store::data_sums::{commit, regions_to_list, DataSums, INTENT_REGION_BYTES, INTENT_RUNS};
use crate::volume::Volume;
use csumkit::crc32c;
use std::path::Path;

impl Volume {
    /// Keeps data checksums in the sidecar at `path`. On a volume opened
    /// for writing the sidecar is created if missing and started afresh if
    /// it belongs to another image or is stale; read-only, such a sidecar
    /// is left alone and `Ok(false)` says no checksums are kept.
    ///
    /// # Errors
    /// [`Error::Io`] for the sidecar file; [`Error::Format`] for a damaged tree.
    pub fn enable_data_checksums(&mut self, path: &Path) -> Result<bool, Error> {
        let io = |source| Error::Io { context: path.display().to_string(), source };
        let write = self.options.write;
        let file = match std::fs::OpenOptions::new().read(true).write(write).create(write).truncate(false).open(path) {
            Ok(file) => file,
            Err(e) if !write && e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io(e)),
        };
        self.enable_data_checksums_on(Box::new(file), path)
    }

    /// [`enable_data_checksums`](Self::enable_data_checksums) with the
    /// sidecar in `file` (opened for writing when the volume is), named
    /// `path` in messages.
    ///
    /// # Errors
    /// As [`enable_data_checksums`](Self::enable_data_checksums).
    pub fn enable_data_checksums_on(
        &mut self,
        file: Box<dyn csumkit::DurableFile>,
        path: &Path,
    ) -> Result<bool, Error> {
        let replayed = std::mem::take(&mut self.replayed_sums);
        let opened =
            DataSums::open(file, path, &self.map, &self.layout, self.options.write, &replayed, self.redo.is_some())?;
        let Some((sums, listed, forgotten)) = opened else {
            self.replayed_sums = replayed;
            return Ok(false);
        };
        self.datasums = Some(sums);
        if listed && self.options.write {
            if forgotten > 0 {
                eprintln!(
                    "csumfs: {}: {forgotten} blocks were being written when csumfs stopped and no longer match \
                     their checksums; those are forgotten (the blocks read unverified until rewritten)",
                    path.display()
                );
            }
            // With a ByteLog the list stays (see `commit`): a recovery that
            // dies before its checkpoint has emptied the log replays the
            // log's checksums again, over the blocks forgotten here, which
            // only the list names.
            self.commit_data_checksums()?;
        }
        Ok(true)
    }

    /// Records, before they are written in place, that data blocks
    /// `start..start + len` are about to change — when any of them has a
    /// checksum that may be durable: the 1 MiB regions around them go on
    /// the intent list (merged with the last entry when adjacent), which is
    /// made durable before this returns. A full list is emptied by a commit
    /// first.
    pub(crate) fn data_will_write(&mut self, start: u64, len: u64) -> Result<(), Error> {
        let region = (INTENT_REGION_BYTES / self.layout.block_size).max(1);
        let blocks = self.layout.blocks_count;
        let Some(sums) = &mut self.datasums else { return Ok(()) };
        // A block with no checksum anywhere reads unverified whatever
        // reaches the disk: nothing to announce.
        if !(start..start + len).any(|b| sums.tree.get(b).is_some() || sums.freed.contains(b as usize)) {
            return Ok(());
        }
        // A commit staged before this write does not carry the blocks' new
        // checksums, so it must not empty the list — even when the list
        // names them already (a power-cut test found a split sync's commit
        // emptying it under a write into a region listed earlier: a cut
        // before the next commit then failed the block's new data).
        sums.version += 1;
        let (start, end) = (start / region * region, ((start + len).div_ceil(region) * region).min(blocks));
        if sums.intent.iter().any(|&(s, l)| s <= start && end <= s + l) {
            return Ok(());
        }
        let i = sums.intent.len().wrapping_sub(1);
        if let Some(last) = sums.intent.last_mut() {
            if last.0 <= start && start <= last.0 + last.1 {
                last.1 = end - last.0; // not covered: `end` is past the entry's
                let run = *last;
                sums.store.write_intent(i, run, None)?;
                Stats::bump(&self.stats.datasum_intent_flushes);
                return sums.store.flush_intent();
            }
        }
        if sums.intent.len() == INTENT_RUNS {
            self.sync()?;
        }
        let sums = self.datasums.as_mut().expect("checked above");
        sums.push_intent((start, end - start))?;
        Stats::bump(&self.stats.datasum_intent_flushes);
        sums.store.flush_intent()
    }

    /// Records the checksum of data block `physical` as it is now.
    pub(crate) fn data_written(&mut self, physical: u64) {
        let bs = self.layout.block_size;
        if self.datasums.is_some() {
            let block = &self.map[(physical * bs) as usize..((physical + 1) * bs) as usize];
            let crc = crc32c::checksum(block);
            self.record_data_sum(physical, crc);
        }
    }

    /// [`data_written`](Self::data_written) for a block whose new bytes
    /// are at hand (`block`): checksummed from them, not read back.
    pub(crate) fn data_written_from(&mut self, physical: u64, block: &[u8]) {
        debug_assert_eq!(block.len() as u64, self.layout.block_size);
        if self.datasums.is_some() {
            self.data_written_crc(physical, crc32c::checksum(block));
        }
    }

    /// [`data_written`](Self::data_written) with the block's checksum
    /// computed already (from the bytes written). Debug builds and
    /// `check_updates` compare it with the image's block.
    pub(crate) fn data_written_crc(&mut self, physical: u64, crc: u32) {
        let bs = self.layout.block_size;
        if cfg!(debug_assertions) || self.options.check_updates {
            let stored = &self.map[(physical * bs) as usize..((physical + 1) * bs) as usize];
            assert_eq!(
                crc,
                crc32c::checksum(stored),
                "data block {physical}: checksummed bytes differ from the image's"
            );
        }
        self.record_data_sum(physical, crc);
    }

    /// `crc` matches the block's bytes now (each caller computed it from
    /// them, or from the bytes it stored there): the block is known good.
    fn record_data_sum(&mut self, physical: u64, crc: u32) {
        if let Some(sums) = &mut self.datasums {
            sums.tree.update(physical, crc);
            sums.known_good.insert(physical, crc);
            sums.dirty = true;
            if let Some(logged) = &mut sums.logged {
                logged.insert(physical, Some(crc));
            }
            Stats::bump(&self.stats.data_checksummed);
        }
    }

    /// Forgets the checksums of freed blocks. Only blocks that have one are
    /// noted for the log: forgetting a block without a checksum changes
    /// nothing a replay would rebuild (a freed fallocated extent notes
    /// nothing, whatever its size).
    pub(crate) fn data_freed(&mut self, start: u64, len: u64) {
        if let Some(sums) = &mut self.datasums {
            let present: Vec<u64> = sums.tree.present_in(start..start + len).collect();
            for b in present {
                sums.tree.remove(b);
                sums.freed.insert(b as usize, b as usize + 1);
                sums.version += 1;
                if let Some(logged) = &mut sums.logged {
                    logged.insert(b, None);
                }
                sums.dirty = true;
            }
        }
    }

    /// Verifies data block `physical` of `inode` (file block `logical`)
    /// against its checksum, if it has one.
    pub(crate) fn verify_data(&self, inode: &Inode, logical: u64, physical: u64) -> Result<(), Error> {
        self.check_data(inode, logical, physical).map(|_| ())
    }

    /// [`verify_data`](Self::verify_data); `Ok(false)`: the block has no
    /// checksum (or PI) to check it against.
    fn check_data(&self, inode: &Inode, logical: u64, physical: u64) -> Result<bool, Error> {
        if let Some(device) = &self.pi {
            return self.pi_verify(device, inode, logical, physical);
        }
        let Some(sums) = &self.datasums else { return Ok(false) };
        let Some(want) = sums.tree.get(physical) else { return Ok(false) };
        let bs = self.layout.block_size;
        let block = &self.map[(physical * bs) as usize..((physical + 1) * bs) as usize];
        let got = crc32c::checksum(block);
        Stats::bump(&self.stats.data_verified);
        if got != want {
            Stats::bump(&self.stats.data_mismatches);
            return Err(Error::DataChecksum { ino: inode.ino, logical, physical, stored: want, computed: got });
        }
        Ok(true)
    }

    /// Commits the data checksums (after the image's data is durable).
    pub(crate) fn commit_data_checksums(&mut self) -> Result<(), Error> {
        commit(&mut self.datasums, &self.stats)
    }

    /// Before the tree is committed while data written through the log is
    /// not yet in the image (byte ranges `logged`): the new checksums of
    /// those blocks would be durable ahead of their data, and a power cut
    /// in between would fail the old data with `EIO`. Their regions go on
    /// the intent list (made durable here), which the tree's commit
    /// keeps: the next open forgets the checksum of a listed block that
    /// does not match, and the log commit carrying the data empties it.
    /// `Ok(false)`: the list has no room for them (nothing was listed).
    pub(crate) fn list_ahead_of_data(&mut self, logged: &[(usize, usize)]) -> Result<bool, Error> {
        let bs = self.layout.block_size;
        let region = (INTENT_REGION_BYTES / bs).max(1);
        let blocks = self.layout.blocks_count;
        let Some(sums) = &mut self.datasums else { return Ok(true) };
        let runs = regions_to_list(logged, &sums.intent, bs, region, blocks);
        if runs.is_empty() {
            return Ok(true);
        }
        if sums.intent.len() + runs.len() > INTENT_RUNS {
            return Ok(false);
        }
        sums.version += 1;
        for run in runs {
            sums.push_intent(run)?;
        }
        Stats::bump(&self.stats.datasum_intent_flushes);
        sums.store.flush_intent()?;
        Ok(true)
    }
}

impl Volume {
    /// Every data block of every file reachable from the root that has a
    /// checksum and does not match it: (path, file block, disk block).
    ///
    /// # Errors
    /// As [`read_dir`](Self::read_dir) and [`runs`](Self::runs).
    pub fn scrub(&self) -> Result<ScrubReport, Error> {
        let mut report = ScrubReport::default();
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![(String::new(), self.inode(crate::inode::table::ROOT)?)];
        while let Some((path, dir)) = stack.pop() {
            for entry in self.read_dir(&dir)? {
                if entry.name == b"." || entry.name == b".." || !seen.insert(entry.ino) {
                    continue;
                }
                let child = format!("{path}/{}", String::from_utf8_lossy(&entry.name));
                let inode = self.inode(entry.ino)?;
                if inode.is_dir() {
                    stack.push((child, inode));
                } else if inode.is_file() {
                    report.files += 1;
                    let mut unchecked = 0;
                    for run in self.runs(&inode)?.into_iter().filter(|r| !r.uninit) {
                        for k in 0..run.len {
                            report.blocks += 1;
                            match self.check_data(&inode, run.logical + k, run.physical + k) {
                                Ok(true) => report.verified += 1,
                                Ok(false) => unchecked += 1,
                                Err(
                                    Error::DataChecksum { logical, physical, .. }
                                    | Error::DataPi { logical, physical, .. },
                                ) => {
                                    report.bad.push((child.clone(), logical, physical));
                                }
                                Err(e) => return Err(e),
                            }
                        }
                    }
                    if unchecked > 0 {
                        report.unchecked.push((child, unchecked));
                    }
                }
            }
        }
        Ok(report)
    }
}

/// What [`Volume::scrub`] found.
#[derive(Debug, Default)]
pub struct ScrubReport {
    /// Regular files walked.
    pub files: u64,
    /// Written blocks read (unwritten extents are not).
    pub blocks: u64,
    /// Blocks whose checksum (or PI) matched.
    pub verified: u64,
    /// (path, file block, disk block) of every mismatch.
    pub bad: Vec<(String, u64, u64)>,
    /// (path, blocks) of each file with blocks that have no checksum (or
    /// PI) to check: written by another driver or a `datasum=off` mount.
    pub unchecked: Vec<(String, u64)>,
}
