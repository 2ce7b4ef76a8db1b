//! `csumkit erofs ls|cat|getxattr|check|add-filter`: erofs images and
//! their xattr name filters.

use clap::{Args, Subcommand};
use csumkit::erofs::{Image, Inode, Lookup};
use csumkit::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum ErofsCommand {
    /// List a directory (or one inode): mode, nid, size, xattr count, name.
    Ls(LsArgs),
    /// Write a regular file's data to standard output (any layout, any compression).
    Cat(CatArgs),
    /// Print one xattr's value; "absent" (exit 1) says whether the name filter answered.
    Getxattr(GetxattrArgs),
    /// Check every inode's name filter against its xattrs; exit 1 on a mismatch.
    Check(CheckArgs),
    /// Write correct name filters and the feature bit in place (keeps the superblock checksum valid).
    AddFilter(ImageArg),
}

#[derive(Args)]
pub struct ImageArg {
    /// The erofs image.
    image: PathBuf,
}

#[derive(Args)]
pub struct CheckArgs {
    /// The erofs image.
    image: PathBuf,
    /// Print one JSON document instead of lines.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct LsArgs {
    /// The erofs image.
    image: PathBuf,
    /// Path inside the image.
    #[arg(default_value = "/")]
    path: String,
}

#[derive(Args)]
pub struct CatArgs {
    /// The erofs image.
    image: PathBuf,
    /// Path of a regular file inside the image.
    path: String,
}

#[derive(Args)]
pub struct GetxattrArgs {
    /// The erofs image.
    image: PathBuf,
    /// Path inside the image.
    path: String,
    /// Full xattr name, e.g. user.mime_type or system.posix_acl_access.
    name: String,
    /// Read the xattrs even when the filter rules the name out.
    #[arg(long)]
    no_filter: bool,
}

pub fn run(command: ErofsCommand) -> ExitCode {
    let (result, image) = match &command {
        ErofsCommand::Ls(args) => (ls(args), &args.image),
        ErofsCommand::Cat(args) => (cat(args), &args.image),
        ErofsCommand::Getxattr(args) => (getxattr(args), &args.image),
        ErofsCommand::Check(args) => (check(&args.image, args.json), &args.image),
        ErofsCommand::AddFilter(args) => (add_filter(&args.image), &args.image),
    };
    result.unwrap_or_else(|e| {
        eprintln!("csumkit erofs: {}", crate::files::naming(image, &e.to_string()));
        ExitCode::from(2)
    })
}

/// The image mapped read-only (its type checked first).
fn map(path: &Path) -> Result<memmap2::Mmap, Error> {
    crate::files::map_input(path)
}

fn mode_string(inode: &Inode) -> String {
    let kind = match inode.mode & 0o170_000 {
        0o040_000 => 'd',
        0o120_000 => 'l',
        0o020_000 => 'c',
        0o060_000 => 'b',
        0o010_000 => 'p',
        0o140_000 => 's',
        _ => '-',
    };
    let rwx = (0..9).rev().map(|bit| if inode.mode >> bit & 1 == 1 { b"rwx"[(8 - bit) % 3] as char } else { '-' });
    std::iter::once(kind).chain(rwx).collect()
}

fn ls(args: &LsArgs) -> Result<ExitCode, Error> {
    let bytes = map(&args.image)?;
    let image = Image::open(&bytes)?;
    let inode = image.lookup(&args.path)?;
    let entries: Vec<(String, Inode)> = if inode.is_dir() {
        let mut v = Vec::new();
        for e in image.read_dir(&inode)? {
            v.push((String::from_utf8_lossy(&e.name).into_owned(), image.inode(e.nid)?));
        }
        v
    } else {
        vec![(args.path.clone(), inode)]
    };
    for (name, inode) in entries {
        let xattrs = image.xattrs(&inode)?.len();
        println!(
            "{} {:>4} {:>5} {:>5} {:>10} nid={:<8} xattrs={:<3} {name}",
            mode_string(&inode),
            inode.nlink,
            inode.uid,
            inode.gid,
            inode.size,
            inode.nid,
            xattrs
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn cat(args: &CatArgs) -> Result<ExitCode, Error> {
    use std::io::Write;
    /// Bytes read and written at a time.
    const PIECE: u64 = 8 << 20;
    let bytes = map(&args.image)?;
    let image = Image::open(&bytes)?;
    let inode = image.lookup(&args.path)?;
    if inode.mode & 0o170_000 != 0o100_000 {
        let what = if inode.is_dir() { "a directory" } else { "not a regular file" };
        return Err(Error::Invalid { what: "path", detail: format!("{} is {what}", args.path) });
    }
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| Error::Io { context: "standard output".into(), source: e };
    let mut offset = 0;
    while offset < inode.size {
        let piece = image.read(&inode, offset, PIECE)?;
        out.write_all(&piece).map_err(io)?;
        offset += piece.len() as u64;
    }
    out.flush().map_err(io)?;
    Ok(ExitCode::SUCCESS)
}

fn getxattr(args: &GetxattrArgs) -> Result<ExitCode, Error> {
    let bytes = map(&args.image)?;
    let image = Image::open(&bytes)?;
    let inode = image.lookup(&args.path)?;
    match image.getxattr(&inode, &args.name, !args.no_filter)? {
        Lookup::Found(value) => {
            match std::str::from_utf8(value) {
                Ok(text) if !text.chars().any(char::is_control) => println!("{}={text:?}", args.name),
                _ => println!("{}=0x{}", args.name, value.iter().map(|b| format!("{b:02x}")).collect::<String>()),
            }
            Ok(ExitCode::SUCCESS)
        }
        Lookup::Absent { filtered } => {
            let how = if filtered { "ruled out by the name filter, no xattr read" } else { "searched every xattr" };
            println!("{}: absent ({how})", args.name);
            Ok(ExitCode::from(1))
        }
    }
}

fn check(path: &Path, json: bool) -> Result<ExitCode, Error> {
    let bytes = map(path)?;
    let image = Image::open(&bytes)?;
    let report = image.check_filters()?;
    let sb = image.superblock();
    let checksum = if sb.has_checksum() { "valid" } else { "none" };
    let code = if report.mismatches.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) };
    if json {
        use crate::json::{array, number, object, string};
        let mismatches: Vec<String> = report
            .mismatches
            .iter()
            .map(|m| {
                object(&[
                    ("nid", number(m.nid)),
                    ("path", string(&m.path)),
                    ("stored", number(u64::from(m.stored.0))),
                    ("computed", number(u64::from(m.computed.0))),
                ])
            })
            .collect();
        println!(
            "{}",
            object(&[
                ("image", string(&path.to_string_lossy())),
                ("inodes", number(report.inodes as u64)),
                ("with_xattrs", number(report.with_ibody as u64)),
                ("superblock_checksum", string(checksum)),
                ("filter_enabled", (if report.enabled { "true" } else { "false" }).to_string()),
                ("mismatches", array(&mismatches)),
            ])
        );
        return Ok(code);
    }
    println!(
        "{}: {} inodes, {} with xattrs; superblock checksum {checksum}",
        path.display(),
        report.inodes,
        report.with_ibody
    );
    if !report.enabled {
        println!("no xattr name filter (compat bit 0x4 clear or reserved byte set): run `csumkit erofs add-filter`");
        return Ok(ExitCode::SUCCESS);
    }
    for m in &report.mismatches {
        println!("mismatch nid {} {}: stored {:#010x}, computed {:#010x}", m.nid, m.path, m.stored.0, m.computed.0);
    }
    if report.mismatches.is_empty() {
        println!("every name filter matches its xattrs");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("{} of {} name filters are wrong", report.mismatches.len(), report.with_ibody);
        Ok(ExitCode::from(1))
    }
}

fn add_filter(path: &Path) -> Result<ExitCode, Error> {
    let plan = {
        let bytes = map(path)?;
        Image::open(&bytes)?.plan_filters()?
    };
    if plan.is_empty() {
        println!("{}: already has correct name filters; nothing written", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let file = crate::files::open_input(path, true)?;
    plan.write_to(&file)?;
    // Re-read what was written: the result must check clean.
    let bytes = map(path)?;
    let image = Image::open(&bytes)?;
    let report = image.check_filters()?;
    if !report.enabled || !report.mismatches.is_empty() {
        return Err(Error::Corrupt {
            location: path.display().to_string(),
            detail: "filters did not check after writing".into(),
        });
    }
    println!(
        "{}: name filters written for {} inodes with xattrs; feature bit set; superblock checksum {}",
        path.display(),
        report.with_ibody,
        if image.superblock().has_checksum() { "re-sealed" } else { "not used by this image" }
    );
    Ok(ExitCode::SUCCESS)
}
