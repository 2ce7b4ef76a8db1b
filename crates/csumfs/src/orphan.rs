//! The orphan list on media, as the kernel keeps it (`ext4_orphan_add`,
//! `ext4_orphan_del`, `ext4_orphan_cleanup`): an inode whose last name goes
//! while a handle holds it is chained from the superblock's `s_last_orphan`
//! through its `i_dtime`, so that if the process dies (or the power goes)
//! before its last close, the next writable open frees it instead of
//! leaving e2fsck an inode with no name. Every change is an ordinary
//! metadata edit (inode and superblock checksums moved by splice), logged
//! and rolled back like the rest of its operation.

use crate::error::{corrupt, Error};
use crate::inode::Inode;
use crate::le::{le32, put32};
use crate::volume::Volume;

/// `s_last_orphan` in the superblock.
const S_LAST_ORPHAN: usize = 0xE8;
/// `i_dtime`: the next orphan while the inode has no links.
const I_DTIME: usize = 0x14;

impl Volume {
    fn last_orphan(&self) -> u32 {
        le32(&self.map, 1024 + S_LAST_ORPHAN)
    }

    fn set_last_orphan(&mut self, ino: u32) -> Result<(), Error> {
        self.patch("superblock", 1024, (0x3FC, 0x3FC, !0), &[(S_LAST_ORPHAN, &ino.to_le_bytes())])
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

    /// Frees every inode on the chain a stopped process left (the kernel
    /// does it at mount: `ext4_orphan_cleanup`); returns how many. An inode
    /// on the chain that has links again is only taken off it.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a chain that names an impossible inode or
    /// loops.
    pub fn release_chained_orphans(&mut self) -> Result<u32, Error> {
        let mut freed = 0;
        for _ in 0..=self.layout.inodes_count {
            let ino = self.last_orphan();
            if ino == 0 {
                return Ok(freed);
            }
            if u64::from(ino) > self.layout.inodes_count {
                return Err(corrupt("orphan list", format!("names inode {ino}")));
            }
            let inode = self.inode(ino)?;
            self.set_last_orphan(le32(&inode.raw, I_DTIME))?;
            if inode.links == 0 {
                self.release(inode)?;
                freed += 1;
            } else {
                self.edit_inode(&inode, |r| put32(r, I_DTIME, 0))?;
            }
        }
        Err(corrupt("orphan list", "loops"))
    }
}
