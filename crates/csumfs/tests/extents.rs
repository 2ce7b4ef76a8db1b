//! Extent trees of depth two and their reshaping: a file is fragmented by
//! punching every other block until its tree has two levels (1 KiB and
//! 4 KiB blocks), then changed at random — writes into holes and into
//! unwritten extents, punches, zero ranges, fallocate with and without
//! KEEP_SIZE, truncates — against a byte model, every checksum update
//! compared with a full recompute. `e2fsck -fn` judges the image along
//! the way (including pass 1E's "could be narrower / shorter"), the
//! kernel reads the file back, and cutting it short brings the tree back
//! into the inode.

mod common;

use common::{assert_clean, have_e2fsprogs, mke2fs, with_kernel_mount, Scratch};
use csumfs::{NewInode, Options, Volume, ROOT};

/// A small deterministic generator (xorshift64*): the sequence is the same
/// on every run, so a failure is reproduced by running the test again.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

fn depth(v: &Volume, ino: u32) -> u16 {
    let root = v.inode(ino).unwrap().i_block;
    u16::from_le_bytes([root[6], root[7]])
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| (i.wrapping_mul(131).wrapping_add(seed * 7) % 251 + 1) as u8).collect()
}

fn zero(model: &mut [u8], from: u64, to: u64) {
    let to = (to as usize).min(model.len());
    if (from as usize) < to {
        model[from as usize..to].fill(0);
    }
}

#[test]
fn deep_extent_trees_are_reshaped_as_e2fsck_and_the_kernel_expect() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("extents");
    // 1 KiB: 84 extents per node, 800 blocks punched to 400 extents;
    // 4 KiB: 340 per node, 3 000 blocks to 1 500. Both need depth 2.
    for (bs, blocks) in [(1024u64, 800u64), (4096, 3000)] {
        let image = scratch.0.join(format!("deep-{bs}.img"));
        mke2fs(&image, &bs.to_string(), "64M");
        let options = Options { write: true, check_updates: true, ..Options::default() };
        let mut v = Volume::open(&image, options).unwrap();
        let ino = v.create(ROOT, b"holes", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
        let mut model = pattern(0, (blocks * bs) as usize);
        v.write(ino, 0, &model).unwrap();
        for k in (0..blocks).step_by(2) {
            v.punch_hole(ino, k * bs, bs).unwrap();
            zero(&mut model, k * bs, (k + 1) * bs);
        }
        assert_eq!(depth(&v, ino), 2, "{bs}: punched every other block");
        assert_eq!(v.runs(&v.inode(ino).unwrap()).unwrap().len() as u64, blocks / 2);
        v.sync().unwrap();
        assert_clean(&image, &format!("{bs}: punching every other block"));

        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ bs);
        let span = blocks * bs + 4 * bs;
        for step in 1..=300u64 {
            let (offset, len) = (rng.below(span), 1 + rng.below(8 * bs));
            let what = rng.below(100);
            let inode = match what {
                0..=34 => {
                    let data = pattern(step, len as usize);
                    let end = (offset + len) as usize;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[offset as usize..end].copy_from_slice(&data);
                    v.write(ino, offset, &data)
                }
                35..=59 => {
                    zero(&mut model, offset, offset + len);
                    v.punch_hole(ino, offset, len)
                }
                60..=74 => {
                    let keep_size = rng.below(2) == 0;
                    zero(&mut model, offset, offset + len);
                    if !keep_size && (model.len() as u64) < offset + len {
                        model.resize((offset + len) as usize, 0);
                    }
                    v.zero_range(ino, offset, len, keep_size)
                }
                75..=94 => {
                    let keep_size = rng.below(2) == 0;
                    if !keep_size && (model.len() as u64) < offset + len {
                        model.resize((offset + len) as usize, 0);
                    }
                    v.fallocate(ino, offset, len, keep_size)
                }
                _ => {
                    let size = blocks * bs / 2 + rng.below(blocks * bs);
                    model.resize(size as usize, 0);
                    v.truncate(ino, size)
                }
            };
            let inode = inode.unwrap_or_else(|e| panic!("{bs}: step {step} ({what}) at {offset}+{len}: {e}"));
            assert_eq!(inode.size, model.len() as u64, "{bs}: step {step}: size");
            if step % 50 == 0 {
                assert!(v.read_all(&inode).unwrap() == model, "{bs}: step {step}: content differs from the model");
                v.sync().unwrap();
                assert_clean(&image, &format!("{bs}: step {step}"));
            }
        }
        assert!(depth(&v, ino) >= 1, "{bs}: the random steps keep the file fragmented");
        v.sync().unwrap();
        drop(v);
        assert_clean(&image, &format!("{bs}: the random steps"));
        let mnt = scratch.0.join(format!("mnt-{bs}"));
        let want = model.clone();
        with_kernel_mount(&image, &mnt, || {
            let read = std::fs::read(mnt.join("holes")).unwrap();
            assert!(read == want, "{bs}: the kernel reads other bytes than the model");
        });

        // Cut short, the tree comes back into the inode.
        let mut v = Volume::open(&image, options).unwrap();
        let inode = v.truncate(ino, 3 * bs + 7).unwrap();
        model.truncate((3 * bs + 7) as usize);
        assert_eq!(depth(&v, ino), 0, "{bs}: truncated to three blocks");
        assert!(v.read_all(&inode).unwrap() == model);
        v.sync().unwrap();
        drop(v);
        assert_clean(&image, &format!("{bs}: truncated to three blocks"));
    }
}
