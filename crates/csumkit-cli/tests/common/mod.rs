//! What the mount tests share: a scratch directory with an image, mounts
//! and unmounts of `csumkit mount` and of the kernel, e2fsck's verdict.
//! Needs root and /dev/fuse; a test skips visibly without them (a failure
//! in CI).
#![allow(dead_code)] // each test file uses its own share of these

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn skip(what: &str) -> bool {
    assert!(std::env::var_os("CI").is_none(), "{what} is required in CI");
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {what}");
    true
}

/// Whether this machine can run the test; says why not.
pub fn cannot_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("root (FUSE mounts and loop mounts)");
    }
    if !Path::new("/dev/fuse").exists() {
        return skip("/dev/fuse");
    }
    if !Path::new("/usr/bin/fusermount3").exists() {
        return skip("fusermount3 (apt-get install fuse3)");
    }
    if !Path::new("/usr/sbin/mke2fs").exists() || !Path::new("/usr/sbin/e2fsck").exists() {
        return skip("mke2fs and e2fsck (apt-get install e2fsprogs)");
    }
    false
}

pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("csumkit-mount-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("mnt")).unwrap();
        Scratch(dir)
    }

    /// A fresh image without a journal (a logged mount's ByteLog beside it).
    pub fn image(&self, size: &str, block_size: &str) -> PathBuf {
        self.image_with(size, block_size, "metadata_csum,^has_journal")
    }

    /// A fresh image with mke2fs's journal (a mount commits into it).
    pub fn journaled_image(&self, size: &str, block_size: &str) -> PathBuf {
        self.image_with(size, block_size, "metadata_csum")
    }

    fn image_with(&self, size: &str, block_size: &str, features: &str) -> PathBuf {
        let image = self.0.join("img");
        let out = Command::new("/usr/sbin/mke2fs")
            .args(["-q", "-F", "-t", "ext4", "-O", features, "-b", block_size])
            .arg(&image)
            .arg(size)
            .output()
            .unwrap();
        assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
        image
    }

    pub fn mnt(&self) -> PathBuf {
        self.0.join("mnt")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("/usr/bin/fusermount3").arg("-uz").arg(self.mnt()).output();
        let _ = Command::new("umount").arg(self.0.join("kernel")).output();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn is_mounted(mnt: &Path) -> bool {
    let mnt = std::fs::canonicalize(mnt).unwrap();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(mnt.to_str().unwrap()))
}

pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `csumkit mount -f`, returned once the mount is up.
pub fn mount_foreground(image: &Path, mnt: &Path, options: &[&str]) -> Child {
    mount_foreground_env(image, mnt, options, &[])
}

/// [`mount_foreground`] with environment variables for the daemon.
pub fn mount_foreground_env(image: &Path, mnt: &Path, options: &[&str], env: &[(&str, &str)]) -> Child {
    spawn_mount(image, mnt, options, env, Stdio::inherit())
}

/// [`mount_foreground`] with the daemon's stderr in the file `log`.
#[allow(dead_code)] // not every test binary reads a daemon's stderr
pub fn mount_foreground_logged(image: &Path, mnt: &Path, options: &[&str], log: &Path) -> Child {
    spawn_mount(image, mnt, options, &[], std::fs::File::create(log).unwrap().into())
}

fn spawn_mount(image: &Path, mnt: &Path, options: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_csumkit"))
        .envs(env.iter().copied())
        .arg("mount")
        .arg("-f")
        .arg(image)
        .arg(mnt)
        .args(options)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    wait_for("the mount", || is_mounted(mnt));
    child
}

/// The child's exit status, waited for at most 30 s (killed then, and the
/// test fails: a hang would stall the whole run).
pub fn exit_status(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("timed out waiting for {what}");
}

/// `fusermount3 -u`, then the daemon's exit. A busy mount is retried for a
/// moment, as [`unmount_kernel`] retries: a process another test forks
/// holds this test's open files until its exec (seen under load: "Device or
/// resource busy" right after the files were closed).
pub fn unmount_and_wait(mut child: Child, mnt: &Path) {
    let mut out = Command::new("/usr/bin/fusermount3").arg("-u").arg(mnt).output().unwrap();
    for _ in 0..50 {
        if out.status.success() || !String::from_utf8_lossy(&out.stderr).contains("busy") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        out = Command::new("/usr/bin/fusermount3").arg("-u").arg(mnt).output().unwrap();
    }
    assert!(out.status.success(), "fusermount3 -u: {}", String::from_utf8_lossy(&out.stderr));
    let status = exit_status(&mut child, "the daemon to exit after its unmount");
    assert!(status.success(), "csumkit mount exited with {status}");
}

pub fn e2fsck_clean(image: &Path) {
    let out = Command::new("/usr/sbin/e2fsck").arg("-fn").arg(image).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !text.contains("? no"), "e2fsck -fn:\n{text}");
}

/// Deterministic bytes.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Unmounts a kernel mount, retrying while it is busy for a moment (seen
/// once in a full test run: "target is busy" right after the comparison
/// closed its files — a process forked by a parallel test can hold them
/// until its exec).
pub fn unmount_kernel(path: &Path) {
    for _ in 0..50 {
        if Command::new("umount").arg(path).output().unwrap().status.success() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("umount {}: still busy after 5 s", path.display());
}

/// Mounts `image` at `at` with the kernel's ext4 (`-o options`, e.g.
/// `loop,ro`); false, with a visible skip, when the kernel refuses.
pub fn kernel_mount(image: &Path, at: &Path, options: &str) -> bool {
    std::fs::create_dir_all(at).unwrap();
    let out = Command::new("mount").args(["-t", "ext4", "-o", options]).arg(image).arg(at).output().unwrap();
    out.status.success() || skip(&format!("a kernel loop mount ({})", String::from_utf8_lossy(&out.stderr).trim()))
}

/// Free blocks of the file system mounted at `dir` (`statvfs`'s f_bfree).
pub fn free_blocks(dir: &Path) -> u64 {
    statvfs(dir).f_bfree
}

/// `statvfs` of the file system mounted at `dir`.
pub fn statvfs(dir: &Path) -> libc::statvfs {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a zeroed struct for the kernel to fill.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(path.as_ptr(), &mut st), 0);
        st
    }
}

/// `FS_IOC_GETFLAGS` of `path` (what `lsattr` shows).
pub fn inode_flags(path: &Path) -> std::io::Result<u32> {
    let file = std::fs::File::open(path)?;
    let mut flags: libc::c_int = 0;
    // SAFETY: a valid descriptor and a pointer to an int, as the command takes.
    let done = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&file), libc::FS_IOC_GETFLAGS, &mut flags) };
    if done < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(flags as u32)
}

/// `FS_IOC_SETFLAGS` of `path` (what `chattr` does).
pub fn set_inode_flags(path: &Path, flags: u32) -> std::io::Result<()> {
    let file = std::fs::File::open(path)?;
    let flags = flags as libc::c_int;
    // SAFETY: a valid descriptor and a pointer to an int, as the command takes.
    let done = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&file), libc::FS_IOC_SETFLAGS, &flags) };
    if done < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the kernel offers FUSE over io_uring (`csumkit mount` then
/// serves through it unless told `uring=off`).
pub fn fuse_uring_offered() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").is_ok_and(|v| v.trim() == "Y")
}

/// The count on the `FUSE:` line of `csumkit mount --stats`.
pub fn uring_requests(stats: &str) -> u64 {
    let line = stats.lines().find(|l| l.starts_with("FUSE: ")).unwrap_or_else(|| panic!("no FUSE line: {stats}"));
    line["FUSE: ".len()..].split(' ').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

/// `csumkit mount --stats MNT`.
pub fn mount_stats(mnt: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("mount").arg("--stats").arg(mnt).output().unwrap();
    assert!(out.status.success(), "--stats: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
