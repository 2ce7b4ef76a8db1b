//! Shared CRC machinery: parameter sets ([`Spec`]), GF(2) algebra, and the
//! macro that gives `crc32c`, `crc64nvme` and `crc16t10dif` the same API.

pub(crate) mod algebra;
mod dynamic;
#[cfg(any(target_arch = "aarch64", test))]
pub(crate) mod fold;
pub mod gf2;
pub mod spec;

pub use algebra::FLIP_TOTAL_BITS_MAX;
pub use spec::{Algorithm, Spec};

/// Defines the public API of one CRC module over a `static Spec`.
macro_rules! crc_api {
    ($T:ty, $spec:path, $algorithm:expr, $m:ident, $check:literal) => {
        use crate::arch::{self, Backend};
        use crate::crc::algebra;
        use crate::Error;

        /// The parameter set of this CRC.
        #[doc = concat!("\n```\n", "assert_eq!(csumkit::", stringify!($m), "::spec().check, ", stringify!($check), " as u64);", "\n```")]
        pub fn spec() -> &'static crate::crc::spec::Spec {
            &$spec
        }

        /// Checksum of `data`.
        #[doc = concat!("\n```\n", "assert_eq!(csumkit::", stringify!($m), "::checksum(b\"123456789\"), ", stringify!($check), ");", "\n```")]
        #[must_use]
        #[inline]
        pub fn checksum(data: &[u8]) -> $T {
            update(0, data)
        }

        /// Continues a finished checksum, zlib style: `update(0, a) == checksum(a)`
        /// and `update(checksum(a), b) == checksum(a ++ b)`.
        #[doc = concat!("\n```\n", "use csumkit::", stringify!($m), "::{checksum, update};\nassert_eq!(update(checksum(b\"1234\"), b\"56789\"), ", stringify!($check), ");", "\n```")]
        #[must_use]
        #[inline]
        pub fn update(crc: $T, data: &[u8]) -> $T {
            let s = &$spec;
            (arch::active_raw_update($algorithm, crc as u64 ^ s.xorout, data) ^ s.xorout) as $T
        }

        /// The bare CRC register update: no initial value, no final XOR.
        /// `update(crc, d) == raw_update(crc ^ XOROUT, d) ^ XOROUT`.
        #[doc = concat!("\n```\n", "use csumkit::", stringify!($m), "::{raw_update, spec};\nlet x = spec().xorout as _;\nassert_eq!(raw_update(x, b\"123456789\") ^ x, ", stringify!($check), ");", "\n```")]
        #[must_use]
        #[inline]
        pub fn raw_update(seed: $T, data: &[u8]) -> $T {
            arch::active_raw_update($algorithm, seed as u64, data) as $T
        }

        /// Checksum of `a ++ b` from `checksum(a)`, `checksum(b)` and `b.len()`;
        /// O(log len_b), no data.
        #[doc = concat!("\n```\n", "use csumkit::", stringify!($m), "::{checksum, combine};\nassert_eq!(combine(checksum(b\"1234\"), checksum(b\"56789\"), 5), ", stringify!($check), ");", "\n```")]
        #[must_use]
        #[inline]
        pub fn combine(crc_a: $T, crc_b: $T, len_b: u64) -> $T {
            Engine::active().combine(crc_a, crc_b, len_b)
        }

        /// Checksum of the data whose checksum is `crc` followed by `zeros` zero bytes.
        #[doc = concat!("\n```\n", "use csumkit::", stringify!($m), "::{checksum, zero_extend};\nassert_eq!(zero_extend(checksum(b\"12\"), 3), checksum(b\"12\0\0\0\"));", "\n```")]
        #[must_use]
        #[inline]
        pub fn zero_extend(crc: $T, zeros: u64) -> $T {
            Engine::active().zero_extend(crc, zeros)
        }

        /// New checksum of a `total_bits / 8`-byte buffer whose checksum was
        /// `crc`, after bits `[bit_offset, bit_offset + bit_len)` are inverted.
        /// Linux bitmap order: bit `i` is bit `i % 8` (LSB first) of byte `i / 8`.
        /// O(log total_bits); the buffer is not needed.
        ///
        /// # Errors
        /// `total_bits` not a multiple of 8 or above
        /// [`FLIP_TOTAL_BITS_MAX`](crate::crc::FLIP_TOTAL_BITS_MAX), or a range
        /// past the end.
        #[doc = concat!("\n```\n", "use csumkit::", stringify!($m), "::{checksum, flip_range};\nlet mut bitmap = [0u8; 512];\nlet before = checksum(&bitmap);\nbitmap[1] = 0x0F; // bits 8..12\nassert_eq!(flip_range(before, 512 * 8, 8, 4)?, checksum(&bitmap));\nassert!(flip_range(before, 512 * 8, 4090, 10).is_err()); // past the end\n# Ok::<(), csumkit::Error>(())", "\n```")]
        #[inline]
        pub fn flip_range(crc: $T, total_bits: u64, bit_offset: u64, bit_len: u64) -> Result<$T, Error> {
            Engine::active().flip_range(crc, total_bits, bit_offset, bit_len)
        }

        /// New checksum of a `total_len`-byte buffer whose checksum was `crc`,
        /// after the bytes at `offset` changed from `old` to `new`. Reads only
        /// `old` and `new`.
        ///
        /// # Errors
        /// `old` and `new` of different lengths, or a region past the end.
        #[doc = concat!("\n```\n", "use csumkit::", stringify!($m), "::{checksum, splice};\nlet old = *b\"hello world\";\nlet new = *b\"hello earth\";\nassert_eq!(splice(checksum(&old), 11, 6, &old[6..], &new[6..])?, checksum(&new));\n# Ok::<(), csumkit::Error>(())", "\n```")]
        #[inline]
        pub fn splice(crc: $T, total_len: u64, offset: u64, old: &[u8], new: &[u8]) -> Result<$T, Error> {
            Engine::active().splice(crc, total_len, offset, old, new)
        }

        /// This CRC on one chosen [`Backend`]. The free functions use
        /// the active backend; tests and benchmarks compare engines.
        #[doc = concat!("\n```\n", "use csumkit::{Backend, ", stringify!($m), "::Engine};\nlet portable = Engine::new(Backend::Portable)?;\nassert_eq!(portable.backend(), Backend::Portable);\nassert_eq!(portable.checksum(b\"123456789\"), ", stringify!($check), ");\nlet fastest = Engine::active();\nlet c = fastest.update(fastest.checksum(b\"1234\"), b\"56789\");\nassert_eq!(c, ", stringify!($check), ");\nassert_eq!(fastest.combine(fastest.checksum(b\"1234\"), fastest.checksum(b\"56789\"), 5), c);\nassert_eq!(fastest.zero_extend(c, 0), c);\nassert_eq!(fastest.raw_update(fastest.raw_update(0, b\"12\"), b\"3\"), fastest.raw_update(0, b\"123\"));\nlet bits = fastest.flip_range(fastest.flip_range(c, 72, 3, 9)?, 72, 3, 9)?;\nassert_eq!(bits, c);\nassert_eq!(fastest.splice(c, 9, 0, b\"1\", b\"1\")?, c);\nlet mut d = fastest.digest();\nd.update(b\"123456789\");\nassert_eq!(d.finalize(), ", stringify!($check), ");\n# Ok::<(), csumkit::Error>(())", "\n```")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Engine {
            backend: Backend,
        }

        impl Engine {
            /// The engine of the process-wide active backend.
            #[inline]
            pub fn active() -> Self {
                Self { backend: Backend::active() }
            }

            /// An engine on `backend`.
            ///
            /// # Errors
            /// [`Error::BackendUnavailable`] if this CPU cannot run it.
            pub fn new(backend: Backend) -> Result<Self, Error> {
                Ok(Self { backend: backend.checked()? })
            }

            /// The backend this engine runs on.
            pub fn backend(self) -> Backend {
                self.backend
            }

            /// See [`checksum`].
            #[must_use]
            #[inline]
            pub fn checksum(self, data: &[u8]) -> $T {
                self.update(0, data)
            }

            /// See [`update`].
            #[must_use]
            #[inline]
            pub fn update(self, crc: $T, data: &[u8]) -> $T {
                let s = &$spec;
                (arch::raw_update(self.backend, s, crc as u64 ^ s.xorout, data) ^ s.xorout) as $T
            }

            /// See [`raw_update`].
            #[must_use]
            #[inline]
            pub fn raw_update(self, seed: $T, data: &[u8]) -> $T {
                arch::raw_update(self.backend, &$spec, seed as u64, data) as $T
            }

            /// See [`combine`].
            #[must_use]
            #[inline]
            pub fn combine(self, crc_a: $T, crc_b: $T, len_b: u64) -> $T {
                arch::combine(self.backend, &$spec, crc_a as u64, crc_b as u64, len_b) as $T
            }

            /// See [`zero_extend`].
            #[must_use]
            #[inline]
            pub fn zero_extend(self, crc: $T, zeros: u64) -> $T {
                arch::zero_extend(self.backend, &$spec, crc as u64, zeros) as $T
            }

            /// See [`flip_range`].
            ///
            /// # Errors
            /// As [`flip_range`].
            #[inline]
            pub fn flip_range(self, crc: $T, total_bits: u64, bit_offset: u64, bit_len: u64) -> Result<$T, Error> {
                algebra::check_bit_range(total_bits, bit_offset, bit_len)?;
                Ok(arch::flip_range(self.backend, &$spec, crc as u64, total_bits, bit_offset, bit_len) as $T)
            }

            /// See [`splice`].
            ///
            /// # Errors
            /// As [`splice`].
            #[inline]
            pub fn splice(self, crc: $T, total_len: u64, offset: u64, old: &[u8], new: &[u8]) -> Result<$T, Error> {
                algebra::check_splice(total_len, offset, old.len(), new.len())?;
                // lin(old ^ new) = lin(old) ^ lin(new): one CRC of the XOR for
                // the usual small region, else two CRCs and no scratch buffer.
                let s = &$spec;
                let lin = if old.len() <= 64 {
                    let mut delta = [0u8; 64];
                    for (d, (a, b)) in delta.iter_mut().zip(old.iter().zip(new)) {
                        *d = a ^ b;
                    }
                    arch::raw_update(self.backend, s, 0, &delta[..old.len()])
                } else {
                    arch::raw_update(self.backend, s, 0, old) ^ arch::raw_update(self.backend, s, 0, new)
                };
                let trailing = total_len - offset - old.len() as u64;
                Ok(arch::splice_shift(self.backend, s, crc as u64, lin, trailing, total_len) as $T)
            }

            /// A streaming digest on this engine.
            pub fn digest(self) -> Digest {
                Digest { engine: self, crc: 0, len: 0 }
            }
        }

        /// Streaming checksum state; also a [`std::io::Write`] sink and a
        /// [`std::hash::Hasher`].
        #[doc = concat!("\n```\n", "use csumkit::", stringify!($m), "::Digest;\nuse std::io::Write;\nlet mut d = Digest::new();\nassert!(d.is_empty());\nd.update(b\"1234\");\nd.write_all(b\"56789\").unwrap();\nassert_eq!((d.finalize(), d.len()), (", stringify!($check), ", 9));\nd.reset();\nassert_eq!(d.finalize(), 0);", "\n```")]
        #[derive(Clone, Debug)]
        pub struct Digest {
            engine: Engine,
            crc: $T,
            len: u64,
        }

        impl Digest {
            /// An empty digest on the active backend.
            pub fn new() -> Self {
                Engine::active().digest()
            }

            /// Feeds `data`.
            #[inline]
            pub fn update(&mut self, data: &[u8]) {
                self.crc = self.engine.update(self.crc, data);
                self.len += data.len() as u64;
            }

            /// The checksum of everything fed so far (the digest stays usable).
            #[must_use]
            pub fn finalize(&self) -> $T {
                self.crc
            }

            /// Bytes fed so far.
            pub fn len(&self) -> u64 {
                self.len
            }

            /// Whether nothing has been fed.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }

            /// Forgets everything fed so far.
            pub fn reset(&mut self) {
                self.crc = 0;
                self.len = 0;
            }
        }

        impl Default for Digest {
            fn default() -> Self {
                Self::new()
            }
        }

        impl std::io::Write for Digest {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.update(buf);
                Ok(buf.len())
            }

            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        impl std::hash::Hasher for Digest {
            fn finish(&self) -> u64 {
                self.finalize() as u64
            }

            fn write(&mut self, bytes: &[u8]) {
                self.update(bytes);
            }
        }
    };
}

pub(crate) use crc_api;
