//! The ByteLog inside the image (`-o bytelog`): its region is the jbd2
//! journal's fast-commit area after the area's first two blocks, which
//! hold a conventional fast-commit stream of anchor records (HEAD, anchor,
//! TAIL; anchor, TAIL: `csumkit::ext4::jbd2::bytelog_anchor`) naming the
//! window and repeating the ByteLog's anchors. Commits are the ByteLog's
//! records as a sidecar log has them, written into the image file with
//! direct writes of the sectors they touch and `fdatasync` — or, for an
//! image on DAX (tmpfs standing in), stored through a shared map and
//! flushed by cache line.
//!
//! Whenever the ByteLog flushes one of its anchor slots (at a checkpoint,
//! and every 256 KiB of log) the anchor block of the same parity is
//! rewritten, within the same fence: a crash tears at most that one, and
//! the other names the same window and generation. Recovery trusts the
//! ByteLog's own slots and record CRCs; the anchor blocks say where the
//! log is and of which generation, so a log of another mount, or bytes of
//! the kernel's own fast commits, are never read as this one's.
//!
//! The journal's log itself stays empty (`s_start` 0) in this mode: the
//! image's incompat bits (`LOG_PENDING` with `FC_BYTELOG`) keep the kernel
//! and e2fsck away while the ByteLog holds records the image lacks.

use crate::error::{corrupt, Error};
use crate::store::medium::{
    on_tmpfs, LogMedium, LOG_IN_FAST_COMMIT_AREA, LOG_IN_FAST_COMMIT_AREA_DIRECT, LOG_IN_FAST_COMMIT_AREA_MAPPED,
};
use csumkit::bytelog::{Anchor, FileMedium, Medium, MmapMedium, Persist, Superblock, LINE_BYTES};
use csumkit::ext4::feature_bits::COMPAT_FAST_COMMIT;
use csumkit::ext4::jbd2::bytelog_anchor::ByteLogAnchor;
use csumkit::ext4::jbd2::{Journal, DEFAULT_FAST_COMMIT_BLOCKS, MIN_JOURNAL_BLOCKS};
use csumkit::le::be32;
use std::path::Path;

/// Where the fast-commit area is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Area {
    /// Journal block where the area begins (its anchor block).
    pub(crate) first: u32,
    /// Blocks in the area.
    pub(crate) blocks: u32,
    /// Byte offset of the area in the image.
    pub(crate) offset: u64,
    pub(crate) block_size: usize,
    /// The transaction the journal expects next (the anchor's HEAD and TAIL).
    pub(crate) tid: u32,
}

/// Blocks at the area's start holding anchor records.
const ANCHOR_BLOCKS: u32 = 2;
/// Fewest bytes of ByteLog region the area must leave after them.
const REGION_BYTES_MIN: u64 = 16 << 10;

impl Area {
    /// The fast-commit area of `image`'s journal, when it is one csumfs
    /// can hold its ByteLog in; else why not, for the user.
    pub(crate) fn locate(image: &[u8]) -> Result<Area, String> {
        let layout = csumkit::ext4::Layout::parse(image).map_err(|e| e.to_string())?;
        if layout.features.compat & COMPAT_FAST_COMMIT == 0 {
            return Err("the image has no fast-commit area (make it with `mke2fs -O fast_commit`)".into());
        }
        let journal = match Journal::open(image, &layout) {
            Ok(Some(journal)) => journal,
            Ok(None) => return Err("the image has no journal".into()),
            Err(e) => return Err(e.to_string()),
        };
        let sb = &journal.superblock;
        if sb.start != 0 {
            return Err("its journal still needs recovery".into());
        }
        let raw = journal.block(image, 0).map_err(|e| e.to_string())?;
        let blocks = match (sb.fast_commit_blocks, be32(raw, 0x54)) {
            (0, 0) => DEFAULT_FAST_COMMIT_BLOCKS,
            (0, n) | (n, _) => n,
        };
        if sb.max_len.checked_sub(blocks).is_none_or(|log| log < MIN_JOURNAL_BLOCKS) {
            return Err(format!("{blocks} fast-commit blocks leave too short a log of {} blocks", sb.max_len));
        }
        let first = sb.max_len - blocks;
        let block_size = sb.block_size as usize;
        if u64::from(blocks.saturating_sub(ANCHOR_BLOCKS)) * (block_size as u64) < REGION_BYTES_MIN {
            return Err(format!("its fast-commit area of {blocks} blocks is too small for a ByteLog"));
        }
        let physical = journal.blocks.get(first as usize..sb.max_len as usize).unwrap_or_default();
        let contiguous = physical.len() == blocks as usize && physical.windows(2).all(|w| w[1] == w[0] + 1);
        if !contiguous {
            return Err("its fast-commit area is not in one piece in the image".into());
        }
        let offset = physical[0] * block_size as u64;
        if offset + u64::from(blocks) * block_size as u64 > image.len() as u64 {
            return Err("its fast-commit area lies past the image's end".into());
        }
        Ok(Area { first, blocks, offset, block_size, tid: sb.sequence })
    }

    /// The ByteLog region's bytes in `image` (a copy), after checking that
    /// the area's anchors name it: what a read-only open or a check replays.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when no anchor block does.
    pub(crate) fn log_bytes(&self, image: &[u8]) -> Result<Vec<u8>, Error> {
        let area = &image[self.offset as usize..self.offset as usize + self.blocks as usize * self.block_size];
        let (anchors, region) = area.split_at(self.region_offset() as usize);
        self.check_anchors(anchors, region)?;
        Ok(region.to_vec())
    }

    /// Where the ByteLog region begins in the area.
    fn region_offset(&self) -> u64 {
        u64::from(ANCHOR_BLOCKS) * self.block_size as u64
    }

    fn anchor(&self, anchor: Anchor) -> ByteLogAnchor {
        ByteLogAnchor { window_first: self.first + ANCHOR_BLOCKS, window_blocks: self.blocks - ANCHOR_BLOCKS, anchor }
    }

    /// That one of the anchor blocks in `blocks` names the ByteLog in
    /// `region`: this window, the generation its superblock has.
    fn check_anchors(&self, blocks: &[u8], region: &[u8]) -> Result<(), Error> {
        let sb = Superblock::decode(&region[..LINE_BYTES as usize])?;
        let mut why = Vec::new();
        for (slot, block) in blocks.chunks(self.block_size).enumerate() {
            let found = match ByteLogAnchor::parse(block, slot == 0) {
                Ok((found, _)) => found,
                Err(e) => {
                    why.push(format!("block {slot}: {e}"));
                    continue;
                }
            };
            let expected = self.anchor(found.anchor);
            if (found.window_first, found.window_blocks) != (expected.window_first, expected.window_blocks) {
                why.push(format!(
                    "block {slot} names blocks {}..+{}, the ByteLog is at {}..+{}",
                    found.window_first, found.window_blocks, expected.window_first, expected.window_blocks
                ));
            } else if found.anchor.generation != sb.generation {
                why.push(format!(
                    "block {slot} names ByteLog generation {}, the log there is generation {}",
                    found.anchor.generation, sb.generation
                ));
            } else {
                return Ok(());
            }
        }
        Err(corrupt("the journal's fast-commit area", format!("no anchor names its ByteLog: {}", why.join("; "))))
    }
}

/// The ByteLog an image a `-o bytelog` mount left holds in its journal's
/// fast-commit area (a copy of the region's bytes), for a replay in
/// memory ([`Volume::replayed_image`](crate::Volume::replayed_image)).
///
/// # Errors
/// [`Error::Invalid`] when the image has no such area; [`Error::Corrupt`]
/// when its anchor does not name the ByteLog there.
pub fn fast_commit_area_log(image: &[u8]) -> Result<Vec<u8>, Error> {
    let area = Area::locate(image).map_err(|reason| Error::Invalid(format!("its fast-commit area: {reason}")))?;
    area.log_bytes(image)
}

/// The ByteLog region of the fast-commit area as a medium: bytes from the
/// area's third block, written into the image file (`M`: a file's range;
/// a simulated medium in tests); a flush of an anchor slot rewrites the
/// anchor block of its parity too.
pub(crate) struct AreaMedium<M = FileMedium> {
    /// The whole area (anchor blocks first).
    inner: M,
    area: Area,
}

/// The area of the image at `path` as the ByteLog's medium, as `area`
/// locates it, and how it is written: mapped and flushed by cache line
/// when the image is on DAX (or tmpfs, the stand-in), else through
/// [`AreaMedium::open`]. When `expect_log` (the image says the log holds
/// changes), one of its anchor blocks must name the ByteLog there.
///
/// # Errors
/// As [`FileMedium::open_range`] and [`MmapMedium::open_range`];
/// [`Error::Corrupt`] when no anchor names the log.
pub(crate) fn area_medium(path: &Path, area: Area, expect_log: bool) -> Result<(LogMedium, &'static str), Error> {
    let len = u64::from(area.blocks) * area.block_size as u64;
    let mapped = MmapMedium::open_range(path, area.offset, len, on_tmpfs(path))?;
    if mapped.persist() == Persist::CacheLines {
        return Ok((Box::new(AreaMedium::over(mapped, area, expect_log)?), LOG_IN_FAST_COMMIT_AREA_MAPPED));
    }
    drop(mapped);
    let medium = AreaMedium::open(path, area, expect_log)?;
    let on = if medium.direct() { LOG_IN_FAST_COMMIT_AREA_DIRECT } else { LOG_IN_FAST_COMMIT_AREA };
    Ok((Box::new(medium), on))
}

impl AreaMedium {
    /// The area of the image at `path`, as `area` locates it, written with
    /// `pwrite` (direct writes where the file system takes them) and
    /// `fdatasync`; checked as [`area_medium`] says.
    ///
    /// # Errors
    /// As [`FileMedium::open_range`]; [`Error::Corrupt`] when no anchor
    /// names the log.
    pub(crate) fn open(path: &Path, area: Area, expect_log: bool) -> Result<AreaMedium, Error> {
        let len = u64::from(area.blocks) * area.block_size as u64;
        let mut file = FileMedium::open_range(path, area.offset, len)?;
        // Written back as it is, once: mke2fs leaves an image file's journal
        // as unwritten extents (zeroed by fallocate), and each first write
        // into one costs the file's file system a metadata commit at the
        // fdatasync that follows — a commit's worth of bytes per fsync.
        file.flush(0, len)?;
        file.fence()?;
        AreaMedium::over(file, area, expect_log)
    }

    /// Whether the medium writes whole sectors directly.
    pub(crate) fn direct(&self) -> bool {
        self.inner.write_unit() > 1
    }
}

impl<M: Medium> AreaMedium<M> {
    /// The area's bytes on `inner`, checked as [`AreaMedium::open`] does.
    pub(crate) fn over(inner: M, area: Area, expect_log: bool) -> Result<AreaMedium<M>, Error> {
        let medium = AreaMedium { inner, area };
        if expect_log {
            let at = area.region_offset();
            let region = medium.inner.view(at, medium.inner.len() - at)?;
            area.check_anchors(medium.inner.view(0, at)?, region)?;
        }
        Ok(medium)
    }

    /// Offsets past the region fail here, not in the anchor blocks' place.
    fn check(&self, offset: u64, len: u64) -> Result<(), csumkit::Error> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(csumkit::Error::Invalid {
                what: "fast-commit ByteLog",
                detail: format!("bytes {offset}..+{len} of a {}-byte region", self.len()),
            }),
        }
    }

    /// The anchor block for the newest valid anchor slot — the first
    /// block for an even anchor sequence, the second for an odd one —
    /// written and flushed (no valid slot yet: nothing).
    fn write_anchor_block(&mut self) -> Result<(), csumkit::Error> {
        let at = self.area.region_offset();
        let Ok(sb) = Superblock::decode(self.inner.view(at, LINE_BYTES)?) else { return Ok(()) };
        let newest = (1..=2)
            .filter_map(|slot| {
                let line = self.inner.view(at + slot * LINE_BYTES, LINE_BYTES).ok()?;
                Anchor::decode(line, sb.generation, sb.version)
            })
            .max_by_key(|a| a.anchor_seq);
        let Some(anchor) = newest else { return Ok(()) };
        let slot = anchor.anchor_seq % 2;
        let block = self.area.anchor(anchor).block(self.area.block_size, self.area.tid, slot == 0)?;
        let bs = self.area.block_size as u64;
        self.inner.write(slot * bs, &block)?;
        self.inner.flush(slot * bs, bs)
    }
}

impl<M: Medium> Medium for AreaMedium<M> {
    fn len(&self) -> u64 {
        self.inner.len() - self.area.region_offset()
    }
    fn view(&self, offset: u64, len: u64) -> Result<&[u8], csumkit::Error> {
        self.check(offset, len)?;
        self.inner.view(offset + self.area.region_offset(), len)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), csumkit::Error> {
        self.check(offset, data.len() as u64)?;
        self.inner.write(offset + self.area.region_offset(), data)
    }
    fn flush(&mut self, offset: u64, len: u64) -> Result<(), csumkit::Error> {
        self.check(offset, len)?;
        self.inner.flush(offset + self.area.region_offset(), len)?;
        let slots = LINE_BYTES..3 * LINE_BYTES;
        if len > 0 && offset < slots.end && offset + len > slots.start {
            self.write_anchor_block()?;
        }
        Ok(())
    }
    fn fence(&mut self) -> Result<(), csumkit::Error> {
        self.inner.fence()
    }
}

#[cfg(test)]
mod tests {
    use super::{Area, AreaMedium};
    use csumkit::bytelog::{ByteLog, LogError, Medium, SimMedium};
    use csumkit::ext4::jbd2::bytelog_anchor::ByteLogAnchor;
    use std::cell::RefCell;
    use std::rc::Rc;

    const AREA: Area = Area { first: 100, blocks: 24, offset: 0, block_size: 1024, tid: 9 };

    /// What the log acknowledged: records by sequence, and the sequence up
    /// to which a checkpoint (finished or under way) may drop them.
    #[derive(Default)]
    struct Model {
        acked: Vec<(u64, Vec<u8>)>,
        droppable_through: u64,
        crashes: u64,
        failure: Option<String>,
    }

    /// A simulated medium under the area that crashes at every store,
    /// flush and fence once armed: random subsets of its dirty lines
    /// reaching the medium, one of them torn at 8-byte granularity.
    struct Probe {
        sim: SimMedium,
        model: Rc<RefCell<Model>>,
        armed: Rc<std::cell::Cell<bool>>,
        rng: u64,
    }

    impl Probe {
        fn next(&mut self) -> u64 {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.rng
        }

        fn crash_here(&mut self) {
            if !self.armed.get() || self.model.borrow().failure.is_some() {
                return;
            }
            let dirty = self.sim.dirty_lines();
            for _ in 0..if dirty.is_empty() { 1 } else { 12 } {
                let reached: Vec<usize> = dirty.iter().copied().filter(|_| self.next() & 1 == 1).collect();
                let torn = (!reached.is_empty())
                    .then(|| (reached[(self.next() % reached.len() as u64) as usize], self.next() as u8 | 1));
                let image = self.sim.crash_image(&reached, torn);
                let verdict = check(&self.model.borrow(), image);
                let mut model = self.model.borrow_mut();
                model.crashes += 1;
                if let Err(why) = verdict {
                    model.failure = Some(format!("event {}: {why}", self.sim.events));
                    return;
                }
            }
        }
    }

    /// The crash image opens as the image's replay opens it (an anchor
    /// block names the log) and replays every acknowledged record not
    /// dropped, intact.
    fn check(model: &Model, image: Vec<u8>) -> Result<(), String> {
        let medium = AreaMedium::over(SimMedium::from_image(image), AREA, true).map_err(|e| e.to_string())?;
        let (_, records) = ByteLog::open(medium).map_err(|e| format!("replay: {e}"))?;
        for (seq, payload) in model.acked.iter().filter(|(seq, _)| *seq > model.droppable_through) {
            if !records.iter().any(|r| r.seq == *seq && r.payload == *payload) {
                return Err(format!("acknowledged record {seq} lost"));
            }
        }
        Ok(())
    }

    impl Medium for Probe {
        fn len(&self) -> u64 {
            self.sim.len()
        }
        fn view(&self, offset: u64, len: u64) -> Result<&[u8], csumkit::Error> {
            self.sim.view(offset, len)
        }
        fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), csumkit::Error> {
            self.sim.write(offset, data)?;
            self.crash_here();
            Ok(())
        }
        fn flush(&mut self, offset: u64, len: u64) -> Result<(), csumkit::Error> {
            self.sim.flush(offset, len)?;
            self.crash_here();
            Ok(())
        }
        fn fence(&mut self) -> Result<(), csumkit::Error> {
            self.sim.fence()?;
            self.crash_here();
            Ok(())
        }
    }

    /// Appends, checkpoints and anchors every 1 KiB of log, the ring
    /// wrapping many times, crashed at every event: every crash state
    /// has an anchor block naming the log and replays every acknowledged
    /// record (torn anchor blocks included, which is why there are two).
    #[test]
    fn every_crash_of_the_area_leaves_an_anchor_and_every_acknowledged_record() {
        let model = Rc::new(RefCell::new(Model::default()));
        let armed = Rc::new(std::cell::Cell::new(false));
        let len = AREA.blocks as usize * AREA.block_size;
        let probe = Probe { sim: SimMedium::new(len), model: model.clone(), armed: armed.clone(), rng: 0x2545_F491 };
        let mut log = ByteLog::format(AreaMedium::over(probe, AREA, false).unwrap(), 1).unwrap();
        log.set_anchor_interval(1024);
        armed.set(true);
        let mut rng = 0x9E37_79B9u64;
        for i in 0..600u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let payload: Vec<u8> = (0..40 + rng % 600).map(|k| (k as u8) ^ (i as u8)).collect();
            let appended = if i % 40 == 39 { None } else { Some(log.append(2, 0, &payload)) };
            match appended {
                Some(Ok(seq)) => model.borrow_mut().acked.push((seq, payload)),
                Some(Err(csumkit::Error::Log(LogError::Full { .. }))) | None => {
                    model.borrow_mut().droppable_through = log.next_seq() - 1;
                    log.checkpoint().unwrap();
                }
                Some(Err(e)) => panic!("append: {e}"),
            }
            assert!(model.borrow().failure.is_none(), "{}", model.borrow().failure.as_ref().unwrap());
        }
        let model = model.borrow();
        assert!(model.crashes > 5_000, "{} crash states", model.crashes);
        let blocks = log.medium().inner.sim.view(0, 2 * AREA.block_size as u64).unwrap();
        let seqs: Vec<u64> = blocks
            .chunks(AREA.block_size)
            .enumerate()
            .map(|(slot, b)| ByteLogAnchor::parse(b, slot == 0).unwrap().0.anchor.anchor_seq)
            .collect();
        assert!(
            seqs.iter().all(|&s| s > 20) && seqs[0].is_multiple_of(2) && !seqs[1].is_multiple_of(2),
            "anchor blocks {seqs:?}"
        );
    }
}
