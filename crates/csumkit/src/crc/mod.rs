//! Shared CRC machinery: parameter sets ([`Spec`]), GF(2) algebra, and the
//! macro that gives `crc32c`, `crc64nvme` and `crc16t10dif` the same API.

pub(crate) mod algebra;
pub(crate) mod api;
mod dynamic;
mod error;
#[cfg(any(target_arch = "aarch64", test))]
pub(crate) mod fold;
pub mod gf2;
pub mod spec;

pub use algebra::FLIP_TOTAL_BITS_MAX;
pub use error::CrcError;
pub use spec::{Algorithm, Spec};
