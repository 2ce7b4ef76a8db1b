//! The orphan list on media, as the kernel keeps it (`ext4_orphan_add`,
//! `ext4_orphan_del`, `ext4_orphan_cleanup`): an inode whose last name goes
//! while a handle holds it is chained from the superblock's `s_last_orphan`
//! through its `i_dtime`, so that if the process dies (or the power goes)
//! before its last close, the next writable open frees it instead of
//! leaving e2fsck an inode with no name. Every change is an ordinary
//! metadata edit (inode and superblock checksums moved by splice), logged
//! and rolled back like the rest of its operation.

use crate::error::{corrupt, Error};
use crate::inode::table::{Inode, FLAG_EXTENTS};
use crate::volume::Volume;
use csumkit::crc32c;
use csumkit::ext4::feature_bits::RO_COMPAT_ORPHAN_PRESENT;
use csumkit::ext4::fields::{I_DTIME, S_FEATURE_RO_COMPAT, S_LAST_ORPHAN, S_ORPHAN_FILE_INUM};
use csumkit::le::{le32, put32};

/// `orphan_present`: the orphan file names orphans.
/// An orphan file block's tail magic.
const ORPHAN_MAGIC: u32 = 0x0B10_CA04;

impl Volume {
    fn last_orphan(&self) -> u32 {
        le32(&self.map, 1024 + S_LAST_ORPHAN)
    }

    fn set_last_orphan(&mut self, ino: u32) -> Result<(), Error> {
        self.patch_superblock(&[(S_LAST_ORPHAN, &ino.to_le_bytes())])
    }

    /// Puts `inode` (its last link just dropped, still held) at the head
    /// of the chain.
    pub(crate) fn orphan_add(&mut self, inode: &Inode) -> Result<Inode, Error> {
        let head = self.last_orphan();
        let inode = self.edit_inode(inode, |r| put32(r, I_DTIME, head))?;
        self.set_last_orphan(inode.ino)?;
        Ok(inode)
    }

    /// Takes `ino` out of the chain (at its last close, before it is freed).
    pub(crate) fn orphan_del(&mut self, ino: u32) -> Result<(), Error> {
        let inode = self.inode(ino)?;
        let next = le32(&inode.raw, I_DTIME);
        if self.last_orphan() == ino {
            self.set_last_orphan(next)?;
        } else {
            let mut at = self.last_orphan();
            for _ in 0..self.layout.inodes_count {
                if at == 0 {
                    break;
                }
                let prev = self.inode(at)?;
                let after = le32(&prev.raw, I_DTIME);
                if after == ino {
                    self.edit_inode(&prev, |r| put32(r, I_DTIME, next))?;
                    break;
                }
                at = after;
            }
        }
        self.edit_inode(&inode, |r| put32(r, I_DTIME, 0)).map(|_| ())
    }

    /// Finishes what the orphans a stopped process (or a kernel that went
    /// down) left were waiting for, as the kernel's `ext4_orphan_cleanup`
    /// does at mount: the chain from `s_last_orphan`, then the entries of
    /// the `orphan_file` feature's file. An orphan without links is freed;
    /// a file with links was being truncated and loses its blocks past its
    /// size. Returns how many were freed.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a chain that names an impossible inode or
    /// loops, an orphan file block with a bad magic; [`Error::Checksum`]
    /// for an orphan file block whose checksum is wrong (nothing there is
    /// trusted then).
    pub fn release_orphans_left(&mut self) -> Result<u32, Error> {
        let mut freed = 0;
        // An inode named twice (on the chain and in the file) is finished once.
        let mut finished = std::collections::HashSet::new();
        for _ in 0..=self.layout.inodes_count {
            let ino = self.last_orphan();
            if ino == 0 {
                return Ok(freed + self.release_file_orphans(&mut finished)?);
            }
            let inode = self.orphan(ino, "orphan list")?;
            self.set_last_orphan(le32(&inode.raw, I_DTIME))?;
            let inode = self.edit_inode(&inode, |r| put32(r, I_DTIME, 0))?;
            if finished.insert(ino) {
                freed += u32::from(self.finish_orphan(inode)?);
            }
        }
        Err(corrupt("orphan list", "loops"))
    }

    fn orphan(&self, ino: u32, what: &str) -> Result<Inode, Error> {
        if ino < self.first_ino() || u64::from(ino) > self.layout.inodes_count {
            return Err(corrupt(what, format!("names inode {ino}")));
        }
        self.inode(ino)
    }

    /// Frees `inode` (no links) or cuts it to its size; whether it was freed.
    fn finish_orphan(&mut self, inode: Inode) -> Result<bool, Error> {
        if inode.links == 0 {
            self.release(inode)?;
            return Ok(true);
        }
        if inode.is_file() && inode.flags & FLAG_EXTENTS != 0 {
            let bs = self.layout.block_size;
            self.unmap(&inode, inode.size.div_ceil(bs), u64::MAX)?;
        }
        Ok(false)
    }

    /// The orphan file's entries (`orphan_present` set): each block holds
    /// inode numbers, then a tail of magic and checksum (the file inode's
    /// seed, the le64 block number, the entries). Each entry is finished
    /// and zeroed, its block's checksum moved by splice; then the flag goes.
    fn release_file_orphans(&mut self, finished: &mut std::collections::HashSet<u32>) -> Result<u32, Error> {
        if self.layout.features.ro_compat & RO_COMPAT_ORPHAN_PRESENT == 0 {
            return Ok(0);
        }
        let file = self.orphan(le32(&self.map, 1024 + S_ORPHAN_FILE_INUM), "s_orphan_file_inum")?;
        let bs = self.layout.block_size as usize;
        let mut freed = 0;
        for run in self.runs(&file)? {
            for physical in run.physical..run.physical + run.len {
                let what = || format!("orphan file (inode {}) block {physical}", file.ino);
                let block = self.block(physical, &what)?;
                if le32(block, bs - 8) != ORPHAN_MAGIC {
                    return Err(corrupt(what(), format!("tail magic {:#010x}", le32(block, bs - 8))));
                }
                let seed = crc32c::raw_update(file.csum_seed, &physical.to_le_bytes());
                self.verify(&what, le32(block, bs - 4), crc32c::raw_update(seed, &block[..bs - 8]))?;
                let named: Vec<(usize, u32)> =
                    (0..bs - 8).step_by(4).map(|at| (at, le32(block, at))).filter(|&(_, ino)| ino != 0).collect();
                for (at, ino) in named {
                    let inode = self.orphan(ino, &what())?;
                    self.patch("orphan file block", physical * bs as u64, (bs - 8, bs - 4, seed), &[(at, &[0; 4])])?;
                    if finished.insert(ino) {
                        freed += u32::from(self.finish_orphan(inode)?);
                    }
                }
            }
        }
        let flags = self.layout.features.ro_compat & !RO_COMPAT_ORPHAN_PRESENT;
        self.patch_superblock(&[(S_FEATURE_RO_COMPAT, &flags.to_le_bytes())])?;
        std::sync::Arc::make_mut(&mut self.layout).features.ro_compat = flags;
        Ok(freed)
    }
}
