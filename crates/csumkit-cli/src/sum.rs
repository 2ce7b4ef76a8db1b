//! `csumkit sum`: checksums of files (or stdin), one line each.

use crate::encode::{render, Format};
use clap::Args;
use csumkit::file::{checksum_path, checksum_reader, Options};
use csumkit::Algorithm;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// Files at least this large get a progress bar when stderr is a terminal.
const PROGRESS_MIN_BYTES: u64 = 1 << 30;

#[derive(Args)]
pub struct SumArgs {
    /// Checksum algorithm.
    #[arg(long, short, default_value = "crc32c", value_parser = parse_algorithm)]
    algo: Algorithm,
    /// Output encoding; base64 matches S3's x-amz-checksum-crc32c / -crc64nvme headers.
    #[arg(long, short, value_enum, default_value_t = Format::Hex)]
    format: Format,
    /// Worker threads for large files (0 = one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Files to checksum; `-` reads standard input.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

fn parse_algorithm(name: &str) -> Result<Algorithm, String> {
    Algorithm::from_name(name).map_err(|e| e.to_string())
}

pub fn run(args: &SumArgs) -> ExitCode {
    let mut failed = false;
    let options = Options { threads: args.threads, ..Options::default() };
    for path in &args.files {
        let result = if path.as_os_str() == "-" {
            checksum_reader(args.algo, &mut std::io::stdin().lock(), &|_| {})
                .map_err(|e| format!("cannot read standard input: {e}"))
        } else {
            let bar = progress_bar(path);
            let progress = |done: u64| {
                if let Some(bar) = &bar {
                    bar.set_position(done);
                }
            };
            let result = checksum_path(args.algo, path, &options, &progress).map_err(|e| e.to_string());
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            result
        };
        match result {
            Ok(done) => println!("{}  {}", render(done.crc, args.algo.width(), args.format), path.display()),
            Err(message) => {
                eprintln!("csumkit: {message}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn progress_bar(path: &std::path::Path) -> Option<ProgressBar> {
    let len = std::fs::metadata(path).ok()?.len();
    if len < PROGRESS_MIN_BYTES || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .ok()?
        .progress_chars("=> "),
    );
    bar.set_message(path.display().to_string());
    Some(bar)
}
