//! Differential: every available backend must equal the portable engine,
//! for all three CRCs, at every split of the input.
#![no_main]

use csumkit::{crc16t10dif, crc32c, crc64nvme, Backend};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&b| b as usize % (data.len() + 1));
    let (a, b) = data.split_at(split);
    let p32 = crc32c::Engine::new(Backend::Portable).unwrap();
    let p64 = crc64nvme::Engine::new(Backend::Portable).unwrap();
    let p16 = crc16t10dif::Engine::new(Backend::Portable).unwrap();
    for backend in Backend::available() {
        let e32 = crc32c::Engine::new(backend).unwrap();
        let e64 = crc64nvme::Engine::new(backend).unwrap();
        let e16 = crc16t10dif::Engine::new(backend).unwrap();
        assert_eq!(e32.checksum(data), p32.checksum(data));
        assert_eq!(e64.checksum(data), p64.checksum(data));
        assert_eq!(e16.checksum(data), p16.checksum(data));
        assert_eq!(e32.update(e32.checksum(a), b), p32.checksum(data));
        assert_eq!(e64.update(e64.checksum(a), b), p64.checksum(data));
        assert_eq!(e16.update(e16.checksum(a), b), p16.checksum(data));
    }
});
