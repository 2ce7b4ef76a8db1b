//! The PI format `-o pi[=SPEC]` names (the companion files and what keeps
//! them from going stale are `csumfs::mount`).

use csumfs::mount::Companions;
use csumkit::pi::{GuardSize, LbaFormat, PiFormat, PiLocation, PiType, Protection};
use std::path::Path;

/// The PI format `-o pi[=SPEC]` asks for. SPEC is `LBA[/GUARD]`: an LBA
/// format `DATA+META` and a guard `crc16`, `crc32` or `crc64` (default:
/// crc16 with 8 metadata bytes, crc64 with more). Type 1 (reference tag =
/// LBA), PI in the last metadata bytes. Without SPEC: what `IMAGE.pi`
/// holds, else 8 bytes of PI (CRC16 guard) per 4 KiB — or per filesystem
/// block when blocks are smaller (a device block must not span two).
pub fn pi_protection(spec: Option<&str>, image: &Path, companions: &Companions) -> Result<Protection, String> {
    match spec {
        Some(spec) => parse_pi(spec),
        None => csumfs::mount::default_protection(image, companions).map_err(|e| e.to_string()),
    }
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

    /// Without a spec or a PI file the library's default is what `pi=4096+8` names.
    #[test]
    fn the_default_pi_format_is_4096_plus_8_with_a_crc16_guard() {
        let image = Path::new("/nonexistent/disk.img");
        let default = pi_protection(None, image, &Companions::beside(image)).unwrap();
        assert_eq!(default, parse_pi("4096+8").unwrap());
    }
}
