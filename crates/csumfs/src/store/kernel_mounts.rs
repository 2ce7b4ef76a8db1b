//! Whether the kernel has an image file mounted, through a loop device.
//! The kernel takes no lock csumfs sees (`store/image_lock.rs`), and a read-only
//! kernel mount marks nothing on disk (a read-write one does: `needs_recovery`
//! or `s_state`, `format/features.rs`), so e2fsck's way is taken: the loop devices whose
//! backing file is this one (`/sys/block/loopN/loop/backing_file`), and
//! whether one of them is a mount's source (`/proc/self/mountinfo`).

use std::os::unix::fs::MetadataExt;

/// Where the kernel has `file` mounted: "at MOUNTPOINT through
/// /dev/loopN". `None` when it has not, or where sysfs or procfs cannot
/// tell.
pub(crate) fn kernel_mount_of(file: &std::fs::File) -> Option<String> {
    let image = file.metadata().ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    for entry in std::fs::read_dir("/sys/block").ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let Ok(backing) = std::fs::read_to_string(entry.path().join("loop/backing_file")) else { continue };
        let same = std::fs::metadata(backing.trim_end_matches('\n'))
            .is_ok_and(|m| m.dev() == image.dev() && m.ino() == image.ino());
        if !same {
            continue;
        }
        let Ok(device) = std::fs::read_to_string(entry.path().join("dev")) else { continue };
        let device = device.trim();
        // mountinfo: id, parent id, major:minor, root, mount point, …
        let mounted = mountinfo.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (fields.get(2) == Some(&device)).then(|| fields.get(4).copied().unwrap_or("?").to_string())
        });
        if let Some(mountpoint) = mounted {
            return Some(format!("at {} through /dev/{name}", unescape(&mountpoint)));
        }
    }
    None
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape(path: &str) -> String {
    let mut out = Vec::with_capacity(path.len());
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let octal =
            bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/mnt/a\040b\011c\134d"), "/mnt/a b\tc\\d");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/short\04"), r"/short\04");
    }

    #[test]
    fn a_file_no_loop_device_backs_is_not_mounted() {
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        assert_eq!(kernel_mount_of(&file), None);
    }
}
