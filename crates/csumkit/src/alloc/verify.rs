//! `verify`: every checksum, count and index recomputed from scratch and
//! compared with what the allocator keeps incrementally.

use super::descriptor::BG_BLOCK_UNINIT;
use super::free_space::FreeSpace;
use super::volume::bitmap_location;
use super::{File, Leaf, Probe, Run, Volume};
use crate::{crc32c, Error};

impl<P: Probe> Volume<P> {
    /// Checks every group: fixed metadata and padding bits set, bitmap
    /// checksum, descriptor checksum, free count, bitmap location, the
    /// uninitialized flag, free-space tree equal to the bitmap's free runs,
    /// and the volume's free total.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the group and the first failed check.
    pub fn verify(&self) -> Result<(), Error> {
        let mut free_total = 0u64;
        for (g, group) in self.groups.iter().enumerate() {
            let g64 = g as u64;
            let corrupt = |what: &str, detail: String| Error::Corrupt { location: format!("group {g} {what}"), detail };
            let (bits, len) = (group.bitmap.bits(), u64::from(self.geometry.group_len(g64)));
            let reserved = self.geometry.reserved_blocks(g64);
            if group.bitmap.count_zeros(0, reserved) != 0 {
                return Err(corrupt("bitmap", format!("fixed metadata blocks [0, {reserved}) are not all in use")));
            }
            if group.bitmap.count_zeros(len, bits) != 0 {
                return Err(corrupt(
                    "bitmap",
                    format!("padding bits [{len}, {bits}) past the volume end are not all set"),
                ));
            }
            let desc = &group.desc;
            let (stored, computed) = (desc.checksum(), desc.compute_checksum(self.csum_seed, g as u32));
            if stored != computed {
                return Err(corrupt("descriptor", format!("checksum {stored:#06x}, computed {computed:#06x}")));
            }
            let (stored, computed) = (desc.bitmap_csum(), crc32c::raw_update(self.csum_seed, group.bitmap.as_media()));
            if stored != computed {
                return Err(corrupt("bitmap", format!("checksum {stored:#010x}, computed {computed:#010x}")));
            }
            let free = group.bitmap.count_zeros(0, len);
            if u64::from(desc.free_blocks()) != free {
                return Err(corrupt(
                    "descriptor",
                    format!("free count {} but the bitmap has {free}", desc.free_blocks()),
                ));
            }
            if desc.flags() & BG_BLOCK_UNINIT != 0 && free != len - reserved {
                return Err(corrupt("descriptor", "BLOCK_UNINIT set on a group with allocated blocks".into()));
            }
            let (location, expected) = (desc.block_bitmap(), bitmap_location(&self.geometry, g64));
            if location != expected {
                return Err(corrupt("descriptor", format!("block bitmap at block {location}, expected {expected}")));
            }
            if let Some(tree) = &group.tree {
                let expected = FreeSpace::from_runs(group.bitmap.free_runs().map(|(s, l)| (s as u32, l as u32)));
                if *tree != expected {
                    return Err(corrupt("free-space tree", "differs from the bitmap's free runs".into()));
                }
            }
            free_total += free;
        }
        if free_total != self.free {
            return Err(Error::Corrupt {
                location: "volume".into(),
                detail: format!("free total {} but the groups have {free_total}", self.free),
            });
        }
        Ok(())
    }

    /// [`verify`](Self::verify), then every file: leaves re-parsed (magic,
    /// counts, checksum, order), extents in logical order across leaves, and
    /// block ownership — no block owned twice, every owned block allocated,
    /// and no allocated block owned by nobody (a leak). `other` lists runs
    /// the caller allocated with [`Volume::allocate`] for anything else.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming what failed.
    pub fn verify_with_files(&self, files: &[&File], other: &[Run]) -> Result<(), Error> {
        self.verify()?;
        let corrupt = |location: String, detail: String| Error::Corrupt { location, detail };
        let mut owned: Vec<(u64, u64, String)> = (0..self.geometry.groups())
            .map(|g| (self.geometry.group_start(g), self.geometry.reserved_blocks(g), format!("group {g} metadata")))
            .filter(|&(_, len, _)| len > 0)
            .collect();
        owned.extend(other.iter().map(|r| (r.start, u64::from(r.len), format!("run at block {}", r.start))));
        for file in files {
            let name = format!("inode {}", file.inode);
            let mut prev_end = 0u64;
            for leaf in file.leaves() {
                Leaf::parse(leaf.block, leaf.as_media(), file.csum_seed())?;
                if leaf.is_empty() {
                    return Err(corrupt(name, format!("empty extent leaf at block {}", leaf.block)));
                }
                owned.push((leaf.block, 1, format!("{name} extent leaf")));
            }
            for e in file.extents() {
                if u64::from(e.logical) < prev_end {
                    return Err(corrupt(name, format!("extent at logical {} out of order", e.logical)));
                }
                prev_end = u64::from(e.logical_end());
                owned.push((e.physical, u64::from(e.len), format!("{name} logical {}", e.logical)));
            }
        }
        owned.sort_unstable_by_key(|&(start, _, _)| start);
        let mut owned_total = 0u64;
        for (i, (start, len, who)) in owned.iter().enumerate() {
            if start + len > self.geometry.blocks_count {
                return Err(corrupt(who.clone(), format!("blocks [{start}, {}) run past the volume", start + len)));
            }
            if let Some((next, _, other)) = owned.get(i + 1).filter(|(next, _, _)| *next < start + len) {
                return Err(corrupt(who.clone(), format!("block {next} is also owned by {other}")));
            }
            let unallocated: u64 = (self.group_pieces(*start, *len).iter())
                .map(|&(g, s, l)| self.groups[g as usize].bitmap.count_zeros(u64::from(s), u64::from(s + l)))
                .sum();
            if unallocated != 0 {
                return Err(corrupt(
                    who.clone(),
                    format!("{unallocated} of blocks [{start}, {}) are free in the bitmap", start + len),
                ));
            }
            owned_total += len;
        }
        let allocated = self.geometry.blocks_count - self.free;
        if owned_total != allocated {
            return Err(Error::Corrupt {
                location: "volume".into(),
                detail: format!(
                    "{allocated} blocks allocated but {owned_total} owned: {} leaked",
                    allocated as i128 - owned_total as i128
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Geometry, Strategy, Volume};

    /// `verify` compares the free-space tree with the bitmap: a tree that
    /// lost a free run (or gained one) is corruption, even when every
    /// checksum is right (nothing else would notice until an allocation
    /// handed out a used block).
    #[test]
    fn a_tree_that_disagrees_with_its_bitmap_fails_verify() {
        let geometry = Geometry::ext4(4096, 32768, 2).unwrap();
        let mut volume = Volume::new(geometry, [7; 16], Strategy::FREE_SPACE_TREE).unwrap();
        let run = volume.allocate(0, 8).unwrap();
        volume.verify().unwrap();
        let group = (run.start / u64::from(geometry.blocks_per_group)) as usize;
        let (start, len) = volume.groups[group].tree.as_ref().unwrap().runs().last().unwrap();
        // The tree forgets the last block of its last free run; the bitmap still has it free.
        volume.groups[group].tree.as_mut().unwrap().allocate(start + len - 1, 1);
        let err = volume.verify().unwrap_err().to_string();
        assert!(err.contains("free-space tree"), "{err}");
    }

    /// BLOCK_UNINIT means "nothing but the group's fixed metadata in use":
    /// a group that holds metadata (group 0) may carry it while nothing else
    /// is allocated, and may not once a block is (cargo-mutants found the
    /// first half untested: `len - reserved` and `len + reserved` agreed on
    /// every group the allocator itself marks, which hold no metadata).
    #[test]
    fn block_uninit_allows_the_fixed_metadata_and_nothing_more() {
        let geometry = Geometry::ext4(4096, 32768, 2).unwrap();
        let mut volume = Volume::new(geometry, [7; 16], Strategy::FREE_SPACE_TREE).unwrap();
        assert!(geometry.reserved_blocks(0) > 0);
        let seed = volume.csum_seed();
        let uninit = |volume: &mut Volume| {
            let desc = &mut volume.groups[0].desc;
            desc.set_flags(desc.flags() | super::BG_BLOCK_UNINIT);
            desc.seal(seed, 0);
        };
        uninit(&mut volume);
        volume.verify().expect("group 0 with only its fixed metadata in use");
        let mut volume = Volume::new(geometry, [7; 16], Strategy::FREE_SPACE_TREE).unwrap();
        volume.allocate(0, 1).unwrap();
        uninit(&mut volume);
        let err = volume.verify().unwrap_err().to_string();
        assert!(err.contains("BLOCK_UNINIT"), "{err}");
    }
}
