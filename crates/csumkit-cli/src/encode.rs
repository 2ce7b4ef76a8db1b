//! Output encodings of a checksum value.

use clap::ValueEnum;

/// How `csumkit sum` prints a checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Lowercase hex, zero-padded to the checksum width.
    Hex,
    /// Base64 of the big-endian bytes: the form of S3's `x-amz-checksum-*` headers.
    Base64,
    /// Unsigned decimal.
    Decimal,
}

impl Format {
    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            Format::Hex => "hex",
            Format::Base64 => "base64",
            Format::Decimal => "decimal",
        }
    }
}

/// Renders a `width_bits`-bit checksum.
pub fn render(value: u64, width_bits: u32, format: Format) -> String {
    let bytes = (width_bits / 8) as usize;
    match format {
        Format::Hex => format!("{value:0width$x}", width = bytes * 2),
        Format::Decimal => value.to_string(),
        Format::Base64 => base64(&value.to_be_bytes()[8 - bytes..]),
    }
}

/// Standard base64 (RFC 4648, with padding).
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for group in data.chunks(3) {
        let n =
            (group[0] as u32) << 16 | (*group.get(1).unwrap_or(&0) as u32) << 8 | *group.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
    }

    #[test]
    fn widths_and_formats() {
        assert_eq!(render(0xE306_9283, 32, Format::Hex), "e3069283");
        assert_eq!(render(0x1, 16, Format::Hex), "0001");
        assert_eq!(render(0xE306_9283, 32, Format::Base64), "4waSgw==");
        assert_eq!(render(0xAE8B_1486_0A79_9888, 64, Format::Base64), "rosUhgp5mIg=");
        assert_eq!(render(0xD0DB, 16, Format::Decimal), "53467");
    }
}
