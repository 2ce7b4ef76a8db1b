//! The C ABI of csumkit. Every function is a thin wrapper over the Rust
//! library; `include/csumkit.h` is generated from this file by cbindgen
//! (`tests/header.rs` fails when it is stale).
//!
//! Conventions: `csumkit_` prefix; checksums in zlib style (start from 0,
//! pass the previous value to continue); `data` may be NULL only when `len`
//! is 0, and a NULL `data` with a length is `CSUMKIT_NULL_POINTER`, never
//! read as empty; so every function that takes a buffer returns a
//! `csumkit_status` and writes its result through an out pointer;
//! streaming state is caller-allocated (no heap). Nothing panics across the
//! boundary: the wrapped functions cannot panic on any input.

#![allow(non_camel_case_types)] // C names
#![deny(unsafe_op_in_unsafe_fn)]

use csumkit_core::crc::CrcError;
use csumkit_core::{crc16t10dif, crc32c, crc64nvme};
use std::ffi::{c_char, CStr};
use std::sync::OnceLock;

/// Result of an operation that can fail. The values are part of the ABI.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum csumkit_status {
    /// Success.
    CSUMKIT_OK = 0,
    /// A required pointer was NULL.
    CSUMKIT_NULL_POINTER = 1,
    /// A bit range does not fit in its buffer.
    CSUMKIT_BIT_RANGE_OUT_OF_BOUNDS = 2,
    /// A byte range does not fit in its buffer.
    CSUMKIT_BYTE_RANGE_OUT_OF_BOUNDS = 3,
    /// A bit count that must be whole bytes is not.
    CSUMKIT_TOTAL_BITS_NOT_WHOLE_BYTES = 4,
    /// A length above a documented limit.
    CSUMKIT_TOO_LARGE = 5,
    /// An error this ABI version has no code for.
    CSUMKIT_OTHER_ERROR = 99,
}

use csumkit_status::*;

fn status_of(error: &CrcError) -> csumkit_status {
    match error {
        CrcError::BitRangeOutOfBounds { .. } => CSUMKIT_BIT_RANGE_OUT_OF_BOUNDS,
        CrcError::ByteRangeOutOfBounds { .. } | CrcError::LengthMismatch { .. } => CSUMKIT_BYTE_RANGE_OUT_OF_BOUNDS,
        CrcError::TotalBitsNotWholeBytes { .. } => CSUMKIT_TOTAL_BITS_NOT_WHOLE_BYTES,
        CrcError::TotalBitsTooLarge { .. } => CSUMKIT_TOO_LARGE,
        _ => CSUMKIT_OTHER_ERROR,
    }
}

/// A static, NUL-terminated description of `status` (any int is accepted).
#[no_mangle]
pub extern "C" fn csumkit_status_str(status: i32) -> *const c_char {
    let text: &'static CStr = match status {
        0 => c"ok",
        1 => c"a required pointer was NULL",
        2 => c"bit range is outside the buffer",
        3 => c"byte range is outside the buffer",
        4 => c"total_bits is not a multiple of 8",
        5 => c"a length exceeds its limit",
        99 => c"unexpected error",
        _ => c"unknown status code",
    };
    text.as_ptr()
}

/// The library version, e.g. "0.1.0" (static, NUL-terminated).
#[no_mangle]
pub extern "C" fn csumkit_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The engine in use, e.g. "x86_64-vpclmul-avx2" (static, NUL-terminated).
#[no_mangle]
pub extern "C" fn csumkit_backend() -> *const c_char {
    static NAME: OnceLock<Vec<u8>> = OnceLock::new();
    NAME.get_or_init(|| format!("{}\0", csumkit_core::Backend::active()).into_bytes()).as_ptr().cast()
}

/// # Safety
/// `data` is NULL or points to `len` readable bytes.
unsafe fn bytes<'a>(data: *const u8, len: usize) -> &'a [u8] {
    if data.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller guarantees `len` readable bytes at `data`.
        unsafe { std::slice::from_raw_parts(data, len) }
    }
}

fn write_out<T>(out: *mut T, result: Result<T, CrcError>) -> csumkit_status {
    if out.is_null() {
        return CSUMKIT_NULL_POINTER;
    }
    match result {
        Ok(value) => {
            // SAFETY: checked non-NULL; the caller passes a writable T.
            unsafe { out.write(value) };
            CSUMKIT_OK
        }
        Err(e) => status_of(&e),
    }
}

/// # Safety
/// `old` and `new_` are NULL or point to `len` readable bytes.
unsafe fn splice_args<'a>(old: *const u8, new_: *const u8, len: usize) -> Option<(&'a [u8], &'a [u8])> {
    if len > 0 && (old.is_null() || new_.is_null()) {
        return None;
    }
    // SAFETY: forwarded caller guarantee.
    Some(unsafe { (bytes(old, len), bytes(new_, len)) })
}

// ---- CRC32C -----------------------------------------------------------------

/// Streaming CRC32C state; initialise with `csumkit_crc32c_init`.
#[repr(C)]
pub struct csumkit_crc32c_state {
    /// Checksum of the bytes so far.
    pub crc: u32,
    /// Bytes so far.
    pub length: u64,
}

/// CRC32C of `data`, continuing from `crc` (0 to start), written to `out`.
/// `CSUMKIT_NULL_POINTER` when `out` is NULL, or `data` is NULL with `len` > 0
/// (then nothing is written).
///
/// # Safety
/// `data` is NULL or points to `len` readable bytes; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc32c(crc: u32, data: *const u8, len: usize, out: *mut u32) -> csumkit_status {
    if data.is_null() && len > 0 {
        return CSUMKIT_NULL_POINTER;
    }
    // SAFETY: forwarded caller guarantee.
    write_out(out, Ok(crc32c::update(crc, unsafe { bytes(data, len) })))
}

/// CRC32C of A||B from crc(A), crc(B) and len(B), in O(log len_b).
#[no_mangle]
pub extern "C" fn csumkit_crc32c_combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    crc32c::combine(crc_a, crc_b, len_b)
}

/// CRC32C of the data followed by `zeros` zero bytes.
#[no_mangle]
pub extern "C" fn csumkit_crc32c_zero_extend(crc: u32, zeros: u64) -> u32 {
    crc32c::zero_extend(crc, zeros)
}

/// CRC32C after bits [bit_offset, bit_offset + bit_len) of a `total_bits`
/// buffer flip (Linux bitmap bit order).
#[no_mangle]
pub extern "C" fn csumkit_crc32c_flip_range(
    crc: u32,
    total_bits: u64,
    bit_offset: u64,
    bit_len: u64,
    out: *mut u32,
) -> csumkit_status {
    write_out(out, crc32c::flip_range(crc, total_bits, bit_offset, bit_len))
}

/// CRC32C of a `total_len` buffer after its `len` bytes at `offset` change
/// from `old` to `new_`.
///
/// # Safety
/// `old` and `new_` point to `len` readable bytes each (or are NULL with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc32c_splice(
    crc: u32,
    total_len: u64,
    offset: u64,
    old: *const u8,
    new_: *const u8,
    len: usize,
    out: *mut u32,
) -> csumkit_status {
    // SAFETY: forwarded caller guarantee.
    let Some((old, new_)) = (unsafe { splice_args(old, new_, len) }) else { return CSUMKIT_NULL_POINTER };
    write_out(out, crc32c::splice(crc, total_len, offset, old, new_))
}

/// Starts a CRC32C stream.
#[no_mangle]
pub extern "C" fn csumkit_crc32c_init(state: *mut csumkit_crc32c_state) -> csumkit_status {
    write_out(state, Ok(csumkit_crc32c_state { crc: 0, length: 0 }))
}

/// Adds `data` to a CRC32C stream.
///
/// # Safety
/// `state` was initialised by `csumkit_crc32c_init`; `data` is NULL or points to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc32c_update(
    state: *mut csumkit_crc32c_state,
    data: *const u8,
    len: usize,
) -> csumkit_status {
    if state.is_null() || (data.is_null() && len > 0) {
        return CSUMKIT_NULL_POINTER;
    }
    // SAFETY: checked non-NULL; initialised by the caller.
    let state = unsafe { &mut *state };
    // SAFETY: forwarded caller guarantee.
    state.crc = crc32c::update(state.crc, unsafe { bytes(data, len) });
    state.length += len as u64;
    CSUMKIT_OK
}

/// The checksum of everything added to a CRC32C stream (0 for NULL).
///
/// # Safety
/// `state` is NULL or was initialised by `csumkit_crc32c_init`.
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc32c_final(state: *const csumkit_crc32c_state) -> u32 {
    // SAFETY: forwarded caller guarantee.
    unsafe { state.as_ref() }.map_or(0, |s| s.crc)
}

// ---- CRC64-NVMe ----------------------------------------------------------------

/// Streaming CRC64-NVMe state; initialise with `csumkit_crc64nvme_init`.
#[repr(C)]
pub struct csumkit_crc64nvme_state {
    /// Checksum of the bytes so far.
    pub crc: u64,
    /// Bytes so far.
    pub length: u64,
}

/// CRC64-NVMe of `data`, continuing from `crc` (0 to start), written to `out`.
/// `CSUMKIT_NULL_POINTER` when `out` is NULL, or `data` is NULL with `len` > 0
/// (then nothing is written).
///
/// # Safety
/// `data` is NULL or points to `len` readable bytes; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc64nvme(crc: u64, data: *const u8, len: usize, out: *mut u64) -> csumkit_status {
    if data.is_null() && len > 0 {
        return CSUMKIT_NULL_POINTER;
    }
    // SAFETY: forwarded caller guarantee.
    write_out(out, Ok(crc64nvme::update(crc, unsafe { bytes(data, len) })))
}

/// CRC64-NVMe of A||B from crc(A), crc(B) and len(B).
#[no_mangle]
pub extern "C" fn csumkit_crc64nvme_combine(crc_a: u64, crc_b: u64, len_b: u64) -> u64 {
    crc64nvme::combine(crc_a, crc_b, len_b)
}

/// CRC64-NVMe of the data followed by `zeros` zero bytes.
#[no_mangle]
pub extern "C" fn csumkit_crc64nvme_zero_extend(crc: u64, zeros: u64) -> u64 {
    crc64nvme::zero_extend(crc, zeros)
}

/// CRC64-NVMe after a run of bits flips (see `csumkit_crc32c_flip_range`).
#[no_mangle]
pub extern "C" fn csumkit_crc64nvme_flip_range(
    crc: u64,
    total_bits: u64,
    bit_offset: u64,
    bit_len: u64,
    out: *mut u64,
) -> csumkit_status {
    write_out(out, crc64nvme::flip_range(crc, total_bits, bit_offset, bit_len))
}

/// CRC64-NVMe after a region changes (see `csumkit_crc32c_splice`).
///
/// # Safety
/// `old` and `new_` point to `len` readable bytes each (or are NULL with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc64nvme_splice(
    crc: u64,
    total_len: u64,
    offset: u64,
    old: *const u8,
    new_: *const u8,
    len: usize,
    out: *mut u64,
) -> csumkit_status {
    // SAFETY: forwarded caller guarantee.
    let Some((old, new_)) = (unsafe { splice_args(old, new_, len) }) else { return CSUMKIT_NULL_POINTER };
    write_out(out, crc64nvme::splice(crc, total_len, offset, old, new_))
}

/// Starts a CRC64-NVMe stream.
#[no_mangle]
pub extern "C" fn csumkit_crc64nvme_init(state: *mut csumkit_crc64nvme_state) -> csumkit_status {
    write_out(state, Ok(csumkit_crc64nvme_state { crc: 0, length: 0 }))
}

/// Adds `data` to a CRC64-NVMe stream.
///
/// # Safety
/// `state` was initialised by `csumkit_crc64nvme_init`; `data` is NULL or points to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc64nvme_update(
    state: *mut csumkit_crc64nvme_state,
    data: *const u8,
    len: usize,
) -> csumkit_status {
    if state.is_null() || (data.is_null() && len > 0) {
        return CSUMKIT_NULL_POINTER;
    }
    // SAFETY: checked non-NULL; initialised by the caller.
    let state = unsafe { &mut *state };
    // SAFETY: forwarded caller guarantee.
    state.crc = crc64nvme::update(state.crc, unsafe { bytes(data, len) });
    state.length += len as u64;
    CSUMKIT_OK
}

/// The checksum of everything added to a CRC64-NVMe stream (0 for NULL).
///
/// # Safety
/// `state` is NULL or was initialised by `csumkit_crc64nvme_init`.
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc64nvme_final(state: *const csumkit_crc64nvme_state) -> u64 {
    // SAFETY: forwarded caller guarantee.
    unsafe { state.as_ref() }.map_or(0, |s| s.crc)
}

// ---- CRC16-T10DIF --------------------------------------------------------------

/// Streaming CRC16-T10DIF state; initialise with `csumkit_crc16t10dif_init`.
#[repr(C)]
pub struct csumkit_crc16t10dif_state {
    /// Checksum of the bytes so far.
    pub crc: u16,
    /// Bytes so far.
    pub length: u64,
}

/// CRC16-T10DIF of `data`, continuing from `crc` (0 to start), written to `out`.
/// `CSUMKIT_NULL_POINTER` when `out` is NULL, or `data` is NULL with `len` > 0
/// (then nothing is written).
///
/// # Safety
/// `data` is NULL or points to `len` readable bytes; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc16t10dif(crc: u16, data: *const u8, len: usize, out: *mut u16) -> csumkit_status {
    if data.is_null() && len > 0 {
        return CSUMKIT_NULL_POINTER;
    }
    // SAFETY: forwarded caller guarantee.
    write_out(out, Ok(crc16t10dif::update(crc, unsafe { bytes(data, len) })))
}

/// CRC16-T10DIF of A||B from crc(A), crc(B) and len(B).
#[no_mangle]
pub extern "C" fn csumkit_crc16t10dif_combine(crc_a: u16, crc_b: u16, len_b: u64) -> u16 {
    crc16t10dif::combine(crc_a, crc_b, len_b)
}

/// CRC16-T10DIF of the data followed by `zeros` zero bytes.
#[no_mangle]
pub extern "C" fn csumkit_crc16t10dif_zero_extend(crc: u16, zeros: u64) -> u16 {
    crc16t10dif::zero_extend(crc, zeros)
}

/// CRC16-T10DIF after a run of bits flips (see `csumkit_crc32c_flip_range`).
#[no_mangle]
pub extern "C" fn csumkit_crc16t10dif_flip_range(
    crc: u16,
    total_bits: u64,
    bit_offset: u64,
    bit_len: u64,
    out: *mut u16,
) -> csumkit_status {
    write_out(out, crc16t10dif::flip_range(crc, total_bits, bit_offset, bit_len))
}

/// CRC16-T10DIF after a region changes (see `csumkit_crc32c_splice`).
///
/// # Safety
/// `old` and `new_` point to `len` readable bytes each (or are NULL with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc16t10dif_splice(
    crc: u16,
    total_len: u64,
    offset: u64,
    old: *const u8,
    new_: *const u8,
    len: usize,
    out: *mut u16,
) -> csumkit_status {
    // SAFETY: forwarded caller guarantee.
    let Some((old, new_)) = (unsafe { splice_args(old, new_, len) }) else { return CSUMKIT_NULL_POINTER };
    write_out(out, crc16t10dif::splice(crc, total_len, offset, old, new_))
}

/// Starts a CRC16-T10DIF stream.
#[no_mangle]
pub extern "C" fn csumkit_crc16t10dif_init(state: *mut csumkit_crc16t10dif_state) -> csumkit_status {
    write_out(state, Ok(csumkit_crc16t10dif_state { crc: 0, length: 0 }))
}

/// Adds `data` to a CRC16-T10DIF stream.
///
/// # Safety
/// `state` was initialised by `csumkit_crc16t10dif_init`; `data` is NULL or points to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc16t10dif_update(
    state: *mut csumkit_crc16t10dif_state,
    data: *const u8,
    len: usize,
) -> csumkit_status {
    if state.is_null() || (data.is_null() && len > 0) {
        return CSUMKIT_NULL_POINTER;
    }
    // SAFETY: checked non-NULL; initialised by the caller.
    let state = unsafe { &mut *state };
    // SAFETY: forwarded caller guarantee.
    state.crc = crc16t10dif::update(state.crc, unsafe { bytes(data, len) });
    state.length += len as u64;
    CSUMKIT_OK
}

/// The checksum of everything added to a CRC16-T10DIF stream (0 for NULL).
///
/// # Safety
/// `state` is NULL or was initialised by `csumkit_crc16t10dif_init`.
#[no_mangle]
pub unsafe extern "C" fn csumkit_crc16t10dif_final(state: *const csumkit_crc16t10dif_state) -> u16 {
    // SAFETY: forwarded caller guarantee.
    unsafe { state.as_ref() }.map_or(0, |s| s.crc)
}
