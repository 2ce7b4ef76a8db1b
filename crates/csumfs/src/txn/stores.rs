//! Every store to the image goes through here, as jbd2's
//! `get_write_access`/`dirty_metadata` bracket a buffer's change: metadata
//! stores are noted for the ByteLog's next commit and the undo list (their
//! old bytes kept first), their checksums moved over what changed (or
//! recomputed, `Checksums::Full`); data stores go to the log, the PI device
//! or the image in place, with their data checksums announced first; and
//! `sync`, the one way everything reaches the media.

use crate::error::Error;
use crate::splice::SPLICE_MIN_BYTES;
use crate::stats::Stats;
use crate::store::bytes::Bytes;
use crate::store::private_map::PAGE;
use crate::volume::{Checksums, DataPath, Volume};
use csumkit::crc32c;
use csumkit::ext4::fields::{S_CHECKSUM, S_FREE_BLOCKS_HI, S_FREE_BLOCKS_LO, S_FREE_INODES};
use csumkit::ext4::Group;
use csumkit::le::{le32, put16, put32};

/// Whether every byte of `bytes` is zero: or-ed whole, without an exit
/// inside (vector instructions).
fn all_zero(bytes: &[u8]) -> bool {
    bytes.iter().fold(0, |any, &b| any | b) == 0
}

impl Volume {
    /// Whether the checksum of a `bytes`-long structure is moved rather
    /// than recomputed: with `Checksums::Incremental`, from
    /// [`SPLICE_MIN_BYTES`] up — below, a hardware CRC of the whole
    /// structure costs no more than the splice (`csumkit bench crc`) — and
    /// at every size on the portable engine or with `check_updates`.
    pub(crate) fn moves_checksums(&self, bytes: usize) -> bool {
        // Without CRC instructions every byte recomputed costs ~10x more:
        // then everything is moved. `check_updates` moves everything too, so
        // the tests that run with it prove the algebra on every structure.
        let hardware = csumkit::Backend::active() != csumkit::Backend::Portable;
        self.options.checksums == Checksums::Incremental
            && (bytes >= SPLICE_MIN_BYTES || !hardware || self.options.check_updates)
    }

    /// A structure's new checksum: moved by `incremental` (splice over
    /// what changed) or, with `Checksums::Full` or for a structure under
    /// [`SPLICE_MIN_BYTES`], recomputed by `full`. In debug builds and with
    /// `Options::check_updates` a moved checksum must equal the recomputed
    /// one.
    pub(crate) fn updated(
        &self,
        what: &str,
        bytes: usize,
        incremental: impl FnOnce() -> u32,
        full: impl FnOnce() -> u32,
    ) -> u32 {
        if !self.moves_checksums(bytes) {
            Stats::bump(&self.stats.csum_full);
            return full();
        }
        Stats::bump(&self.stats.csum_incremental);
        let crc = incremental();
        if cfg!(debug_assertions) || self.options.check_updates {
            let recomputed = full();
            assert_eq!(crc, recomputed, "{what}: incremental checksum {crc:#010x}, recomputed {recomputed:#010x}");
        }
        crc
    }

    /// Writes `edits` (offset in the structure, new bytes) into the
    /// checksummed structure at byte `base` whose checksum (raw CRC32C from
    /// `seed` over its first `covered` bytes) is stored at `csum_at`, and
    /// re-seals it: by splicing the old bytes of each edit into the new
    /// (reading only those bytes), or with `Checksums::Full` over all
    /// `covered` bytes. Edits must lie inside `covered`.
    pub(crate) fn patch(
        &mut self,
        what: &str,
        base: u64,
        (covered, csum_at, seed): (usize, usize, u32),
        edits: &[(usize, &[u8])],
    ) -> Result<(), Error> {
        let base_at = base as usize;
        let old_crc = le32(&self.map, base_at + csum_at);
        let mut crc = old_crc;
        for &(at, new) in edits {
            debug_assert!(at + new.len() <= covered, "{what}: edit [{at}, +{}) past {covered}", new.len());
            let old = &self.map[base_at + at..base_at + at + new.len()];
            if self.moves_checksums(covered) {
                crc = crc32c::splice(crc, covered as u64, at as u64, old, new)?;
            }
            let image = self.image_mut(base_at + at, new.len())?;
            image[base_at + at..base_at + at + new.len()].copy_from_slice(new);
        }
        let map = &self.map;
        let full = || crc32c::raw_update(seed, &map[base_at..base_at + covered]);
        let crc = self.updated(what, covered, || crc, full);
        let image = self.image_mut(base_at + csum_at, 4)?;
        put32(image, base_at + csum_at, crc);
        Ok(())
    }

    /// The image's bytes, to change the `len` metadata bytes at `at`:
    /// their old bytes go to the undo log first while an operation is in
    /// progress.
    pub(crate) fn image_mut(&mut self, at: usize, len: usize) -> Result<&mut [u8], Error> {
        self.image_mut_keeping(at, len, true)
    }

    /// [`image_mut`](Self::image_mut), the old bytes kept for undo only if
    /// `keep_old`.
    fn image_mut_keeping(&mut self, at: usize, len: usize, keep_old: bool) -> Result<&mut [u8], Error> {
        if let Some(undo) = self.undo.as_mut().filter(|u| keep_old && u.depth > 0) {
            let old =
                self.map.get(at..at + len).ok_or_else(|| crate::error::corrupt("image", "a write past its end"))?;
            undo.record(at, old)?;
        }
        if let Some(redo) = &mut self.redo {
            redo.note(at, len);
        }
        if let Some(written) = &mut self.written {
            written.insert(at, at + len);
        }
        self.map.writable().ok_or_else(|| Error::Invalid("the volume was opened read-only".into()))
    }

    /// Writes the metadata bytes `new` at `at` of the image.
    pub(crate) fn store(&mut self, at: u64, new: &[u8]) -> Result<(), Error> {
        let at = at as usize;
        let image = self.image_mut(at, new.len())?;
        image[at..at + new.len()].copy_from_slice(new);
        Ok(())
    }

    /// Writes the metadata bytes `new` at `at` of the image over bytes no
    /// reader looks at, without keeping them for undo: a block the
    /// operation allocated (undoing it frees the block again), a bitmap of
    /// a group whose descriptor still marks it uninitialised (the kernel
    /// and e2fsck compute that bitmap instead of reading it, and undoing
    /// puts the flag back). Keeping them cost a 16 GiB fallocate at 64 KiB
    /// blocks 40% of its time — a copy of every 64 KiB block it wrote —
    /// and every mkdir at 64 KiB blocks a 64 KiB copy.
    pub(crate) fn store_unread(&mut self, at: u64, new: &[u8]) -> Result<(), Error> {
        let at = at as usize;
        // Unless the operation freed the block first: then it held another
        // owner's bytes, which undoing the operation gives back.
        let keep_old = self.undo.as_ref().is_some_and(|u| u.was_freed(at, new.len()));
        // Spliced blank, only the pages that are not all zeros are written
        // (and copied from the template): a new 64 KiB extent leaf or
        // directory block is mostly zeros between a header and a tail.
        let blank = !keep_old && self.blank_unread(at, new.len(), new.len());
        let image = self.image_mut_keeping(at, new.len(), keep_old)?;
        if blank {
            for (k, page) in new.chunks(PAGE).enumerate() {
                if !all_zero(page) {
                    image[at + k * PAGE..][..page.len()].copy_from_slice(page);
                }
            }
        } else {
            image[at..at + new.len()].copy_from_slice(new);
        }
        Ok(())
    }

    /// Before `[at, at + len)` is built over bytes nothing reads (a block
    /// the operation allocated, an uninitialised group's bitmap): in the
    /// private map its pages become a template's, reading as zeros below
    /// `at + ones_from` and as 0xFF from it (`store/private_map.rs`), so that the
    /// builder writes only what differs and neither the file's pages nor
    /// a device read are touched. The file keeps its old bytes until the
    /// checkpoint that writes the new ones; until then they are unread
    /// there too (the file holds the last checkpoint, whose descriptor
    /// still marks the group uninitialised, or whose bitmap still has the
    /// block free). Whether it did; if not, the builder writes every byte.
    fn blank_unread(&mut self, at: usize, len: usize, ones_from: usize) -> bool {
        let Bytes::Private(map) = &mut self.map else { return false };
        map.blank(at, len, ones_from)
    }

    /// Before an uninitialised group's bitmap at `[at, at + len)` is
    /// written whole over the file's own map (no log): read ahead at once.
    /// Page by page it would be a device read per page where the page
    /// cache has let them go (the map is advised random).
    fn read_ahead(&mut self, at: usize, len: usize) {
        if !matches!(self.map, Bytes::Private(_)) && !self.map.in_memory(at, len) {
            self.map.will_need(at, len);
        }
    }

    /// The bytes of a new bitmap at `[at, at + len)`, over bytes nothing
    /// reads (an uninitialised group's): zeros below `ones_from`, 0xFF from
    /// it — spliced from a template where the map can (only the pages then
    /// written are copied), else written whole. Not kept for undo: undoing
    /// puts the group's flag back.
    pub(crate) fn new_bitmap(&mut self, at: usize, len: usize, ones_from: usize) -> Result<&mut [u8], Error> {
        let preset = self.blank_unread(at, len, ones_from);
        if !preset {
            self.read_ahead(at, len);
        }
        let image = self.image_mut_keeping(at, len, false)?;
        let bitmap = &mut image[at..at + len];
        if !preset {
            bitmap[..ones_from].fill(0);
            bitmap[ones_from..].fill(0xFF);
        }
        Ok(bitmap)
    }

    /// Writes file data `new` at `at` of the image: in place, not logged
    /// (with a ByteLog, see `store_logged_data`), announced first on the
    /// data checksums' intent list.
    pub(crate) fn store_data(&mut self, at: u64, new: &[u8]) -> Result<(), Error> {
        match self.data_path {
            DataPath::Log { .. } => return self.store_logged_data(at as usize, new),
            DataPath::Pi => return self.pi_store_data(at, new),
            DataPath::InPlace => {}
        }
        let bs = self.layout.block_size;
        self.data_will_write(at / bs, (at + new.len() as u64).div_ceil(bs) - at / bs)?;
        if let Some(written) = &mut self.written {
            written.insert(at as usize, at as usize + new.len());
        }
        let image = self.map.writable().ok_or_else(|| Error::Invalid("the volume was opened read-only".into()))?;
        let at = at as usize;
        image[at..at + new.len()].copy_from_slice(new);
        Ok(())
    }

    /// [`store_data`](Self::store_data) for a file's data written: with a
    /// ByteLog, the data of a file with data journaling (`chattr +j`) goes
    /// through the log whatever its size, as ext4's puts it in its journal
    /// — in the image only with the commit that carries it, so that a crash
    /// leaves each write request to such a file whole or not at all.
    pub(crate) fn store_file_data(&mut self, at: u64, new: &[u8], journaled: bool) -> Result<(), Error> {
        if journaled && matches!(self.data_path, DataPath::Log { .. }) {
            return self.store_data_in_log(at as usize, new);
        }
        self.store_data(at, new)
    }

    /// Writes file data that is the file's only if the operation is kept:
    /// a truncate's zeroed tail past the new end (without the truncate
    /// those bytes are still the file's). Zeroed in place at once, a death
    /// before the truncate was committed (or undone) left the file at its
    /// old size over zeros — `scripts/kill9-data.py` found it with
    /// `log=off`; with a ByteLog a tail of more than a page did the same.
    /// With a ByteLog the bytes go through the log whatever their size;
    /// with the undo log (`log=off`) their old bytes are kept for undo;
    /// on a PI device without a log they are written as any data (the
    /// device's tuples would not match bytes put back).
    pub(crate) fn store_data_with_metadata(&mut self, at: u64, new: &[u8]) -> Result<(), Error> {
        let bs = self.layout.block_size;
        let blocks = at / bs..(at + new.len() as u64).div_ceil(bs);
        if let Some(undo) = self.undo.as_mut() {
            undo.kept_data(blocks.clone());
        }
        match self.data_path {
            DataPath::Log { .. } => self.store_data_in_log(at as usize, new),
            DataPath::Pi => self.pi_store_data(at, new),
            DataPath::InPlace => {
                self.data_will_write(blocks.start, blocks.end - blocks.start)?;
                self.store(at, new)
            }
        }
    }

    /// Changes one group descriptor with `edit`, in place, and re-seals it.
    /// Only 16 bits of its CRC are stored, so there is no full CRC to
    /// splice from: the 64 (or 32) bytes are checksummed anew, as the
    /// kernel does.
    pub(crate) fn edit_descriptor(&mut self, group: &Group, edit: impl FnOnce(&mut [u8])) -> Result<(), Error> {
        let size = self.layout.desc_size as usize;
        let at = group.desc_offset;
        self.bytes(at, size, &|| format!("group {} descriptor", group.number))?;
        Stats::bump(&self.stats.csum_full);
        let (seed, number) = (self.layout.csum_seed, group.number as u32);
        let at = at as usize;
        let image = self.image_mut(at, size)?;
        let d = &mut image[at..at + size];
        edit(d);
        let crc = csumkit::ext4::checksum::descriptor_checksum(seed, number, d);
        put16(d, csumkit::ext4::checksum::DESC_CSUM, crc as u16);
        Ok(())
    }

    /// Adds `delta` to the superblock's free block and inode counts, moving
    /// its checksum by splice.
    pub(crate) fn edit_superblock(&mut self, free_blocks: i64, free_inodes: i64) -> Result<(), Error> {
        let sb = self.bytes(1024, 1024, &|| "superblock".into())?;
        let wide = self.layout.desc_size >= 64;
        let blocks =
            u64::from(le32(sb, S_FREE_BLOCKS_LO)) | if wide { u64::from(le32(sb, S_FREE_BLOCKS_HI)) << 32 } else { 0 };
        let blocks = blocks.wrapping_add_signed(free_blocks);
        let inodes = (i64::from(le32(sb, S_FREE_INODES)) + free_inodes) as u32;
        let (lo, hi, inodes) =
            ((blocks as u32).to_le_bytes(), ((blocks >> 32) as u32).to_le_bytes(), inodes.to_le_bytes());
        let edits: [(usize, &[u8]); 3] = [(S_FREE_BLOCKS_LO, &lo), (S_FREE_INODES, &inodes), (S_FREE_BLOCKS_HI, &hi)];
        self.patch_superblock(&edits[..if wide { 3 } else { 2 }])
    }

    /// [`patch`](Self::patch) of the superblock: its CRC32C (seeded with
    /// `!0`) covers every byte before `s_checksum`.
    pub(crate) fn patch_superblock(&mut self, edits: &[(usize, &[u8])]) -> Result<(), Error> {
        self.patch("superblock", 1024, (S_CHECKSUM, S_CHECKSUM, !0), edits)
    }

    /// Makes every change durable: `fdatasync` of the image file, which
    /// writes the pages written through the map; with a ByteLog, the data
    /// written so far, then one commit of the metadata changed since the
    /// last (the image file gets metadata at checkpoints).
    ///
    /// # Errors
    /// [`Error::Io`] when the flush fails.
    pub fn sync(&mut self) -> Result<(), Error> {
        let durable = self.start_sync()?.wait()?;
        self.finish_sync(durable)
    }

    /// `sync` without a log: the image file's data and metadata in place.
    pub(crate) fn sync_in_place(&mut self) -> Result<(), Error> {
        if let Some(device) = &self.pi {
            device.flush()?;
        } else if let Bytes::MapMut(_, file) = &self.map {
            file.sync_data().map_err(|source| Error::Io { context: "fdatasync".into(), source })?;
        }
        // Checksums of data now durable.
        self.commit_data_checksums()
    }
}

#[cfg(test)]
mod tests {
    use super::all_zero;

    /// Zero pages only are zero: bytes that cancel out (as an exclusive
    /// or would) or a last byte set are not.
    #[test]
    fn only_zero_bytes_are_all_zero() {
        assert!(all_zero(&[]) && all_zero(&[0; 4096]));
        let mut page = [0u8; 4096];
        page[4095] = 1;
        assert!(!all_zero(&page));
        page[4095] = 0;
        page[7..9].copy_from_slice(&[0x5A, 0x5A]);
        assert!(!all_zero(&page));
    }
}
