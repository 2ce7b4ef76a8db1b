//! A split PI device on a simulated disk, its power cut after every
//! command and before every sync of either file: the page cache may have
//! written back any subset of the sectors written since their file's last
//! sync, so a block's data and its PI can part. After reopening, no block may fail its check (a drive's block
//! write is atomic: old or new), and every block flushed and not written
//! since must read back as flushed, still checked.
//!
//! A cut during the recovery of a cut is judged the same way.
//!
//! Negative control: the same crash images with the write-intent bitmap
//! erased from the metadata file's header must show torn blocks — so the
//! test would catch a device that did not mark, or did not recover.

use csumkit::pi::{Device, GuardSize, Io, PiFormat, PiLocation, PiType, Protection};
use csumkit::DurableFile;
use csumkit::Error;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

const SECTOR: usize = 512;
/// Where the split metadata file keeps its write-intent bitmap (64 bytes).
const BITMAP_AT: usize = 256;

#[derive(Default)]
struct Disk {
    durable: Vec<u8>,
    current: Vec<u8>,
    dirty: BTreeSet<usize>,
}

impl Disk {
    fn new(image: Vec<u8>) -> Disk {
        Disk { durable: image.clone(), current: image, dirty: BTreeSet::new() }
    }

    /// What a power cut leaves: the durable bytes, and each sector written
    /// since the last sync with probability 1/2.
    fn crash_image(&self, rng: &mut Rng) -> Vec<u8> {
        let mut image = self.durable.clone();
        for &sector in &self.dirty {
            if rng.below(2) == 1 {
                let at = sector * SECTOR;
                let end = (at + SECTOR).min(image.len());
                image[at..end].copy_from_slice(&self.current[at..end]);
            }
        }
        image
    }
}

/// The device's two files, and the crash images taken before each sync
/// (when `cut_at_syncs`).
struct Pair {
    disks: [Disk; 2],
    rng: Rng,
    cut_at_syncs: bool,
    cuts: Vec<[Vec<u8>; 2]>,
}

/// One of a pair's files, whose writes are durable only once synced.
#[derive(Clone)]
struct SimFile(Arc<Mutex<Pair>>, usize);

/// A data file holding `data` and an empty metadata file.
fn sim_pair(data: Vec<u8>, metadata: Vec<u8>, seed: u64, cut_at_syncs: bool) -> (SimFile, SimFile) {
    let pair = Pair { disks: [Disk::new(data), Disk::new(metadata)], rng: Rng(seed), cut_at_syncs, cuts: Vec::new() };
    let pair = Arc::new(Mutex::new(pair));
    (SimFile(pair.clone(), 0), SimFile(pair, 1))
}

impl SimFile {
    /// What a power cut now leaves of both files.
    fn crash_images(&self) -> [Vec<u8>; 2] {
        let pair = &mut *self.0.lock().unwrap();
        [pair.disks[0].crash_image(&mut pair.rng), pair.disks[1].crash_image(&mut pair.rng)]
    }

    /// The crash images taken before syncs since the last call.
    fn take_cuts(&self) -> Vec<[Vec<u8>; 2]> {
        std::mem::take(&mut self.0.lock().unwrap().cuts)
    }
}

impl DurableFile for SimFile {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.0.lock().unwrap().disks[self.1].current.len() as u64)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let disk = &mut self.0.lock().unwrap().disks[self.1];
        disk.current.resize(len as usize, 0);
        disk.durable.resize(len as usize, 0);
        disk.dirty.retain(|&s| s * SECTOR < len as usize);
        Ok(())
    }
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<()> {
        let disk = &self.0.lock().unwrap().disks[self.1];
        let at = at as usize;
        let src = disk.current.get(at..at + buf.len()).ok_or(std::io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_all_at(&self, buf: &[u8], at: u64) -> std::io::Result<()> {
        let disk = &mut self.0.lock().unwrap().disks[self.1];
        let (at, end) = (at as usize, at as usize + buf.len());
        assert!(end <= disk.current.len(), "a device writes inside its files");
        disk.current[at..end].copy_from_slice(buf);
        disk.dirty.extend(at / SECTOR..end.div_ceil(SECTOR));
        Ok(())
    }
    fn sync_data(&self) -> std::io::Result<()> {
        let pair = &mut *self.0.lock().unwrap();
        if pair.cut_at_syncs {
            let cut = [pair.disks[0].crash_image(&mut pair.rng), pair.disks[1].crash_image(&mut pair.rng)];
            pair.cuts.push(cut);
        }
        let disk = &mut pair.disks[self.1];
        let dirty = std::mem::take(&mut disk.dirty);
        for sector in dirty {
            let at = sector * SECTOR;
            let end = (at + SECTOR).min(disk.current.len());
            let bytes = disk.current[at..end].to_vec();
            disk.durable[at..end].copy_from_slice(&bytes);
        }
        Ok(())
    }
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

/// Opens a device over crash images; with `cut_recovery`, also returns
/// what a power cut before each sync of its recovery would leave.
fn open_images(images: [Vec<u8>; 2], p: Protection, cut_recovery: bool) -> (Device, u64, Vec<[Vec<u8>; 2]>) {
    let [data, metadata] = images;
    let (data, metadata) = sim_pair(data, metadata, 7, cut_recovery);
    let (device, forgotten) = open(&data, &metadata, p).unwrap();
    (device, forgotten, data.take_cuts())
}

fn open(data: &SimFile, metadata: &SimFile, p: Protection) -> Result<(Device, u64), Error> {
    let (device, opened) = Device::open_split_on(
        Box::new(data.clone()),
        Box::new(metadata.clone()),
        Path::new("sim.img"),
        Path::new("sim.pi"),
        p,
    )?;
    Ok((device, opened.forgotten_blocks))
}

/// What each block may hold after a cut: its content at the last flush
/// (None: never written through the device) and each content written
/// since (the newest last).
#[derive(Clone, Default)]
struct Block {
    flushed: Option<Vec<u8>>,
    since: Vec<Vec<u8>>,
}

impl Block {
    fn flushed_now(&mut self) {
        if let Some(newest) = self.since.pop() {
            self.flushed = Some(newest);
        }
        self.since.clear();
    }
}

#[derive(Default, Debug)]
struct Tally {
    cuts: u64,
    sync_cuts: u64,
    recovery_cuts: u64,
    forgotten: u64,
    kept_checked: u64,
    torn_without_bitmap: u64,
}

/// One cut: reopens the crash images and judges every block, and each cut
/// of that reopening's recovery (when `outer`); then the same images with
/// the bitmap erased, counting blocks that fail.
fn judge(images: [Vec<u8>; 2], model: &[Block], p: Protection, tally: &mut Tally, outer: bool) {
    tally.cuts += 1;
    let db = p.lba().data_bytes();
    let (device, forgotten, recovery_cuts) = open_images(images.clone(), p, outer);
    tally.forgotten += forgotten;
    let mut block = vec![0u8; db];
    for (lba, expect) in model.iter().enumerate() {
        match device.read(lba as u64, &mut block, None, &Io::pract()) {
            Ok(()) => {}
            Err(e) => panic!("cut {}: block {lba} fails its check after the power cut: {e}", tally.cuts),
        }
        match (&expect.flushed, expect.since.is_empty()) {
            (Some(flushed), true) => {
                assert_eq!(&block, flushed, "cut {}: block {lba}, flushed, reads other bytes", tally.cuts);
                let mut md = vec![0u8; p.lba().metadata_bytes()];
                device.read(lba as u64, &mut block, Some(&mut md), &Io::default()).unwrap();
                let tuple = p.format().decode(&md[p.tuple_offset()..][..p.format().tuple_bytes()]);
                assert!(!p.format().is_escape(&tuple), "cut {}: block {lba}, flushed, lost its PI", tally.cuts);
                tally.kept_checked += 1;
            }
            (Some(flushed), false) if db <= SECTOR => {
                let known = expect.since.contains(&block) || &block == flushed;
                assert!(known, "cut {}: block {lba} holds bytes never written to it", tally.cuts);
            }
            _ => {}
        }
    }
    if !outer {
        return;
    }
    for cut in recovery_cuts {
        tally.recovery_cuts += 1;
        judge(cut, model, p, tally, false);
    }
    // The negative control: without the bitmap nothing is recovered.
    let [data, mut erased] = images;
    erased[BITMAP_AT..BITMAP_AT + 64].fill(0);
    let (device, forgotten, _) = open_images([data, erased], p, false);
    assert_eq!(forgotten, 0);
    for lba in 0..model.len() as u64 {
        if let Err(Error::PiCheck(_)) = device.read(lba, &mut block, None, &Io::pract()) {
            tally.torn_without_bitmap += 1;
        }
    }
}

fn run(p: Protection, blocks: u64, seed: u64) -> Tally {
    let db = p.lba().data_bytes();
    let mut rng = Rng(seed);
    let image = (0..blocks as usize * db).map(|i| (i * 13 % 251) as u8).collect();
    let (data, metadata) = sim_pair(image, Vec::new(), seed, true);
    let (mut device, _) = open(&data, &metadata, p).unwrap();
    data.take_cuts();
    let mut model = vec![Block::default(); blocks as usize];
    let mut tally = Tally::default();
    for op in 0..160 {
        let flushing = rng.below(5) == 0;
        if flushing {
            device.flush().unwrap();
        } else {
            // In the model before the device: a cut inside the write may
            // find it stored.
            let n = 1 + rng.below(12);
            let lba = rng.below(blocks - n + 1);
            let bytes: Vec<u8> = (0..n as usize * db).map(|_| rng.below(256) as u8).collect();
            for (i, b) in model[lba as usize..(lba + n) as usize].iter_mut().enumerate() {
                b.since.push(bytes[i * db..(i + 1) * db].to_vec());
            }
            device.write(lba, &bytes, None, &Io::pract()).unwrap();
        }
        for images in data.take_cuts() {
            tally.sync_cuts += 1;
            judge(images, &model, p, &mut tally, true);
        }
        if flushing {
            model.iter_mut().for_each(Block::flushed_now);
        }
        judge(data.crash_images(), &model, p, &mut tally, true);
        if op % 40 == 39 {
            // A clean reopen now and then: nothing is forgotten once flushed.
            device.flush().unwrap();
            drop(device);
            let (again, forgotten) = open(&data, &metadata, p).unwrap();
            assert_eq!(forgotten, 0, "a flushed device has nothing torn");
            data.take_cuts();
            device = again;
            model.iter_mut().for_each(Block::flushed_now);
        }
    }
    tally
}

#[test]
fn a_power_cut_never_leaves_a_block_failing_its_pi_and_keeps_what_was_flushed() {
    let formats = [
        ("512+8", GuardSize::Crc16, PiType::Type1, 1024),
        ("4096+16", GuardSize::Crc64, PiType::Type1, 256),
        ("512+8", GuardSize::Crc16, PiType::Type3, 1024),
    ];
    let mut total = Tally::default();
    for (i, (lba, guard, pi_type, blocks)) in formats.into_iter().enumerate() {
        let p =
            Protection::new(PiFormat::new(guard, pi_type, 0).unwrap(), lba.parse().unwrap(), PiLocation::Last).unwrap();
        for seed in 0..3 {
            let tally = run(p, blocks, 1000 * i as u64 + seed);
            total.cuts += tally.cuts;
            total.sync_cuts += tally.sync_cuts;
            total.recovery_cuts += tally.recovery_cuts;
            total.forgotten += tally.forgotten;
            total.kept_checked += tally.kept_checked;
            total.torn_without_bitmap += tally.torn_without_bitmap;
        }
    }
    println!("PI power cuts: {total:?}");
    assert!(total.forgotten > 0, "no cut tore a block: the model is too gentle to test anything");
    assert!(total.torn_without_bitmap > 0, "the negative control found nothing torn");
    assert!(total.kept_checked > 0);
}
