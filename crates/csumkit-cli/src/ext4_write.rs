//! `csumkit ext4 put|mkdir|mv|rm IMAGE …`: changing an ext4 image without
//! mounting it, through csumfs (every checksum moved as it changes) — images
//! built and edited without root or loop devices, for scripts.
//!
//! `put` copies like `cp -a`: directories, regular files with their holes
//! (only data extents are read and written: `SEEK_DATA`/`SEEK_HOLE`),
//! symlinks, FIFOs, sockets and device nodes, hard links within the tree
//! (one inode, several names), modes, owners, xattrs (ACLs included), and
//! access and modification times (set last, as `cp -a` does). The source
//! tree is walked and every entry's metadata read before the image is
//! opened, so a missing or unreadable source changes nothing.

use clap::Args;
use csumfs::{Error, NewInode, Options, RenameMode, SetAttr, Timespec, Volume, XattrMode};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A progress bar for puts of at least this many bytes on a terminal.
const PROGRESS_MIN_BYTES: u64 = 64 << 20;
/// Bytes copied per write into the image.
const COPY_CHUNK: usize = 1 << 20;

#[derive(Args)]
pub struct PutArgs {
    /// The ext4 image (or device) to write into.
    image: PathBuf,
    /// A host file or directory (copied recursively, like `cp -a`).
    source: PathBuf,
    /// Where in the image: an existing directory (the source goes inside
    /// it under its own name) or a new path.
    dest: String,
}

#[derive(Args)]
pub struct MkdirArgs {
    /// The ext4 image (or device) to write into.
    image: PathBuf,
    /// The directory to create (its parent must exist).
    path: String,
}

#[derive(Args)]
pub struct MvArgs {
    /// The ext4 image (or device).
    image: PathBuf,
    /// What to move (absolute path in the image).
    from: String,
    /// Where: a new name, an existing file or empty directory it replaces,
    /// or an existing directory to move it into (as `mv`).
    to: String,
    /// Fail instead of replacing an existing name (`RENAME_NOREPLACE`).
    #[arg(short = 'n', long)]
    no_clobber: bool,
}

#[derive(Args)]
pub struct RmArgs {
    /// The ext4 image (or device).
    image: PathBuf,
    /// What to remove (absolute path in the image).
    path: String,
    /// Remove a directory and everything below it.
    #[arg(short, long)]
    recursive: bool,
}

fn open_rw(image: &Path) -> Result<Volume, Error> {
    let mut volume = Volume::open(image, Options { write: true, ..Options::default() })?;
    let companions = csumfs::mount::Companions::beside(image);
    let forgotten =
        csumfs::mount::forget_unkept(&companions, false, false).map_err(|e| Error::Invalid(e.to_string()))?;
    for event in forgotten {
        eprintln!("csumkit ext4: {event}");
    }
    // As the kernel at mount: orphans a stopped writer left go first.
    let freed = csumfs::mount::free_orphans_left(&mut volume)
        .map_err(|e| Error::Invalid(crate::files::naming(image, &e.to_string())))?;
    if freed > 0 {
        eprintln!("csumkit: {}: {}", image.display(), csumfs::mount::MountEvent::OrphansFreed(freed));
    }
    Ok(volume)
}

/// (parent inode, last component) of an absolute path in the image.
fn parent_of(volume: &Volume, path: &str) -> Result<(u32, String), Error> {
    let trimmed = path.trim_end_matches('/');
    let (parent, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
    if name.is_empty() || name == "." || name == ".." {
        return Err(Error::Invalid(format!("{path}: not a name that can be created, moved or removed")));
    }
    let parent = if parent.is_empty() { "/" } else { parent };
    let dir = volume.resolve(parent)?;
    if !dir.is_dir() {
        return Err(Error::NotDir(parent.to_string()));
    }
    Ok((dir.ino, name.to_string()))
}

/// `e` naming `path` where the library named an inode number ("inode
/// 456: not a directory"): the user gave a path, and knows it.
fn naming_path(e: Error, path: &str) -> Error {
    let rename = |what: String| if what.starts_with("inode ") { path.to_string() } else { what };
    match e {
        Error::NotDir(what) => Error::NotDir(rename(what)),
        Error::IsDir(what) => Error::IsDir(rename(what)),
        Error::NotFound(what) => Error::NotFound(rename(what)),
        Error::Exists(what) => Error::Exists(rename(what)),
        Error::NotEmpty(what) => Error::NotEmpty(rename(what)),
        other => other,
    }
}

fn finish(image: &Path, result: Result<(), Error>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("csumkit ext4: {}", crate::files::naming(image, &e.to_string()));
            let usage = matches!(
                e,
                Error::NotFound(_)
                    | Error::NotDir(_)
                    | Error::Exists(_)
                    | Error::IsDir(_)
                    | Error::NotEmpty(_)
                    | Error::Permission(_)
            );
            ExitCode::from(if usage { 1 } else { 2 })
        }
    }
}

pub fn mkdir(args: &MkdirArgs) -> ExitCode {
    let result = open_rw(&args.image).and_then(|mut volume| {
        let (parent, name) = parent_of(&volume, &args.path)?;
        volume.mkdir(parent, name.as_bytes(), NewInode { mode: 0o755, uid: 0, gid: 0 })?;
        volume.sync()
    });
    finish(&args.image, result.map_err(|e| naming_path(e, &args.path)))
}

pub fn mv(args: &MvArgs) -> ExitCode {
    let result = open_rw(&args.image).and_then(|mut volume| {
        let (from_dir, from_name) = parent_of(&volume, &args.from)?;
        volume.resolve(&args.from)?;
        let (to_dir, to_name) = match volume.resolve(&args.to) {
            // Into an existing directory, under its own name (as mv).
            Ok(dir) if dir.is_dir() && !args.to.ends_with("/.") => (dir.ino, from_name.clone()),
            Ok(_) | Err(Error::NotFound(_)) => parent_of(&volume, &args.to)?,
            Err(e) => return Err(e),
        };
        let mode = if args.no_clobber { RenameMode::NoReplace } else { RenameMode::Replace };
        volume.rename(from_dir, from_name.as_bytes(), to_dir, to_name.as_bytes(), mode)?;
        volume.sync()
    });
    finish(&args.image, result.map_err(|e| naming_path(e, &args.to)))
}

pub fn rm(args: &RmArgs) -> ExitCode {
    let result = open_rw(&args.image).and_then(|mut volume| {
        let (parent, name) = parent_of(&volume, &args.path)?;
        let inode = volume.resolve(&args.path)?;
        if inode.is_dir() {
            if !args.recursive {
                return Err(Error::IsDir(format!("{} (use -r to remove a directory)", args.path)));
            }
            let removed = remove_tree(&mut volume, inode.ino)?;
            volume.rmdir(parent, name.as_bytes())?;
            volume.sync()?;
            println!("{}: removed {} and {removed} entries below it", args.image.display(), args.path);
            return Ok(());
        }
        volume.unlink(parent, name.as_bytes())?;
        volume.sync()
    });
    finish(&args.image, result.map_err(|e| naming_path(e, &args.path)))
}

/// Removes everything below directory `dir`; returns how many names.
fn remove_tree(volume: &mut Volume, dir: u32) -> Result<u64, Error> {
    let mut removed = 0;
    let entries = volume.read_dir(&volume.inode(dir)?)?;
    for entry in entries.into_iter().filter(|e| e.name != b"." && e.name != b"..") {
        if volume.inode(entry.ino)?.is_dir() {
            removed += remove_tree(volume, entry.ino)?;
            volume.rmdir(dir, &entry.name)?;
        } else {
            volume.unlink(dir, &entry.name)?;
        }
        removed += 1;
    }
    Ok(removed)
}

/// One entry of the source tree, read before the image is touched.
struct Source {
    path: PathBuf,
    /// Where in the image: index of the parent in the list (`None`: the
    /// put's destination directory) and name.
    parent: Option<usize>,
    name: Vec<u8>,
    meta: std::fs::Metadata,
    /// Symlink target.
    target: Option<Vec<u8>>,
    xattrs: Vec<(std::ffi::OsString, Vec<u8>)>,
}

pub fn put(args: &PutArgs) -> ExitCode {
    // The source first: a missing or unreadable entry changes nothing.
    let mut sources = Vec::new();
    let root_name = match args.source.file_name() {
        Some(name) => name.as_bytes().to_vec(),
        None => return finish(&args.image, Err(Error::Invalid("the source has no name".into()))),
    };
    let image_id = std::fs::metadata(&args.image).ok().map(|m| (m.dev(), m.ino()));
    let mut failed = 0u64;
    if let Err(e) = walk(&args.source, None, root_name, image_id, &mut sources, &mut failed) {
        return finish(&args.image, Err(e));
    }
    let result = open_rw(&args.image).and_then(|mut volume| {
        let (parent, name) = match volume.resolve(&args.dest) {
            Ok(dir) if dir.is_dir() => (dir.ino, sources[0].name.clone()),
            Ok(_) => return Err(Error::Exists(args.dest.clone())),
            Err(Error::NotFound(_)) => {
                let (parent, name) = parent_of(&volume, &args.dest)?;
                (parent, name.into_bytes())
            }
            Err(e) => return Err(e),
        };
        sources[0].name = name;
        let bytes: u64 = sources.iter().filter(|s| s.meta.is_file()).map(|s| s.meta.len()).sum();
        let bar = progress_bar(bytes, &args.source);
        let copy_failed = copy_in(&mut volume, &sources, parent, bar.as_ref());
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        // What was copied is kept (and made durable) even when something failed.
        volume.sync()?;
        let copy_failed = copy_failed?;
        failed += copy_failed;
        let copied = sources.len() as u64 - copy_failed;
        let entries = if copied == 1 { "entry" } else { "entries" };
        println!("{}: copied {copied} {entries} ({bytes} bytes of file data) into {}", args.image.display(), args.dest);
        Ok(())
    });
    if result.is_ok() && failed > 0 {
        eprintln!(
            "csumkit ext4: {}: {failed} {} not copied (named above)",
            args.image.display(),
            if failed == 1 { "entry" } else { "entries" }
        );
        return ExitCode::from(1);
    }
    finish(&args.image, result)
}

/// Appends `path` and, for a directory, everything below it (sorted by
/// name) to `out`. As `cp -a`, an entry that cannot be read is named on
/// stderr, counted in `failed` and left out, and the walk goes on; so is
/// the image itself (`image`: its device and inode), never copied into
/// itself. Only the top entry's failure is an error.
fn walk(
    path: &Path,
    parent: Option<usize>,
    name: Vec<u8>,
    image: Option<(u64, u64)>,
    out: &mut Vec<Source>,
    failed: &mut u64,
) -> Result<(), Error> {
    let host = |e: std::io::Error| Error::Io { context: path.display().to_string(), source: e };
    let read = || -> Result<Source, Error> {
        let meta = std::fs::symlink_metadata(path).map_err(host)?;
        if image == Some((meta.dev(), meta.ino())) {
            return Err(Error::Invalid(format!("{}: the image itself is not copied into itself", path.display())));
        }
        let target = if meta.file_type().is_symlink() {
            Some(std::fs::read_link(path).map_err(host)?.as_os_str().as_bytes().to_vec())
        } else {
            None
        };
        if meta.is_file() {
            // Readable now, so the copy does not stop half way on permissions.
            std::fs::File::open(path).map_err(host)?;
        }
        let xattrs = host_xattrs(path).map_err(host)?;
        Ok(Source { path: path.to_path_buf(), parent, name, meta, target, xattrs })
    };
    let source = match read() {
        Ok(source) => source,
        Err(e) if parent.is_none() => return Err(e),
        Err(e) => {
            eprintln!("csumkit ext4 put: {e}");
            *failed += 1;
            return Ok(());
        }
    };
    let is_dir = source.meta.is_dir();
    out.push(source);
    if is_dir {
        let me = out.len() - 1;
        let entries = std::fs::read_dir(path).and_then(Iterator::collect::<Result<Vec<_>, _>>);
        let mut entries = match entries {
            Ok(entries) => entries,
            Err(e) => {
                eprintln!("csumkit ext4 put: {}: its entries cannot be listed: {e}", path.display());
                *failed += 1;
                return Ok(());
            }
        };
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            walk(&entry.path(), Some(me), entry.file_name().as_bytes().to_vec(), image, out, failed)?;
        }
    }
    Ok(())
}

/// Whether a failure to copy one entry leaves the rest worth trying: the
/// entry's own problem, not the volume's (no space, I/O, damage).
fn entry_failure(e: &Error) -> bool {
    matches!(
        e,
        Error::Exists(_) | Error::NameTooLong(_) | Error::Invalid(_) | Error::Unsupported { .. } | Error::Permission(_)
    ) || matches!(e, Error::Io { source, .. }
        if !matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EIO | libc::EDQUOT | libc::EROFS)))
}

/// Makes every source entry in the image, in walk order (parents first);
/// directories' times are set after their contents, at the end. An entry
/// that fails on its own is named on stderr and skipped with everything
/// below it, and the copy goes on; returns how many were not copied. A
/// failure of the volume itself stops it.
fn copy_in(volume: &mut Volume, sources: &[Source], dest: u32, bar: Option<&ProgressBar>) -> Result<u64, Error> {
    let mut made: Vec<Option<u32>> = Vec::with_capacity(sources.len());
    let mut links: HashMap<(u64, u64), u32> = HashMap::new();
    let mut failed = 0;
    for s in sources {
        let parent = match s.parent {
            None => Some(dest),
            Some(p) => made[p],
        };
        let Some(parent) = parent else {
            // Its directory was not made: named already.
            failed += 1;
            made.push(None);
            continue;
        };
        match copy_one(volume, s, parent, &mut links, bar) {
            Ok(ino) => made.push(Some(ino)),
            Err(e) if entry_failure(&e) => {
                eprintln!("csumkit ext4 put: {}: {e}", s.path.display());
                failed += 1;
                made.push(None);
            }
            Err(e) => return Err(e),
        }
    }
    // Directories last, deepest first: their contents changed their mtime.
    for (s, ino) in sources.iter().zip(&made).rev().filter(|(s, _)| s.meta.is_dir()) {
        if let Some(ino) = ino {
            set_times(volume, *ino, &s.meta)?;
        }
    }
    Ok(failed)
}

/// One source entry made in directory `parent`; its inode.
fn copy_one(
    volume: &mut Volume,
    s: &Source,
    parent: u32,
    links: &mut HashMap<(u64, u64), u32>,
    bar: Option<&ProgressBar>,
) -> Result<u32, Error> {
    {
        let meta = &s.meta;
        let new = NewInode { mode: meta.mode() as u16, uid: meta.uid(), gid: meta.gid() };
        let kind = meta.file_type();
        if !kind.is_dir() && meta.nlink() > 1 {
            if let Some(&ino) = links.get(&(meta.dev(), meta.ino())) {
                volume.link(ino, parent, &s.name)?;
                return Ok(ino);
            }
        }
        let inode = if kind.is_dir() {
            volume.mkdir(parent, &s.name, new)?
        } else if kind.is_symlink() {
            let target = s.target.as_deref().unwrap_or_default();
            volume.symlink(parent, &s.name, target, meta.uid(), meta.gid())?
        } else if kind.is_file() {
            let file = volume.create(parent, &s.name, new)?;
            copy_data(volume, &s.path, file.ino, meta.len(), bar)?;
            file
        } else if kind.is_fifo() || kind.is_socket() || kind.is_char_device() || kind.is_block_device() {
            volume.mknod(parent, &s.name, new, linux_rdev(meta.rdev()))?
        } else {
            return Err(Error::Unsupported { feature: "this file type", remedy: "ext4 put skips nothing: remove it" });
        };
        for (name, value) in &s.xattrs {
            volume.setxattr(inode.ino, name, value, XattrMode::Either)?;
        }
        if !kind.is_dir() && meta.nlink() > 1 {
            links.insert((meta.dev(), meta.ino()), inode.ino);
        }
        if !kind.is_dir() {
            set_times(volume, inode.ino, meta)?;
        }
        Ok(inode.ino)
    }
}

/// A host `dev_t` in the encoding csumfs takes (Linux's `new_encode_dev`:
/// minor bits 0–7 and 20–31, major bits 8–19).
fn linux_rdev(rdev: u64) -> u32 {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    (minor & 0xFF) | (major & 0xFFF) << 8 | (minor & !0xFF) << 12
}

fn set_times(volume: &mut Volume, ino: u32, meta: &std::fs::Metadata) -> Result<(), Error> {
    let time = |sec: i64, nsec: i64| Some(Timespec { sec, nsec: nsec as u32 });
    let attr = SetAttr {
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ..SetAttr::default()
    };
    volume.set_attr(ino, attr).map(|_| ())
}

/// Copies the data extents of host file `path` (holes stay holes) and sets
/// the size.
fn copy_data(volume: &mut Volume, path: &Path, ino: u32, len: u64, bar: Option<&ProgressBar>) -> Result<(), Error> {
    use std::os::unix::fs::FileExt;
    let host = |e: std::io::Error| Error::Io { context: path.display().to_string(), source: e };
    let file = std::fs::File::open(path).map_err(host)?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut at = 0u64;
    while at < len {
        // SAFETY: a valid descriptor; plain integer arguments.
        let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break; // a hole to the end
            }
            return Err(host(e));
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        let (start, end) = (data as u64, if hole < 0 { len } else { (hole as u64).min(len) });
        let mut offset = start;
        while offset < end {
            let want = ((end - offset) as usize).min(buf.len());
            let n = file.read_at(&mut buf[..want], offset).map_err(host)?;
            if n == 0 {
                return Err(host(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file shrank")));
            }
            volume.write(ino, offset, &buf[..n])?;
            offset += n as u64;
            if let Some(bar) = bar {
                bar.inc(n as u64);
            }
        }
        at = end;
    }
    if volume.inode(ino)?.size != len {
        volume.truncate(ino, len)?; // a hole at the end
    }
    Ok(())
}

/// The xattrs of `path` itself (a symlink's own), by `llistxattr`; names
/// are kept as the bytes they are (they need not be UTF-8).
fn host_xattrs(path: &Path) -> std::io::Result<Vec<(std::ffi::OsString, Vec<u8>)>> {
    let cpath = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: a NUL-terminated path; a null buffer asks for the size.
    let size = unsafe { libc::llistxattr(cpath.as_ptr(), std::ptr::null_mut(), 0) };
    if size < 0 {
        let e = std::io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENOTSUP) { Ok(Vec::new()) } else { Err(e) };
    }
    let mut names = vec![0u8; size as usize];
    // SAFETY: the buffer is `names.len()` bytes.
    let size = unsafe { libc::llistxattr(cpath.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if size < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    for name in names[..size as usize].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = std::ffi::CString::new(name)?;
        // SAFETY: NUL-terminated path and name; a null buffer asks for the size.
        let len = unsafe { libc::lgetxattr(cpath.as_ptr(), cname.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut value = vec![0u8; len as usize];
        // SAFETY: the buffer is `value.len()` bytes.
        let len = unsafe { libc::lgetxattr(cpath.as_ptr(), cname.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if len < 0 {
            return Err(std::io::Error::last_os_error());
        }
        value.truncate(len as usize);
        out.push((std::ffi::OsStr::from_bytes(name).to_os_string(), value));
    }
    Ok(out)
}

fn progress_bar(bytes: u64, source: &Path) -> Option<ProgressBar> {
    if bytes < PROGRESS_MIN_BYTES || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(bytes);
    let style = ProgressStyle::with_template(
        "{msg} [{bar:40}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
    )
    .ok()?;
    bar.set_style(style.progress_chars("=> "));
    bar.set_message(source.display().to_string());
    Some(bar)
}
