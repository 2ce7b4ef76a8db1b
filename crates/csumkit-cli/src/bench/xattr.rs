//! `csumkit bench xattr`: the xattr name filter — negative xattr lookups with and
//! without the erofs name filter, as `ls -l` does them with ACLs enabled
//! (`system.posix_acl_access` and `security.capability` on every inode),
//! over an image of many files, page cache cold and warm.
//!
//! The image is made by mkfs.erofs (Debian's 1.5 writes no filters, a newer
//! one may) from a generated tree, then `add-filter` is applied. "Without
//! the filter" runs the same lookups ignoring it, which is the work the
//! kernel does on an image without the feature bit: same bytes, same cache
//! state, only the filter check differs. Cold means the image's pages were
//! dropped with `posix_fadvise(DONTNEED)` (checked with `mincore`) and the
//! mapping is `MADV_RANDOM`, so every metadata block read is a device read.

use super::machine_line;
use super::table::{num, ratio, Table};
use clap::Args;
use csumkit::erofs::{Image, Lookup};
use csumkit::xattr_filter::Query;
use csumkit::Error;
use indicatif::{ProgressBar, ProgressStyle};
use std::fs::File;
use std::io::IsTerminal;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

/// The patch series' `ls -lR` times (ms): uncached without/with, cached without/with.
const SEED_LS_MS: [(f64, f64); 2] = [(468.0, 370.0), (264.0, 254.0)];
/// The two names `ls -l` asks for on every file.
const LOOKUPS: [&str; 2] = ["system.posix_acl_access", "security.capability"];
/// Files per generated directory.
const FILES_PER_DIR: usize = 1000;

#[derive(Args)]
pub struct XattrArgs {
    /// Files in the generated tree (default 100000; 5000 with --quick).
    #[arg(long, value_parser = super::usize_in(1..=10_000_000))]
    files: Option<usize>,
    /// Work directory for the tree and image (default: the temp dir; must
    /// not be tmpfs for the cold runs to mean anything).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Benchmark this erofs image instead of generating one.
    #[arg(long)]
    image: Option<PathBuf>,
    /// Measured runs per configuration (median reported).
    #[arg(long, default_value_t = 5, value_parser = super::usize_in(1..=1000))]
    runs: usize,
    /// A reduced run for CI.
    #[arg(long)]
    quick: bool,
}

pub fn run(args: &XattrArgs) -> ExitCode {
    match bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("csumkit bench xattr: {e}");
            ExitCode::from(2)
        }
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

fn progress(len: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        eprintln!("{what} …");
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len).with_message(what.to_string());
    bar.set_style(ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} {eta}").expect("valid template"));
    bar
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) -> Result<(), Error> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("no NUL in generated paths");
    let c_name = std::ffi::CString::new(name).expect("no NUL in names");
    // SAFETY: valid NUL-terminated strings and a live buffer of value.len() bytes.
    let rc = unsafe { libc::lsetxattr(c_path.as_ptr(), c_name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if rc != 0 {
        return Err(io(format!("setxattr {name} on {} (the work dir needs xattr support)", path.display()))(
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// A tree like a system image: every file has an SELinux label (one of
/// 1024 types, like an Android `file_contexts`; `-x1` shares them), a
/// per-file `user.` xattr, and one in ten a MIME type; none has an ACL or
/// a capability.
fn build_tree(root: &Path, files: usize) -> Result<(), Error> {
    let _ = std::fs::remove_dir_all(root);
    let bar = progress(files as u64, "creating files with xattrs");
    for i in 0..files {
        let dir = root.join(format!("d{:03}", i / FILES_PER_DIR));
        if i % FILES_PER_DIR == 0 {
            std::fs::create_dir_all(&dir).map_err(io(dir.display().to_string()))?;
        }
        let path = dir.join(format!("file{i:06}"));
        File::create(&path).map_err(io(path.display().to_string()))?;
        let label = format!("u:object_r:type{}_file:s0", i.wrapping_mul(7919) % 1024);
        set_xattr(&path, "security.selinux", label.as_bytes())?;
        set_xattr(&path, "user.origin", format!("{:08x}", i.wrapping_mul(2_654_435_761)).as_bytes())?;
        if i % 10 == 0 {
            set_xattr(&path, "user.mime_type", b"text/plain")?;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}

fn make_image(dir: &Path, files: usize) -> Result<PathBuf, Error> {
    let mkfs = ["/usr/bin/mkfs.erofs", "/usr/sbin/mkfs.erofs", "/sbin/mkfs.erofs"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .ok_or_else(|| Error::Invalid {
            what: "environment",
            detail: "mkfs.erofs not found: install Debian's erofs-utils, or pass --image".into(),
        })?;
    let tree = dir.join("tree");
    build_tree(&tree, files)?;
    let image = dir.join("bench.erofs");
    eprintln!("mkfs.erofs -x1 over {files} files …");
    let out = Command::new(mkfs).arg("-x1").arg(&image).arg(&tree).output().map_err(io(mkfs))?;
    if !out.status.success() {
        return Err(Error::Invalid {
            what: "mkfs.erofs",
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    std::fs::remove_dir_all(&tree).map_err(io(tree.display().to_string()))?;
    Ok(image)
}

/// `csumkit erofs add-filter`, then the file flushed so its pages can be dropped.
fn add_filter(path: &Path) -> Result<(), Error> {
    let plan = {
        let bytes = std::fs::read(path).map_err(io(path.display().to_string()))?;
        Image::open(&bytes)?.plan_filters()?
    };
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(io(path.display().to_string()))?;
    plan.write_to(&file)?;
    file.sync_all().map_err(io("fsync"))
}

/// Drops the file's cached pages; returns how many stayed resident.
fn evict(file: &File, len: usize) -> Result<usize, Error> {
    // SAFETY: plain syscall on an open descriptor.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io("posix_fadvise")(std::io::Error::from_raw_os_error(rc)));
    }
    // SAFETY: a read-only mapping used only for mincore and dropped here.
    let map = unsafe { memmap2::Mmap::map(file) }.map_err(io("mmap"))?;
    Ok(resident_pages(&map, len))
}

fn resident_pages(map: &memmap2::Mmap, len: usize) -> usize {
    let page = 4096;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `map` covers `len` bytes and `vec` has one byte per page.
    let rc = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, len, vec.as_mut_ptr()) };
    if rc != 0 {
        return usize::MAX;
    }
    vec.iter().filter(|&&b| b & 1 == 1).count()
}

/// One `ls -lR`-like pass: walk every directory and inode, then the two
/// negative lookups per inode. Returns (walk ms, lookups ms, answered by filter).
fn pass(path: &Path, use_filter: bool) -> Result<(f64, f64, usize, usize), Error> {
    let file = File::open(path).map_err(io(path.display().to_string()))?;
    // SAFETY: read-only mapping of a file this benchmark owns.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io("mmap"))?;
    map.advise(memmap2::Advice::Random).map_err(io("madvise"))?;
    let t0 = Instant::now();
    let image = Image::open(&map)?;
    let inodes = image.walk()?;
    let t1 = Instant::now();
    let queries = LOOKUPS.map(|name| Query::new(name).expect("valid names"));
    let mut filtered = 0;
    for (_, inode) in &inodes {
        for query in &queries {
            match image.getxattr_query(inode, query, use_filter)? {
                Lookup::Absent { filtered: true } => filtered += 1,
                Lookup::Absent { filtered: false } => {}
                Lookup::Found(_) => {
                    return Err(Error::Invalid { what: "bench image", detail: "a looked-up name is present".into() })
                }
            }
        }
    }
    let t2 = Instant::now();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    Ok((ms(t1 - t0), ms(t2 - t1), filtered, inodes.len()))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench(args: &XattrArgs) -> Result<(), Error> {
    println!("{}", machine_line());
    let files = args.files.unwrap_or(if args.quick { 5_000 } else { 100_000 });
    let runs = if args.quick { args.runs.min(3) } else { args.runs };
    // The generated tree and image live in a scratch directory removed on
    // any exit (error, panic, SIGINT).
    let (image, _work) = match &args.image {
        Some(image) => (image.clone(), None),
        None => {
            let work = super::scratch(&args.dir.clone().unwrap_or_else(std::env::temp_dir), "bench-xattr")?;
            let image = make_image(work.path(), files)?;
            add_filter(&image)?;
            (image, Some(work))
        }
    };
    measure(&image, runs)
}

fn measure(image: &Path, runs: usize) -> Result<(), Error> {
    let file = File::open(image).map_err(io(image.display().to_string()))?;
    let len = file.metadata().map_err(io("stat"))?.len() as usize;
    {
        let bytes = std::fs::read(image).map_err(io(image.display().to_string()))?;
        let report = Image::open(&bytes)?.check_filters()?;
        if !report.enabled || !report.mismatches.is_empty() {
            return Err(Error::Invalid {
                what: "bench image",
                detail: "needs correct name filters (run add-filter)".into(),
            });
        }
        println!(
            "image: {} ({} MiB), {} inodes, {} with xattrs",
            image.display(),
            len >> 20,
            report.inodes,
            report.with_ibody
        );
    }
    // [cold, warm] x [without, with]: (lookups ms, pass ms) per run.
    let mut lookups = [[vec![], vec![]], [vec![], vec![]]];
    let mut passes = [[vec![], vec![]], [vec![], vec![]]];
    let (mut resident_after_evict, mut answered, mut inodes) = (0, 0, 0);
    let bar = progress(runs as u64, "measuring");
    for run in 0..runs {
        // Alternate which mode goes first, so drift does not favour one.
        let order = if run % 2 == 0 { [false, true] } else { [true, false] };
        for use_filter in order {
            resident_after_evict = resident_after_evict.max(evict(&file, len)?);
            for (cache, _) in ["cold", "warm"].iter().enumerate() {
                let (walk, look, filtered, n) = pass(image, use_filter)?;
                lookups[cache][usize::from(use_filter)].push(look);
                passes[cache][usize::from(use_filter)].push(walk + look);
                if use_filter {
                    answered = filtered;
                }
                inodes = n;
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let evicted = if resident_after_evict == 0 {
        "yes (0 pages resident after posix_fadvise)".to_string()
    } else {
        format!("PARTLY: up to {resident_after_evict} pages stayed resident (tmpfs? cold numbers are warm)")
    };
    println!("cold cache evicted: {evicted}");
    println!(
        "negative lookups answered by the filter alone: {answered} of {} ({:.1}%)",
        2 * inodes,
        100.0 * answered as f64 / (2 * inodes).max(1) as f64
    );
    let mut table = Table::new(&[
        "page cache",
        "lookups without ms",
        "with filter ms",
        "speedup",
        "ls -lR pass without ms",
        "with ms",
        "speedup",
        "published ls -lR ms",
        "published speedup",
    ]);
    for (cache, name) in ["cold", "warm"].iter().enumerate() {
        let look = [median(&mut lookups[cache][0]), median(&mut lookups[cache][1])];
        let pass = [median(&mut passes[cache][0]), median(&mut passes[cache][1])];
        let seed = SEED_LS_MS[cache];
        table.row(vec![
            name.to_string(),
            num(look[0]),
            num(look[1]),
            ratio(look[0] / look[1]),
            num(pass[0]),
            num(pass[1]),
            ratio(pass[0] / pass[1]),
            format!("{} → {}", seed.0, seed.1),
            ratio(seed.0 / seed.1),
        ]);
    }
    table.print(&format!(
        "Negative lookups of system.posix_acl_access + security.capability on {inodes} inodes (median of {runs}); target: lookups ≥ 5x faster cold"
    ));
    Ok(())
}
