//! The files csumfs keeps beside an image, from untrusted bytes: the undo
//! log (`IMAGE.undo`, `-o log=off`) and the data checksum sidecar
//! (`IMAGE.csums`: identity, intent list, checksum tree). A real sidecar of
//! the corpus image is built once and damaged at the offsets the input
//! names (so the fuzzer gets past its identity check to the intent list
//! and the tree); an undo log is taken whole from the input after its
//! magic, and read both by a writable open and by `undone_image`. Opening gives a volume or a typed error, never a panic, and a
//! file read over a damaged sidecar gives its own bytes or `EIO`. Twin in
//! CI: `crates/csumfs/tests/sidecars.rs`.
#![no_main]

use csumfs::{NewInode, Options, Volume, ROOT};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Linux's `EIO` (the fuzz crate does without libc).
const EIO: i32 = 5;

struct Base {
    dir: PathBuf,
    image: Vec<u8>,
    sums: Vec<u8>,
    files: Vec<(u32, Vec<u8>)>,
}

fn writable() -> Options {
    Options { write: true, ..Options::default() }
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("csumkit-fuzz-sidecars-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let packed = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/csumkit/tests/data/ext4/1k.img.gz");
        let image = std::process::Command::new("gzip").arg("-dc").arg(packed).output().expect("gzip").stdout;
        let (image_path, sums_path) = (dir.join("1k.img"), dir.join("1k.csums"));
        std::fs::write(&image_path, &image).unwrap();
        let mut v = Volume::open(&image_path, writable()).unwrap();
        assert!(v.enable_data_checksums(&sums_path).unwrap());
        let mut files = Vec::new();
        for (i, len) in [700usize, 5_000, 70_000].into_iter().enumerate() {
            let new = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
            let ino = v.create(ROOT, format!("sidecar-{i}").as_bytes(), new).unwrap().ino;
            let bytes: Vec<u8> = (0..len).map(|b| (b as u8).wrapping_mul(7) ^ i as u8).collect();
            v.write(ino, 0, &bytes).unwrap();
            files.push((ino, bytes));
        }
        v.sync().unwrap();
        drop(v);
        let image = std::fs::read(&image_path).unwrap();
        let sums = std::fs::read(&sums_path).unwrap();
        Base { dir, image, sums, files }
    })
}

fuzz_target!(|input: (bool, Vec<(u16, u8)>, Vec<u8>)| {
    let (undo, edits, bytes) = input;
    let base = base();
    let mut v = Volume::from_bytes(base.image.clone(), writable()).unwrap();
    if undo {
        let path = base.dir.join("fuzz.undo");
        let mut log = b"CSFSUND2".to_vec();
        log.extend_from_slice(&bytes);
        std::fs::write(&path, &log).unwrap();
        // The same log read for a check (`csumkit ext4 check` of an image
        // a log=off mount left): bytes or a typed error.
        let _ = csumfs::undone_image(base.image.clone(), &log);
        let _ = v.enable_undo(&path);
        return;
    }
    let path = base.dir.join("fuzz.csums");
    let mut sums = base.sums.clone();
    // Offsets over the whole sidecar: the header's first 4 KiB at one
    // selector value in two, the rest spread over the tree's area.
    for (at, value) in edits {
        let at = if at & 1 == 0 { usize::from(at >> 1) % 4096 } else { usize::from(at) * 16 % sums.len() };
        sums[at] = value;
    }
    std::fs::write(&path, &sums).unwrap();
    if v.enable_data_checksums(&path).is_err() {
        return;
    }
    for (ino, want) in &base.files {
        match v.read_all(&v.inode(*ino).unwrap()) {
            Ok(read) => assert!(read == *want, "inode {ino}: other bytes than written"),
            Err(err) => assert_eq!(err.errno(), EIO, "inode {ino}: {err}"),
        }
    }
});
