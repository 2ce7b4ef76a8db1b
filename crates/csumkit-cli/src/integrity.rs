//! Where an image's data integrity lives beside it — data checksums in
//! `IMAGE.csums` or PI in `IMAGE.pi` — and keeping
//! whichever one a writer does not maintain from going stale unnoticed.

use csumkit::pi::{GuardSize, LbaFormat, PiFormat, PiLocation, PiType, Protection};
use std::path::{Path, PathBuf};

/// `IMAGE` + `suffix`.
pub fn with_suffix(image: &Path, suffix: &str) -> PathBuf {
    let mut name = image.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// Where the data checksums of `image` live: `IMAGE.csums` beside it.
pub fn sidecar_path(image: &Path) -> PathBuf {
    with_suffix(image, ".csums")
}

/// Where the PI of `image` (the metadata of its emulated PI device) lives:
/// `IMAGE.pi` beside it.
pub fn pi_path(image: &Path) -> PathBuf {
    with_suffix(image, ".pi")
}

/// The PI format `-o pi[=SPEC]` asks for. SPEC is `LBA[/GUARD]`: an LBA
/// format `DATA+META` and a guard `crc16`, `crc32` or `crc64` (default:
/// crc16 with 8 metadata bytes, crc64 with more). Type 1 (reference tag =
/// LBA), PI in the last metadata bytes. Without SPEC: what `IMAGE.pi`
/// holds, else 8 bytes of PI (CRC16 guard) per 4 KiB — or per filesystem
/// block when blocks are smaller (a device block must not span two).
pub fn pi_protection(spec: Option<&str>, image: &Path) -> Result<Protection, String> {
    let stored = csumkit::pi::split_protection(&pi_path(image)).map_err(|e| e.to_string())?;
    let Some(spec) = spec else {
        return match stored {
            Some(p) => Ok(p),
            None => parse_pi(&format!("{}+8", ext4_block_size(image).unwrap_or(4096).min(4096))),
        };
    };
    parse_pi(spec)
}

/// The block size the ext4 superblock of `image` names, if it can be read.
fn ext4_block_size(image: &Path) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    let mut field = [0u8; 4];
    csumkit::file::open_image(image, false).ok()?.read_exact_at(&mut field, 1024 + 24).ok()?;
    let log = u32::from_le_bytes(field);
    (log <= 6).then(|| 1024 << log)
}

fn parse_pi(spec: &str) -> Result<Protection, String> {
    let (lba, guard) = spec.split_once('/').map_or((spec, None), |(l, g)| (l, Some(g)));
    let lba: LbaFormat = lba.parse().map_err(|e| format!("pi={spec}: {e}"))?;
    let guard = match guard {
        None if lba.metadata_bytes() < 16 => GuardSize::Crc16,
        None => GuardSize::Crc64,
        Some("crc16") => GuardSize::Crc16,
        Some("crc32") => GuardSize::Crc32,
        Some("crc64") => GuardSize::Crc64,
        Some(other) => return Err(format!("pi={spec}: guard {other:?} (known: crc16, crc32, crc64)")),
    };
    // The 32-bit guard's space needs a storage tag of at least 16 bits.
    let sts = guard.storage_tag_bits_range().0;
    let format = PiFormat::new(guard, PiType::Type1, sts).map_err(|e| format!("pi={spec}: {e}"))?;
    Protection::new(format, lba, PiLocation::Last).map_err(|e| format!("pi={spec}: {e}"))
}

/// Before `image` is written by something that keeps neither its data
/// checksums (`keeps_datasum`) nor its PI (`keeps_pi`): each one not kept
/// is marked stale, with a line on stderr, so that no block rewritten now
/// fails an old checksum or PI later.
pub fn forget_unkept(image: &Path, keeps_datasum: bool, keeps_pi: bool, command: &str) -> Result<(), String> {
    if !keeps_datasum {
        let sidecar = sidecar_path(image);
        if csumfs::forget_data_checksums(&sidecar).map_err(|e| e.to_string())? {
            eprintln!(
                "{command}: {}: not kept by this write; its data checksums start afresh at the next mount",
                sidecar.display()
            );
        }
    }
    if !keeps_pi {
        let pi = pi_path(image);
        if csumkit::pi::clear_split_owner_tag(&pi).map_err(|e| format!("{}: {e}", pi.display()))? {
            eprintln!("{command}: {}: not kept by this write; its PI starts afresh at the next pi mount", pi.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pi_specs_parse_with_their_guard_defaults_and_bad_ones_say_why() {
        let p = parse_pi("4096+8").unwrap();
        assert_eq!((p.lba().to_string(), p.format().guard()), ("4096+8".into(), GuardSize::Crc16));
        assert_eq!(parse_pi("512+16").unwrap().format().guard(), GuardSize::Crc64);
        let p = parse_pi("4096+16/crc32").unwrap();
        assert_eq!((p.format().guard(), p.format().storage_tag_bits()), (GuardSize::Crc32, 16));
        assert!(parse_pi("4096+8/crc64").unwrap_err().contains("needs 16"));
        assert!(parse_pi("4096+8/md5").unwrap_err().contains("known: crc16, crc32, crc64"));
        assert!(parse_pi("4096").unwrap_err().starts_with("pi=4096: "));
    }
}
