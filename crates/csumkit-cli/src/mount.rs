//! `csumkit mount IMAGE MOUNTPOINT`: the image served by csumfs over FUSE.
//! Refusals are checked before anything is mounted, one line each; in
//! the background (the default) the command returns once the mount is up.

use crate::integrity::pi_protection;
use csumfs::fuse::MountOptions;
use csumfs::mount::{Companions, LogPlace, MountConfig};
use csumfs::{Checksums, Options, Volume};
use std::io::{BufRead, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Set in the environment of the background child: it prints this line
/// on stdout once mounted.
const READY_ENV: &str = "CSUMKIT_MOUNT_READY";
const READY_LINE: &str = "csumkit-mount-ready";

#[derive(clap::Args)]
pub struct MountArgs {
    /// The ext4 image (metadata_csum).
    #[arg(required_unless_present = "stats")]
    image: Option<PathBuf>,
    /// An empty directory to mount it on.
    #[arg(required_unless_present = "stats")]
    mountpoint: Option<PathBuf>,
    /// Print the counters of the csumkit mount at DIR (checksum updates,
    /// log commits and fsyncs, data checksums, xattr filter, PI) and exit.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["image", "mountpoint", "foreground", "options"])]
    stats: Option<PathBuf>,
    /// Stay in the foreground until unmounted (default: return once mounted).
    #[arg(short, long)]
    foreground: bool,
    /// Mount options, comma-separated:
    ///   ro, rw
    ///   allow_other          let other users in (default_permissions is always on)
    ///   nonempty             mount over a directory that has entries
    ///   writeback_cache      gather buffered writes in the kernel's page cache (off)
    ///   sync                 every change durable before it is answered (chattr +S on all)
    ///   dirsync              the same for directory changes (chattr +D on all)
    ///   uring=on|off         FUSE over io_uring where the kernel offers it (Linux 6.14+,
    ///                        /sys/module/fuse/parameters/enable_uring = Y): on
    ///   threads=N            threads reading /dev/fuse without io_uring (2)
    ///   ttl=SECONDS          how long the kernel caches attributes and names (1)
    ///   csum=incremental|full   how metadata checksums are kept (incremental)
    ///   datasum=on|off       data checksums in IMAGE.csums, verified on read (on)
    ///   log=PATH|off         metadata made durable through a ByteLog (IMAGE.bytelog);
    ///                        off: written in place with an undo log, IMAGE.undo
    ///   pi[=LBA[/GUARD]]     the image is the data of an emulated PI device, its PI in
    ///                        IMAGE.pi (no data checksums); LBA 4096+8 (default), 512+8,
    ///                        4096+16, …; GUARD crc16|crc32|crc64
    #[arg(verbatim_doc_comment)]
    #[arg(short = 'o', value_name = "OPTIONS", value_delimiter = ',')]
    options: Vec<String>,
}

/// The parsed `-o` list.
struct Parsed {
    mount: MountOptions,
    checksums: Checksums,
    /// Data checksums in `IMAGE.csums`.
    datasum: bool,
    /// `datasum=` was given.
    datasum_given: bool,
    /// The log: `None` = `log=off`; an empty path = the image's journal
    /// when it has one csumfs writes, else the ByteLog beside the image.
    log: Option<PathBuf>,
    /// Where a logged mount's commits go (`log=journal`, `log=PATH`,
    /// `bytelog`; `Auto` when none of them is given).
    log_place: LogPlace,
    /// PI offload: `Some(None)` = `pi` (the stored or default format).
    pi: Option<Option<String>>,
    /// `uring` or `uring=on` was given: say so when the kernel has none.
    uring_given: bool,
    /// `nonempty`: mount over a directory that has entries (hiding them).
    nonempty: bool,
}

fn parse_options(list: &[String]) -> Result<Parsed, String> {
    let mut parsed = Parsed {
        mount: MountOptions::default(),
        checksums: Checksums::Incremental,
        datasum: true,
        datasum_given: false,
        log: Some(PathBuf::new()),
        log_place: LogPlace::Auto,
        pi: None,
        uring_given: false,
        nonempty: false,
    };
    for option in list.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
        let (key, value) = option.split_once('=').map_or((option, None), |(k, v)| (k, Some(v)));
        match (key, value) {
            ("ro", None) => parsed.mount.read_only = true,
            ("rw", None) => parsed.mount.read_only = false,
            ("allow_other", None) => parsed.mount.allow_other = true,
            ("default_permissions", None) => {}
            ("nonempty", None) => parsed.nonempty = true,
            ("writeback_cache", None) => parsed.mount.writeback_cache = true,
            ("sync", None) => parsed.mount.sync_all = true,
            ("dirsync", None) => parsed.mount.dirsync = true,
            ("uring", None | Some("on")) => (parsed.mount.uring, parsed.uring_given) = (true, true),
            ("uring", Some("off")) => parsed.mount.uring = false,
            ("threads", Some(n)) => {
                parsed.mount.threads = n
                    .parse()
                    .ok()
                    .filter(|n| (1..=64).contains(n))
                    .ok_or_else(|| format!("threads={n}: give a number of threads from 1 to 64"))?;
            }
            ("ttl", Some(s)) => {
                let secs: f64 = s
                    .parse()
                    .ok()
                    .filter(|s: &f64| (0.0..=3600.0).contains(s))
                    .ok_or_else(|| format!("ttl={s}: give seconds from 0 to 3600"))?;
                parsed.mount.ttl = Duration::from_secs_f64(secs);
            }
            ("csum", Some("incremental")) => parsed.checksums = Checksums::Incremental,
            ("csum", Some("full")) => parsed.checksums = Checksums::Full,
            ("datasum", Some("on")) => (parsed.datasum, parsed.datasum_given) = (true, true),
            ("datasum", Some("off")) => (parsed.datasum, parsed.datasum_given) = (false, true),
            ("pi", spec) => parsed.pi = Some(spec.map(str::to_string)),
            ("log", Some("off")) => parsed.log = None,
            ("log", Some("journal")) => (parsed.log, parsed.log_place) = (Some(PathBuf::new()), LogPlace::ImageJournal),
            ("log", Some(path)) if !path.is_empty() => {
                (parsed.log, parsed.log_place) = (Some(PathBuf::from(path)), LogPlace::ByteLog);
            }
            ("bytelog", None) => (parsed.log, parsed.log_place) = (Some(PathBuf::new()), LogPlace::FastCommitArea),
            _ => {
                return Err(format!(
                    "unknown mount option {option:?} (known: ro, rw, allow_other, default_permissions, \
                     writeback_cache, sync, dirsync, nonempty, uring=on|off, threads=N, ttl=SECONDS, csum=incremental|full, datasum=on|off, log=journal|PATH|off, bytelog, pi[=LBA[/GUARD]])"
                ))
            }
        }
    }
    if parsed.mount.sync_all && parsed.mount.writeback_cache {
        return Err("sync makes every write durable before it is answered, and writeback_cache answers writes \
                    from the kernel's cache before csumfs sees them: give one of them"
            .into());
    }
    if parsed.pi.is_some() {
        if parsed.datasum && parsed.datasum_given {
            return Err("pi keeps data integrity in the device's PI instead of data checksums: \
                        give pi or datasum=on, not both"
                .into());
        }
        parsed.datasum = false;
    }
    Ok(parsed)
}

/// Why the mountpoint cannot take a mount, if it cannot.
fn mountpoint_problem(mountpoint: &Path, nonempty: bool) -> Option<String> {
    let shown = mountpoint.display();
    let meta = match std::fs::metadata(mountpoint) {
        Ok(meta) => meta,
        // ENOTCONN through /dev/fuse; ECANCELED or ECONNABORTED through FUSE over io_uring.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECANCELED | libc::ECONNABORTED)) => {
            return Some(format!(
                "mountpoint {shown}: a FUSE mount whose daemon stopped (killed, or crashed) is still there: \
                 run `fusermount3 -u {shown}`, then mount again (the next mount replays what the log holds)"
            ))
        }
        Err(e) => return Some(format!("mountpoint {shown}: {e}")),
    };
    if !meta.is_dir() {
        return Some(format!("mountpoint {shown} is not a directory"));
    }
    let parent = mountpoint.join("..");
    let busy = std::fs::metadata(&parent).is_ok_and(|p| p.dev() != meta.dev() || p.ino() == meta.ino());
    if busy {
        return Some(format!("mountpoint {shown} is busy: something is mounted there already"));
    }
    let has_entries = std::fs::read_dir(mountpoint).is_ok_and(|mut entries| entries.next().is_some());
    if has_entries && !nonempty {
        return Some(format!(
            "mountpoint {shown} is not empty: the mount would hide what it holds (give -o nonempty to mount there anyway)"
        ));
    }
    None
}

pub fn run(args: &MountArgs) -> ExitCode {
    let fail = |message: String| {
        eprintln!("csumkit mount: {message}");
        ExitCode::from(2)
    };
    if let Some(dir) = &args.stats {
        return match read_stats(dir) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(message) => fail(message),
        };
    }
    let (Some(image), Some(mountpoint)) = (&args.image, &args.mountpoint) else {
        return fail("give IMAGE and MOUNTPOINT".into());
    };
    let parsed = match parse_options(&args.options) {
        Ok(parsed) => parsed,
        Err(message) => return fail(message),
    };
    if !Path::new("/dev/fuse").exists() {
        return fail("/dev/fuse is missing: load the fuse module (modprobe fuse)".into());
    }
    if let Some(problem) = mountpoint_problem(mountpoint, parsed.nonempty) {
        return fail(problem);
    }
    let mut companions = Companions::beside(image);
    if let Some(log) = parsed.log.as_ref().filter(|log| !log.as_os_str().is_empty()) {
        companions.log = log.clone();
    }
    let protection = match parsed.pi.as_ref().map(|spec| pi_protection(spec.as_deref(), image, &companions)).transpose()
    {
        Ok(protection) => protection,
        Err(message) => return fail(message),
    };
    let config = MountConfig {
        write: !parsed.mount.read_only,
        checksums: parsed.checksums,
        logged: parsed.log.is_some(),
        log_place: parsed.log_place,
        data_checksums: parsed.datasum,
        pi: protection,
        companions,
        log_bytes: csumfs::mount::LOG_BYTES,
    };
    let volume = match csumfs::mount::mount(image, &config) {
        Ok((volume, events)) => {
            for event in events {
                match event.file() {
                    Some(_) => eprintln!("csumkit mount: {event}"),
                    None => eprintln!("csumkit mount: {}: {event}", image.display()),
                }
            }
            volume
        }
        Err(e) => return fail(e.to_string()),
    };
    if !args.foreground && std::env::var_os(READY_ENV).is_none() {
        drop(volume);
        return detach();
    }
    serve(volume, image, mountpoint, &parsed.mount, parsed.uring_given)
}

/// The counters of the csumkit mount at `dir` (its root's virtual xattr).
fn read_stats(dir: &Path) -> Result<String, String> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    let name = std::ffi::CString::new(csumfs::fuse::STATS_XATTR).expect("no NUL");
    let mut buf = vec![0u8; 8192];
    // SAFETY: valid NUL-terminated path and name; the buffer's length is passed.
    let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOENT) => format!("{}: no such directory", dir.display()),
            Some(libc::ENOTCONN | libc::ECANCELED | libc::ECONNABORTED) => format!(
                "{}: its csumkit mount stopped (killed, or crashed): run `fusermount3 -u {}`",
                dir.display(),
                dir.display()
            ),
            _ => format!("{}: not a csumkit mount ({e})", dir.display()),
        });
    }
    buf.truncate(n as usize);
    String::from_utf8(buf).map_err(|e| e.to_string())
}

/// Starts this command again in the foreground in a session of its own,
/// and returns once it says the mount is up (or with its exit status if
/// it fails first; its errors reach the same stderr).
fn detach() -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("csumkit mount: cannot find this program to start in the background: {e}");
            return ExitCode::from(2);
        }
    };
    let mut command = std::process::Command::new(exe);
    command.args(std::env::args_os().skip(1)).env(READY_ENV, "1").stdin(Stdio::null()).stdout(Stdio::piped());
    // SAFETY: setsid is async-signal-safe; the child leaves the terminal's
    // session so the shell's SIGINT and SIGHUP do not reach the daemon.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("csumkit mount: cannot start the background process: {e}");
            return ExitCode::from(2);
        }
    };
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped");
    let _ = std::io::BufReader::new(stdout).read_line(&mut line);
    if line.trim() == READY_LINE {
        return ExitCode::SUCCESS;
    }
    match child.wait() {
        Ok(status) => ExitCode::from(status.code().unwrap_or(2).clamp(1, 255) as u8),
        Err(_) => ExitCode::from(2),
    }
}

fn serve(mut volume: Volume, image: &Path, mountpoint: &Path, options: &MountOptions, uring_given: bool) -> ExitCode {
    // From here to the unmount's checkpoint the image is marked in use:
    // `needs_recovery` with its own journal (a kill leaves an image the
    // kernel and e2fsck recover), csumfs's log bit with a ByteLog file (the
    // kernel and e2fsck refuse it until it is folded in); a `log=off`
    // volume's undo log marked it at open.
    if let Err(e) = volume.mark_log_in_use() {
        eprintln!("csumkit mount: {}: {e}", image.display());
        return ExitCode::from(2);
    }
    let volume = Arc::new(RwLock::new(volume));
    let options = MountOptions { fsname: image.display().to_string(), ..options.clone() };
    let mut session = match csumfs::fuse::mount(Arc::clone(&volume), mountpoint, &options) {
        Ok(session) => session,
        Err(e) => {
            eprintln!("csumkit mount: {}: {e}", mountpoint.display());
            let mut volume = volume.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Err(e) = volume.checkpoint() {
                eprintln!("csumkit mount: {}: {e}", image.display());
            }
            return ExitCode::from(2);
        }
    };
    if uring_given && !session.io_uring() {
        eprintln!(
            "csumkit mount: this kernel does not offer FUSE over io_uring (Linux 6.14+, with \
             /sys/module/fuse/parameters/enable_uring set to Y): requests go through /dev/fuse"
        );
    }
    // SIGINT and SIGTERM unmount; the session then ends and the volume is
    // synced below, as after `fusermount3 -u`. A mount busy for a moment
    // (a file being closed; one a forked process holds until its exec) is
    // retried for up to 5 s; busy past that it stays mounted, as `umount`
    // leaves it, and the next signal exits.
    let unmounter = std::sync::Mutex::new(session.unmount_callable());
    crate::files::on_interrupt(Box::new(move || {
        if let Ok(mut unmounter) = unmounter.lock() {
            let mut result = unmounter.unmount();
            for _ in 0..50 {
                if !matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EBUSY)) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
                result = unmounter.unmount();
            }
            if let Err(e) = result {
                eprintln!("csumkit mount: unmount: {e}");
            }
        }
    }));
    if std::env::var_os(READY_ENV).is_some() {
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "{READY_LINE}").and_then(|()| stdout.flush());
        // The parent has what it waited for. A daemon lets go of the
        // caller's stdout and stderr (a pipe would never see its end):
        // messages after this point are shown only with -f.
        // SAFETY: replacing fds 1 and 2 with /dev/null; no Rust handle owns them beyond Stdout/Stderr.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
            if null >= 0 {
                libc::dup2(null, 1);
                libc::dup2(null, 2);
                libc::close(null);
            }
        }
    }
    let ran = session.run();
    let mut volume = volume.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    volume.begin();
    let released = volume.release_orphans();
    // Everything into the image (with a ByteLog: a final checkpoint, so
    // the kernel and e2fsck accept the image after unmount).
    let synced = volume.end(released.is_ok()).and(released).and_then(|()| volume.checkpoint());
    match (ran, synced) {
        (Ok(()), Ok(())) => ExitCode::SUCCESS,
        (Err(e), _) => {
            eprintln!("csumkit mount: the FUSE session failed: {e}");
            ExitCode::from(2)
        }
        (_, Err(e)) => {
            eprintln!("csumkit mount: {}: sync after unmount: {e}", image.display());
            ExitCode::from(2)
        }
    }
}

#[derive(clap::Args)]
pub struct ScrubArgs {
    /// The ext4 image whose files' data is verified against `IMAGE.csums`
    /// (or, when `IMAGE.pi` is there, against the PI of its device).
    image: PathBuf,
}

/// `csumkit scrub IMAGE`: every file block with a recorded checksum read
/// and verified; each bad one named (path, file block, disk block).
pub fn scrub(args: &ScrubArgs) -> ExitCode {
    let fail = |message: String| {
        eprintln!("csumkit scrub: {message}");
        ExitCode::from(2)
    };
    let mut volume = match Volume::open(&args.image, Options::default()) {
        Ok(volume) => volume,
        Err(e) => return fail(crate::files::naming(&args.image, &e.to_string())),
    };
    let Companions { data_checksums: sidecar, pi, .. } = Companions::beside(&args.image);
    // The device's PI first; PI that no longer matches the image (a mount
    // without `-o pi` wrote it since) gives way to current data checksums.
    let pi_refused = match csumkit::pi::split_protection(&pi) {
        Ok(Some(protection)) => volume.enable_pi(&args.image, &pi, protection).err().map(|e| e.to_string()),
        Ok(None) => Some(String::new()),
        Err(e) => Some(format!("{}: {e}", pi.display())),
    };
    let on_pi = pi_refused.is_none();
    if let Some(pi_refused) = &pi_refused {
        match volume.enable_data_checksums(&sidecar) {
            Ok(true) if pi_refused.is_empty() => {}
            Ok(true) => eprintln!(
                "csumkit scrub: {} not used ({pi_refused}); verifying against {}",
                pi.display(),
                sidecar.display()
            ),
            Ok(false) if pi_refused.is_empty() => {
                return fail(format!(
                    "{}: no data checksums for this image (missing, or the image was written since by another \
                     driver), and no PI ({})",
                    sidecar.display(),
                    pi.display()
                ))
            }
            Ok(false) => {
                return fail(format!(
                    "{}: {pi_refused}; and no current data checksums ({})",
                    args.image.display(),
                    sidecar.display()
                ))
            }
            Err(e) => return fail(format!("{}: {e}", sidecar.display())),
        }
    }
    let report = match volume.scrub() {
        Ok(report) => report,
        Err(e) => return fail(crate::files::naming(&args.image, &e.to_string())),
    };
    let image = args.image.display();
    let (what, against) = if on_pi { ("PI check failed", "PI") } else { ("data checksum mismatch", "checksum") };
    for (path, logical, physical) in &report.bad {
        println!("{image}: {path}: file block {logical} (disk block {physical}): {what}");
    }
    for (path, blocks) in report.unchecked.iter().take(SCRUB_UNCHECKED_NAMED) {
        println!("{image}: {path}: {blocks} {} without a {against}, not verified", plural(*blocks, "block", "blocks"));
    }
    if report.unchecked.len() > SCRUB_UNCHECKED_NAMED {
        println!(
            "{image}: … and {} more files with blocks not verified",
            report.unchecked.len() - SCRUB_UNCHECKED_NAMED
        );
    }
    let unchecked: u64 = report.unchecked.iter().map(|(_, blocks)| blocks).sum();
    println!(
        "scrub: {} {}, {} {} read: {} verified against their {against}, {} bad, {unchecked} without a {against} \
         (written by another driver or a datasum=off mount)",
        report.files,
        plural(report.files, "file", "files"),
        report.blocks,
        plural(report.blocks, "block", "blocks"),
        report.verified,
        report.bad.len(),
    );
    if !report.bad.is_empty() {
        return ExitCode::from(1);
    }
    if report.verified == 0 && report.blocks > 0 {
        println!("scrub: FAILED: no block had a {against} to verify it against");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// Files with unverifiable blocks named before the rest are only counted.
const SCRUB_UNCHECKED_NAMED: usize = 100;

/// `one` for a count of 1, else `many`.
pub(crate) fn plural(count: u64, one: &'static str, many: &'static str) -> &'static str {
    if count == 1 {
        one
    } else {
        many
    }
}
