//! `csumkit ext4 check IMAGE [--repair [--yes]]`: every metadata_csum
//! checksum of an ext4 image; wrong ones printed and optionally rewritten.
//! The reading commands (`ls`, `cat`, `stat`, `getfattr`) are in `ext4_read`.

use clap::{Args, Subcommand};
use csumkit::ext4::feature_bits::INCOMPAT_RECOVER;
use csumkit::ext4::{self, Report};
use csumkit::Error;
use std::io::{BufRead, IsTerminal, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Repairs that still leave findings after this many passes give up (a
/// bitmap fix changes its descriptor's checksum, so two passes suffice).
const REPAIR_PASSES_MAX: usize = 4;

/// The exit status of the commands that write into an image, as coreutils'.
const WRITE_EXIT: &str = "Exit status: 0 done; 1 a problem of the paths given (missing, existing, not a \
directory, not empty, not permitted; for put, any entry not copied — named on stderr, the rest copied); \
2 a problem of the image (unreadable, damaged, full, in use) or of the command line.";

#[derive(Subcommand)]
pub enum Ext4Command {
    /// Verify every metadata checksum; exit 1 when one is wrong.
    Check(CheckArgs),
    /// List a directory (or show one entry) like `ls -l`.
    Ls(crate::ext4_read::PathArgs),
    /// Write a file's content to stdout (symlinks followed).
    Cat(crate::ext4_read::CatArgs),
    /// Show an inode: type, mode, owner, size, times with nanoseconds.
    Stat(crate::ext4_read::PathArgs),
    /// Show extended attributes (all, or one with -n NAME).
    Getfattr(crate::ext4_read::GetfattrArgs),
    #[command(after_help = WRITE_EXIT)]
    /// Copy a host file or directory tree into the image, like `cp -a`
    /// (directories, files with their holes, symlinks, devices, FIFOs,
    /// sockets, hard links, modes, owners, xattrs, times).
    Put(crate::ext4_write::PutArgs),
    #[command(after_help = WRITE_EXIT)]
    /// Create a directory in the image.
    Mkdir(crate::ext4_write::MkdirArgs),
    #[command(after_help = WRITE_EXIT)]
    /// Rename or move a file or directory in the image, like `mv`.
    Mv(crate::ext4_write::MvArgs),
    #[command(after_help = WRITE_EXIT)]
    /// Remove a file (or, with -r, a directory tree) from the image.
    Rm(crate::ext4_write::RmArgs),
    /// Fold the ByteLog a stopped `csumkit mount` left (IMAGE.bytelog) into
    /// the image — or put back the undo log a stopped `-o log=off` mount
    /// left (IMAGE.undo) — so the kernel and e2fsck accept it.
    Checkpoint(CheckpointArgs),
    /// Replay the kernel's journal into the image (blocks home, then the
    /// journal emptied and needs_recovery cleared), as `e2fsck -E
    /// journal_only` does; nothing else is changed.
    Recover(RecoverArgs),
}

#[derive(Args)]
pub struct RecoverArgs {
    /// The ext4 image (or device).
    image: PathBuf,
}

#[derive(Args)]
pub struct CheckpointArgs {
    /// The ext4 image.
    image: PathBuf,
    /// The log, when not IMAGE.bytelog.
    #[arg(long, value_name = "PATH")]
    log: Option<PathBuf>,
}

#[derive(Args)]
pub struct CheckArgs {
    /// The ext4 image (or device).
    image: PathBuf,
    /// Rewrite wrong checksums in place (asks first). Only checksums of
    /// structures that are otherwise consistent are rewritten; a structure
    /// whose content is itself wrong (extents outside the filesystem or
    /// claimed twice, bitmaps that disagree with their descriptor's counts,
    /// directory entries that overrun their block) is reported as
    /// structural damage and left for e2fsck.
    #[arg(long)]
    repair: bool,
    /// Do not ask before repairing.
    #[arg(long, requires = "repair")]
    yes: bool,
    /// Print one JSON document instead of lines (not with --repair).
    #[arg(long, conflicts_with = "repair")]
    json: bool,
}

pub fn run(command: Ext4Command) -> ExitCode {
    use crate::ext4_read::{run as read, Read};
    match &command {
        Ext4Command::Check(args) => check(args).unwrap_or_else(|e| {
            eprintln!("csumkit ext4: {}", crate::files::naming(&args.image, &e.to_string()));
            ExitCode::from(2)
        }),
        Ext4Command::Ls(args) => read(Read::Ls(args)),
        Ext4Command::Cat(args) => read(Read::Cat(args)),
        Ext4Command::Stat(args) => read(Read::Stat(args)),
        Ext4Command::Getfattr(args) => read(Read::Getfattr(args)),
        Ext4Command::Put(args) => crate::ext4_write::put(args),
        Ext4Command::Mkdir(args) => crate::ext4_write::mkdir(args),
        Ext4Command::Mv(args) => crate::ext4_write::mv(args),
        Ext4Command::Rm(args) => crate::ext4_write::rm(args),
        Ext4Command::Checkpoint(args) => checkpoint(args),
        Ext4Command::Recover(args) => recover(args),
    }
}

/// What a replay of the kernel's journal did, for a line of output.
pub fn recovered_line(r: &csumfs::JournalReplayed) -> String {
    let into = if r.in_place { "into the image" } else { "in memory (the image file is unchanged)" };
    let fast = if r.fast_commit_records > 0 {
        format!(", then {} fast-commit records", r.fast_commit_records)
    } else {
        String::new()
    };
    format!("its jbd2 journal replayed {into}: {} transactions, {} blocks{fast}", r.transactions, r.blocks)
}

/// `csumkit ext4 recover IMAGE`: the kernel's journal replayed in place —
/// or, on an image whose ByteLog in its journal's fast-commit area holds
/// changes (a `-o bytelog` mount stopped), that log replayed and folded in.
fn recover(args: &RecoverArgs) -> ExitCode {
    let in_area = crate::files::map_input(&args.image)
        .is_ok_and(|image| csumfs::log_pending(&image) && csumfs::log_in_fast_commit_area(&image));
    if in_area {
        return checkpoint(&CheckpointArgs { image: args.image.clone(), log: None });
    }
    match csumfs::recover(&args.image) {
        Ok(Some(r)) => {
            println!("{}: {}; needs_recovery cleared", args.image.display(), recovered_line(&r));
            ExitCode::SUCCESS
        }
        Ok(None) => {
            println!(
                "{}: its journal holds nothing to replay (no needs_recovery); nothing to do",
                args.image.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("csumkit ext4 recover: {}", crate::files::naming(&args.image, &e.to_string()));
            ExitCode::from(2)
        }
    }
}

/// `csumkit ext4 checkpoint IMAGE`: the undo log a `log=off` mount left
/// put back, the ByteLog replayed and folded in.
fn checkpoint(args: &CheckpointArgs) -> ExitCode {
    let image = &args.image;
    let mut companions = csumfs::mount::Companions::beside(image);
    if let Some(log) = &args.log {
        companions.log = log.clone();
    }
    match csumfs::mount::checkpoint(image, &companions) {
        Ok(done) => {
            if done.undo_put_back {
                println!(
                    "{}: the undo log a csumkit mount -o log=off left is put back and removed; the image is complete",
                    image.display()
                );
            }
            match done.replayed {
                Some(replayed) => println!(
                    "{}: {} commits ({} bytes of metadata) replayed from {}; the image is complete",
                    image.display(),
                    replayed.commits,
                    replayed.bytes,
                    if done.from_fast_commit_area {
                        csumfs::mount::FAST_COMMIT_AREA.to_string()
                    } else {
                        companions.log.display().to_string()
                    }
                ),
                // Without the image's log mark no log holds changes it
                // lacks: a log file there is left as it is.
                None if !done.undo_put_back => {
                    println!("{}: no ByteLog holds changes for it; nothing to do", image.display())
                }
                None => {}
            }
            ExitCode::SUCCESS
        }
        Err(csumfs::mount::CheckpointError::LogMissing(log)) => {
            let how = if args.log.is_some() {
                "give the path the mount's -o log=PATH named (the default is IMAGE.bytelog)"
            } else {
                "if its mount ran with -o log=PATH, name that log with --log PATH"
            };
            eprintln!(
                "csumkit ext4 checkpoint: {} holds changes in a ByteLog that is not at {}: {how}",
                image.display(),
                log.display()
            );
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("csumkit ext4 checkpoint: {e}");
            ExitCode::from(2)
        }
    }
}

/// The checker's report; an image a stopped `csumkit mount` left with its
/// ByteLog not folded in is checked as the log's replay makes it (neither
/// file is written).
fn scan(path: &Path) -> Result<Report, Error> {
    let image = crate::files::map_input(path)?;
    // Not ext4 at all: say so before any mark in its bytes is believed.
    ext4::Layout::parse(&image)?;
    if csumfs::undo_pending(&image) {
        return scan_undone(path, &image);
    }
    if !csumfs::log_pending(&image) {
        if image.get(1024 + 0x60..1024 + 0x64).is_some_and(|b| b[0] & INCOMPAT_RECOVER as u8 != 0) {
            // The kernel's journal checked and replayed into a private copy
            // first; its fast commits, if any, replayed by csumfs.
            drop(image);
            let report = ext4::check_recovering(&mut crate::files::map_input_private(path)?)?;
            let Some(journal) = report.journal.clone().filter(|j| j.error.is_none() && j.fast_commits.records > 0)
            else {
                return Ok(report);
            };
            let volume = csumfs::Volume::open(path, csumfs::Options::default())
                .map_err(|e| Error::Invalid { what: "fast-commit replay", detail: e.to_string() })?;
            let mut report = ext4::check(volume.image())?;
            report.journal = Some(ext4::JournalCheck { fast_commits_replayed: true, ..journal });
            return Ok(report);
        }
        return ext4::check(&image);
    }
    let (log, shown) = if csumfs::log_in_fast_commit_area(&image) {
        let log = csumfs::fast_commit_area_log(&image)
            .map_err(|e| Error::Invalid { what: "ByteLog replay", detail: e.to_string() })?;
        (log, format!("in {}", csumfs::mount::FAST_COMMIT_AREA))
    } else {
        let log_path = csumfs::mount::Companions::beside(path).log;
        let log =
            std::fs::read(&log_path).map_err(|source| Error::Io { context: log_path.display().to_string(), source })?;
        (log, log_path.display().to_string())
    };
    let (replayed, commits) = csumfs::Volume::replayed_image(image.to_vec(), log)
        .map_err(|e| Error::Invalid { what: "ByteLog replay", detail: e.to_string() })?;
    eprintln!(
        "{}: checked as its ByteLog {shown} makes it ({} commits replayed in memory; `csumkit ext4 checkpoint` folds \
         them in)",
        path.display(),
        commits.commits
    );
    ext4::check(&replayed)
}

/// [`scan`] of an image a `log=off` mount left in use: checked as its
/// undo log makes it (the operation it may have left half done undone in
/// memory), as the next writable open would.
fn scan_undone(path: &Path, image: &[u8]) -> Result<Report, Error> {
    let undo_path = csumfs::mount::Companions::beside(path).undo;
    let undo =
        std::fs::read(&undo_path).map_err(|source| Error::Io { context: undo_path.display().to_string(), source })?;
    let (undone, records) = csumfs::undone_image(image.to_vec(), &undo)
        .map_err(|e| Error::Invalid { what: "undo log", detail: e.to_string() })?;
    eprintln!(
        "{}: checked as its undo log {} makes it ({records} records put back in memory; `csumkit ext4 checkpoint` \
         puts them back)",
        path.display(),
        undo_path.display()
    );
    ext4::check(&undone)
}

fn print(path: &Path, report: &Report) {
    let c = &report.checked;
    let mut parts = vec![
        format!("{} descriptors", c.descriptors),
        format!("{} block bitmaps", c.block_bitmaps),
        format!("{} inode bitmaps", c.inode_bitmaps),
        format!("{} inodes", c.inodes),
        format!("{} extent blocks", c.extent_blocks),
        format!("{} directory blocks", c.dir_blocks),
        format!("{} htree blocks", c.htree_blocks),
        format!("{} xattr blocks", c.xattr_blocks),
    ];
    for (count, what) in [
        (c.ea_inode_values, "ea_inode values"),
        (c.journal_superblocks, "journal superblock"),
        (c.orphan_blocks, "orphan file blocks"),
        (c.mmp_blocks, "MMP block"),
    ] {
        if count > 0 {
            parts.push(format!("{count} {what}"));
        }
    }
    if let Some(j) = &report.journal {
        match &j.error {
            None if j.transactions.0 == j.transactions.1 => {
                println!("{}: journal checked (checksums {}): empty, nothing to replay", path.display(), j.checksums)
            }
            None => println!(
                "{}: journal checked ({} log blocks, checksums {}) and replayed in memory: transactions {}..{}, {} \
                 blocks{} (`csumkit ext4 recover` writes them home)",
                path.display(),
                j.log_blocks,
                j.checksums,
                j.transactions.0,
                j.transactions.1,
                j.blocks,
                if j.fast_commits_replayed {
                    format!(", then {} fast-commit records", j.fast_commits.replay.len())
                } else {
                    String::new()
                }
            ),
            Some(why) if j.blocks > 0 => {
                println!("BAD journal: {why} (the image is checked as the transactions before it leave it)")
            }
            Some(why) => println!("BAD journal: {why} (not replayed; the image is checked as it is)"),
        }
    }
    println!("{}: checked superblock, {}", path.display(), parts.join(", "));
    for u in &report.unchecked {
        println!("NOT CHECKED {} {}: {}", u.count, u.what, u.why);
    }
    for f in &report.findings {
        // "inode 12", not "inode inode 12".
        let location = f.location.strip_prefix(f.what).map_or(f.location.as_str(), str::trim_start);
        print!("BAD {} {location}: stored {:#010x}, computed {:#010x}", f.what, f.stored, f.computed);
        match &f.damage {
            // No checksum to rewrite: the data is what is wrong.
            Some(why) if f.fix.is_empty() => {
                println!(" (data damage: {why}; e2fsck does not check it: restore it from a backup)");
            }
            Some(why) => println!(" (structural damage: {why}; not repairable here, run e2fsck -f)"),
            None => println!(),
        }
    }
    for (inode, block) in &report.missing_tails {
        println!("BAD directory block {block} of inode {inode}: no checksum tail");
    }
}

/// The verdict on a report without wrong checksums: "all checksums valid"
/// only when nothing was left unchecked.
fn verdict(report: &Report) -> String {
    if report.unchecked.is_empty() {
        return "all checksums valid".into();
    }
    let list: Vec<String> = report.unchecked.iter().map(|u| format!("{} {}", u.count, u.what)).collect();
    format!("all checked checksums valid; not checked: {}", list.join(", "))
}

fn confirm(count: usize) -> bool {
    eprint!("rewrite {count} checksums in place? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).is_ok() && matches!(answer.trim(), "y" | "Y" | "yes")
}

fn print_json(path: &Path, report: &Report) {
    use crate::json::{array, number, object, string};
    let c = &report.checked;
    let checked = object(&[
        ("descriptors", number(c.descriptors)),
        ("block_bitmaps", number(c.block_bitmaps)),
        ("inode_bitmaps", number(c.inode_bitmaps)),
        ("inodes", number(c.inodes)),
        ("extent_blocks", number(c.extent_blocks)),
        ("directory_blocks", number(c.dir_blocks)),
        ("htree_blocks", number(c.htree_blocks)),
        ("xattr_blocks", number(c.xattr_blocks)),
        ("ea_inode_values", number(c.ea_inode_values)),
        ("journal_superblocks", number(c.journal_superblocks)),
        ("orphan_blocks", number(c.orphan_blocks)),
        ("mmp_blocks", number(c.mmp_blocks)),
    ]);
    let unchecked: Vec<String> = report
        .unchecked
        .iter()
        .map(|u| object(&[("what", string(u.what)), ("count", number(u.count)), ("why", string(u.why))]))
        .collect();
    let findings: Vec<String> = report
        .findings
        .iter()
        .map(|f| {
            object(&[
                ("what", string(f.what)),
                ("location", string(&f.location)),
                ("stored", number(u64::from(f.stored))),
                ("computed", number(u64::from(f.computed))),
                ("repairable", (if f.repairable() { "true" } else { "false" }).to_string()),
                ("damage", f.damage.as_deref().map_or("null".to_string(), string)),
            ])
        })
        .collect();
    let tails: Vec<String> = report
        .missing_tails
        .iter()
        .map(|(inode, block)| object(&[("inode", number(*inode)), ("block", number(*block))]))
        .collect();
    println!(
        "{}",
        object(&[
            ("image", string(&path.to_string_lossy())),
            ("checked", checked),
            ("findings", array(&findings)),
            ("missing_tails", array(&tails)),
            ("not_checked", array(&unchecked)),
            (
                "journal",
                report.journal.as_ref().map_or("null".to_string(), |j| {
                    object(&[
                        ("first_transaction", number(u64::from(j.transactions.0))),
                        ("end_transaction", number(u64::from(j.transactions.1))),
                        ("blocks_replayed", number(j.blocks)),
                        ("log_blocks", number(j.log_blocks)),
                        ("checksums", string(j.checksums)),
                        ("fast_commit_records", number(j.fast_commits.replay.len() as u64)),
                        ("fast_commits_replayed", (if j.fast_commits_replayed { "true" } else { "false" }).to_string()),
                        ("error", j.error.as_deref().map_or("null".to_string(), string)),
                    ])
                })
            ),
        ])
    );
}

fn check(args: &CheckArgs) -> Result<ExitCode, Error> {
    // Not while a csumkit mount or command writes the image (its view
    // there is the log's and its memory's); a repair, not while anything
    // of csumkit's has it open.
    let held = crate::files::open_input(&args.image, args.repair)?;
    let _lock = csumfs::ImageLock::take(&held, &args.image, args.repair)
        .map_err(|e| Error::Invalid { what: "image", detail: format!("{}: {e}", args.image.display()) })?;
    let marked = crate::files::map_input(&args.image)?;
    // The kernel marks an image it mounts read-write on disk: `needs_recovery`
    // with a journal, `s_state` without `EXT2_VALID_FS` without one.
    let incompat =
        marked.get(1024 + 0x60..1024 + 0x64).map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let mut marked = marked;
    if args.repair && incompat & INCOMPAT_RECOVER != 0 {
        // A repair writes the image as the kernel's recovery leaves it:
        // the journal home first, as e2fsck does (the lock is held).
        drop(marked);
        let replayed = csumfs::recover_held(&held, &args.image)
            .map_err(|e| Error::Invalid { what: "journal", detail: e.to_string() })?;
        if let Some(r) = replayed {
            println!("{}: {}", args.image.display(), recovered_line(&r));
        }
        marked = crate::files::map_input(&args.image)?;
    }
    if args.repair && !csumfs::cleanly_unmounted(&marked) {
        return Err(Error::Invalid {
            what: "--repair",
            detail: format!(
                "{} is mounted read-write by the kernel, or was left so by a kernel that stopped without a journal \
                 (not cleanly unmounted): unmount it, or run e2fsck -f",
                args.image.display()
            ),
        });
    }
    if args.repair && (csumfs::log_pending(&marked) || csumfs::undo_pending(&marked)) {
        return Err(Error::Invalid {
            what: "--repair",
            detail: format!(
                "{} has a csumkit mount ByteLog not folded in, or an undo log in use: run `csumkit ext4 checkpoint` \
                 first",
                args.image.display()
            ),
        });
    }
    drop(marked);
    let mut report = scan(&args.image)?;
    if args.json {
        print_json(&args.image, &report);
        return Ok(if report.clean() { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    print(&args.image, &report);
    if report.clean() {
        println!("{}", verdict(&report));
        return Ok(ExitCode::SUCCESS);
    }
    if !args.repair {
        println!("{} wrong checksums", report.findings.len() + report.missing_tails.len());
        return Ok(ExitCode::from(1));
    }
    let repairable = report.findings.iter().filter(|f| f.repairable()).count();
    if repairable == 0 {
        println!("no checksum is safe to rewrite: every wrong one covers damaged content; run e2fsck -f");
        return Ok(ExitCode::from(1));
    }
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(Error::Invalid {
                what: "--repair",
                detail: "stdin is not a terminal to confirm on: pass --yes".into(),
            });
        }
        if !confirm(repairable) {
            println!("nothing written");
            return Ok(ExitCode::from(1));
        }
    }
    let io = |source| Error::Io { context: args.image.display().to_string(), source };
    // (Opened for writing above, with the lock: a repair gets here only.)
    let file = &held;
    // A sound MMP block with only its checksum wrong is fixed first (as
    // e2fsck fixes it): multiple-mount protection cannot read it before.
    for finding in report.findings.iter().filter(|f| f.what == "MMP block" && f.repairable()) {
        for (at, bytes) in &finding.fix {
            file.write_all_at(bytes, *at).map_err(io)?;
        }
        file.sync_data().map_err(io)?;
    }
    // On an image with the mmp feature, not while the kernel (or another
    // node) has it mounted, as e2fsck.
    let _mmp = csumfs::MultiMountProtection::take(file, &args.image, &crate::files::map_input(&args.image)?)
        .map_err(|e| Error::Invalid { what: "image", detail: format!("{}: {e}", args.image.display()) })?;
    let mut written = 0;
    for _ in 0..REPAIR_PASSES_MAX {
        let safe: Vec<_> = report.findings.iter().filter(|f| f.repairable()).collect();
        if safe.is_empty() {
            break;
        }
        for finding in safe {
            for (at, bytes) in &finding.fix {
                file.write_all_at(bytes, *at).map_err(io)?;
            }
            written += 1;
        }
        file.sync_data().map_err(io)?;
        report = scan(&args.image)?;
    }
    println!("rewrote {written} checksums");
    print(&args.image, &report);
    if report.clean() {
        println!("{}", verdict(&report));
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "{} wrong checksums left (structural damage: run e2fsck -f)",
            report.findings.len() + report.missing_tails.len()
        );
        Ok(ExitCode::from(1))
    }
}
