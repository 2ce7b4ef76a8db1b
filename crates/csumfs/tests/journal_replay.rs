//! A read-only open of an image the kernel left with committed
//! transactions in its journal (csumkit's `tests/data/jbd2`, made by
//! `scripts/journal-corpus.sh`): the journal is replayed over a private
//! copy, so the tree is what the workload fsynced — and the image file's
//! bytes are unchanged.

mod common;

use common::Scratch;
use csumfs::{Options, Volume};
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../csumkit/tests/data/jbd2")
}

fn unpack(name: &str, scratch: &Scratch) -> PathBuf {
    let out = Command::new("gzip").arg("-dc").arg(corpus().join(format!("{name}.img.gz"))).output().unwrap();
    assert!(out.status.success(), "gzip -dc {name}");
    let path = scratch.0.join(format!("{name}.img"));
    std::fs::write(&path, out.stdout).unwrap();
    path
}

fn names(v: &Volume, dir: &str) -> Vec<String> {
    let dir = v.resolve(dir).unwrap();
    let mut names: Vec<String> = v
        .read_dir(&dir)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect();
    names.sort();
    names
}

fn content(v: &Volume, path: &str) -> Vec<u8> {
    v.read_all(&v.resolve(path).unwrap()).unwrap()
}

#[test]
fn a_read_only_open_replays_the_kernels_journal_in_memory_and_leaves_the_file_alone() {
    let scratch = Scratch::new("journal-replay");
    for name in ["v3-4k", "v3-1k", "v3-32bit-4k"] {
        let path = unpack(name, &scratch);
        let before = std::fs::read(&path).unwrap();
        let v = Volume::open(&path, Options::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (transactions, blocks) = v.journal_replayed().expect("replayed");
        assert!(transactions >= 2 && blocks > 0, "{name}: {transactions} transactions, {blocks} blocks");
        let mut want: Vec<String> = (1..=60).filter(|i| *i != 3 && *i != 4).map(|i| format!("f{i}")).collect();
        want.sort();
        assert_eq!(names(&v, "/d"), want, "{name}");
        assert_eq!(content(&v, "/d/f60"), b"file 60\n");
        assert_eq!(content(&v, "/late"), b"late\n");
        // Only fsynced data reached the disk; the others' blocks were never
        // allocated (delayed allocation) and their sizes are 0 — what the
        // kernel shows after its own recovery of these images.
        assert_eq!(content(&v, "/late_dir/moved"), b"");
        assert_eq!(content(&v, "/d/f1"), b"");
        drop(v);
        assert!(std::fs::read(&path).unwrap() == before, "{name}: the image file changed");
    }
}

#[test]
fn a_wrapped_log_and_revoked_blocks_replay_as_the_kernel_replays_them() {
    let scratch = Scratch::new("journal-replay-wrap");
    let v = Volume::open(&unpack("wrap-1k", &scratch), Options::default()).unwrap();
    let mut want: Vec<String> = (1..=400).map(|i| format!("f{i}")).collect();
    want.sort();
    assert_eq!(names(&v, "/w"), want);
    assert_eq!(content(&v, "/w/f400"), b"400\n");
    let v = Volume::open(&unpack("revoke-4k", &scratch), Options::default()).unwrap();
    assert!(v.resolve("/big").is_err(), "the removed directory stays removed");
    assert_eq!(content(&v, "/data"), vec![b'd'; 2 << 20]);
    assert!(v.resolve("/after_rm").is_ok());
}

#[test]
fn a_writable_open_of_an_image_that_needs_recovery_is_refused_by_name() {
    let scratch = Scratch::new("journal-replay-rw");
    let path = unpack("v3-4k", &scratch);
    let err = Volume::open(&path, Options { write: true, ..Options::default() }).err().expect("refused");
    assert!(err.to_string().contains("needs_recovery"), "{err}");
}
