//! All-or-nothing operations: what an operation changed is put back when
//! it fails, and when the process died before it ended (the next open
//! undoes it) — every block in use byte for byte as before (blocks free
//! before, and the bitmaps of groups `dumpe2fs` shows uninitialised, may
//! keep what the operation wrote there), `e2fsck -fn` clean.

mod common;

use common::{
    assert_clean, assert_same_but_unread, fill_until_full, have_e2fsprogs, mke2fs_with, unread_blocks, Scratch,
};
use csumfs::{NewInode, Options, Volume, XattrMode, ROOT};
use std::path::{Path, PathBuf};

/// A fresh image of 1 KiB blocks (mke2fs with `extra`) in a scratch
/// directory; None (the test skips) without e2fsprogs.
fn image(name: &str, size: &str, extra: &[&str]) -> Option<(Scratch, PathBuf)> {
    if !have_e2fsprogs() {
        return None;
    }
    let scratch = Scratch::new(&format!("undo-{name}"));
    let path = scratch.0.join("u.img");
    mke2fs_with(&path, "1024", size, extra);
    Some((scratch, path))
}

fn open(image: &Path) -> Volume {
    Volume::open(image, Options { write: true, check_updates: true, ..Options::default() }).unwrap()
}

/// `image` without the mark an undo log in use sets (its superblock as
/// before the mark).
fn without_undo_mark(mut image: Vec<u8>) -> Vec<u8> {
    let sb = &mut image[1024..2048];
    let incompat = u32::from_le_bytes(sb[0x60..0x64].try_into().unwrap()) & !csumfs::UNDO_PENDING;
    sb[0x60..0x64].copy_from_slice(&incompat.to_le_bytes());
    let crc = csumkit::crc32c::raw_update(!0, &sb[..0x3FC]);
    sb[0x3FC..].copy_from_slice(&crc.to_le_bytes());
    image
}

const FILE: NewInode = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
const DIR: NewInode = NewInode { mode: 0o755, uid: 0, gid: 0 };

/// Metadata operations only (no file data), so the whole image must come back.
fn metadata_work(v: &mut Volume, base: u32) {
    let d = v.mkdir(ROOT, b"new-dir", DIR).unwrap().ino;
    for i in 0..40 {
        v.create(d, format!("name-{i}").as_bytes(), FILE).unwrap();
    }
    v.setxattr(base, "user.a", &[b'a'; 300], XattrMode::Either).unwrap();
    v.rename(ROOT, b"kept", d, b"moved", csumfs::RenameMode::Replace).unwrap();
    v.unlink(d, b"name-3").unwrap();
    v.truncate(base, 0).unwrap();
}

#[test]
fn a_failed_or_interrupted_operation_leaves_the_image_as_before() {
    let Some((scratch, path)) = image("meta", "16M", &[]) else { return };
    let undo = scratch.0.join("u.undo");
    let mut v = open(&path);
    let base = v.create(ROOT, b"kept", FILE).unwrap().ino;
    v.write(base, 0, &[7; 5000]).unwrap();
    v.sync().unwrap();
    let unread = unread_blocks(&path);
    assert!(!v.enable_undo(&undo).unwrap(), "a new log has nothing to undo");
    let before = std::fs::read(&path).unwrap();

    // Ended as failed: put back at once.
    v.begin();
    metadata_work(&mut v, base);
    v.end(false).unwrap();
    v.sync().unwrap();
    assert_same_but_unread(&before, &std::fs::read(&path).unwrap(), &unread, 1024, "rolled back");
    assert_eq!(v.resolve("/kept").unwrap().size, 5000);

    // Never ended: the process "dies" (the volume is dropped mid-operation);
    // the next open undoes it.
    v.begin();
    metadata_work(&mut v, base);
    drop(v);
    assert!(std::fs::read(&path).unwrap() != before, "the interrupted operation reached the image");
    let mut v = open(&path);
    assert!(v.enable_undo(&undo).unwrap(), "the next open undoes it");
    assert_same_but_unread(&before, &std::fs::read(&path).unwrap(), &unread, 1024, "undone");
    v.checkpoint().unwrap();
    assert_clean(&path, "the operations above");

    // Nested operations end with the outermost; a completed one is kept.
    v.begin();
    v.begin();
    v.mkdir(ROOT, b"kept-dir", DIR).unwrap();
    v.end(true).unwrap();
    v.end(true).unwrap();
    drop(v);
    let mut v = open(&path);
    assert!(!v.enable_undo(&undo).unwrap());
    assert!(v.resolve("/kept-dir").is_ok());
    v.checkpoint().unwrap();
    assert_clean(&path, "the operations above");
}

/// While an undo file is in use the image carries csumfs's undo mark, so
/// that e2fsck and the kernel keep off an operation a death left half done
/// (e2fsck would repair it its own way, and the undo log's old bytes would
/// then go over that repair): set by `enable_undo`, cleared by a
/// checkpoint, set again by the next operation. A dead process's image is
/// refused read-only, read as the undo log makes it by `undone_image`, and
/// refused for writing when its undo log is gone.
#[test]
fn an_image_with_an_undo_log_in_use_is_marked_for_every_other_reader() {
    let Some((scratch, path)) = image("mark", "8M", &[]) else { return };
    let undo = scratch.0.join("u.undo");
    let e2fsck_refuses = || {
        let out = std::process::Command::new(common::tool("e2fsck").unwrap()).arg("-fn").arg(&path).output().unwrap();
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("unsupported feature")
    };
    let mut v = open(&path);
    let base = v.create(ROOT, b"kept", FILE).unwrap().ino;
    v.sync().unwrap();
    assert!(!csumfs::undo_pending(&std::fs::read(&path).unwrap()), "no mark without an undo log");
    assert!(!v.enable_undo(&undo).unwrap());
    assert!(csumfs::undo_pending(&std::fs::read(&path).unwrap()) && e2fsck_refuses(), "marked once in use");
    v.checkpoint().unwrap();
    assert!(!csumfs::undo_pending(&std::fs::read(&path).unwrap()), "a checkpoint clears it");
    assert_clean(&path, "checkpointed");
    let before = std::fs::read(&path).unwrap();
    let unread = unread_blocks(&path);
    v.begin();
    assert!(csumfs::undo_pending(&std::fs::read(&path).unwrap()), "the next operation marks it again");
    metadata_work(&mut v, base);
    drop(v); // dies mid-operation
    let left = std::fs::read(&path).unwrap();
    assert!(csumfs::undo_pending(&left) && e2fsck_refuses(), "a dead process's image stays marked");
    match Volume::open(&path, Options::default()) {
        Err(csumfs::Error::Unsupported { feature: "csumfs_undo", .. }) => {}
        other => panic!("a read-only open of a marked image: {:?}", other.map(|_| "opened")),
    }
    // Read as the undo log makes it, neither file written.
    let (undone, records) = csumfs::undone_image(left.clone(), &std::fs::read(&undo).unwrap()).unwrap();
    assert!(records > 0);
    assert_same_but_unread(&before, &without_undo_mark(undone.clone()), &unread, 1024, "undone in memory");
    assert!(std::fs::read(&path).unwrap() == left);
    // Put back by a writable open (its bytes those `undone_image` gave),
    // unmarked by its checkpoint.
    let mut v = open(&path);
    assert!(v.enable_undo(&undo).unwrap());
    assert!(std::fs::read(&path).unwrap() == undone);
    v.checkpoint().unwrap();
    drop(v);
    assert_same_but_unread(&before, &std::fs::read(&path).unwrap(), &unread, 1024, "undone");
    assert_clean(&path, "undone and checkpointed");
    // Marked, its undo log gone: nothing can be undone, and nothing is.
    let mut v = open(&path);
    v.enable_undo(&undo).unwrap();
    drop(v);
    std::fs::remove_file(&undo).unwrap();
    let mut v = open(&path);
    match v.enable_undo(&undo) {
        Err(err @ csumfs::Error::Corrupt { .. }) => assert!(err.to_string().contains("missing"), "{err}"),
        other => panic!("a marked image without its undo log: {other:?}"),
    }
}

/// What the undo log file holds is trusted only when it is one: a file of
/// something else at its path is started afresh (nothing put back), and a
/// log whose count names a record past its bytes used is refused as
/// corrupt, the image untouched.
#[test]
fn only_a_whole_undo_log_is_put_back() {
    let Some((scratch, path)) = image("foreign", "8M", &[]) else { return };
    let undo = scratch.0.join("u.undo");
    std::fs::write(&undo, vec![0xA5u8; 1 << 20]).unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut v = open(&path);
    assert!(!v.enable_undo(&undo).unwrap(), "not a log: nothing to undo");
    assert!(without_undo_mark(std::fs::read(&path).unwrap()) == before, "nothing put back");
    // A never-ended operation, then one record more counted than written.
    v.begin();
    v.mkdir(ROOT, b"d", DIR).unwrap();
    drop(v);
    let mut log = std::fs::read(&undo).unwrap();
    let count = u64::from_le_bytes(log[8..16].try_into().unwrap());
    assert!(count > 0);
    log[8..16].copy_from_slice(&(count + 1).to_le_bytes());
    std::fs::write(&undo, &log).unwrap();
    let interrupted = std::fs::read(&path).unwrap();
    let mut v = open(&path);
    match v.enable_undo(&undo) {
        Err(err @ csumfs::Error::Corrupt { .. }) => assert!(err.to_string().contains("past the"), "{err}"),
        other => panic!("a log counting a record it lacks: {other:?}"),
    }
    drop(v);
    assert!(std::fs::read(&path).unwrap() == interrupted, "a refused log puts nothing back");
}

/// An operation whose old metadata bytes pass the log's first megabyte
/// (the log file grows) is rolled back whole when it fails, and undone
/// whole after a death.
#[test]
fn an_operation_past_the_logs_first_megabyte_is_undone_whole() {
    let Some((scratch, path)) = image("large", "32M", &[]) else { return };
    let undo = scratch.0.join("u.undo");
    let mut v = open(&path);
    let unread = unread_blocks(&path);
    assert!(!v.enable_undo(&undo).unwrap());
    let before = std::fs::read(&path).unwrap();
    let work = |v: &mut Volume| {
        v.begin();
        let d = v.mkdir(ROOT, b"many", DIR).unwrap().ino;
        for i in 0..3000 {
            v.create(d, format!("a-rather-long-file-name-{i:05}").as_bytes(), FILE).unwrap();
        }
    };
    work(&mut v);
    let logged = std::fs::metadata(&undo).unwrap().len();
    assert!(logged > 1 << 20, "the log grew past its first megabyte: {logged} bytes");
    v.end(false).unwrap();
    v.sync().unwrap();
    assert_same_but_unread(&before, &std::fs::read(&path).unwrap(), &unread, 1024, "rolled back");
    work(&mut v);
    drop(v); // dies mid-operation
    let mut v = open(&path);
    assert!(v.enable_undo(&undo).unwrap());
    assert_same_but_unread(&before, &std::fs::read(&path).unwrap(), &unread, 1024, "undone");
    v.checkpoint().unwrap();
    v.checkpoint().unwrap();
    drop(v);
    assert_clean(&path, "the undone operation");
}

/// Nested operations are one: an inner `end(true)` keeps nothing by
/// itself — the outer operation failing puts back the inner one's changes
/// too.
#[test]
fn a_failed_operation_puts_back_what_its_inner_operations_did() {
    let Some((scratch, path)) = image("nested", "8M", &[]) else { return };
    let mut v = open(&path);
    let unread = unread_blocks(&path);
    assert!(!v.enable_undo(&scratch.0.join("u.undo")).unwrap());
    v.sync().unwrap();
    let before = std::fs::read(&path).unwrap();
    v.begin();
    v.begin();
    v.mkdir(ROOT, b"inner", DIR).unwrap();
    v.end(true).unwrap();
    v.create(ROOT, b"outer", FILE).unwrap();
    v.end(false).unwrap();
    v.sync().unwrap();
    assert!(v.resolve("/inner").is_err(), "the inner operation's directory is gone");
    assert_same_but_unread(&before, &std::fs::read(&path).unwrap(), &unread, 1024, "rolled back");
}

#[test]
fn a_write_that_runs_out_of_space_is_undone_whole() {
    let Some((scratch, path)) = image("enospc", "8M", &[]) else { return };
    let mut v = open(&path);
    v.enable_undo(&scratch.0.join("u.undo")).unwrap();
    let f = v.create(ROOT, b"big", FILE).unwrap().ino;
    let free = v.statfs().free_blocks;
    v.begin();
    let err = v.write(f, 0, &vec![1u8; 16 << 20]).unwrap_err();
    v.end(false).unwrap();
    assert_eq!(err.errno(), libc::ENOSPC);
    assert_eq!(v.statfs().free_blocks, free, "every block the write took is free again");
    assert_eq!(v.inode(f).unwrap().size, 0);
    v.checkpoint().unwrap();
    assert_clean(&path, "the operations above");
}

#[test]
fn data_rewritten_after_the_last_commit_reads_back_after_a_death_not_as_eio() {
    let Some((scratch, path)) = image("datasum", "16M", &[]) else { return };
    let sums = scratch.0.join("u.csums");
    let mut v = open(&path);
    assert!(v.enable_data_checksums(&sums).unwrap());
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    v.write(f, 0, &[1u8; 3000]).unwrap();
    v.sync().unwrap(); // the checksum of [1; 3000] is committed
    v.write(f, 100, &[2u8; 50]).unwrap(); // in place; its new checksum is not
    drop(v); // the process dies before the next commit
    let mut v = open(&path);
    assert!(v.enable_data_checksums(&sums).unwrap());
    let mut want = vec![1u8; 3000];
    want[100..150].fill(2);
    assert_eq!(v.read_all(&v.inode(f).unwrap()).unwrap(), want, "good data, not EIO");
    // Written again, the block has a checksum again, and it is verified.
    v.write(f, 0, &[3u8; 10]).unwrap();
    v.sync().unwrap();
    drop(v);
    let mut bytes = std::fs::read(&path).unwrap();
    let v = open(&path);
    let block = v.runs(&v.inode(f).unwrap()).unwrap()[0].physical;
    drop(v);
    bytes[(block * 1024 + 2000) as usize] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let mut v = Volume::open(&path, Options::default()).unwrap();
    assert!(v.enable_data_checksums(&sums).unwrap());
    let err = v.read_all(&v.inode(f).unwrap()).unwrap_err();
    assert_eq!(err.errno(), libc::EIO, "{err}");
}

/// An in-place overwrite of blocks with committed checksums makes the
/// intent list durable first (one flush per 1 MiB region, none for new
/// blocks); after a death or power cut before the next commit, only the
/// listed blocks whose data changed lose their checksum — the region's
/// untouched blocks stay verified.
#[test]
fn an_overwrite_is_announced_durably_and_only_changed_blocks_lose_their_checksum() {
    use csumfs::Stats;
    let Some((scratch, path)) = image("intent", "16M", &[]) else { return };
    let sums = scratch.0.join("u.csums");
    let mut v = open(&path);
    assert!(v.enable_data_checksums(&sums).unwrap());
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    v.write(f, 0, &[1u8; 64 << 10]).unwrap();
    v.sync().unwrap(); // 64 one-KiB blocks, their checksums committed
    let flushes = |v: &Volume| Stats::get(&v.stats().datasum_intent_flushes);
    let before = flushes(&v);
    let g = v.create(ROOT, b"g", FILE).unwrap().ino;
    v.write(g, 0, &[9u8; 64 << 10]).unwrap();
    assert_eq!(flushes(&v), before, "new blocks have no checksum to announce");
    v.write(f, 1000, &[2u8; 100]).unwrap();
    assert_eq!(flushes(&v), before + 1, "an overwrite of checksummed blocks flushes the list first");
    v.write(f, 5000, &[3u8; 50]).unwrap();
    assert_eq!(flushes(&v), before + 1, "a region already listed costs nothing");
    // On the sidecar now (durable: flushed): one entry covering f's blocks.
    let header = std::fs::read(&sums).unwrap();
    assert_eq!(u64::from_le_bytes(header[48..56].try_into().unwrap()), 1, "one intent entry");
    drop(v); // dies (or the power fails) before the next commit
    let mut v = open(&path);
    assert!(v.enable_data_checksums(&sums).unwrap());
    let mut want = vec![1u8; 64 << 10];
    want[1000..1100].fill(2);
    want[5000..5050].fill(3);
    assert_eq!(v.read_all(&v.inode(f).unwrap()).unwrap(), want, "good data, not EIO");
    let block = v.runs(&v.inode(f).unwrap()).unwrap()[0].physical;
    drop(v);
    // Block 30 of f was in the listed region but never rewritten: its
    // checksum was kept, so damage there is still caught.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[((block + 30) * 1024 + 7) as usize] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let mut v = Volume::open(&path, Options::default()).unwrap();
    assert!(v.enable_data_checksums(&sums).unwrap());
    match v.read_all(&v.inode(f).unwrap()) {
        Err(err) => assert_eq!(err.errno(), libc::EIO, "{err}"),
        Ok(_) => panic!("damage in an untouched block of the listed region read back unnoticed"),
    }
}

/// An overwrite announces exactly the 1 MiB regions of the image it
/// touches: written across region boundaries after a commit (unaligned at
/// both ends), the entry on the sidecar spans its first region's start to
/// its last region's end, and after a death every block reads back — none
/// past the first region left with its old checksum (`EIO`).
#[test]
fn an_overwrite_across_regions_announces_each_and_reads_back_after_a_death() {
    let Some((scratch, path)) = image("regions", "16M", &[]) else { return };
    let sums = scratch.0.join("u.csums");
    let mut v = open(&path);
    assert!(v.enable_data_checksums(&sums).unwrap());
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    let len = 3usize << 20;
    v.write(f, 0, &vec![1u8; len]).unwrap();
    v.sync().unwrap(); // 3072 one-KiB blocks, their checksums committed
    let runs = v.runs(&v.inode(f).unwrap()).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}: one run in a fresh image");
    // From inside the file's first block to 100 bytes before the last
    // region boundary the file crosses: a block more announced at either
    // end would be a region more.
    let (region, physical) = (1024u64, runs[0].physical);
    let boundary = (physical + 3072) / region * region;
    let at = 1500usize;
    let n = ((boundary - physical) * 1024) as usize - 100 - at;
    v.write(f, at as u64, &vec![2u8; n]).unwrap();
    let sidecar = std::fs::read(&sums).unwrap();
    let le64 = |at: usize| u64::from_le_bytes(sidecar[at..at + 8].try_into().unwrap());
    assert_eq!(le64(48), 1, "one intent entry");
    let start = physical / region * region;
    assert!(boundary - start >= 3 * region, "the write spans three regions");
    assert_eq!((le64(64), le64(72)), (start, boundary - start), "the regions touched");
    drop(v); // dies before the next commit
    let mut v = open(&path);
    assert!(v.enable_data_checksums(&sums).unwrap());
    let mut want = vec![1u8; len];
    want[at..at + n].fill(2);
    assert!(v.read_all(&v.inode(f).unwrap()).unwrap() == want, "good data, not EIO");
}

/// The intent list's entries as the sidecar holds them: (first block,
/// blocks) each.
fn intent_entries(sums: &Path) -> Vec<(u64, u64)> {
    let sidecar = std::fs::read(sums).unwrap();
    let le64 = |at: usize| u64::from_le_bytes(sidecar[at..at + 8].try_into().unwrap());
    (0..le64(48) as usize).map(|i| (le64(64 + 16 * i), le64(72 + 16 * i))).collect()
}

/// The intent list grows its last entry only for the region right after
/// it: overwrites of single blocks at region starts, after a commit, in
/// regions a + 1, a + 2 (grown), a (before it: a new entry), a + 5 (a gap:
/// another) — three entries, each exactly its regions, none flushed by a
/// commit on the way; after a death every byte reads back.
#[test]
fn the_intent_list_grows_its_last_entry_only_into_the_next_region() {
    let Some((scratch, path)) = image("grow", "16M", &[]) else { return };
    let sums = scratch.0.join("u.csums");
    let mut v = open(&path);
    assert!(v.enable_data_checksums(&sums).unwrap());
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    let mut want = vec![1u8; 12 << 20];
    v.write(f, 0, &want).unwrap();
    v.sync().unwrap(); // every block's checksum committed
    let runs = v.runs(&v.inode(f).unwrap()).unwrap();
    let logical_of = |physical: u64| {
        let run = runs.iter().find(|r| (r.physical..r.physical + r.len).contains(&physical))?;
        Some(run.logical + physical - run.physical)
    };
    let region = 1024u64; // 1 MiB of 1 KiB blocks
    let a = (1..)
        .find(|a| (*a..*a + 6).all(|k| logical_of(k * region).is_some()))
        .filter(|a| a + 6 <= v.layout().blocks_count / region)
        .expect("six regions of f's blocks");
    for (n, k) in [a + 1, a + 2, a, a + 5].into_iter().enumerate() {
        let at = (logical_of(k * region).unwrap() * 1024) as usize;
        want[at..at + 1024].fill(2 + n as u8);
        v.write(f, at as u64, &want[at..at + 1024]).unwrap();
    }
    let r = |k: u64| k * region;
    assert_eq!(intent_entries(&sums), [(r(a + 1), r(2)), (r(a), r(1)), (r(a + 5), r(1))]);
    drop(v); // dies before the next commit
    let mut v = open(&path);
    assert!(v.enable_data_checksums(&sums).unwrap());
    assert!(v.read_all(&v.inode(f).unwrap()).unwrap() == want, "good data, not EIO");
}

/// A freed block's checksum goes with it — but stays durable until the
/// next commit: blocks freed and committed are new space (a write there
/// announces nothing), blocks freed and written again before a commit are
/// announced (after a death they read back, not `EIO` against the old
/// file's checksums), and freeing one file forgets no other file's
/// checksums (damage to the file after it is still caught).
#[test]
fn a_freed_blocks_checksum_is_forgotten_durably_only_at_the_next_commit() {
    use csumfs::Stats;
    let Some((scratch, path)) = image("freed", "16M", &[]) else { return };
    let sums = scratch.0.join("u.csums");
    let mut v = open(&path);
    assert!(v.enable_data_checksums(&sums).unwrap());
    let flushes = |v: &Volume| Stats::get(&v.stats().datasum_intent_flushes);
    let physical = |v: &Volume, ino: u32| {
        let runs = v.runs(&v.inode(ino).unwrap()).unwrap();
        assert_eq!(runs.len(), 1, "{runs:?}");
        (runs[0].physical, runs[0].len)
    };
    let a = v.create(ROOT, b"a", FILE).unwrap().ino;
    v.write(a, 0, &[1u8; 64 << 10]).unwrap();
    let c = v.create(ROOT, b"c", FILE).unwrap().ino;
    v.write(c, 0, &[3u8; 64 << 10]).unwrap();
    v.sync().unwrap();
    let (a_at, a_len) = physical(&v, a);
    let c_at = physical(&v, c).0;
    assert!(a_at >= 2 && a_len >= 2 && c_at > a_at, "c after a");
    // Freed and committed: the space is new.
    v.unlink(ROOT, b"a").unwrap();
    v.sync().unwrap();
    let before = flushes(&v);
    let b = v.create(ROOT, b"b", FILE).unwrap().ino;
    v.write(b, 0, &[2u8; 64 << 10]).unwrap();
    assert_eq!(physical(&v, b), (a_at, a_len), "b takes a's blocks");
    assert_eq!(flushes(&v), before, "committed-free blocks have no checksum to announce");
    assert_eq!(intent_entries(&sums), []);
    // Freed, not committed: the sidecar still holds b's checksums.
    v.sync().unwrap();
    v.unlink(ROOT, b"b").unwrap();
    let d = v.create(ROOT, b"d", FILE).unwrap().ino;
    v.write(d, 0, &[4u8; 64 << 10]).unwrap();
    assert_eq!(physical(&v, d), (a_at, a_len), "d takes b's blocks");
    assert_eq!(flushes(&v), before + 1, "blocks whose checksums are durable are announced");
    drop(v); // dies before the next commit
    let mut v = open(&path);
    assert!(v.enable_data_checksums(&sums).unwrap());
    assert!(v.read_all(&v.inode(d).unwrap()).unwrap() == [4u8; 64 << 10], "good data, not EIO");
    v.sync().unwrap();
    drop(v);
    // c's checksums outlived both frees.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(c_at * 1024 + 5) as usize] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let mut v = Volume::open(&path, Options::default()).unwrap();
    assert!(v.enable_data_checksums(&sums).unwrap());
    let err = v.read_all(&v.inode(c).unwrap()).unwrap_err();
    assert_eq!(err.errno(), libc::EIO, "{err}");
}

/// The free-space trees the allocator searches stay the bitmaps' twins:
/// filled by large then block-sized writes, the image runs out of space
/// only when no block is free; freed and filled again (the trees merge the
/// freed runs), the same; an `ENOSPC` rolled back (trees dropped and
/// rebuilt from the restored bitmaps) changes nothing of that.
#[test]
fn an_image_fills_to_its_last_free_block_again_and_again() {
    // Three groups (not a power of two): the search from the goal's group
    // must visit each.
    let Some((scratch, path)) = image("fill", "24M", &[]) else { return };
    let mut v = open(&path);
    assert_eq!(v.layout().groups, 3);
    v.enable_undo(&scratch.0.join("u.undo")).unwrap();
    let fill = |v: &mut Volume, name: &[u8]| {
        let f = v.create(ROOT, name, FILE).unwrap().ino;
        let mut at = 0u64;
        for chunk in [64 << 10, 1024] {
            loop {
                v.begin();
                let done = v.write(f, at, &vec![7u8; chunk]);
                if matches!(&done, Err(e) if e.errno() == libc::ENOSPC) {
                    // Before the rollback rebuilds the trees: out of space
                    // only with less than the chunk (and a tree node) free.
                    let free = v.statfs().free_blocks;
                    assert!(free < chunk as u64 / 1024 + 2, "ENOSPC with {free} blocks free");
                }
                v.end(done.is_ok()).unwrap();
                match done {
                    Ok(_) => at += chunk as u64,
                    Err(e) if e.errno() == libc::ENOSPC => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        assert_eq!(v.statfs().free_blocks, 0, "ENOSPC with blocks free");
        at
    };
    // Blocks taken and freed while the tree is cached: it must see both.
    let x = v.create(ROOT, b"x", FILE).unwrap().ino;
    v.write(x, 0, &[1u8; 200 << 10]).unwrap();
    v.unlink(ROOT, b"x").unwrap();
    let first = fill(&mut v, b"a");
    v.checkpoint().unwrap();
    assert_clean(&path, "filled");
    v.unlink(ROOT, b"a").unwrap();
    let second = fill(&mut v, b"b");
    assert_eq!(first, second, "the freed space is all found again");
    v.unlink(ROOT, b"b").unwrap();
    let third = fill(&mut v, b"c");
    assert_eq!(first, third);
    v.checkpoint().unwrap();
    assert_clean(&path, "filled three times");
    // Then small files, each aimed at its inode's group (group 0 for all):
    // once that group is full, every other group is searched from it.
    v.unlink(ROOT, b"c").unwrap();
    for i in 0.. {
        // The create itself may need a block (the directory grows where
        // the image's random hash seed puts the name): ENOSPC there too.
        let f = match v.create(ROOT, format!("small-{i}").as_bytes(), FILE) {
            Ok(inode) => inode.ino,
            Err(e) if e.errno() == libc::ENOSPC => break,
            Err(e) => panic!("{e}"),
        };
        v.begin();
        let done = v.write(f, 0, &[3u8; 16 << 10]);
        v.end(done.is_ok()).unwrap();
        match done {
            Ok(_) => {}
            Err(e) if e.errno() == libc::ENOSPC => break,
            Err(e) => panic!("{e}"),
        }
    }
    let free = v.statfs().free_blocks;
    assert!(free < 16 + 2, "ENOSPC for 16 KiB files with {free} blocks free");
    v.checkpoint().unwrap();
    assert_clean(&path, "filled with small files");
}

/// A file unlinked while held is on the on-media orphan list until its last
/// unhold: e2fsck -fn on an image synced meanwhile (a crash with open
/// unlinked files) names the list's head as the kernel's list would be
/// named; a later writable open frees them (`release_orphans_left`, as
/// the kernel at mount), and e2fsck -fn is clean.
#[test]
fn a_held_unlinked_file_is_on_the_orphan_list_until_released() {
    let Some((scratch, path)) = image("orphan", "8M", &[]) else { return };
    let mut v = open(&path);
    let free = v.statfs().free_blocks;
    let f = v.create(ROOT, b"held", FILE).unwrap().ino;
    v.write(f, 0, &[5u8; 100 << 10]).unwrap();
    let g = v.create(ROOT, b"held2", FILE).unwrap().ino;
    v.hold(f);
    v.hold(g);
    v.unlink(ROOT, b"held").unwrap();
    v.unlink(ROOT, b"held2").unwrap();
    v.sync().unwrap();
    drop(v); // a crash: never unheld
    let out = std::process::Command::new(common::tool("e2fsck").unwrap()).arg("-fn").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Read-only, e2fsck only reports the list: its head, the last unlinked.
    assert!(text.contains(&format!("Inode {g} was part of the orphaned inode list")), "{text}");
    // The kernel reads the same list: mounted read-write, it frees both.
    let copy = scratch.0.join("kernel.img");
    std::fs::copy(&path, &copy).unwrap();
    let mnt = scratch.0.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = std::process::Command::new("mount").args(["-t", "ext4", "-o", "loop"]).arg(&copy).arg(&mnt).output();
    if mounted.as_ref().is_ok_and(|o| o.status.success()) {
        common::kernel_umount(&mnt);
        assert_clean(&copy, "the kernel's orphan cleanup of csumfs's list");
    } else {
        eprintln!("SKIPPED the kernel's orphan cleanup: mount -o loop refused");
    }
    let mut v = open(&path);
    assert_eq!(v.release_orphans_left().unwrap(), 2);
    assert_eq!(v.statfs().free_blocks, free);
    v.sync().unwrap();
    v.checkpoint().unwrap();
    drop(v);
    assert_clean(&path, "the orphans freed");
    // Unheld normally, an orphan leaves the list empty behind it.
    let mut v = open(&path);
    let f = v.create(ROOT, b"h", FILE).unwrap().ino;
    v.hold(f);
    v.unlink(ROOT, b"h").unwrap();
    v.unhold(f).unwrap();
    assert_eq!(v.release_orphans_left().unwrap(), 0);
    v.sync().unwrap();
    v.checkpoint().unwrap();
    drop(v);
    assert_clean(&path, "an orphan released at its last unhold");
}

/// Inodes come from per-group free-inode trees kept in step with the
/// bitmaps: ENOSPC only when no inode is free, and every inode an unlink
/// freed (while the tree was cached) is found again. Three groups (not a
/// power of two): the search from the parent's group must visit each.
#[test]
fn an_image_runs_out_of_inodes_only_when_none_is_free_again_and_again() {
    let Some((scratch, path)) = image("inode-fill", "24M", &["-N", "64"]) else { return };
    let mut v = open(&path);
    assert_eq!(v.layout().groups, 3);
    v.enable_undo(&scratch.0.join("u.undo")).unwrap();
    let fill = |v: &mut Volume, prefix: &str| {
        let mut made = 0u32;
        loop {
            v.begin();
            let done = v.create(ROOT, format!("{prefix}{made}").as_bytes(), FILE);
            v.end(done.is_ok()).unwrap();
            match done {
                Ok(_) => made += 1,
                Err(e) if e.errno() == libc::ENOSPC => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(v.statfs().free_inodes, 0, "ENOSPC with inodes free");
        made
    };
    let first = fill(&mut v, "a");
    assert!(first > 40, "{first} inodes");
    // The failed create rolled back (the trees dropped): one create now
    // builds group 0's tree again, and the unlinks after it must update it.
    v.unlink(ROOT, b"a0").unwrap();
    v.create(ROOT, b"p", FILE).unwrap();
    for i in (3..first).step_by(3) {
        v.unlink(ROOT, format!("a{i}").as_bytes()).unwrap();
    }
    let second = fill(&mut v, "b");
    assert_eq!(second, (3..first).step_by(3).count() as u32, "every freed inode found again");
    v.checkpoint().unwrap();
    assert_clean(&path, "inodes filled twice");
}

/// When no free run is as long as a large write would like (16 blocks),
/// the write takes what is free block by block: free space left only in
/// one-block holes (every second one-block file removed from a full image)
/// still holds a 64 KiB write, and e2fsck agrees with the result.
#[test]
fn a_large_write_takes_single_blocks_when_no_run_is_long_enough() {
    let Some((_scratch, path)) = image("holes", "2M", &["-N", "2048"]) else { return };
    let mut v = open(&path);
    let mut made = 0;
    loop {
        // The directory may need a block of its own first: which of the
        // two the last free block goes to depends on the names' hashes
        // (mke2fs picks the hash seed at random).
        let f = match v.create(ROOT, format!("one-{made}").as_bytes(), FILE) {
            Ok(inode) => inode.ino,
            Err(e) if e.errno() == libc::ENOSPC => break,
            Err(e) => panic!("{e}"),
        };
        match v.write(f, 0, &[5u8; 1024]) {
            Ok(_) => made += 1,
            Err(e) if e.errno() == libc::ENOSPC => break,
            Err(e) => panic!("{e}"),
        }
    }
    for i in (0..made).step_by(2) {
        v.unlink(ROOT, format!("one-{i}").as_bytes()).unwrap();
    }
    let free = v.statfs().free_blocks;
    assert!(free >= 64 + 8, "{free} blocks free after removing every second of {made} files");
    let big = v.create(ROOT, b"big", FILE).unwrap().ino;
    v.write(big, 0, &[9u8; 64 << 10]).unwrap_or_else(|e| panic!("64 KiB into one-block holes: {e}"));
    assert_eq!(v.read_all(&v.inode(big).unwrap()).unwrap(), vec![9u8; 64 << 10]);
    v.sync().unwrap();
    v.checkpoint().unwrap();
    drop(v);
    assert_clean(&path, "a 64 KiB write into one-block holes");
}

/// An append goes where the file ends when that is free, in whichever
/// group it lies: a file that ran from group 0 into group 1 grows in
/// group 1 contiguously — not into an earlier hole of group 0, nor into
/// a hole punched in it earlier in group 1.
#[test]
fn appends_continue_where_the_file_ends_in_its_group() {
    let Some((_scratch, path)) = image("goal", "24M", &[]) else { return };
    let mut v = open(&path);
    assert_eq!(v.layout().groups, 3);
    let b = v.create(ROOT, b"b", FILE).unwrap().ino;
    v.write(b, 0, &vec![1u8; 600 << 10]).unwrap();
    let a = v.create(ROOT, b"a", FILE).unwrap().ino;
    v.write(a, 0, &vec![2u8; 9 << 20]).unwrap();
    v.unlink(ROOT, b"b").unwrap();
    v.punch_hole(a, 8 << 20, 200 << 10).unwrap();
    let last = |v: &Volume| {
        let runs = v.runs(&v.inode(a).unwrap()).unwrap();
        let run = *runs.last().unwrap();
        (runs.len(), run.physical + run.len)
    };
    let (extents, end) = last(&v);
    assert!(end > 8192 + 1, "a ends in group 1 (block {end})");
    let runs = v.runs(&v.inode(a).unwrap()).unwrap();
    assert!(runs.iter().any(|r| r.logical == (8 << 10) + 200 && r.physical > 8192 + 1), "the hole is in group 1");
    v.write(a, 9 << 20, &vec![3u8; 64 << 10]).unwrap();
    assert_eq!(last(&v), (extents, end + 64), "the append continued a's last extent");
    // Group 0's last two blocks (8191 and 8192 with 1 KiB blocks) freed:
    // the bits cleared are group 0's.
    let runs = v.runs(&v.inode(a).unwrap()).unwrap();
    let run = runs.iter().find(|r| (r.physical..r.physical + r.len).contains(&8191)).expect("a holds block 8191");
    v.punch_hole(a, (run.logical + 8191 - run.physical) << 10, 2 << 10).unwrap();
    v.sync().unwrap();
    v.checkpoint().unwrap();
    drop(v);
    assert_clean(&path, "an append at the file's end, a hole at the end of group 0");
}

/// A 32-bit image (32-byte group descriptors, no high halves) fills into
/// its groups that mke2fs left uninitialised, and e2fsck agrees.
#[test]
fn a_32bit_image_fills_into_its_uninitialised_groups() {
    let Some((_scratch, path)) = image("narrow", "24M", &["-O", "^64bit"]) else { return };
    let mut v = open(&path);
    assert_eq!(v.layout().desc_size, 32);
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    v.write(f, 0, &vec![4u8; 20 << 20]).unwrap();
    v.sync().unwrap();
    v.checkpoint().unwrap();
    drop(v);
    assert_clean(&path, "20 MiB across the groups of a 32-bit image");
}

/// The free blocks at the goal are taken even when fewer than a large
/// write would like: a file's append fills the 5 free blocks right after
/// its end (another file follows them) before going on elsewhere, so the
/// file stays contiguous as far as it can.
#[test]
fn an_append_takes_the_short_run_at_the_files_end_first() {
    let Some((_scratch, path)) = image("short", "8M", &[]) else { return };
    let mut v = open(&path);
    // 100 and 20 blocks: both skip any hole shorter than 16 blocks near the
    // group's start, so x lands right after g.
    let g = v.create(ROOT, b"g", FILE).unwrap().ino;
    v.write(g, 0, &[1u8; 100 << 10]).unwrap();
    let x = v.create(ROOT, b"x", FILE).unwrap().ino;
    v.write(x, 0, &[2u8; 20 << 10]).unwrap();
    let first = v.runs(&v.inode(g).unwrap()).unwrap()[0];
    assert_eq!(first.len, 100);
    assert_eq!(v.runs(&v.inode(x).unwrap()).unwrap()[0].physical, first.physical + 100, "x right after g");
    v.truncate(g, 95 << 10).unwrap();
    v.write(g, 95 << 10, &[3u8; 64 << 10]).unwrap();
    let runs = v.runs(&v.inode(g).unwrap()).unwrap();
    assert_eq!((runs[0].logical, runs[0].physical, runs[0].len), (0, first.physical, 100), "{runs:?}");
    v.sync().unwrap();
    v.checkpoint().unwrap();
    drop(v);
    assert_clean(&path, "an append into a short run");
}

/// A fallocate that initialises the block bitmaps of uninitialised groups
/// (written without keeping their old bytes) and then fails with `ENOSPC`,
/// or dies before its end, is undone: every block in use as before — the
/// new bitmaps lie where nothing reads them once their groups are marked
/// uninitialised again — and `e2fsck -fn` clean; the same fallocate made
/// to fit then passes e2fsck.
#[test]
fn a_fallocate_over_uninitialised_groups_is_undone() {
    let Some((scratch, path)) = image("falloc", "32M", &[]) else { return };
    let undo = scratch.0.join("u.undo");
    let mut v = open(&path);
    assert!(!v.enable_undo(&undo).unwrap());
    let f = v.create(ROOT, b"big", FILE).unwrap().ino;
    // (Checkpointed: dumpe2fs refuses an image marked as in use.)
    v.checkpoint().unwrap();
    let before = std::fs::read(&path).unwrap();
    let unread = unread_blocks(&path);
    let free = v.statfs().free_blocks;
    let uninit = uninitialised_groups(&path);
    assert!(uninit >= 2, "the image has uninitialised groups to initialise");

    v.begin();
    let err = v.fallocate(f, 0, (free + 1) * 1024, false).unwrap_err();
    v.end(false).unwrap();
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    v.checkpoint().unwrap();
    let after = std::fs::read(&path).unwrap();
    assert!(after != before, "the groups' bitmaps were written before the allocation failed");
    assert_same_but_unread(&before, &after, &unread, 1024, "rolled back");
    assert_eq!(uninitialised_groups(&path), uninit, "the groups are uninitialised again");
    assert_clean(&path, "the failed fallocate");
    assert_eq!(v.statfs().free_blocks, free, "every block the fallocate took is free again");

    // Dies after initialising the groups: the next open undoes it.
    v.begin();
    v.fallocate(f, 0, free / 2 * 1024, false).unwrap();
    drop(v);
    let mut v = open(&path);
    assert!(v.enable_undo(&undo).unwrap(), "the next open undoes it");
    v.checkpoint().unwrap();
    drop(v);
    assert_same_but_unread(&before, &std::fs::read(&path).unwrap(), &unread, 1024, "undone");
    assert_clean(&path, "the undone fallocate");

    // Ended: kept, the groups' bitmaps as e2fsck computes them.
    let mut v = open(&path);
    assert!(!v.enable_undo(&undo).unwrap());
    v.begin();
    v.fallocate(f, 0, free / 2 * 1024, false).unwrap();
    v.end(true).unwrap();
    v.checkpoint().unwrap();
    drop(v);
    assert!(uninitialised_groups(&path) < uninit, "the fallocate initialised groups");
    assert_clean(&path, "the kept fallocate");
}

/// How many groups of `image` `dumpe2fs` shows as `BLOCK_UNINIT`.
fn uninitialised_groups(image: &Path) -> usize {
    common::dumpe2fs(image).matches("BLOCK_UNINIT").count()
}

/// A block the operation freed and then took again (for a new directory's
/// block, written without keeping old bytes when it was free before) is
/// put back with its first owner's bytes when the operation fails: the
/// image is full, so the truncate's freed blocks are the only ones mkdir
/// can take.
#[test]
fn a_block_freed_and_taken_again_in_one_operation_gets_its_bytes_back() {
    let Some((scratch, path)) = image("retaken", "8M", &[]) else { return };
    let mut v = open(&path);
    assert!(!v.enable_undo(&scratch.0.join("u.undo")).unwrap());
    let a = v.create(ROOT, b"a", FILE).unwrap().ino;
    let data: Vec<u8> = (0..3072u32).map(|i| (i * 7 + 1) as u8).collect();
    v.write(a, 0, &data).unwrap();
    // Fill the image: every block left taken, one at a time.
    let fill = v.create(ROOT, b"fill", FILE).unwrap().ino;
    fill_until_full(&mut v, fill, 1024);
    assert_eq!(v.statfs().free_blocks, 0);
    v.sync().unwrap();

    v.begin();
    v.truncate(a, 0).unwrap();
    v.mkdir(ROOT, b"d", DIR).unwrap();
    v.end(false).unwrap();
    v.checkpoint().unwrap();
    assert!(v.read_all(&v.inode(a).unwrap()).unwrap() == data, "the file's blocks hold its bytes again");
    assert_clean(&path, "the failed truncate + mkdir");
}

/// A truncate to a size inside a block zeroes the rest of that block; those
/// bytes are still the file's until the truncate is kept, so they are put
/// back with it — when the operation fails (their checksum again the old
/// bytes': they read back, not as `EIO`) and when the process died before
/// it ended. (Zeroed in place and never put back, the file came back at its
/// old size over zeros: `scripts/kill9-data.py` with `-o log=off`.)
#[test]
fn a_truncate_undone_puts_back_the_bytes_it_zeroed() {
    let Some((scratch, path)) = image("truncate-tail", "16M", &[]) else { return };
    let sums = scratch.0.join("u.csums");
    let undo = scratch.0.join("u.undo");
    let mut v = open(&path);
    assert!(v.enable_data_checksums(&sums).unwrap());
    assert!(!v.enable_undo(&undo).unwrap());
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    let data: Vec<u8> = (0..6000u32).map(|i| (i % 251) as u8 | 1).collect();
    v.write(f, 0, &data).unwrap();
    v.sync().unwrap();

    v.begin();
    assert_eq!(v.truncate(f, 1500).unwrap().size, 1500);
    v.end(false).unwrap();
    assert!(v.read_all(&v.inode(f).unwrap()).unwrap() == data, "rolled back: the zeroed bytes too, verified");

    v.begin();
    v.truncate(f, 1500).unwrap();
    drop(v); // the process dies before the operation ends
    let mut v = open(&path);
    assert!(v.enable_undo(&undo).unwrap(), "the next open undoes it");
    assert!(v.enable_data_checksums(&sums).unwrap());
    assert!(v.read_all(&v.inode(f).unwrap()).unwrap() == data, "undone: the zeroed bytes too");
    // Kept, the truncate reads as one: the rest of the block reads as zeros
    // once the file grows again.
    v.truncate(f, 1500).unwrap();
    v.truncate(f, 3000).unwrap();
    v.sync().unwrap();
    let mut want = data[..1500].to_vec();
    want.resize(3000, 0);
    assert!(v.read_all(&v.inode(f).unwrap()).unwrap() == want, "kept: zeros past 1 500");
    v.checkpoint().unwrap();
    drop(v);
    assert_clean(&path, "the truncates above");
}

/// An append undone — by a death or a failure — leaves its bytes in the
/// last block past the end (file data is not put back). Once the file
/// grows again, by a truncate up or a write past the end, those bytes are
/// the file's and read as zeros, not as the undone append's (`0xCC` read
/// back before the growth zeroed them).
#[test]
fn bytes_an_undone_append_left_past_the_end_read_as_zeros_once_the_file_grows() {
    let Some((scratch, path)) = image("append-undone", "16M", &[]) else { return };
    let undo = scratch.0.join("u.undo");
    let mut v = open(&path);
    assert!(!v.enable_undo(&undo).unwrap());
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    v.write(f, 0, &[0xAB; 1500]).unwrap();
    v.sync().unwrap();
    v.begin();
    v.write(f, 1500, &[0xCC; 300]).unwrap();
    drop(v);
    let mut v = open(&path);
    assert!(v.enable_undo(&undo).unwrap());
    assert_eq!(v.inode(f).unwrap().size, 1500);
    v.truncate(f, 2000).unwrap();
    let got = v.read_all(&v.inode(f).unwrap()).unwrap();
    assert!(got[1500..].iter().all(|&b| b == 0), "past the old end: {:?}", &got[1500..1510]);
    // And a write past the end leaving a gap inside the block.
    v.truncate(f, 1500).unwrap();
    v.begin();
    v.write(f, 1500, &[0xCC; 300]).unwrap();
    v.end(false).unwrap();
    v.write(f, 1900, &[0xDD; 10]).unwrap();
    let got = v.read_all(&v.inode(f).unwrap()).unwrap();
    assert!(got[1500..1900].iter().all(|&b| b == 0), "the gap: {:?}", &got[1500..1510]);
}

/// The undo log keeps a half-done operation's records until they are back
/// in the image: an open that cannot put them back (read-only here; a
/// death part way is the same) leaves them for the next, which undoes the
/// operation. (The log was emptied at open, before putting back: the
/// read-only open lost them and the writable one found nothing to undo.)
#[test]
fn an_undo_log_keeps_its_records_until_they_are_back_in_the_image() {
    let Some((scratch, path)) = image("undo-kept", "16M", &[]) else { return };
    let undo = scratch.0.join("u.undo");
    let mut v = open(&path);
    let base = v.create(ROOT, b"kept", FILE).unwrap().ino;
    v.write(base, 0, &[7; 5000]).unwrap();
    v.sync().unwrap();
    let unread = unread_blocks(&path);
    assert!(!v.enable_undo(&undo).unwrap());
    let before = std::fs::read(&path).unwrap();
    v.begin();
    metadata_work(&mut v, base);
    drop(v); // dies mid-operation
    match Volume::open(&path, Options::default()) {
        Err(csumfs::Error::Unsupported { feature: "csumfs_undo", .. }) => {}
        other => panic!("a read-only open of an image left half done: {:?}", other.map(|_| "opened")),
    }
    let mut v = open(&path);
    assert!(v.enable_undo(&undo).unwrap(), "the records were kept for this open");
    assert_same_but_unread(&before, &std::fs::read(&path).unwrap(), &unread, 1024, "undone");
    v.checkpoint().unwrap();
    drop(v);
    assert_clean(&path, "the undone operation");
}

/// `transaction` as callers use it: an operation that returns an error is
/// put back whole, and its error returned; one that succeeds is kept; a
/// transaction inside another joins it, so the outer failure takes the
/// inner success back too.
#[test]
fn a_transaction_keeps_what_succeeds_and_puts_back_what_fails() {
    let Some((scratch, path)) = image("transaction", "16M", &[]) else { return };
    let mut v = open(&path);
    let base = v.create(ROOT, b"kept", FILE).unwrap().ino;
    v.sync().unwrap();
    let unread = unread_blocks(&path);
    v.enable_undo(&scratch.0.join("u.undo")).unwrap();
    let before = std::fs::read(&path).unwrap();

    let failed = v.transaction(|v| {
        metadata_work(v, base);
        v.unlink(ROOT, b"absent")
    });
    assert!(matches!(failed, Err(csumfs::Error::NotFound(_))), "{failed:?}");
    v.sync().unwrap();
    assert_same_but_unread(&before, &std::fs::read(&path).unwrap(), &unread, 1024, "failed transaction");

    let nested = v.transaction(|v| {
        v.transaction(|v| v.mkdir(ROOT, b"inner", DIR))?;
        v.unlink(ROOT, b"absent")
    });
    assert!(matches!(nested, Err(csumfs::Error::NotFound(_))), "{nested:?}");
    assert!(v.resolve("/inner").is_err(), "the inner transaction joined the outer one, which failed");

    let made = v.transaction(|v| v.mkdir(ROOT, b"made", DIR)).unwrap();
    assert_eq!(v.resolve("/made").unwrap().ino, made.ino);
    v.checkpoint().unwrap();
    drop(v);
    assert_clean(&path, "the transactions");
}
