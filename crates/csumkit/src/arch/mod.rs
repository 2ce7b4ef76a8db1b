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
use crate::Error;
use std::sync::atomic::{AtomicU8, Ordering};

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
    /// ARMv8 CRC32 instructions (CRC32C) and PMULL folding.
    Aarch64CrcPmull,
}

impl Backend {
    /// Every backend, slowest first.
    pub const ALL: [Backend; 4] =
        [Backend::Portable, Backend::X86Pclmul, Backend::X86VpclmulAvx2, Backend::Aarch64CrcPmull];

    /// Stable name, shown by `csumkit backend` and in benchmark output.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Portable => "portable-slice16",
            Backend::X86Pclmul => "x86_64-sse42-pclmul",
            Backend::X86VpclmulAvx2 => "x86_64-vpclmul-avx2",
            Backend::Aarch64CrcPmull => "aarch64-crc-pmull",
        }
    }

    /// Parses a name as printed by [`Backend::name`]; `portable` is accepted too.
    pub fn from_name(name: &str) -> Result<Backend, Error> {
        let name = name.trim();
        if name == "portable" {
            return Ok(Backend::Portable);
        }
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == name)
            .ok_or_else(|| Error::UnknownBackend { name: name.to_string() })
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
    pub fn from_env() -> Result<Option<Backend>, Error> {
        match std::env::var(BACKEND_ENV_VAR) {
            Ok(name) if !name.trim().is_empty() => {
                let backend = Backend::from_name(&name)?;
                if !backend.is_available() {
                    return Err(Error::BackendUnavailable { name: backend.name() });
                }
                Ok(Some(backend))
            }
            _ => Ok(None),
        }
    }

    /// The backend the free functions use: `CSUMKIT_BACKEND` if valid, else
    /// the fastest available. Decided on first use and cached. An invalid
    /// `CSUMKIT_BACKEND` is reported once on stderr (the CLI turns it into an
    /// error instead).
    #[inline(always)]
    pub fn active() -> Backend {
        match ACTIVE.load(Ordering::Relaxed) {
            1 => Backend::Portable,
            2 => Backend::X86Pclmul,
            3 => Backend::X86VpclmulAvx2,
            4 => Backend::Aarch64CrcPmull,
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
        backend
    }

    /// Pins the backend for the whole process.
    pub fn force(self) -> Result<(), Error> {
        if !self.is_available() {
            return Err(Error::BackendUnavailable { name: self.name() });
        }
        ACTIVE.store(self.tag(), Ordering::Relaxed);
        Ok(())
    }

    const fn tag(self) -> u8 {
        match self {
            Backend::Portable => 1,
            Backend::X86Pclmul => 2,
            Backend::X86VpclmulAvx2 => 3,
            Backend::Aarch64CrcPmull => 4,
        }
    }

    /// Checks availability so the `*_with` entry points never run an
    /// instruction the CPU lacks.
    pub(crate) fn checked(self) -> Result<Backend, Error> {
        if self.is_available() {
            Ok(self)
        } else {
            Err(Error::BackendUnavailable { name: self.name() })
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

/// Raw register update (no init, no final XOR) on `backend`, which the caller
/// has checked is available. Inlined into the public functions, so short
/// inputs reach their small kernel without passing through the big ones.
#[inline(always)]
pub(crate) fn raw_update(backend: Backend, spec: &Spec, state: u64, data: &[u8]) -> u64 {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        use crate::crc::Algorithm;
        if backend == Backend::Portable {
            return spec.update_portable(state, data);
        }
        if spec.algorithm == Algorithm::Crc32c && data.len() < native::CRC32C_FOLD_MIN_BYTES {
            // SAFETY: every hardware backend implies the CRC32C instructions
            // and was checked available (`Backend::active` only returns
            // available backends; `*_with` entry points call `checked`).
            return unsafe { native::crc32c_short(state, data) };
        }
        if spec.algorithm != Algorithm::Crc32c && data.len() < native::TABLE_FOLD_MIN_BYTES {
            return spec.update_portable(state, data);
        }
        // SAFETY: as above, for the backend's folding instructions.
        unsafe { native::update(backend, spec.algorithm, state, data) }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = backend;
        spec.update_portable(state, data)
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
