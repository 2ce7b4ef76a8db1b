//! `csumkit bench …`: benchmarks that print tables. Everything compared is
//! measured side by side in one run (ratios), because shared machines are
//! noisy; each figure is the median of repeated samples.

mod crc;
mod table;
mod timing;

use clap::Subcommand;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// CRC engines and algebra: seed-000 flip table, splice, combine, bulk GB/s vs peers.
    Crc(crc::CrcArgs),
}

pub fn run(command: BenchCommand) -> ExitCode {
    match command {
        BenchCommand::Crc(args) => crc::run(&args),
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
