//! PI tuples from untrusted bytes (device dumps) and checksum-tree nodes
//! read back from a medium. Any input must give a verdict or a typed error,
//! never a panic; the interleaved (DIF) and separate-metadata (DIX) paths
//! must agree block for block; freshly generated PI must verify; a tree
//! lookup over arbitrary node bytes must return a value or an error.
#![no_main]

use csumkit::csum_tree::{ChecksumTree, NodeStore, NODE_BYTES};
use csumkit::pi::{self, Checks, GuardSize, LbaFormat, Order, PiFormat, PiLocation, PiType, Protection, Tags};
use csumkit::Error;
use libfuzzer_sys::fuzz_target;

struct Garbage<'a>(&'a [u8]);

impl NodeStore for Garbage<'_> {
    fn write(&mut self, _: u64, _: &[u8; NODE_BYTES]) -> Result<(), Error> {
        Ok(())
    }
    fn read(&mut self, location: u64, node: &mut [u8; NODE_BYTES]) -> Result<(), Error> {
        for (i, b) in node.iter_mut().enumerate() {
            *b = self.0.get((i + location as usize) % self.0.len().max(1)).copied().unwrap_or(0);
        }
        Ok(())
    }
}

fuzz_target!(|input: (u8, u8, u8, u8, u64, u16, u16, u64, Vec<u8>)| {
    let (guard, pi_type, sts, md, ref_tag, app_tag, app_tag_mask, storage_tag, raw) = input;
    let guard = GuardSize::ALL[guard as usize % 3];
    let (lo, hi) = guard.storage_tag_bits_range();
    let Ok(format) = PiFormat::new(guard, PiType::from_number(1 + pi_type as u32 % 3).unwrap(), lo + sts as u32 % (hi - lo + 1)) else {
        return;
    };
    let lba = LbaFormat::new(512, [8, 16, 24, 64][md as usize % 4]).unwrap();
    let location = if md & 4 == 0 { PiLocation::Last } else { PiLocation::First };
    let Ok(p) = Protection::new(format, lba, location) else { return };
    let tags = Tags {
        ref_tag: ref_tag & format.ref_tag_mask(),
        app_tag,
        app_tag_mask,
        storage_tag: storage_tag & format.storage_tag_mask(),
        storage_tag_mask: if md & 16 == 0 { u64::MAX } else { storage_tag.rotate_left(17) },
    };
    let order = if md & 32 == 0 { Order::Spdk } else { Order::Kernel };
    let checks = Checks { storage_tag: md & 8 != 0, order, ..Checks::ALL };

    let dif: Vec<_> = pi::verify_each(&p, &raw, &tags, checks).collect();
    let ext = lba.extended_bytes();
    if raw.len() % ext == 0 {
        let (mut data, mut meta) = (Vec::new(), Vec::new());
        for block in raw.chunks_exact(ext) {
            data.extend_from_slice(&block[..512]);
            meta.extend_from_slice(&block[512..]);
        }
        let dix: Vec<_> = pi::verify_separate_each(&p, &data, &meta, &tags, checks).collect();
        assert_eq!(format!("{dif:?}"), format!("{dix:?}"));
        let mut fresh = raw.clone();
        pi::generate(&p, &mut fresh, &tags).unwrap();
        assert_eq!(pi::verify_each(&p, &fresh, &tags, checks).count(), 0);
    } else {
        assert!(matches!(dif.as_slice(), [Err(Error::Invalid { .. })]));
    }

    let blocks = 1 + ref_tag % 2_000_000;
    if let Ok(tree) = ChecksumTree::new(blocks, 0, ChecksumTree::area_blocks_for(blocks)) {
        let _ = tree.lookup_persisted(&mut Garbage(&raw), storage_tag % blocks);
    }
});
