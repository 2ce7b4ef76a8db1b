//! Writing inodes: an inode edited in place with its checksum moved over
//! the bytes that changed, and a new inode written whole.

use crate::error::Error;
use crate::format::flags::is_synchronous;
use crate::format::inode::{encode_time, now};
use crate::inode::table::{Inode, NewInode, FLAG_EXTENTS};
use crate::splice::splice_all;
use crate::stats::Stats;
use crate::volume::Volume;
use csumkit::crc32c;
use csumkit::ext4::fields::{
    I_BLOCK, I_EXTRA_ISIZE, I_FLAGS, I_GENERATION, I_GID, I_GID_HIGH, I_LINKS_COUNT, I_MODE, I_UID, I_UID_HIGH,
};
use csumkit::le::{le16, le32, put16, put32};

impl Volume {
    /// Rewrites inode `ino`'s bytes with `edit`, moving its checksum by
    /// splice over what changed. The result is built from the bytes
    /// written, not read back: their checksum is the one just computed.
    pub(crate) fn edit_inode(&mut self, inode: &Inode, edit: impl FnOnce(&mut [u8])) -> Result<Inode, Error> {
        use csumkit::ext4::checksum::{inode_checksum, inode_has_csum_hi, INODE_CSUM_HI as HI, INODE_CSUM_LO as LO};
        let old = &inode.raw;
        let mut new = old.clone();
        edit(&mut new);
        assert_eq!(
            new[I_GENERATION..I_GENERATION + 4],
            old[I_GENERATION..I_GENERATION + 4],
            "inode {}: i_generation seeds its checksum",
            inode.ino
        );
        // The checksum fields are outside what the checksum covers: kept
        // equal on both sides, the splice sees only the edit.
        new[LO..LO + 2].copy_from_slice(&old[LO..LO + 2]);
        let wide = inode_has_csum_hi(old) && inode_has_csum_hi(&new);
        if wide {
            new[HI..HI + 2].copy_from_slice(&old[HI..HI + 2]);
        }
        let full = || inode_checksum(&new, inode.csum_seed).1;
        let crc = if wide {
            let stored = u32::from(le16(old, LO)) | u32::from(le16(old, HI)) << 16;
            self.updated("inode", new.len(), || splice_all(stored, new.len(), old, &new), full)
        } else {
            // A 16-bit checksum cannot be moved: only its low half is known.
            Stats::bump(&self.stats.csum_full);
            full()
        };
        put16(&mut new, LO, crc as u16);
        if inode_has_csum_hi(&new) {
            put16(&mut new, HI, (crc >> 16) as u16);
        }
        let at = self.inode_offset(inode.ino)?;
        self.store(at, &new)?;
        self.fast_track_inode(inode.ino);
        let (mode, flags) = (le16(&new, I_MODE), le32(&new, I_FLAGS));
        self.synchronous |= is_synchronous(mode, flags | self.mount_sync_flags);
        self.written_inode(inode.ino, new, inode.csum_seed)
    }

    /// The inode just written, from its bytes; in the test mode
    /// (`check_updates`) also read back through the checksum check, which
    /// must agree.
    pub(crate) fn written_inode(&self, ino: u32, raw: Vec<u8>, seed: u32) -> Result<Inode, Error> {
        let built = self.inode_from(ino, raw, seed)?;
        if cfg!(debug_assertions) || self.options.check_updates {
            assert_eq!(self.inode(ino)?, built, "inode {ino}: written bytes and a verified read differ");
        }
        Ok(built)
    }

    pub(crate) fn inode_offset(&self, ino: u32) -> Result<u64, Error> {
        let l = &self.layout;
        let (g, index) = l.inode_group(u64::from(ino));
        let group = l.group(&self.map, g)?;
        Ok(group.inode_table * l.block_size + index * l.inode_size)
    }

    /// Writes a brand-new inode (checksummed in full: nothing to splice from).
    pub(crate) fn write_new_inode(&mut self, ino: u32, new: &NewInode, links: u16, flags: u32) -> Result<Inode, Error> {
        let size = self.layout.inode_size as usize;
        let mut raw = vec![0u8; size];
        let t = now();
        let (sec, extra) = encode_time(t);
        put16(&mut raw, I_MODE, new.mode);
        put16(&mut raw, I_UID, new.uid as u16);
        put16(&mut raw, I_UID_HIGH, (new.uid >> 16) as u16);
        put16(&mut raw, I_GID, new.gid as u16);
        put16(&mut raw, I_GID_HIGH, (new.gid >> 16) as u16);
        for at in [0x08, 0x0C, 0x10, 0x90] {
            put32(&mut raw, at, sec);
        }
        for at in [0x84, 0x88, 0x8C, 0x94] {
            put32(&mut raw, at, extra);
        }
        put16(&mut raw, I_LINKS_COUNT, links);
        put32(&mut raw, I_FLAGS, flags);
        if flags & FLAG_EXTENTS != 0 {
            // An empty extent root: magic, 0 entries, room for 4, depth 0.
            put16(&mut raw, I_BLOCK, 0xF30A);
            put16(&mut raw, I_BLOCK + 4, 4);
        }
        let generation = (t.nsec ^ ino.rotate_left(13)).wrapping_mul(0x9E37_79B9);
        put32(&mut raw, I_GENERATION, generation);
        put16(&mut raw, I_EXTRA_ISIZE, 32); // i_extra_isize
        let seed = csumkit::ext4::checksum::inode_seed(self.layout.csum_seed, ino, &raw);
        let crc = crc32c::raw_update(seed, &raw);
        put16(&mut raw, csumkit::ext4::checksum::INODE_CSUM_LO, crc as u16);
        put16(&mut raw, csumkit::ext4::checksum::INODE_CSUM_HI, (crc >> 16) as u16);
        let at = self.inode_offset(ino)?;
        self.store(at, &raw)?;
        self.written_inode(ino, raw, seed)
    }
}
