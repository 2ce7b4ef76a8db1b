//! The LZ4 block format (no frame), decoded as erofs needs it: into at
//! most `want` bytes, stopping there when `partial` (the kernel's
//! `LZ4_decompress_safe_partial`: a pcluster's stream may run on past the
//! part a read maps), else required to end exactly there
//! (`LZ4_decompress_safe`). Every length and offset is checked against the
//! input and the output so far: a damaged stream is an error, never a read
//! out of bounds, and the output never grows past `want`.
//!
//! A sequence is a token (literal length in the high nibble, match length
//! − 4 in the low; 15 continues in 255-valued bytes), the literals, then —
//! except after the last literals — a little-endian 16-bit offset back
//! into the output and the match.

/// The decoded bytes, or why the stream is malformed.
pub(super) fn decompress(src: &[u8], want: usize, partial: bool) -> Result<Vec<u8>, String> {
    let mut out: Vec<u8> = Vec::with_capacity(want);
    let mut at = 0usize;
    let length = |at: &mut usize, nibble: usize| -> Result<usize, String> {
        let mut len = nibble;
        if nibble == 15 {
            loop {
                let &b = src.get(*at).ok_or("a length runs past the input")?;
                *at += 1;
                len = len.checked_add(usize::from(b)).ok_or("a length overflows")?;
                if b != 255 {
                    break;
                }
            }
        }
        Ok(len)
    };
    while at < src.len() {
        let token = usize::from(src[at]);
        at += 1;
        let literals = length(&mut at, token >> 4)?;
        let end = at.checked_add(literals).filter(|&e| e <= src.len()).ok_or("literals run past the input")?;
        let room = want - out.len();
        if literals > room {
            if partial {
                out.extend_from_slice(&src[at..at + room]);
                return Ok(out);
            }
            return Err(format!("the stream decodes past {want} bytes"));
        }
        out.extend_from_slice(&src[at..end]);
        at = end;
        if at == src.len() {
            break; // the last sequence: literals only
        }
        if partial && out.len() == want {
            return Ok(out);
        }
        let offset = match src.get(at..at + 2) {
            Some(b) => usize::from(u16::from_le_bytes([b[0], b[1]])),
            None => return Err("a match offset runs past the input".into()),
        };
        at += 2;
        if offset == 0 || offset > out.len() {
            return Err(format!("a match {offset} bytes back from byte {}", out.len()));
        }
        let matched = length(&mut at, token & 15)?.checked_add(4).ok_or("a length overflows")?;
        let room = want - out.len();
        let take = if matched > room {
            if !partial {
                return Err(format!("the stream decodes past {want} bytes"));
            }
            room
        } else {
            matched
        };
        // Byte by byte: a match may overlap the bytes it produces.
        let from = out.len() - offset;
        for k in 0..take {
            let b = out[from + k];
            out.push(b);
        }
        if partial && out.len() == want {
            return Ok(out);
        }
    }
    if out.len() != want {
        return Err(format!("the stream decodes to {} bytes, not {want}", out.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Compressible bytes: runs and repeats of a small alphabet.
    fn sample(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let run = (x % 40) as usize + 1;
            let byte = b"abcdefgh"[(x >> 8) as usize % 8];
            if x & 0x300 == 0 && out.len() > 64 {
                let from = out.len() - 1 - (x >> 16) as usize % 64;
                for k in 0..run.min(len - out.len()) {
                    out.push(out[from + k]);
                }
            } else {
                out.extend(std::iter::repeat_n(byte, run.min(len - out.len())));
            }
        }
        out
    }

    proptest! {
        /// Against lz4_flex's encoder: the whole stream decodes to the
        /// input, any shorter `want` partially to its prefix, and a `want`
        /// other than the length is refused when not partial.
        #[test]
        fn decodes_what_lz4_flex_encodes(seed in any::<u64>(), len in 0usize..20_000, cut in any::<prop::sample::Index>()) {
            let data = sample(seed, len);
            let packed = lz4_flex::block::compress(&data);
            prop_assert_eq!(decompress(&packed, len, false).unwrap(), data.clone());
            let want = cut.index(len + 1);
            prop_assert_eq!(decompress(&packed, want, true).unwrap(), data[..want].to_vec());
            if want < len {
                prop_assert!(decompress(&packed, want, false).is_err());
            }
            prop_assert!(decompress(&packed, len + 1, false).is_err());
        }

        /// Random bytes never panic and never decode past `want`.
        #[test]
        fn damaged_streams_are_errors(src in prop::collection::vec(any::<u8>(), 0..300), want in 0usize..2000) {
            for partial in [false, true] {
                if let Ok(out) = decompress(&src, want, partial) {
                    prop_assert!(out.len() == want || (partial && out.len() < want));
                }
            }
        }
    }

    #[test]
    fn a_match_before_the_start_is_refused() {
        // One literal, then a match 2 bytes back.
        assert!(decompress(&[0x10, b'a', 2, 0], 5, false).unwrap_err().contains("back"));
        // One literal, a match 1 back of 4: "aaaaa", then the last literals "b".
        assert_eq!(decompress(&[0x10, b'a', 1, 0, 0x10, b'b'], 6, false).unwrap(), b"aaaaab");
    }
}
