//! ByteLog replay of arbitrary media: any bytes give records or a typed
//! error, never a panic. Half the inputs keep a valid superblock and
//! anchors (from a real log with records) and damage the ring, so that the
//! record walk, the end-of-log scan and the anchored-window checks are
//! reached; whatever replays must be records the log really holds.
#![no_main]

use csumkit::bytelog::{ByteLog, SimMedium, Tlv, RING_OFFSET};
use libfuzzer_sys::fuzz_target;

const REGION: usize = (RING_OFFSET + 8192) as usize;

fuzz_target!(|input: (bool, u8, Vec<(u16, u8)>, Vec<u8>)| {
    let (from_real_log, records, damage, raw) = input;
    let mut image = raw;
    image.resize(REGION, 0);
    let mut written = Vec::new();
    if from_real_log {
        let mut log = ByteLog::format(SimMedium::new(REGION), 3).unwrap();
        for i in 0..records % 60 {
            let value = vec![i; 24 + (i as usize * 5) % 41];
            if let Ok(seq) = log.append_tlvs(&[Tlv { tag: 1, value: &value }]) {
                written.push((seq, value));
            }
            if i % 17 == 16 {
                let _ = log.checkpoint();
            }
        }
        image = log.into_medium().durable().to_vec();
        for (at, byte) in damage {
            let at = RING_OFFSET as usize + at as usize % (REGION - RING_OFFSET as usize);
            image[at] ^= byte;
        }
    }
    if let Ok((_, replayed)) = ByteLog::open(SimMedium::from_image(image)) {
        for r in &replayed {
            if from_real_log {
                let (_, value) = written.iter().find(|(s, _)| *s == r.seq).expect("replayed a record never written");
                let tlvs = csumkit::bytelog::decode_tlvs(&r.payload).expect("committed payloads are TLVs");
                assert_eq!(tlvs[0].value, &value[..]);
            }
        }
    }
});
