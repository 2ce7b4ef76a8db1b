//! `csumkit bench …`: benchmarks that print tables. Everything compared is
//! measured side by side in one run (ratios), because shared machines are
//! noisy; each figure is the median of repeated samples.

mod bytelog;
mod crc;
#[cfg(unix)]
mod ext4;
mod fallocate;
#[cfg(unix)]
mod fs;
mod offload;
mod phase_clock;
mod pipeline;
mod table;
mod timing;
#[cfg(unix)]
mod xattr;

use clap::Subcommand;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// CRC engines and algebra: flip_range vs full CRC, splice, combine, bulk GB/s vs peers.
    Crc(crc::CrcArgs),
    /// Sequential fallocate on the checksummed block-group allocator, per technique.
    Fallocate(fallocate::FallocateArgs),
    /// Checksummed writes: sync vs async (worker thread, io_uring), against the model.
    Pipeline(pipeline::PipelineArgs),
    /// ByteLog vs a block-granular commit log; replay speed; crash harness.
    Bytelog(bytelog::BytelogArgs),
    /// Write amplification: checksum tree vs checksums inline in PI; PI speed.
    Offload(offload::OffloadArgs),
    /// Absent-xattr lookups with and without the erofs name filter, cold and warm.
    #[cfg(unix)]
    Xattr(xattr::XattrArgs),
    /// csumfs's writer on ext4 images: incremental checksums vs full recompute.
    #[cfg(unix)]
    Ext4(ext4::Ext4Args),
    /// Whole filesystems: csumkit mount vs fuse2fs vs the kernel's ext4 (needs root).
    #[cfg(unix)]
    Fs(fs::FsArgs),
}

pub fn run(command: BenchCommand) -> ExitCode {
    match command {
        BenchCommand::Crc(args) => crc::run(&args),
        BenchCommand::Fallocate(args) => fallocate::run(&args),
        BenchCommand::Pipeline(args) => pipeline::run(&args),
        BenchCommand::Offload(args) => offload::run(&args),
        BenchCommand::Bytelog(args) => bytelog::run(&args),
        #[cfg(unix)]
        BenchCommand::Xattr(args) => xattr::run(&args),
        #[cfg(unix)]
        BenchCommand::Ext4(args) => ext4::run(&args),
        #[cfg(unix)]
        BenchCommand::Fs(args) => fs::run(&args),
    }
}

/// One line naming the machine and the backend, printed above every benchmark.
pub fn machine_line() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut features: Vec<&str> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    for (name, present) in [
        ("sse4.2", is_x86_feature_detected!("sse4.2")),
        ("pclmulqdq", is_x86_feature_detected!("pclmulqdq")),
        ("avx2", is_x86_feature_detected!("avx2")),
        ("vpclmulqdq", is_x86_feature_detected!("vpclmulqdq")),
        ("avx512f", is_x86_feature_detected!("avx512f")),
    ] {
        if present {
            features.push(name);
        }
    }
    #[cfg(target_arch = "aarch64")]
    for (name, present) in [
        ("crc", std::arch::is_aarch64_feature_detected!("crc")),
        ("pmull", std::arch::is_aarch64_feature_detected!("pmull")),
    ] {
        if present {
            features.push(name);
        }
    }
    format!(
        "machine: {cpu}, {cores} cores, features [{}]; csumkit backend: {}",
        features.join(" "),
        csumkit::Backend::active()
    )
}

/// A clap value parser for a whole number in `range` (a count of runs,
/// rounds, writers…: zero or absurd values are errors at parse time, not
/// panics or empty tables later).
pub fn count_in(range: std::ops::RangeInclusive<u64>) -> impl Fn(&str) -> Result<u64, String> + Clone {
    move |text: &str| {
        let value: u64 = text.trim().parse().map_err(|_| format!("{text:?} is not a whole number"))?;
        if range.contains(&value) {
            Ok(value)
        } else {
            Err(format!("{value} is outside {}..={}", range.start(), range.end()))
        }
    }
}

/// [`count_in`] for `usize` fields.
pub fn usize_in(range: std::ops::RangeInclusive<u64>) -> impl Fn(&str) -> Result<usize, String> + Clone {
    let parse = count_in(range);
    move |text: &str| parse(text).map(|v| v as usize)
}

/// A clap value parser for seconds: finite, above 0 and at most an hour.
pub fn parse_seconds(text: &str) -> Result<f64, String> {
    let value: f64 = text.trim().parse().map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if value.is_finite() && (0.001..=3600.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{text} is not between 0.001 and 3600 seconds"))
    }
}

/// The scratch directory of a benchmark in `parent`, removed on every exit
/// path (see [`crate::files::ScratchDir`]).
#[cfg(unix)]
pub fn scratch(parent: &std::path::Path, tag: &str) -> Result<crate::files::ScratchDir, csumkit::Error> {
    crate::files::ScratchDir::create(parent, tag)
}

/// A byte count with an optional binary suffix: `4096`, `64K`, `16M`, `2G`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last() {
        Some((i, 'k' | 'K')) => (&text[..i], 10),
        Some((i, 'm' | 'M')) => (&text[..i], 20),
        Some((i, 'g' | 'G')) => (&text[..i], 30),
        Some((i, 't' | 'T')) => (&text[..i], 40),
        _ => (text, 0),
    };
    let value: u64 = digits.parse().map_err(|_| format!("{text:?} is not a size like 4096, 64K, 16M or 2G"))?;
    value.checked_mul(1 << shift).ok_or_else(|| format!("{text:?} is too large"))
}
