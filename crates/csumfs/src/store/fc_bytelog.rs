//! The ByteLog inside the image (`-o bytelog`): its region is the jbd2
//! journal's fast-commit area after the area's first block, which holds a
//! conventional fast commit — HEAD, the anchor record, TAIL
//! (`csumkit::ext4::jbd2::bytelog_anchor`) — naming the window and
//! repeating the ByteLog's newest anchor. Commits are the ByteLog's
//! records as a sidecar log has them, written into the image file with
//! direct writes of the sectors they touch and `fdatasync`.
//!
//! The anchor block is rewritten whenever the ByteLog flushes one of its
//! anchor slots (at a checkpoint, and every 256 KiB of log), within the
//! same fence. Recovery trusts the ByteLog's own slots and record CRCs; the
//! anchor block says where the log is and of which generation, so a log
//! of another mount, or bytes of the kernel's own fast commits, are never
//! read as this one's.
//!
//! The journal's log itself stays empty (`s_start` 0) in this mode: the
//! image's incompat bits (`LOG_PENDING` with `FC_BYTELOG`) keep the kernel
//! and e2fsck away while the ByteLog holds records the image lacks.

use crate::error::{corrupt, Error};
use csumkit::bytelog::{Anchor, FileMedium, Medium, Superblock, LINE_BYTES};
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

/// Fewest area blocks the ByteLog takes: an anchor block and a region of
/// at least 16 KiB.
const AREA_BYTES_MIN: u64 = 16 << 10;

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
        if u64::from(blocks - 1) * block_size as u64 <= AREA_BYTES_MIN {
            return Err(format!("its fast-commit area of {blocks} blocks is too small for a ByteLog"));
        }
        let physical = journal.blocks.get(first as usize..sb.max_len as usize).unwrap_or_default();
        let contiguous = physical.len() == blocks as usize && physical.windows(2).all(|w| w[1] == w[0] + 1);
        if !contiguous {
            return Err("its fast-commit area is not in one piece in the image".into());
        }
        let offset = physical[0] * block_size as u64;
        Ok(Area { first, blocks, offset, block_size, tid: sb.sequence })
    }

    /// The ByteLog region's bytes in `image` (a copy), after checking that
    /// the area's anchor names it: what a read-only open or a check replays.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for an anchor block that does not.
    pub(crate) fn log_bytes(&self, image: &[u8]) -> Result<Vec<u8>, Error> {
        let bs = self.block_size;
        let area = &image[self.offset as usize..self.offset as usize + self.blocks as usize * bs];
        self.check_anchor(&area[..bs], &area[bs..])?;
        Ok(area[bs..].to_vec())
    }

    fn anchor(&self, anchor: Anchor) -> ByteLogAnchor {
        ByteLogAnchor { window_first: self.first + 1, window_blocks: self.blocks - 1, anchor }
    }

    /// That `block` is this area's anchor for the ByteLog in `region`.
    fn check_anchor(&self, block: &[u8], region: &[u8]) -> Result<(), Error> {
        let where_ = "the journal's fast-commit area";
        let (found, _) = ByteLogAnchor::parse(block)?;
        let sb = Superblock::decode(&region[..LINE_BYTES as usize])?;
        if (found.window_first, found.window_blocks) != (self.first + 1, self.blocks - 1) {
            return Err(corrupt(
                where_,
                format!(
                    "its anchor names blocks {}..+{}, the ByteLog is at {}..+{}",
                    found.window_first,
                    found.window_blocks,
                    self.first + 1,
                    self.blocks - 1
                ),
            ));
        }
        if found.anchor.generation != sb.generation {
            return Err(corrupt(
                where_,
                format!(
                    "its anchor names ByteLog generation {}, the log there is generation {}",
                    found.anchor.generation, sb.generation
                ),
            ));
        }
        Ok(())
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
/// area's second block, written into the image file; a flush of an
/// anchor slot rewrites the anchor block too.
pub(crate) struct AreaMedium {
    /// The whole area (anchor block first).
    file: FileMedium,
    area: Area,
}

impl AreaMedium {
    /// The area of the image at `path`, as `area` locates it; when
    /// `expect_log` (the image says the log holds changes), its anchor
    /// block must name the ByteLog there.
    ///
    /// # Errors
    /// As [`FileMedium::open_range`]; [`Error::Corrupt`] for an anchor that
    /// does not name the log.
    pub(crate) fn open(path: &Path, area: Area, expect_log: bool) -> Result<AreaMedium, Error> {
        let len = u64::from(area.blocks) * area.block_size as u64;
        let mut file = FileMedium::open_range(path, area.offset, len)?;
        // Written back as it is, once: mke2fs leaves an image file's journal
        // as unwritten extents (zeroed by fallocate), and each first write
        // into one costs the file's file system a metadata commit at the
        // fdatasync that follows — a commit's worth of bytes per fsync.
        file.flush(0, len)?;
        file.fence()?;
        let medium = AreaMedium { file, area };
        if expect_log {
            let bs = area.block_size as u64;
            area.check_anchor(medium.file.view(0, bs)?, medium.file.view(bs, len - bs)?)?;
        }
        Ok(medium)
    }

    /// Offsets past the region fail here, not in the anchor block's place.
    fn check(&self, offset: u64, len: u64) -> Result<(), csumkit::Error> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(csumkit::Error::Invalid {
                what: "fast-commit ByteLog",
                detail: format!("bytes {offset}..+{len} of a {}-byte region", self.len()),
            }),
        }
    }

    /// Whether the medium writes whole sectors directly.
    pub(crate) fn direct(&self) -> bool {
        self.file.write_unit() > 1
    }

    /// The anchor block for the newest valid anchor slot, written and
    /// flushed (none yet: nothing).
    fn write_anchor_block(&mut self) -> Result<(), csumkit::Error> {
        let bs = self.area.block_size as u64;
        let Ok(sb) = Superblock::decode(self.file.view(bs, LINE_BYTES)?) else { return Ok(()) };
        let newest = (1..=2)
            .filter_map(|slot| {
                let line = self.file.view(bs + slot * LINE_BYTES, LINE_BYTES).ok()?;
                Anchor::decode(line, sb.generation, sb.version)
            })
            .max_by_key(|a| a.anchor_seq);
        let Some(anchor) = newest else { return Ok(()) };
        let block = self.area.anchor(anchor).block(self.area.block_size, self.area.tid)?;
        self.file.write(0, &block)?;
        self.file.flush(0, bs)
    }
}

impl Medium for AreaMedium {
    fn len(&self) -> u64 {
        self.file.len() - self.area.block_size as u64
    }
    fn view(&self, offset: u64, len: u64) -> Result<&[u8], csumkit::Error> {
        self.check(offset, len)?;
        self.file.view(offset + self.area.block_size as u64, len)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), csumkit::Error> {
        self.check(offset, data.len() as u64)?;
        self.file.write(offset + self.area.block_size as u64, data)
    }
    fn flush(&mut self, offset: u64, len: u64) -> Result<(), csumkit::Error> {
        self.check(offset, len)?;
        self.file.flush(offset + self.area.block_size as u64, len)?;
        let slots = LINE_BYTES..3 * LINE_BYTES;
        if len > 0 && offset < slots.end && offset + len > slots.start {
            self.write_anchor_block()?;
        }
        Ok(())
    }
    fn fence(&mut self) -> Result<(), csumkit::Error> {
        self.file.fence()
    }
}
