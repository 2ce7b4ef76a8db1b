//! csumfs on an emulated PI device: file data written through
//! the device (in place, or at checkpoints when it rode in the ByteLog),
//! read back checked by it; what it refuses. e2fsck judges the image, which
//! stays plain ext4.

mod common;

use common::{assert_clean, have_e2fsprogs, mke2fs, Scratch};
use csumfs::{NewInode, Options, Stats, Volume, ROOT};
use csumkit::pi::{GuardSize, PiFormat, PiLocation, PiType, Protection};

fn protection(lba: &str, guard: GuardSize) -> Protection {
    Protection::new(PiFormat::new(guard, PiType::Type1, 0).unwrap(), lba.parse().unwrap(), PiLocation::Last).unwrap()
}

const FILE: NewInode = NewInode { mode: 0o100_644, uid: 0, gid: 0 };

#[test]
fn logged_writes_small_and_large_reach_the_device_and_read_back_checked() {
    if !have_e2fsprogs() {
        return;
    }
    for (bs, lba, guard) in [("4096", "4096+8", GuardSize::Crc16), ("1024", "512+16", GuardSize::Crc64)] {
        let scratch = Scratch::new("pi-logged");
        let image = scratch.0.join("img");
        let (log, pi) = (scratch.0.join("img.bytelog"), scratch.0.join("img.pi"));
        mke2fs(&image, bs, "16M");
        let p = protection(lba, guard);
        let (mut volume, _, opened) =
            Volume::open_logged_pi(&image, &log, 1 << 20, Options::default(), &pi, p, None).unwrap();
        assert!(!opened.finished_write && !opened.started_afresh && opened.forgotten_blocks == 0);
        let big = volume.create(ROOT, b"big", FILE).unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect();
        volume.write(big.ino, 0, &data).unwrap();
        // Under a page: rides in the log, reaches the device at the checkpoint.
        let small = volume.create(ROOT, b"small", FILE).unwrap();
        volume.write(small.ino, 0, b"a hundred bytes or so").unwrap();
        volume.write(big.ino, 5000, &[0xEE; 100]).unwrap();
        volume.sync().unwrap();
        let mut want = data.clone();
        want[5000..5100].fill(0xEE);
        assert_eq!(volume.read_all(&volume.inode(big.ino).unwrap()).unwrap(), want, "{bs}");
        let checked = Stats::get(&volume.stats().pi_blocks_verified);
        assert!(checked > 0, "{bs}: reads went through the device");
        // The block the 100 bytes changed is newer in the map than on the
        // device until the checkpoint: read from the map, not checked.
        let unchecked = Stats::get(&volume.stats().pi_blocks_unchecked);
        assert!(unchecked >= 1, "{bs}: the logged block was checked against the device's older copy");
        volume.checkpoint().unwrap();
        let device = volume.pi_device_stats().unwrap();
        assert!(device.data_bytes_written >= 300_000, "{bs}: {device:?}");
        drop(volume);
        assert_clean(&image, "after the checkpoint");

        // Read-only, checked: every block of both files now has PI.
        let mut volume = Volume::open(&image, Options::default()).unwrap();
        volume.enable_pi(&image, &pi, p).unwrap();
        assert_eq!(volume.read_all(&volume.resolve("/big").unwrap()).unwrap(), want);
        assert_eq!(volume.read_all(&volume.resolve("/small").unwrap()).unwrap(), b"a hundred bytes or so");
        assert_eq!(Stats::get(&volume.stats().pi_blocks_unchecked), 0, "{bs}");
        let report = volume.scrub().unwrap();
        assert!(report.bad.is_empty() && report.blocks > 0);

        // A flipped byte in the small file's block: EIO, naming it.
        let block = volume.runs(&volume.resolve("/small").unwrap()).unwrap()[0].physical;
        drop(volume);
        let mut bytes = std::fs::read(&image).unwrap();
        bytes[(block * bs.parse::<u64>().unwrap() + 3) as usize] ^= 1;
        std::fs::write(&image, &bytes).unwrap();
        let mut volume = Volume::open(&image, Options::default()).unwrap();
        volume.enable_pi(&image, &pi, p).unwrap();
        let err = volume.read_all(&volume.resolve("/small").unwrap()).unwrap_err();
        assert_eq!(err.errno(), libc::EIO, "{err}");
        assert!(err.to_string().contains("guard check failed"), "{err}");
        assert_eq!(volume.scrub().unwrap().bad.len(), 1);
    }
}

#[test]
fn pi_is_refused_where_it_cannot_work_and_a_stale_file_is_not_used_read_only() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("pi-refused");
    let image = scratch.0.join("img");
    let pi = scratch.0.join("img.pi");
    mke2fs(&image, "1024", "8M");
    let mut volume = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
    let err = volume.enable_pi(&image, &pi, protection("4096+8", GuardSize::Crc16)).unwrap_err();
    assert!(err.to_string().contains("larger blocks than the filesystem's 1024-byte blocks"), "{err}");
    volume.enable_data_checksums(&scratch.0.join("img.csums")).unwrap();
    let err = volume.enable_pi(&image, &pi, protection("512+8", GuardSize::Crc16)).unwrap_err();
    assert!(err.to_string().contains("alternatives"), "{err}");
    drop(volume);
    let mut volume = Volume::from_bytes(std::fs::read(&image).unwrap(), Options::default()).unwrap();
    assert!(volume.enable_pi(&image, &pi, protection("512+8", GuardSize::Crc16)).is_err());

    // A PI file whose identity is not the image's: refused read-only,
    // started afresh read-write.
    let mut volume = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
    volume.enable_pi(&image, &pi, protection("512+8", GuardSize::Crc16)).unwrap();
    drop(volume);
    csumkit::pi::clear_split_owner_tag(&pi).unwrap();
    let mut volume = Volume::open(&image, Options::default()).unwrap();
    let err = volume.enable_pi(&image, &pi, protection("512+8", GuardSize::Crc16)).unwrap_err();
    assert!(err.to_string().contains("stale"), "{err}");
    drop(volume);
    let mut volume = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
    let opened = volume.enable_pi(&image, &pi, protection("512+8", GuardSize::Crc16)).unwrap();
    assert!(opened.started_afresh);
    drop(volume);
    // Another image of the same size (its own UUID) with this image's PI
    // file: stale, refused read-only.
    let other = scratch.0.join("other");
    mke2fs(&other, "1024", "8M");
    let mut volume = Volume::open(&other, Options::default()).unwrap();
    let err = volume.enable_pi(&other, &pi, protection("512+8", GuardSize::Crc16)).unwrap_err();
    assert!(err.to_string().contains("stale"), "{err}");
}

/// A write larger than one device command (16 MiB) is split into commands
/// that each land where they belong: 20 MiB written, checkpointed, read
/// back checked against the PI of every block.
#[test]
fn a_write_larger_than_one_device_command_reads_back_checked() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("pi-large");
    let image = scratch.0.join("img");
    let (log, pi) = (scratch.0.join("img.bytelog"), scratch.0.join("img.pi"));
    mke2fs(&image, "4096", "64M");
    let p = protection("4096+8", GuardSize::Crc16);
    let (mut volume, _, _) = Volume::open_logged_pi(&image, &log, 1 << 20, Options::default(), &pi, p, None).unwrap();
    let f = volume.create(ROOT, b"large", FILE).unwrap().ino;
    let data: Vec<u8> = (0..20u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    volume.write(f, 0, &data).unwrap();
    // A file after it: written past the device's first command's worth.
    let g = volume.create(ROOT, b"after", FILE).unwrap().ino;
    volume.write(g, 0, &data[..1 << 20]).unwrap();
    assert!(volume.runs(&volume.inode(g).unwrap()).unwrap()[0].physical * 4096 >= 16 << 20);
    volume.checkpoint().unwrap();
    drop(volume);
    let mut volume = Volume::open(&image, Options::default()).unwrap();
    volume.enable_pi(&image, &pi, p).unwrap();
    assert!(volume.read_all(&volume.inode(f).unwrap()).unwrap() == data, "the 20 MiB read back");
    assert!(volume.read_all(&volume.inode(g).unwrap()).unwrap() == data[..1 << 20]);
    assert!(Stats::get(&volume.stats().pi_blocks_verified) >= 5120 + 256, "every block checked");
}

/// A write that covers a damaged block whole replaces it (its old bytes
/// are not read, so their failed check stops nothing), and the block then
/// reads back checked; the partial blocks at the write's ends are read and
/// checked as ever.
#[test]
fn a_write_covering_a_damaged_block_whole_replaces_it() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("pi-replace");
    let image = scratch.0.join("img");
    let (log, pi) = (scratch.0.join("img.bytelog"), scratch.0.join("img.pi"));
    mke2fs(&image, "4096", "16M");
    let p = protection("4096+8", GuardSize::Crc16);
    let open = || Volume::open_logged_pi(&image, &log, 1 << 20, Options::default(), &pi, p, None).unwrap().0;
    let mut volume = open();
    let f = volume.create(ROOT, b"f", FILE).unwrap().ino;
    volume.write(f, 0, &[1u8; 12288]).unwrap();
    volume.checkpoint().unwrap();
    let block = volume.runs(&volume.inode(f).unwrap()).unwrap()[0].physical;
    drop(volume);
    let mut want = vec![1u8; 12288];
    // File block 1 rots; then a write covers it whole, ending at its end
    // (block 0 in part), and again starting at its start (block 2 in part).
    for (at, len) in [(100, 8092), (4096, 4196)] {
        let mut bytes = std::fs::read(&image).unwrap();
        bytes[((block + 1) * 4096 + 9) as usize] ^= 1;
        std::fs::write(&image, &bytes).unwrap();
        let mut volume = open();
        assert_eq!(volume.read_all(&volume.inode(f).unwrap()).unwrap_err().errno(), libc::EIO);
        volume.write(f, at as u64, &vec![at as u8; len]).unwrap();
        volume.checkpoint().unwrap();
        want[at..at + len].fill(at as u8);
        assert_eq!(volume.read_all(&volume.inode(f).unwrap()).unwrap(), want);
    }
    let mut volume = Volume::open(&image, Options::default()).unwrap();
    volume.enable_pi(&image, &pi, p).unwrap();
    assert_eq!(volume.read_all(&volume.inode(f).unwrap()).unwrap(), want, "checked against the new PI");
}

/// Metadata written in place without the device (`log=off`: the image's
/// map, no PI generated) over a block the device wrote has stale PI; a
/// logged PI volume rewriting part of such a block later reads the rest of
/// it unchecked (metadata has checksums of its own) — the checkpoint
/// succeeds and e2fsck is clean.
#[test]
fn metadata_written_without_the_device_is_rewritten_through_it_unchecked() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("pi-metadata");
    let image = scratch.0.join("img");
    let (log, pi) = (scratch.0.join("img.bytelog"), scratch.0.join("img.pi"));
    mke2fs(&image, "4096", "16M");
    let p = protection("4096+8", GuardSize::Crc16);
    let logged = || Volume::open_logged_pi(&image, &log, 1 << 20, Options::default(), &pi, p, None).unwrap().0;
    let mut volume = logged();
    volume.create(ROOT, b"first", FILE).unwrap(); // its inode's block through the device
    volume.checkpoint().unwrap();
    drop(volume);
    let mut volume = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
    volume.enable_pi(&image, &pi, p).unwrap();
    volume.create(ROOT, b"in-place", FILE).unwrap(); // the same block, its PI now stale
    volume.sync().unwrap();
    drop(volume);
    let mut volume = logged();
    volume.create(ROOT, b"last", FILE).unwrap(); // the same block, in part
    volume.checkpoint().unwrap();
    drop(volume);
    assert_clean(&image, "metadata rewritten through the device");
}
