//! `import csumkit`: the csumkit CRC engines and algebra for Python.
//!
//! Functions take any object with the buffer protocol (bytes, bytearray,
//! memoryview, mmap, C-contiguous numpy arrays of any dtype) and work like
//! `binascii.crc32`: `csumkit.crc32c(data, value=0)` continues from `value`.
//! The GIL is released while hashing buffers of `GIL_RELEASE_MIN_BYTES` or
//! more, so threads scale.

#![deny(unsafe_op_in_unsafe_fn)]

use csumkit_core::{crc16t10dif, crc32c, crc64nvme, Algorithm, Error};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Buffers at least this long are hashed with the GIL released: below it,
/// releasing and re-taking the GIL costs more than the CRC (~100 ns).
const GIL_RELEASE_MIN_BYTES: usize = 64 * 1024;

/// A borrowed view of an object's bytes (PyBUF_SIMPLE: contiguous, any
/// item format), released on drop.
struct Bytes {
    view: Box<ffi::Py_buffer>,
}

impl Bytes {
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        // SAFETY: Py_buffer is a plain C struct; all-zero is its "empty" state.
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `obj` is a live object and the GIL is held; `view` is writable.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_SIMPLE) } != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(Bytes { view })
    }

    fn as_slice(&self) -> &[u8] {
        let len = usize::try_from(self.view.len).unwrap_or(0);
        if self.view.buf.is_null() || len == 0 {
            return &[];
        }
        // SAFETY: a successful PyBUF_SIMPLE request exposes `len` contiguous
        // bytes at `buf`, valid until PyBuffer_Release.
        unsafe { std::slice::from_raw_parts(self.view.buf.cast::<u8>(), len) }
    }
}

impl Drop for Bytes {
    fn drop(&mut self) {
        // SAFETY: obtained by PyObject_GetBuffer and released once; every
        // `Bytes` is dropped inside a function that holds the GIL.
        unsafe { ffi::PyBuffer_Release(&mut *self.view) }
    }
}

/// Runs `f` over the object's bytes, without the GIL when they are many.
fn with_bytes<T: Send>(py: Python<'_>, data: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> T + Send) -> PyResult<T> {
    let bytes = Bytes::get(data)?;
    let slice = bytes.as_slice();
    Ok(if slice.len() >= GIL_RELEASE_MIN_BYTES { py.allow_threads(|| f(slice)) } else { f(slice) })
}

fn value_error(e: csumkit_core::crc::CrcError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn algorithm(name: &str) -> PyResult<Algorithm> {
    Algorithm::from_name(name).map_err(value_error)
}

/// A checksum argument: an int that fits the algorithm's width.
fn crc_arg(value: &Bound<'_, PyAny>, algorithm: Algorithm, what: &str) -> PyResult<u64> {
    let width = algorithm.width();
    let max = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
    match value.extract::<u64>() {
        Ok(v) if v <= max => Ok(v),
        _ => Err(PyValueError::new_err(format!(
            "{what} must be an int in 0..2**{width} for {algorithm}, got {}",
            value.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into())
        ))),
    }
}

fn len_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    value.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a non-negative int below 2**64, got {}",
            value.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into())
        ))
    })
}

/// CRC-32C (Castagnoli) of `data`, continuing from `value`.
#[pyfunction(name = "crc32c")]
#[pyo3(signature = (data, value = None))]
fn py_crc32c(py: Python<'_>, data: &Bound<'_, PyAny>, value: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    update(py, Algorithm::Crc32c, data, value)
}

/// CRC-64/NVME of `data`, continuing from `value`.
#[pyfunction(name = "crc64nvme")]
#[pyo3(signature = (data, value = None))]
fn py_crc64nvme(py: Python<'_>, data: &Bound<'_, PyAny>, value: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    update(py, Algorithm::Crc64Nvme, data, value)
}

/// CRC-16/T10-DIF of `data`, continuing from `value`.
#[pyfunction(name = "crc16t10dif")]
#[pyo3(signature = (data, value = None))]
fn py_crc16t10dif(py: Python<'_>, data: &Bound<'_, PyAny>, value: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    update(py, Algorithm::Crc16T10Dif, data, value)
}

fn update(py: Python<'_>, a: Algorithm, data: &Bound<'_, PyAny>, value: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    let start = value.map(|v| crc_arg(v, a, "value")).transpose()?.unwrap_or(0);
    with_bytes(py, data, |bytes| a.update(start, bytes))
}

/// Checksum of A||B from crc(A), crc(B) and len(B), without the data.
#[pyfunction]
#[pyo3(signature = (crc_a, crc_b, len_b, algorithm = "crc32c"))]
fn combine(
    crc_a: &Bound<'_, PyAny>,
    crc_b: &Bound<'_, PyAny>,
    len_b: &Bound<'_, PyAny>,
    algorithm: &str,
) -> PyResult<u64> {
    let a = self::algorithm(algorithm)?;
    Ok(a.combine(crc_arg(crc_a, a, "crc_a")?, crc_arg(crc_b, a, "crc_b")?, len_arg(len_b, "len_b")?))
}

/// Checksum of the data followed by `zeros` zero bytes.
#[pyfunction]
#[pyo3(signature = (crc, zeros, algorithm = "crc32c"))]
fn zero_extend(crc: &Bound<'_, PyAny>, zeros: &Bound<'_, PyAny>, algorithm: &str) -> PyResult<u64> {
    let a = self::algorithm(algorithm)?;
    let (crc, zeros) = (crc_arg(crc, a, "crc")?, len_arg(zeros, "zeros")?);
    Ok(match a {
        Algorithm::Crc32c => crc32c::zero_extend(crc as u32, zeros) as u64,
        Algorithm::Crc64Nvme => crc64nvme::zero_extend(crc, zeros),
        Algorithm::Crc16T10Dif => crc16t10dif::zero_extend(crc as u16, zeros) as u64,
    })
}

/// Checksum after bits [bit_offset, bit_offset + bit_len) of a
/// `total_bits`-bit buffer flip (Linux bitmap order), in O(log n).
#[pyfunction]
#[pyo3(signature = (crc, total_bits, bit_offset, bit_len, algorithm = "crc32c"))]
fn flip_range(
    crc: &Bound<'_, PyAny>,
    total_bits: &Bound<'_, PyAny>,
    bit_offset: &Bound<'_, PyAny>,
    bit_len: &Bound<'_, PyAny>,
    algorithm: &str,
) -> PyResult<u64> {
    let a = self::algorithm(algorithm)?;
    let crc = crc_arg(crc, a, "crc")?;
    let (t, o, l) =
        (len_arg(total_bits, "total_bits")?, len_arg(bit_offset, "bit_offset")?, len_arg(bit_len, "bit_len")?);
    match a {
        Algorithm::Crc32c => crc32c::flip_range(crc as u32, t, o, l).map(u64::from),
        Algorithm::Crc64Nvme => crc64nvme::flip_range(crc, t, o, l),
        Algorithm::Crc16T10Dif => crc16t10dif::flip_range(crc as u16, t, o, l).map(u64::from),
    }
    .map_err(value_error)
}

/// Checksum of a `total_len`-byte buffer after the bytes at `offset`
/// change from `old` to `new` (same length), without the rest of the buffer.
#[pyfunction]
#[pyo3(signature = (crc, total_len, offset, old, new, algorithm = "crc32c"))]
fn splice(
    crc: &Bound<'_, PyAny>,
    total_len: &Bound<'_, PyAny>,
    offset: &Bound<'_, PyAny>,
    old: &Bound<'_, PyAny>,
    new: &Bound<'_, PyAny>,
    algorithm: &str,
) -> PyResult<u64> {
    let a = self::algorithm(algorithm)?;
    let crc = crc_arg(crc, a, "crc")?;
    let (total, at) = (len_arg(total_len, "total_len")?, len_arg(offset, "offset")?);
    let (old, new) = (Bytes::get(old)?, Bytes::get(new)?);
    let (old, new) = (old.as_slice(), new.as_slice());
    match a {
        Algorithm::Crc32c => crc32c::splice(crc as u32, total, at, old, new).map(u64::from),
        Algorithm::Crc64Nvme => crc64nvme::splice(crc, total, at, old, new),
        Algorithm::Crc16T10Dif => crc16t10dif::splice(crc as u16, total, at, old, new).map(u64::from),
    }
    .map_err(value_error)
}

/// Whole-file checksum on all cores (chunks combined in order). The same
/// `algorithm` keyword and default as every other function; `format` is
/// "hex" (as `csumkit sum` prints), "base64" (the form S3 reports in
/// x-amz-checksum-crc64nvme / -crc32c) or "int".
#[pyfunction]
#[pyo3(signature = (path, algorithm = "crc32c", format = "hex"))]
fn file_checksum(py: Python<'_>, path: std::path::PathBuf, algorithm: &str, format: &str) -> PyResult<PyObject> {
    let (a, fmt) = (self::algorithm(algorithm)?, format);
    if !matches!(fmt, "base64" | "hex" | "int") {
        return Err(PyValueError::new_err(format!("format must be 'hex', 'base64' or 'int', got {fmt:?}")));
    }
    let options = csumkit_core::file::Options::default();
    let done =
        py.allow_threads(|| csumkit_core::file::checksum_path(a, &path, &options, &|_| {})).map_err(|e| match e {
            Error::Io { context, source } => {
                PyErr::from(std::io::Error::new(source.kind(), format!("{context}: {source}")))
            }
            other => PyOSError::new_err(other.to_string()),
        })?;
    let width_bytes = (a.width() / 8) as usize;
    let big_endian = &done.crc.to_be_bytes()[8 - width_bytes..];
    Ok(match fmt {
        "int" => done.crc.into_pyobject(py)?.into_any().unbind(),
        "hex" => format!("{:0w$x}", done.crc, w = width_bytes * 2).into_pyobject(py)?.into_any().unbind(),
        _ => py
            .import("base64")?
            .call_method1("b64encode", (PyBytes::new(py, big_endian),))?
            .call_method1("decode", ("ascii",))?
            .unbind(),
    })
}

/// The state of a hashlib-style object: algorithm, checksum, length.
#[derive(Clone, Copy)]
struct State {
    algorithm: Algorithm,
    crc: u64,
}

impl State {
    fn update(&mut self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let (a, crc) = (self.algorithm, self.crc);
        self.crc = with_bytes(py, data, |bytes| a.update(crc, bytes))?;
        Ok(())
    }

    fn digest<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let n = (self.algorithm.width() / 8) as usize;
        PyBytes::new(py, &self.crc.to_be_bytes()[8 - n..])
    }

    fn hexdigest(&self) -> String {
        format!("{:0w$x}", self.crc, w = (self.algorithm.width() / 4) as usize)
    }
}

/// hashlib-style classes: `Crc32c(b"data").hexdigest()`.
macro_rules! hasher_class {
    ($rust:ident, $python:literal, $algorithm:expr) => {
        #[doc = concat!("Streaming ", $python, " in the hashlib style: update, digest (big-endian), hexdigest, intdigest, copy.")]
        #[pyclass(name = $python, module = "csumkit")]
        struct $rust {
            state: State,
        }

        #[pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = (data = None))]
            fn new(py: Python<'_>, data: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
                let mut state = State { algorithm: $algorithm, crc: 0 };
                if let Some(data) = data {
                    state.update(py, data)?;
                }
                Ok($rust { state })
            }

            fn update(&mut self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
                self.state.update(py, data)
            }

            fn digest<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
                self.state.digest(py)
            }

            fn hexdigest(&self) -> String {
                self.state.hexdigest()
            }

            fn intdigest(&self) -> u64 {
                self.state.crc
            }

            fn copy(&self) -> Self {
                $rust { state: self.state }
            }

            #[getter]
            fn name(&self) -> &'static str {
                self.state.algorithm.name()
            }

            #[getter]
            fn digest_size(&self) -> u32 {
                self.state.algorithm.width() / 8
            }

            fn __repr__(&self) -> String {
                format!("<csumkit.{} {}>", $python, self.state.hexdigest())
            }
        }
    };
}

hasher_class!(Crc32cHasher, "Crc32c", Algorithm::Crc32c);
hasher_class!(Crc64NvmeHasher, "Crc64Nvme", Algorithm::Crc64Nvme);
hasher_class!(Crc16T10DifHasher, "Crc16T10Dif", Algorithm::Crc16T10Dif);

#[pymodule]
fn csumkit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("backend", csumkit_core::Backend::active().name())?;
    m.add("GIL_RELEASE_MIN_BYTES", GIL_RELEASE_MIN_BYTES)?;
    m.add_function(wrap_pyfunction!(py_crc32c, m)?)?;
    m.add_function(wrap_pyfunction!(py_crc64nvme, m)?)?;
    m.add_function(wrap_pyfunction!(py_crc16t10dif, m)?)?;
    m.add_function(wrap_pyfunction!(combine, m)?)?;
    m.add_function(wrap_pyfunction!(zero_extend, m)?)?;
    m.add_function(wrap_pyfunction!(flip_range, m)?)?;
    m.add_function(wrap_pyfunction!(splice, m)?)?;
    m.add_function(wrap_pyfunction!(file_checksum, m)?)?;
    m.add_class::<Crc32cHasher>()?;
    m.add_class::<Crc64NvmeHasher>()?;
    m.add_class::<Crc16T10DifHasher>()?;
    Ok(())
}
