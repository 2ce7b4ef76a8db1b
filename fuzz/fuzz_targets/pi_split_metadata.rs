//! The split PI device's metadata file from untrusted bytes (`IMAGE.pi`
//! after a crash, a bad disk or a bad hand): reading its format and
//! opening the device over it — the command in flight finished, every
//! block read — gives a verdict or a typed error, never a panic.
#![no_main]

use csumkit::pi::{self, Device, GuardSize, Io, PiFormat, PiLocation, PiType, Protection};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (bool, Vec<u8>)| {
    let (use_stored, metadata) = input;
    let dir = std::env::temp_dir().join(format!("csumkit-fuzz-pi-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let (data_path, meta_path) = (dir.join("data"), dir.join("data.pi"));
    std::fs::write(&data_path, vec![0x5Au8; 8 * 512]).unwrap();
    std::fs::write(&meta_path, &metadata).unwrap();
    let stored = pi::split_protection(&meta_path);
    let protection = match (use_stored, stored) {
        (true, Ok(Some(p))) => p,
        _ => Protection::new(
            PiFormat::new(GuardSize::Crc16, PiType::Type1, 0).unwrap(),
            "512+8".parse().unwrap(),
            PiLocation::Last,
        )
        .unwrap(),
    };
    if protection.lba().data_bytes() > 4096 {
        return;
    }
    let Ok((device, _)) = Device::open_split(&data_path, &meta_path, protection) else { return };
    let mut block = vec![0u8; protection.lba().data_bytes()];
    for lba in 0..device.blocks() {
        let _ = device.read(lba, &mut block, None, &Io::pract());
    }
    let _ = device.owner_tag();
});
