//! Extended attributes as e2fsck's pass 1 judges them (`check_ea_in_inode`,
//! `check_ext_attr`, `check_large_ea_inode`): entries inside their region
//! and not overlapping, hashes matching; values held in ea_inodes named by
//! a hash that matches the value inode's, of its size; the blocks they
//! charge to their owner's `i_blocks`; an xattr block named by as many
//! inodes as its reference count says. A value inode's bytes are checked
//! against the hash it stores, as the kernel's
//! `ext4_xattr_inode_verify_hashes` does before it returns a value.
//!
//! An xattr block's checksum (`ext4_xattr_block_csum`, le32 at 0x10) is
//! the CRC32C of the fs seed, the le64 block number and the block with
//! 0x10..0x14 read as zero.

use super::checker::Checker;
use super::feature_bits::INCOMPAT_64BIT;
use super::fields::{I_ATIME, I_FILE_ACL_HIGH, I_FILE_ACL_LO, I_GENERATION};
use super::inode_rules::{self as rules, FLAG_EA_INODE};
use super::leaves::{physical, Leaf};
use super::xattr_entries::{
    entries, hash_entry, in_inode, XattrBlock, XattrEntry, BLOCK_HEADER, EA_INODE_VALUE_MAX, XATTR_MAGIC,
};
use super::{bytes, structure};
use crate::crc32c;
use crate::le::{le16, le32};
use crate::Error;

impl Checker<'_> {
    /// The clusters an inode's xattrs charge to its `i_blocks`: its xattr
    /// block's and the ea_inode values its entries (in the inode and in the
    /// block) name. Any wrong reference is the inode's damage.
    pub(super) fn xattr_charge(&mut self, inum: u64, raw: &[u8]) -> Result<u64, Error> {
        let block = self.xattr_block(inum, raw)?;
        let in_inode = in_inode(self.layout.inode_size as usize, raw)
            .and_then(|list| self.ea_inode_charge(inum, le32(raw, I_GENERATION), &list));
        match in_inode {
            Ok(clusters) => Ok(block + clusters),
            Err(why) => {
                self.inode_damage.entry(inum).or_insert(why);
                Ok(block)
            }
        }
    }

    /// The inode's external xattr block (`i_file_acl`): checked the first
    /// time any inode names it; returns the clusters it charges.
    fn xattr_block(&mut self, inum: u64, raw: &[u8]) -> Result<u64, Error> {
        let generation = le32(raw, I_GENERATION);
        let hi = if self.layout.features.incompat & INCOMPAT_64BIT != 0 { le16(raw, I_FILE_ACL_HIGH) } else { 0 };
        let block = u64::from(le32(raw, I_FILE_ACL_LO)) | u64::from(hi) << 32;
        if block == 0 {
            return Ok(0);
        }
        if let Some(why) = structure::out_of_range(&self.layout, block, 1) {
            self.inode_damage.entry(inum).or_insert(format!("xattr block: {why}"));
            return Ok(0);
        }
        if !self.xattr_blocks.contains_key(&block) {
            let verdict = self.first_sight(inum, generation, block)?;
            self.xattr_blocks.insert(block, verdict);
        }
        let seen = self.xattr_blocks.get_mut(&block).expect("inserted above");
        seen.owners.push(inum);
        match &seen.verdict {
            Ok(clusters) => Ok(*clusters),
            Err(why) => {
                let why = format!("xattr block {block}: {why}");
                self.inode_damage.entry(inum).or_insert(why);
                Ok(0)
            }
        }
    }

    fn first_sight(&mut self, inum: u64, generation: u32, block: u64) -> Result<XattrBlock, Error> {
        let bs = self.layout.block_size;
        self.claim_leaves(inum, &[(0, block, 1)])?;
        let data = self.block(block, &|| format!("inode {inum} xattr block {block}"))?;
        let (magic, refcount, blocks) = (le32(data, 0), le32(data, 4), le32(data, 8));
        let crc = crc32c::raw_update(self.layout.csum_seed, &block.to_le_bytes());
        let crc = crc32c::raw_update(crc, &data[..0x10]);
        let crc = crc32c::raw_update(crc, &[0; 4]);
        let computed = crc32c::raw_update(crc, &data[0x14..]);
        self.report.checked.xattr_blocks += 1;
        let verdict = if magic != XATTR_MAGIC || blocks != 1 {
            Err(format!("not an xattr block (magic {magic:#010x}, h_blocks {blocks})"))
        } else {
            entries(data, BLOCK_HEADER, "xattr block")
                .and_then(|list| Ok(1 + self.ea_inode_charge(inum, generation, &list)?))
        };
        if let Some(f) = self.finding(
            "xattr block",
            format!("block {block} (inode {inum})"),
            le32(data, 0x10),
            computed,
            vec![(block * bs + 0x10, computed.to_le_bytes().to_vec())],
        ) {
            f.damage = verdict.as_ref().err().cloned();
            f.inode = Some(inum);
        }
        Ok(XattrBlock { refcount, owners: Vec::new(), verdict })
    }

    /// The clusters the ea_inode values of `list` charge their owner, or
    /// why a reference is wrong: out of range, a size that is not the
    /// value inode's, a hash that is not the entry name's folded with the
    /// value inode's (`ext2fs_ext_attr_hash_entry3`), an inode without
    /// the ea_inode flag. An old Lustre reference (the value inode's mtime
    /// and generation are its owner's number and generation) charges none.
    fn ea_inode_charge(&self, owner: u64, generation: u32, list: &[XattrEntry]) -> Result<u64, String> {
        let cluster = self.layout.block_size * (self.layout.blocks_per_group / self.layout.clusters_per_group);
        let mut clusters = 0;
        for e in list.iter().filter(|e| e.value_inum != 0) {
            let n = u64::from(e.value_inum);
            if n < self.first_ino || n > self.layout.inodes_count {
                return Err(format!("an xattr names ea_inode {n}, out of range"));
            }
            let value = self.inode_raw(n).ok_or_else(|| format!("an xattr names ea_inode {n}, unreadable"))?;
            if e.value_size == 0 || u64::from(e.value_size) != rules::size(value) {
                return Err(format!("an xattr of {} bytes names ea_inode {n} of {}", e.value_size, rules::size(value)));
            }
            let stored = le32(value, 0x08);
            let fold = |h: u32| (h << 16) ^ (h >> 16) ^ stored;
            if e.hash == fold(hash_entry(e.name, None, false)) || e.hash == fold(hash_entry(e.name, None, true)) {
                clusters += u64::from(e.value_size).div_ceil(cluster);
            } else if !(u64::from(le32(value, 0x10)) == owner && le32(value, 0x64) == generation) {
                return Err(format!("an xattr's hash {:#010x} does not match ea_inode {n}'s", e.hash));
            }
            if le32(value, 0x20) & FLAG_EA_INODE == 0 {
                return Err(format!("an xattr names inode {n}, which lacks the ea_inode flag"));
            }
        }
        Ok(clusters)
    }

    /// A value inode's bytes against the hash in its `i_atime` (CRC32C
    /// seeded with the volume's seed): a mismatch is data damage, reported
    /// and never re-sealed.
    pub(super) fn ea_inode_value(&mut self, inum: u64, raw: &[u8], leaves: &[Leaf]) -> Result<(), Error> {
        let size = rules::size(raw);
        let bs = self.layout.block_size;
        self.report.checked.ea_inode_values += 1;
        if size > EA_INODE_VALUE_MAX {
            self.inode_damage.entry(inum).or_insert(format!("an ea_inode value of {size} bytes"));
            return Ok(());
        }
        let mut crc = self.layout.csum_seed;
        for logical in 0..size.div_ceil(bs) {
            let Some(block) = physical(leaves, logical) else {
                self.inode_damage.entry(inum).or_insert(format!("an ea_inode value with a hole at block {logical}"));
                return Ok(());
            };
            let data = self.block(block, &|| format!("inode {inum} ea_inode value block {block}"))?;
            let len = (size - logical * bs).min(bs) as usize;
            crc = crc32c::raw_update(crc, &data[..len]);
        }
        let stored = le32(raw, I_ATIME);
        if stored != crc {
            // The inode's checksum cannot be re-sealed over it either.
            let why = "its bytes do not match the hash in its inode (the kernel refuses to read it)".to_string();
            self.inode_damage.entry(inum).or_insert(why.clone());
            let (location, fix) = (format!("inode {inum}"), Vec::new());
            if let Some(f) = self.finding("ea_inode value", location, stored, crc, fix) {
                f.damage = Some(why);
                f.inode = Some(inum);
            }
        }
        Ok(())
    }

    /// Each xattr block named by as many inodes as its `h_refcount`: any
    /// other count is every owner's damage (e2fsck rewrites the count).
    pub(super) fn xattr_refcounts(&mut self) {
        for (block, seen) in &self.xattr_blocks {
            let owners = seen.owners.len() as u64;
            if owners != u64::from(seen.refcount) {
                let why =
                    format!("xattr block {block} has reference count {}, but {owners} inodes name it", seen.refcount);
                for &inum in &seen.owners {
                    self.inode_damage.entry(inum).or_insert(why.clone());
                }
            }
        }
    }

    /// Inode `inum`'s bytes, if its group's table is readable.
    fn inode_raw(&self, inum: u64) -> Option<&[u8]> {
        let l = &self.layout;
        let (g, i) = l.inode_group(inum);
        let group = l.group(self.image, g).ok()?;
        let at = group.inode_table.checked_mul(l.block_size)?.checked_add(i * l.inode_size)?;
        bytes(self.image, at, l.inode_size as usize, &String::new).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash of a kernel-made `user.a` = "b" entry, as e2fsprogs'
    /// `ext2fs_ext_attr_hash_entry` computes it by hand: name "a" → 0x61,
    /// then the padded value word 0x62 → (0x61 << 16) ^ 0x62.
    #[test]
    fn hash_entry_is_e2fsprogs_hash() {
        assert_eq!(hash_entry(b"a", Some(b"b"), false), 0x0061_0062);
        assert_eq!(hash_entry(b"a", None, false), 0x61);
        // A high name byte differs between the two signednesses.
        assert_ne!(hash_entry(&[0xE9], None, false), hash_entry(&[0xE9], None, true));
    }

    #[test]
    fn overlapping_or_overrunning_entries_are_refused() {
        let mut region = vec![0u8; 64];
        // name_len 1, index 1, value at 40, size 4 (hash 0: not checked in an inode).
        region[..4].copy_from_slice(&[1, 1, 40, 0]);
        region[8..12].copy_from_slice(&4u32.to_le_bytes());
        region[16] = b'a';
        assert_eq!(entries(&region, 0, "t").unwrap().len(), 1);
        region[2] = 62; // the value runs past the region
        assert!(entries(&region, 0, "t").is_err());
        region[2] = 8; // the value overlaps the entry
        assert!(entries(&region, 0, "t").is_err());
    }

    #[test]
    fn a_block_entry_needs_its_hash_and_name_index() {
        let mut block = vec![0u8; 128];
        let at = BLOCK_HEADER;
        block[at..at + 4].copy_from_slice(&[1, 1, 100, 0]);
        block[at + 8..at + 12].copy_from_slice(&1u32.to_le_bytes());
        block[at + 16] = b'a';
        block[100] = b'b';
        assert!(entries(&block, at, "t").is_err(), "a zero hash in a block");
        block[at + 12..at + 16].copy_from_slice(&0x0061_0062u32.to_le_bytes());
        assert_eq!(entries(&block, at, "t").unwrap().len(), 1);
        block[at + 1] = 0;
        assert!(entries(&block, at, "t").is_err(), "no name index");
        block[at + 1] = 1;
        block[at + 2] = 8; // the value in the header
        assert!(entries(&block, at, "t").is_err());
    }
}
