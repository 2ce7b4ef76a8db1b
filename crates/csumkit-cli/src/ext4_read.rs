//! `csumkit ext4 ls|cat|stat|getfattr IMAGE PATH`: reading an ext4 image
//! without mounting it, through csumfs (every checksum verified on the way).
//! Writing into it: `ext4_write.rs`.

use clap::Args;
use csumfs::{Error, Inode, Options, Timespec, Volume};
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct PathArgs {
    /// The ext4 image (or device).
    image: PathBuf,
    /// A path inside it (absolute; `/` is the root).
    #[arg(default_value = "/")]
    path: String,
    /// Read past wrong metadata checksums instead of failing on them.
    #[arg(long)]
    no_verify: bool,
}

#[derive(Args)]
pub struct CatArgs {
    /// The ext4 image (or device).
    image: PathBuf,
    /// The file inside it (absolute); symlinks are followed, as `cat` does.
    path: String,
    /// Read past wrong metadata checksums instead of failing on them.
    #[arg(long)]
    no_verify: bool,
}

#[derive(Args)]
pub struct GetfattrArgs {
    #[command(flatten)]
    at: PathArgs,
    /// Only this attribute (e.g. user.mime_type); exit 1 when absent.
    #[arg(short, long)]
    name: Option<std::ffi::OsString>,
}

/// Which reading command.
pub enum Read<'a> {
    Ls(&'a PathArgs),
    Cat(&'a CatArgs),
    Stat(&'a PathArgs),
    Getfattr(&'a GetfattrArgs),
}

pub fn run(command: Read<'_>) -> ExitCode {
    let (image, path, no_verify) = match &command {
        Read::Ls(a) | Read::Stat(a) => (&a.image, &a.path, a.no_verify),
        Read::Cat(a) => (&a.image, &a.path, a.no_verify),
        Read::Getfattr(g) => (&g.at.image, &g.at.path, g.at.no_verify),
    };
    let result =
        Volume::open(image, Options { verify_checksums: !no_verify, ..Options::default() }).and_then(|volume| {
            if let Some(r) = volume.journal_replayed() {
                eprintln!("{}: {}", image.display(), crate::ext4::recovered_line(&r));
            }
            match &command {
                Read::Cat(_) => cat(&volume, path),
                Read::Ls(_) => ls(&volume, &volume.resolve(path)?, path),
                Read::Stat(_) => stat(&volume, &volume.resolve(path)?, path),
                Read::Getfattr(g) => getfattr(&volume, &volume.resolve(path)?, g.name.as_deref()),
            }
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("csumkit ext4: {}", crate::files::naming(image, &e.to_string()));
            // A missing path or attribute is the answer, not a failure of the tool.
            let missing = matches!(e, Error::NotFound(_) | Error::NotDir(_) | Error::IsDir(_) | Error::NoData(_));
            ExitCode::from(if missing { 1 } else { 2 })
        }
    }
}

fn io(e: std::io::Error) -> Error {
    Error::Io { context: "stdout".into(), source: e }
}

fn mode_string(mode: u16) -> String {
    let kind = match mode & 0o170_000 {
        0o040_000 => 'd',
        0o120_000 => 'l',
        0o020_000 => 'c',
        0o060_000 => 'b',
        0o010_000 => 'p',
        0o140_000 => 's',
        _ => '-',
    };
    let mut s = String::from(kind);
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        s.push(if mode & (0o400 >> i) != 0 { c } else { '-' });
    }
    s
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of a timestamp.
fn date(t: Timespec) -> String {
    let (days, secs) = (t.sec.div_euclid(86_400), t.sec.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

fn line(volume: &Volume, inode: &Inode, name: &str) -> Result<String, Error> {
    let mut text = format!(
        "{} {:>3} {:>5} {:>5} {:>10} {} {name}",
        mode_string(inode.mode),
        inode.links,
        inode.uid,
        inode.gid,
        inode.size,
        date(inode.mtime)
    );
    if inode.is_symlink() {
        text += &format!(" -> {}", String::from_utf8_lossy(&volume.read_link(inode)?));
    }
    Ok(text)
}

fn ls(volume: &Volume, inode: &Inode, path: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    if !inode.is_dir() {
        return writeln!(out, "{}", line(volume, inode, &escaped(path.as_bytes()))?).map_err(io);
    }
    let mut entries = volume.read_dir(inode)?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for entry in entries {
        let child = volume.inode(entry.ino)?;
        writeln!(out, "{}", line(volume, &child, &escaped(&entry.name))?).map_err(io)?;
    }
    Ok(())
}

/// A name as `ls -b` prints it: C escapes for backslash, space, tab and
/// newline, octal for other control bytes and for bytes that are not UTF-8,
/// so that every name is one line and can be typed back.
fn escaped(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                ' ' => out.push_str("\\ "),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                c if c.is_control() => {
                    let mut buf = [0u8; 4];
                    c.encode_utf8(&mut buf).bytes().for_each(|b| out.push_str(&format!("\\{b:03o}")));
                }
                c => out.push(c),
            }
        }
        chunk.invalid().iter().for_each(|b| out.push_str(&format!("\\{b:03o}")));
    }
    out
}

fn cat(volume: &Volume, path: &str) -> Result<(), Error> {
    let inode = volume.resolve_following(path)?;
    if inode.is_dir() {
        return Err(Error::IsDir(path.to_string()));
    }
    if !inode.is_file() {
        let what = match inode.mode & 0o170_000 {
            0o020_000 => "a character device",
            0o060_000 => "a block device",
            0o010_000 => "a FIFO",
            _ => "a socket",
        };
        return Err(Error::Invalid(format!("{path} is {what}: its data is not in the image")));
    }
    let inode = &inode;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0;
    loop {
        let n = volume.read(inode, offset, &mut buf)?;
        if n == 0 {
            return out.flush().map_err(io);
        }
        out.write_all(&buf[..n]).map_err(io)?;
        offset += n as u64;
    }
}

fn stat(volume: &Volume, inode: &Inode, path: &str) -> Result<(), Error> {
    let t = |t: Timespec| format!("{}.{:09} UTC", date(t), t.nsec);
    let runs = if inode.is_symlink() && inode.size < 60 { 0 } else { volume.runs(inode).map_or(0, |r| r.len()) };
    let xattrs = volume.xattrs(inode)?.len();
    let mut out = std::io::stdout().lock();
    let text = format!(
        "  File: {path}\n  Inode: {}  Links: {}  Mode: {:04o} ({})  Uid: {}  Gid: {}\n  Size: {}  Blocks (512 B): {}  Data runs: {runs}  Xattrs: {xattrs}  Flags: {:#x}  Generation: {}\nAccess: {}\nModify: {}\nChange: {}\n Birth: {}",
        inode.ino,
        inode.links,
        inode.mode & 0o7777,
        mode_string(inode.mode),
        inode.uid,
        inode.gid,
        inode.size,
        inode.blocks,
        inode.flags,
        inode.generation,
        t(inode.atime),
        t(inode.mtime),
        t(inode.ctime),
        t(inode.crtime),
    );
    writeln!(out, "{text}").map_err(io)
}

fn shown(value: &[u8]) -> String {
    match std::str::from_utf8(value) {
        Ok(text) if text.chars().all(|c| !c.is_control()) => format!("{text:?}"),
        _ => format!("0x{}", value.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    }
}

/// Names go out as the bytes they are (as getfattr prints them): a name
/// need not be UTF-8.
fn getfattr(volume: &Volume, inode: &Inode, name: Option<&OsStr>) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    let mut line = |name: &OsStr, value: &[u8]| {
        out.write_all(name.as_bytes()).and_then(|()| writeln!(out, "={}", shown(value))).map_err(io)
    };
    match name {
        Some(name) => line(name, &volume.getxattr(inode, name)?),
        None => volume.xattrs(inode)?.iter().try_for_each(|(name, value)| line(name, value)),
    }
}
