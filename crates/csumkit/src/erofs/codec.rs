//! A pcluster's stream decoded into `length` bytes as erofs-utils'
//! `lib/decompress.c` decodes it: the zero padding ahead of the stream
//! skipped, then LZ4 (our decoder), MicroLZMA (`lzma-rs`, the stream's
//! first byte being the inverted properties byte), raw DEFLATE
//! (`miniz_oxide`) or a Zstandard frame (`ruzstd`). `partial`: the stream
//! may run on past `length` (it must still reach it); otherwise it must end
//! there. No decoder writes past `length`.

use super::lz4;
use std::io::Read;

/// `Z_EROFS_LZMA_MAX_DICT_SIZE`: MicroLZMA streams name no dictionary size.
const LZMA_DICT_MAX: u32 = 8 << 20;

/// The algorithm's name for messages (`Z_EROFS_COMPRESSION_*`).
pub(super) fn name(format: u8) -> &'static str {
    match format {
        0 => "LZ4",
        1 => "LZMA",
        2 => "DEFLATE",
        3 => "Zstandard",
        _ => "an unknown algorithm",
    }
}

/// The decoded bytes, or why the stream does not decode.
pub(super) fn decode(format: u8, raw: &[u8], length: usize, partial: bool) -> Result<Vec<u8>, String> {
    let margin = raw.iter().position(|&b| b != 0).ok_or("an all-zero pcluster")?;
    let src = &raw[margin..];
    let out = match format {
        0 => lz4::decompress(src, length, partial)?,
        1 => lzma(src, length)?,
        2 => deflate(src, length, partial)?,
        3 => zstd(src, length, partial)?,
        other => return Err(format!("unknown compression algorithm {other}")),
    };
    if out.len() != length {
        return Err(format!("{} decodes to {} bytes, not {length}", name(format), out.len()));
    }
    Ok(out)
}

/// MicroLZMA: an LZMA1 range-coder stream whose first byte (always 0 in
/// LZMA) holds the inverted properties byte; no size, no end marker.
fn lzma(src: &[u8], length: usize) -> Result<Vec<u8>, String> {
    let props = !src[0];
    let mut stream = Vec::with_capacity(src.len() + 5);
    stream.push(props);
    stream.extend_from_slice(&LZMA_DICT_MAX.to_le_bytes());
    stream.push(0);
    stream.extend_from_slice(&src[1..]);
    let options = lzma_rs::decompress::Options {
        unpacked_size: lzma_rs::decompress::UnpackedSize::UseProvided(Some(length as u64)),
        memlimit: Some(2 * LZMA_DICT_MAX as usize),
        allow_incomplete: false,
    };
    let mut out = Vec::with_capacity(length);
    lzma_rs::lzma_decompress_with_options(&mut stream.as_slice(), &mut out, &options)
        .map_err(|e| format!("LZMA: {e}"))?;
    Ok(out)
}

fn deflate(src: &[u8], length: usize, partial: bool) -> Result<Vec<u8>, String> {
    use miniz_oxide::inflate::stream::{inflate, InflateState};
    use miniz_oxide::{DataFormat, MZFlush, MZStatus};
    let mut state = InflateState::new_boxed(DataFormat::Raw);
    let mut out = vec![0u8; length];
    let flush = if partial { MZFlush::Sync } else { MZFlush::Finish };
    let result = inflate(&mut state, src, &mut out, flush);
    match result.status {
        Ok(MZStatus::StreamEnd) if result.bytes_written == length => Ok(out),
        Ok(_) if partial && result.bytes_written == length => Ok(out),
        other => Err(format!("DEFLATE: {other:?} after {} of {length} bytes", result.bytes_written)),
    }
}

fn zstd(src: &[u8], length: usize, partial: bool) -> Result<Vec<u8>, String> {
    let mut decoder = ruzstd::decoding::StreamingDecoder::new(src).map_err(|e| format!("Zstandard: {e}"))?;
    let mut out = vec![0u8; length];
    decoder.read_exact(&mut out).map_err(|e| format!("Zstandard: {e}"))?;
    // A whole frame must end where the extent does.
    if !partial && decoder.read(&mut [0u8; 1]).map_err(|e| format!("Zstandard: {e}"))? != 0 {
        return Err(format!("Zstandard: the frame decodes past {length} bytes"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x.is_multiple_of(3) {
                    b"erofs"[i % 5]
                } else {
                    (x % 7) as u8
                }
            })
            .collect()
    }

    proptest! {
        /// Streams the crates' own encoders make (with erofs's zero
        /// padding ahead): whole, and partially to any prefix.
        #[test]
        fn decodes_deflate_and_zstd_with_padding(seed in any::<u64>(), len in 1usize..20_000, pad in 0usize..64, cut in any::<prop::sample::Index>()) {
            let data = sample(seed, len);
            let deflated = miniz_oxide::deflate::compress_to_vec(&data, 6);
            let zstd = ruzstd::encoding::compress_to_vec(&data[..], ruzstd::encoding::CompressionLevel::Fastest);
            for (format, stream) in [(2u8, deflated), (3, zstd)] {
                let raw = [vec![0u8; pad], stream].concat();
                prop_assert_eq!(decode(format, &raw, len, false).unwrap(), data.clone());
                let want = cut.index(len) + 1;
                prop_assert_eq!(decode(format, &raw, want, true).unwrap(), data[..want].to_vec());
                prop_assert!(decode(format, &raw, len + 1, false).is_err());
            }
        }

        /// Damaged streams are errors, never a panic, never longer than asked.
        #[test]
        fn damaged_streams_are_errors(raw in prop::collection::vec(any::<u8>(), 0..400), want in 1usize..3000) {
            for format in 0..5u8 {
                for partial in [false, true] {
                    if let Ok(out) = decode(format, &raw, want, partial) {
                        prop_assert_eq!(out.len(), want);
                    }
                }
            }
        }
    }
}
