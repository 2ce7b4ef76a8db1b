//! Run-time backend selection (crc32fast / crc-fast style): CPU features are
//! detected once, the best backend is cached, and `CSUMKIT_BACKEND` or
//! [`Backend::force`] pins one so tests and users can exercise every path.

#[cfg(target_arch = "aarch64")]
pub(crate) mod aarch64;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

use crate::crc::algebra;
use crate::crc::gf2::PortableClmul;
use crate::crc::spec::Spec;
use crate::crc::CrcError;
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

/// Environment variable that pins the backend (`portable`, or a backend name).
pub const BACKEND_ENV_VAR: &str = "CSUMKIT_BACKEND";

/// A CRC engine. Every backend computes bit-identical results; they differ in
/// speed and in the CPU features they need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Slicing-by-16 tables and a table-driven carry-less multiply. Runs everywhere.
    Portable,
    /// SSE4.2 `crc32` (CRC32C) and 128-bit PCLMULQDQ folding.
    X86Pclmul,
    /// 256-bit VPCLMULQDQ folding on AVX2, falling back to `X86Pclmul` below 256 bytes.
    X86VpclmulAvx2,
    /// 512-bit VPCLMULQDQ folding on AVX-512 (F, VL, BW), falling back to
    /// `X86Pclmul` below 64 bytes.
    X86VpclmulAvx512,
    /// ARMv8 CRC32 instructions (CRC32C) and PMULL folding.
    Aarch64CrcPmull,
}

impl Backend {
    /// Every backend, slowest first.
    pub const ALL: [Backend; 5] = [
        Backend::Portable,
        Backend::X86Pclmul,
        Backend::X86VpclmulAvx2,
        Backend::X86VpclmulAvx512,
        Backend::Aarch64CrcPmull,
    ];

    /// Stable name, shown by `csumkit backend` and in benchmark output.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Portable => "portable-slice16",
            Backend::X86Pclmul => "x86_64-sse42-pclmul",
            Backend::X86VpclmulAvx2 => "x86_64-vpclmul-avx2",
            Backend::X86VpclmulAvx512 => "x86_64-vpclmul-avx512",
            Backend::Aarch64CrcPmull => "aarch64-crc-pmull",
        }
    }

    /// Parses a name as printed by [`Backend::name`]; `portable` is accepted too.
    pub fn from_name(name: &str) -> Result<Backend, CrcError> {
        let name = name.trim();
        if name == "portable" {
            return Ok(Backend::Portable);
        }
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == name)
            .ok_or_else(|| CrcError::UnknownBackend { name: name.to_string() })
    }

    /// Whether this CPU can run the backend.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Backend::X86Pclmul => {
                is_x86_feature_detected!("sse4.2")
                    && is_x86_feature_detected!("sse4.1")
                    && is_x86_feature_detected!("popcnt")
                    && is_x86_feature_detected!("ssse3")
                    && is_x86_feature_detected!("pclmulqdq")
            }
            #[cfg(target_arch = "x86_64")]
            Backend::X86VpclmulAvx2 => {
                Backend::X86Pclmul.is_available()
                    && is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("vpclmulqdq")
            }
            // std's detection also checks that the OS saves ZMM state (XCR0).
            #[cfg(target_arch = "x86_64")]
            Backend::X86VpclmulAvx512 => {
                Backend::X86VpclmulAvx2.is_available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512bw")
            }
            #[cfg(target_arch = "aarch64")]
            Backend::Aarch64CrcPmull => {
                std::arch::is_aarch64_feature_detected!("crc") && std::arch::is_aarch64_feature_detected!("pmull")
            }
            #[allow(unreachable_patterns)] // every arm above may be compiled in or out
            _ => false,
        }
    }

    /// The backends this CPU can run, slowest first.
    pub fn available() -> Vec<Backend> {
        Backend::ALL.into_iter().filter(|b| b.is_available()).collect()
    }

    /// The fastest backend this CPU can run.
    pub fn detect() -> Backend {
        *Backend::available().last().unwrap_or(&Backend::Portable)
    }

    /// The backend requested by `CSUMKIT_BACKEND`, if set: an error for an
    /// unknown name or one this CPU cannot run.
    pub fn from_env() -> Result<Option<Backend>, CrcError> {
        match std::env::var(BACKEND_ENV_VAR) {
            Ok(name) if !name.trim().is_empty() => {
                let backend = Backend::from_name(&name)?;
                if !backend.is_available() {
                    return Err(CrcError::BackendUnavailable { name: backend.name() });
                }
                Ok(Some(backend))
            }
            _ => Ok(None),
        }
    }

    /// The backend the free functions use: `CSUMKIT_BACKEND` if valid, else
    /// the fastest available. Decided on first use and cached. An invalid
    /// `CSUMKIT_BACKEND` is reported once on stderr and ignored — the one
    /// behaviour of the library, the command, C and Python (a checksum call
    /// has no way to fail).
    #[inline(always)]
    pub fn active() -> Backend {
        match ACTIVE.load(Ordering::Relaxed) {
            1 => Backend::Portable,
            2 => Backend::X86Pclmul,
            3 => Backend::X86VpclmulAvx2,
            4 => Backend::Aarch64CrcPmull,
            5 => Backend::X86VpclmulAvx512,
            _ => Self::init_active(),
        }
    }

    #[cold]
    fn init_active() -> Backend {
        let backend = match Backend::from_env() {
            Ok(Some(b)) => b,
            Ok(None) => Backend::detect(),
            Err(e) => {
                let fallback = Backend::detect();
                eprintln!("csumkit: ignoring {BACKEND_ENV_VAR}: {e}; using {}", fallback.name());
                fallback
            }
        };
        ACTIVE.store(backend.tag(), Ordering::Relaxed);
        publish(backend);
        backend
    }

    /// Pins the backend for the whole process.
    pub fn force(self) -> Result<(), CrcError> {
        if !self.is_available() {
            return Err(CrcError::BackendUnavailable { name: self.name() });
        }
        ACTIVE.store(self.tag(), Ordering::Relaxed);
        publish(self);
        Ok(())
    }

    const fn tag(self) -> u8 {
        match self {
            Backend::Portable => 1,
            Backend::X86Pclmul => 2,
            Backend::X86VpclmulAvx2 => 3,
            Backend::Aarch64CrcPmull => 4,
            Backend::X86VpclmulAvx512 => 5,
        }
    }

    /// Checks availability so the `*_with` entry points never run an
    /// instruction the CPU lacks.
    pub(crate) fn checked(self) -> Result<Backend, CrcError> {
        if self.is_available() {
            Ok(self)
        } else {
            Err(CrcError::BackendUnavailable { name: self.name() })
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// This CPU architecture's engine module (same item names on each).
#[cfg(target_arch = "aarch64")]
use aarch64 as native;
#[cfg(target_arch = "x86_64")]
use x86_64 as native;

/// A raw register update (no init, no final XOR) of one algorithm on one
/// backend, every input size's path inside it.
///
/// # Safety
/// The CPU must support the backend it belongs to.
pub(crate) type Kernel = unsafe fn(u64, &[u8]) -> u64;

fn portable<const A: usize>(state: u64, data: &[u8]) -> u64 {
    crate::crc::spec::Algorithm::ALL[A].spec().update_portable(state, data)
}

/// The kernel of `algorithm` on `backend`.
#[inline(always)]
pub(crate) fn kernel(backend: Backend, algorithm: crate::crc::spec::Algorithm) -> Kernel {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    if let Some(kernel) = native::kernel(backend, algorithm) {
        return kernel;
    }
    let _ = backend;
    [portable::<0> as Kernel, portable::<1>, portable::<2>][algorithm as usize]
}

/// Raw register update on `backend`, which the caller has checked is
/// available (`Backend::active` only returns available backends; `*_with`
/// and `Engine::new` call `checked`).
#[inline(always)]
pub(crate) fn raw_update(backend: Backend, spec: &Spec, state: u64, data: &[u8]) -> u64 {
    // SAFETY: see above.
    unsafe { kernel(backend, spec.algorithm)(state, data) }
}

/// The free functions' kernels, one per algorithm: a load and an indirect
/// call per checksum (crc32fast / crc-fast style). Each slot starts at
/// `first_call`, which detects the backend and publishes its kernels;
/// `Backend::force` publishes another backend's.
static ACTIVE_KERNELS: [AtomicPtr<()>; 3] = [
    AtomicPtr::new(first_call::<0> as *mut ()),
    AtomicPtr::new(first_call::<1> as *mut ()),
    AtomicPtr::new(first_call::<2> as *mut ()),
];

/// Raw register update on the active backend.
#[inline(always)]
pub(crate) fn active_raw_update(algorithm: crate::crc::spec::Algorithm, state: u64, data: &[u8]) -> u64 {
    let kernel = ACTIVE_KERNELS[algorithm as usize].load(Ordering::Relaxed);
    // SAFETY: a slot only ever holds `first_call` or a kernel of a backend
    // that passed `is_available` (`publish`), both of type `Kernel`.
    unsafe { core::mem::transmute::<*mut (), Kernel>(kernel)(state, data) }
}

/// # Safety
/// None beyond `Kernel`'s: it runs only the detected backend's kernel.
unsafe fn first_call<const A: usize>(state: u64, data: &[u8]) -> u64 {
    let backend = Backend::active(); // publishes on first use
    publish(backend);
    // SAFETY: `Backend::active` returns only available backends.
    unsafe { kernel(backend, crate::crc::spec::Algorithm::ALL[A])(state, data) }
}

fn publish(backend: Backend) {
    debug_assert!(backend.is_available());
    for algorithm in crate::crc::spec::Algorithm::ALL {
        ACTIVE_KERNELS[algorithm as usize].store(kernel(backend, algorithm) as *mut (), Ordering::Relaxed);
    }
}

/// The algebra operations, instantiated per carry-less multiplier.
macro_rules! dispatch_algebra {
    ($(#[$doc:meta])* $name:ident => $op:ident($($arg:ident: $ty:ty),*)) => {
        // Not `#[inline]`: the generic algebra is inlined *here*, once per
        // backend; call sites get a plain call instead of its whole body.
        $(#[$doc])*
        pub(crate) fn $name(backend: Backend, spec: &Spec, $($arg: $ty),*) -> u64 {
            match backend {
                Backend::Portable => algebra::$op::<PortableClmul>(spec, $($arg),*),
                // SAFETY: every hardware backend implies its carry-less
                // multiply (PCLMULQDQ, PMULL) and was checked available.
                #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
                _ => unsafe { native::algebra::$op(spec, $($arg),*) },
                #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
                _ => algebra::$op::<PortableClmul>(spec, $($arg),*),
            }
        }
    };
}

dispatch_algebra!(combine => combine(crc_a: u64, crc_b: u64, len_b: u64));
dispatch_algebra!(zero_extend => zero_extend(crc: u64, zeros: u64));
dispatch_algebra!(flip_range => flip_range(crc: u64, total_bits: u64, bit_offset: u64, bit_len: u64));
dispatch_algebra!(splice_shift => splice_shift(crc: u64, lin_delta_reg: u64, trailing_bytes: u64, total_len: u64));
