//! Files the commands read and write, handled so that no input is ever
//! destroyed: inputs are checked for their type before they are opened (a
//! FIFO with no writer would hang the open), outputs are written beside
//! their destination and renamed over it only when complete, and temporary
//! files are removed on every exit path — errors, panics, SIGINT, SIGTERM.

use csumkit::Error;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Temporary files to remove if the process is interrupted.
static TEMPORARIES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Installs the SIGINT/SIGTERM handler that removes registered temporary
/// files and exits with 130 (the shell's code for an interrupt).
pub fn install_cleanup_handler() {
    // A second installation attempt (tests calling `main` twice) is harmless.
    let _ = ctrlc::set_handler(|| {
        let hook = INTERRUPT_HOOK.lock().map(|mut h| h.take()).unwrap_or(None);
        if let Some(mut hook) = hook {
            return hook(); // e.g. `csumkit mount` unmounts, then exits in order
        }
        match remove_temporaries() {
            0 => eprintln!("csumkit: interrupted"),
            n => eprintln!("csumkit: interrupted; {n} unfinished output{} removed", if n == 1 { "" } else { "s" }),
        }
        std::process::exit(130);
    });
}

/// What the next SIGINT/SIGTERM does instead of exiting at once.
type InterruptHook = Box<dyn FnMut() + Send>;
static INTERRUPT_HOOK: Mutex<Option<InterruptHook>> = Mutex::new(None);

/// Makes the next SIGINT or SIGTERM run `hook` rather than exit (a later
/// one exits as usual).
pub fn on_interrupt(hook: InterruptHook) {
    if let Ok(mut slot) = INTERRUPT_HOOK.lock() {
        *slot = Some(hook);
    }
}

/// Removes the registered temporary files; returns how many there were.
fn remove_temporaries() -> usize {
    let paths = match TEMPORARIES.lock() {
        Ok(mut paths) => std::mem::take(&mut *paths),
        Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
    };
    let removed = paths.iter().filter(|path| path.exists()).count();
    for path in paths {
        if path.is_dir() {
            let _ = std::fs::remove_dir_all(path);
        } else {
            let _ = std::fs::remove_file(path);
        }
    }
    removed
}

/// A temporary file removed when this guard is dropped (also on panic) or
/// by the signal handler.
pub struct Temporary {
    path: PathBuf,
}

impl Temporary {
    /// Registers `path` (not yet created) for removal.
    pub fn register(path: PathBuf) -> Self {
        if let Ok(mut paths) = TEMPORARIES.lock() {
            paths.push(path.clone());
        }
        Temporary { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops tracking the file (it was renamed into place).
    fn keep(mut self) {
        self.forget();
        self.path = PathBuf::new();
    }

    fn forget(&self) {
        if let Ok(mut paths) = TEMPORARIES.lock() {
            paths.retain(|p| p != &self.path);
        }
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            if self.path.is_dir() {
                let _ = std::fs::remove_dir_all(&self.path);
            } else {
                let _ = std::fs::remove_file(&self.path);
            }
            self.forget();
        }
    }
}

/// A directory of scratch files (a benchmark's logs, devices, images),
/// removed with everything in it on every exit path: drop, panic, SIGINT,
/// SIGTERM.
pub struct ScratchDir {
    dir: Temporary,
}

impl ScratchDir {
    /// Creates `parent/csumkit-<tag>-<pid>`.
    pub fn create(parent: &Path, tag: &str) -> Result<Self, Error> {
        let dir = Temporary::register(parent.join(format!("csumkit-{tag}-{}", std::process::id())));
        std::fs::create_dir_all(dir.path())
            .map_err(|source| Error::Io { context: format!("{}: create", dir.path().display()), source })?;
        Ok(ScratchDir { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Opens an input image or dump for reading (and writing with `write`):
/// [`csumkit::file::open_image`], which refuses a directory, FIFO, socket
/// or character device at once.
pub fn open_input(path: &Path, write: bool) -> Result<File, Error> {
    csumkit::file::open_image(path, write)
}

/// The size of an opened input: its length, or a block device's capacity
/// (whose metadata length is 0).
pub fn input_len(file: &File, path: &Path) -> Result<u64, Error> {
    use std::io::{Seek, SeekFrom};
    let io = |source| Error::Io { context: format!("{}: size", path.display()), source };
    let meta = file.metadata().map_err(io)?;
    if meta.file_type().is_block_device() {
        let mut handle = file;
        return handle.seek(SeekFrom::End(0)).map_err(io);
    }
    Ok(meta.len())
}

/// Whether two paths name the same file (same device and inode).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// An output written to a temporary file in the destination's directory
/// and renamed over the destination by [`AtomicOutput::commit`]; dropped
/// uncommitted, it leaves the destination as it was.
pub struct AtomicOutput {
    file: File,
    temp: Temporary,
    dest: PathBuf,
}

impl AtomicOutput {
    /// Refuses a destination that is one of `inputs`, or that exists
    /// without `force`; creates the temporary file.
    pub fn create(dest: &Path, force: bool, inputs: &[&Path]) -> Result<Self, Error> {
        if let Some(input) = inputs.iter().find(|input| same_file(dest, input)) {
            return Err(Error::Invalid {
                what: "output",
                detail: format!("{} is the input {}: refusing to overwrite it", dest.display(), input.display()),
            });
        }
        if std::fs::symlink_metadata(dest).is_ok() && !force {
            return Err(Error::Invalid {
                what: "output",
                detail: format!("{} exists: pass --force to replace it", dest.display()),
            });
        }
        let name = dest
            .file_name()
            .ok_or_else(|| Error::Invalid { what: "output", detail: format!("{} names no file", dest.display()) })?;
        let dir = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let temp =
            Temporary::register(dir.join(format!(".{}.csumkit-{}.tmp", name.to_string_lossy(), std::process::id())));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(temp.path())
            .map_err(|source| Error::Io { context: format!("{}: create", temp.path().display()), source })?;
        Ok(AtomicOutput { file, temp, dest: dest.to_path_buf() })
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Makes the data durable and renames it over the destination.
    pub fn commit(self) -> Result<(), Error> {
        let io = |context: String| move |source| Error::Io { context, source };
        self.file.sync_all().map_err(io(format!("{}: sync", self.temp.path().display())))?;
        std::fs::rename(self.temp.path(), &self.dest).map_err(io(format!("{}: rename", self.dest.display())))?;
        self.temp.keep();
        if let Some(dir) = self.dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            // The rename is durable once the directory is.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

/// An input image opened read-only, and its length (a block device's
/// capacity) as a mapping's.
fn input_for_map(path: &Path) -> Result<(File, usize), Error> {
    let file = open_input(path, false)?;
    let len = input_len(&file, path)?;
    let len = usize::try_from(len).map_err(|_| Error::Invalid {
        what: "input",
        detail: format!("{}: {len} bytes do not fit this machine's address space", path.display()),
    })?;
    Ok((file, len))
}

/// Maps an input image read-only (a block device by its capacity).
pub fn map_input(path: &Path) -> Result<memmap2::Mmap, Error> {
    let (file, len) = input_for_map(path)?;
    // SAFETY: a read-only mapping; a concurrent writer can only make the
    // reader see inconsistent bytes, which the parsers report as damage.
    unsafe { memmap2::MmapOptions::new().len(len).map(&file) }
        .map_err(|source| Error::Io { context: format!("{}: map", path.display()), source })
}

/// [`map_input`] as a private copy: writes stay in this process (a
/// journal replayed in memory), the file keeps every byte.
pub fn map_input_private(path: &Path) -> Result<memmap2::MmapMut, Error> {
    let (file, len) = input_for_map(path)?;
    // SAFETY: as `map_input`; a private mapping never writes the file.
    unsafe { memmap2::MmapOptions::new().len(len).map_copy(&file) }
        .map_err(|source| Error::Io { context: format!("{}: map", path.display()), source })
}

/// `message` about `path`, prefixed with the path unless it names it
/// already (an error from below often does): never "img: img: …".
pub fn naming(path: &Path, message: &str) -> String {
    let shown = path.display().to_string();
    if message.starts_with(&shown) || message.contains(&format!(" {shown} ")) || message.contains(&format!(" {shown}:"))
    {
        message.to_string()
    } else {
        format!("{shown}: {message}")
    }
}
