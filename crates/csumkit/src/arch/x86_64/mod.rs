//! x86_64 engines: PCLMULQDQ folding over 128-bit lanes (8 accumulators,
//! 128 bytes per step, 4 below 256 bytes) and VPCLMULQDQ over 256-bit lanes (4 accumulators,
//! 128 bytes per step), one generic kernel for all three CRCs; the SSE4.2
//! `crc32` instruction for short CRC32C inputs, tails and the final 128->32
//! reduction, and beside the 128-bit fold for long CRC32C inputs
//! (`crc32c_hybrid`).
//!
//! Every function here is safe with `#[target_feature]`: called from code
//! compiled for the same features, it needs no `unsafe`. The one place that
//! does is the dispatch (`arch/mod.rs`), which calls a kernel through an
//! `unsafe fn` pointer only after `Backend::is_available` said yes.

pub(crate) mod algebra;
mod crc32c_algebra;
mod crc32c_hybrid;
mod fold;
mod fold512;

use super::Kernel;
use crate::crc::spec::{Algorithm, Spec};
use crate::Backend;
use core::arch::x86_64::*;

/// Below this many bytes CRC32C uses the `crc32` instruction alone: folding's
/// fixed cost (loads, reduction) only pays off above it. Measured with
/// `csumkit bench crc`.
const CRC32C_FOLD_MIN_BYTES: usize = 128;
/// Below this many bytes the other CRCs use the slicing tables.
const TABLE_FOLD_MIN_BYTES: usize = 32;
/// The 256-bit kernel needs one full 128-byte step plus its reduction.
const WIDE_FOLD_MIN_BYTES: usize = 256;

#[inline(always)]
fn fold_min_bytes(spec: &Spec) -> usize {
    if spec.algorithm == Algorithm::Crc32c {
        CRC32C_FOLD_MIN_BYTES
    } else {
        TABLE_FOLD_MIN_BYTES
    }
}

/// Calls `$body` with `$spec` bound to the `static` parameter set of
/// `$algorithm`, so each arm is compiled with the CRC's constants folded in
/// (width, bit order, the `crc32` instruction choice).
macro_rules! with_static_spec {
    ($algorithm:expr, |$spec:ident| $body:expr) => {
        match $algorithm {
            crate::crc::spec::Algorithm::Crc32c => {
                let $spec = &crate::crc::spec::CRC32C;
                $body
            }
            crate::crc::spec::Algorithm::Crc64Nvme => {
                let $spec = &crate::crc::spec::CRC64NVME;
                $body
            }
            crate::crc::spec::Algorithm::Crc16T10Dif => {
                let $spec = &crate::crc::spec::CRC16T10DIF;
                $body
            }
        }
    };
}
pub(crate) use with_static_spec;

/// Each algorithm's kernel compiled for one set of target features.
macro_rules! kernels {
    ($f:ident) => {
        [$f::<0> as Kernel, $f::<1>, $f::<2>]
    };
}

/// The kernel of `algorithm` on an x86 hardware `backend`.
#[inline(always)]
pub(crate) fn kernel(backend: Backend, algorithm: Algorithm) -> Option<Kernel> {
    let kernels = match backend {
        Backend::X86Pclmul => kernels!(pclmul_kernel),
        Backend::X86VpclmulAvx2 => kernels!(avx2_kernel),
        Backend::X86VpclmulAvx512 => kernels!(avx512_kernel),
        _ => return None,
    };
    Some(kernels[algorithm as usize])
}

/// The 128-bit path of algorithm `A` (the `crc32` instruction, the hybrid
/// or the PCLMULQDQ fold by length), expanded in each kernel: compiled with
/// that kernel's features and inlined there, as a `#[target_feature]`
/// function cannot be `#[inline(always)]`. `$kernel` numbers the kernel, so
/// that each instance of `fold_128` has one caller, which LLVM inlines.
macro_rules! update_128 {
    ($a:ident, $kernel:literal, $state:expr, $data:expr) => {{
        let (state, data): (u64, &[u8]) = ($state, $data);
        with_static_spec!(Algorithm::ALL[$a], |spec| {
            if data.len() < fold_min_bytes(spec) {
                update_tail::<$a>(state, data)
            } else if spec.algorithm == Algorithm::Crc32c && data.len() >= crc32c_hybrid::HYBRID_MIN_BYTES {
                crc32c_hybrid::update(state, data)
            } else {
                let whole = data.len() & !15;
                update_tail::<$a>(fold::fold_128::<$a, $kernel>(state, &data[..whole]), &data[whole..])
            }
        })
    }};
}

/// Defines a kernel whose short inputs (`crc32` instruction or tables) are
/// handled in a function small enough to need no saved registers, and whose
/// folding path is a separate function: one big function pushed five
/// registers before its length test, 0.5 ns on every 16-byte call.
macro_rules! kernel_with_short_path {
    ($(#[$doc:meta])* $name:ident, $long:ident, $features:literal, |$spec:ident, $state:ident, $data:ident| $body:expr) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        fn $name<const A: usize>(state: u64, data: &[u8]) -> u64 {
            with_static_spec!(Algorithm::ALL[A], |spec| {
                if data.len() < fold_min_bytes(spec) {
                    return update_tail::<A>(state, data);
                }
                $long::<A>(state, data)
            })
        }

        #[target_feature(enable = $features)]
        #[inline(never)]
        fn $long<const A: usize>($state: u64, $data: &[u8]) -> u64 {
            with_static_spec!(Algorithm::ALL[A], |$spec| $body)
        }
    };
}

kernel_with_short_path!(
    /// Raw update with 128-bit PCLMULQDQ folding (SSE4.2, SSSE3, SSE4.1,
    /// PCLMULQDQ).
    pclmul_kernel,
    pclmul_fold,
    "sse2,ssse3,sse4.1,sse4.2,pclmulqdq",
    |_spec, state, data| update_128!(A, 0, state, data)
);

kernel_with_short_path!(
    /// Raw update with 256-bit VPCLMULQDQ folding (128-bit below 256 bytes):
    /// everything `pclmul_kernel` needs plus AVX2 and VPCLMULQDQ.
    avx2_kernel,
    avx2_fold,
    "sse2,ssse3,sse4.1,sse4.2,pclmulqdq,avx2,vpclmulqdq",
    |spec, state, data| {
        if data.len() < WIDE_FOLD_MIN_BYTES {
            update_128!(A, 1, state, data)
        } else {
            let whole = data.len() & !15;
            let state = if spec.reflected {
                fold::fold_256::<true>(spec, state, &data[..whole])
            } else {
                fold::fold_256::<false>(spec, state, &data[..whole])
            };
            update_tail::<A>(state, &data[whole..])
        }
    }
);

kernel_with_short_path!(
    /// Raw update with 512-bit VPCLMULQDQ folding (the 128-bit paths below
    /// their thresholds), the `crc32` instruction beside it for long CRC32C
    /// inputs, and the last partial chunk folded in vector registers:
    /// everything `avx2_kernel` needs plus AVX-512F, AVX-512VL and
    /// AVX-512BW, with ZMM state enabled by the OS.
    avx512_kernel,
    avx512_fold,
    "sse2,ssse3,sse4.1,sse4.2,pclmulqdq,avx2,vpclmulqdq,avx512f,avx512vl,avx512bw",
    |spec, state, data| {
        let range = fold512::CRC32C_HYBRID_MIN_BYTES..=fold512::CRC32C_HYBRID_MAX_BYTES;
        // One call of `update_512` per kernel: LLVM inlines a function
        // with a single caller.
        let (state, data) = if spec.algorithm == Algorithm::Crc32c && range.contains(&data.len()) {
            let (state, done) = fold512::crc32c_hybrid(state, data);
            (state, &data[done..])
        } else {
            (state, data)
        };
        update_512::<A>(state, data)
    }
);

#[inline]
#[target_feature(enable = "sse2,ssse3,sse4.1,sse4.2,pclmulqdq,avx2,vpclmulqdq,avx512f,avx512vl,avx512bw")]
fn update_512<const A: usize>(state: u64, data: &[u8]) -> u64 {
    with_static_spec!(Algorithm::ALL[A], |spec| {
        if data.len() < 64 || (spec.algorithm == Algorithm::Crc32c && data.len() < CRC32C_FOLD_MIN_BYTES) {
            return update_128!(A, 2, state, data);
        }
        let partial = data.len() % 16;
        if spec.reflected {
            let x = fold512::fold_to_128::<true>(spec, state, data);
            if spec.algorithm == Algorithm::Crc32c {
                // The `crc32` instruction takes the tail as fast as a fold.
                let reg = fold::reduce128::<true>(spec, x);
                return crc32c_sse42(reg, &data[data.len() - partial..]);
            }
            let x = if partial == 0 { x } else { fold512::fold_partial::<true>(spec, x, data, partial) };
            fold::reduce128::<true>(spec, x)
        } else {
            let x = fold512::fold_to_128::<false>(spec, state, data);
            let x = if partial == 0 { x } else { fold512::fold_partial::<false>(spec, x, data, partial) };
            fold::reduce128::<false>(spec, x)
        }
    })
}

/// Short inputs and tails: the `crc32` instruction for CRC32C, tables otherwise.
#[inline]
#[target_feature(enable = "sse4.2")]
fn update_tail<const A: usize>(state: u64, data: &[u8]) -> u64 {
    with_static_spec!(Algorithm::ALL[A], |spec| {
        if spec.algorithm == Algorithm::Crc32c {
            crc32c_sse42(state, data)
        } else {
            tables(spec, state, data)
        }
    })
}

/// The slicing tables, kept out of line: inlined into a kernel with AVX2
/// or AVX-512 enabled, LLVM turns their independent loads into VPGATHERQQ,
/// several times slower than scalar loads on AMD Zen 4.
#[inline(never)]
fn tables(spec: &Spec, state: u64, data: &[u8]) -> u64 {
    spec.update_portable(state, data)
}

/// CRC32C with the SSE4.2 `crc32` instruction, eight bytes at a time.
#[inline]
#[target_feature(enable = "sse4.2")]
fn crc32c_sse42(state: u64, data: &[u8]) -> u64 {
    let mut crc = state;
    let mut words = data.chunks_exact(8);
    for word in &mut words {
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(word.try_into().unwrap()));
    }
    let mut crc = crc as u32;
    let mut rest = words.remainder();
    if rest.len() >= 4 {
        crc = _mm_crc32_u32(crc, u32::from_le_bytes(rest[..4].try_into().unwrap()));
        rest = &rest[4..];
    }
    for &byte in rest {
        crc = _mm_crc32_u8(crc, byte);
    }
    crc as u64
}
