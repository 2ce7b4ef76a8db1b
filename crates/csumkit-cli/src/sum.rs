//! `csumkit sum`: checksums of files (or stdin), one line each, in the
//! format of `sha256sum`; `--check` verifies such lines.

use crate::encode::{render, Format};
use crate::json;
use clap::Args;
use csumkit::file::{checksum_path, checksum_reader, Options};
use csumkit::Algorithm;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Files at least this large get a progress bar when stderr is a terminal.
const PROGRESS_MIN_BYTES: u64 = 1 << 30;

#[derive(Args)]
pub struct SumArgs {
    /// Checksum algorithm: crc32c, crc64nvme or crc16t10dif (no aliases:
    /// "crc64" alone names several different CRCs).
    #[arg(long, short, default_value = "crc32c", value_parser = parse_algorithm)]
    algo: Algorithm,
    /// Output encoding; base64 matches S3's x-amz-checksum-crc32c / -crc64nvme headers.
    #[arg(long, short, value_enum, default_value_t = Format::Hex)]
    format: Format,
    /// Worker threads for large files (0 = one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Read `CHECKSUM  PATH` lines from the FILEs (as printed by `csumkit sum`
    /// with the same --algo and --format) and check each path.
    #[arg(long, short)]
    check: bool,
    /// With --check: do not print OK for each file that matches.
    #[arg(long, requires = "check")]
    quiet: bool,
    /// With --check: print nothing; the exit status says it all.
    #[arg(long, requires = "check")]
    status: bool,
    /// Print one JSON document instead of lines.
    #[arg(long, conflicts_with = "check")]
    json: bool,
    /// Files to checksum; `-` or none reads standard input.
    files: Vec<PathBuf>,
}

fn parse_algorithm(name: &str) -> Result<Algorithm, String> {
    name.parse::<Algorithm>().map_err(|e| e.to_string())
}

pub fn run(args: &SumArgs) -> ExitCode {
    let stdin_only = [PathBuf::from("-")];
    let files: &[PathBuf] = if args.files.is_empty() { &stdin_only } else { &args.files };
    if args.check {
        return check(args, files);
    }
    let mut failed = false;
    let mut records = Vec::new();
    for path in files {
        match checksum_one(args, path) {
            Ok(crc) => {
                let value = render(crc, args.algo.width(), args.format);
                if args.json {
                    records.push(json::object(&[
                        ("path", json::string(&path.to_string_lossy())),
                        ("algorithm", json::string(args.algo.name())),
                        ("format", json::string(format_name(args.format))),
                        ("checksum", json::string(&value)),
                    ]));
                } else {
                    println!("{}", line(&value, &path.to_string_lossy()));
                }
            }
            Err(message) => {
                eprintln!("csumkit: {message}");
                if args.json {
                    records.push(json::object(&[
                        ("path", json::string(&path.to_string_lossy())),
                        ("error", json::string(&message)),
                    ]));
                }
                failed = true;
            }
        }
    }
    if args.json {
        println!("{}", json::array(&records));
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn format_name(format: Format) -> &'static str {
    match format {
        Format::Hex => "hex",
        Format::Base64 => "base64",
        Format::Decimal => "decimal",
    }
}

fn checksum_one(args: &SumArgs, path: &Path) -> Result<u64, String> {
    if path.as_os_str() == "-" {
        return checksum_reader(args.algo, &mut std::io::stdin().lock(), &|_| {})
            .map(|done| done.crc)
            .map_err(|e| format!("cannot read standard input: {e}"));
    }
    let options = Options { threads: args.threads, ..Options::default() };
    let bar = progress_bar(path);
    let progress = |done: u64| {
        if let Some(bar) = &bar {
            bar.set_position(done);
        }
    };
    let result = checksum_path(args.algo, path, &options, &progress).map(|done| done.crc).map_err(|e| e.to_string());
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result
}

/// `checksum  name`, with coreutils' escaping: a name holding a backslash,
/// newline or carriage return is written with `\\`, `\n`, `\r` and the line
/// starts with a backslash, so every line stays one line.
pub fn line(checksum: &str, name: &str) -> String {
    match display_name(name).strip_prefix('\\') {
        Some(escaped) => format!("\\{checksum}  {escaped}"),
        None => format!("{checksum}  {name}"),
    }
}

/// A name as `--check` prints it: escaped, behind a backslash, when it
/// holds a backslash, newline or carriage return (as coreutils does).
fn display_name(name: &str) -> String {
    if name.contains(['\\', '\n', '\r']) {
        format!("\\{}", name.replace('\\', "\\\\").replace('\n', "\\n").replace('\r', "\\r"))
    } else {
        name.to_string()
    }
}

/// The checksum and name of one line of `sum` output, or `None` when the
/// line is not of that form.
pub fn parse_line(line: &str) -> Option<(String, String)> {
    let (escaped, rest) = match line.strip_prefix('\\') {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let (checksum, name) = rest.split_once("  ").or_else(|| rest.split_once(" *"))?;
    if checksum.is_empty() || name.is_empty() || checksum.contains(char::is_whitespace) {
        return None;
    }
    let name = if escaped { unescape(name)? } else { name.to_string() };
    Some((checksum.to_string(), name))
}

fn unescape(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '\\' => out.push('\\'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            _ => return None,
        }
    }
    Some(out)
}

/// `--check`: like `sha256sum -c`.
fn check(args: &SumArgs, lists: &[PathBuf]) -> ExitCode {
    let (mut mismatched, mut unreadable, mut malformed, mut checked) = (0u64, 0u64, 0u64, 0u64);
    // A checksum of the wrong length was made with another --algo or --format.
    let length = match args.format {
        Format::Decimal => None,
        _ => Some(render(0, args.algo.width(), args.format).len()),
    };
    let mut wrong_length = 0u64;
    for list in lists {
        let reader: Box<dyn BufRead> = if list.as_os_str() == "-" {
            Box::new(std::io::stdin().lock())
        } else {
            match std::fs::File::open(list) {
                Ok(f) => Box::new(std::io::BufReader::new(f)),
                Err(e) => {
                    eprintln!("csumkit: {}: {e}", list.display());
                    unreadable += 1;
                    continue;
                }
            }
        };
        for (number, text) in reader.lines().enumerate() {
            let text = match text {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("csumkit: {}: {e}", list.display());
                    unreadable += 1;
                    break;
                }
            };
            let Some((expected, name)) = parse_line(&text) else {
                if !text.trim().is_empty() {
                    malformed += 1;
                    if !args.status {
                        eprintln!("csumkit: {}: line {}: not a CHECKSUM  PATH line", list.display(), number + 1);
                    }
                }
                continue;
            };
            let shown = display_name(&name);
            if let Some(length) = length.filter(|&l| l != expected.len()) {
                wrong_length += 1;
                if !args.status && wrong_length == 1 {
                    eprintln!(
                        "csumkit: {}: line {}: {:?} has {} characters, but a {} in {} has {length}: the list was made \
                         with another --algo or --format",
                        list.display(),
                        number + 1,
                        expected,
                        expected.len(),
                        args.algo.name(),
                        args.format.name()
                    );
                }
                continue;
            }
            checked += 1;
            match checksum_one(args, Path::new(&name)) {
                Ok(crc) => {
                    let got = render(crc, args.algo.width(), args.format);
                    let same = match args.format {
                        Format::Hex => got.eq_ignore_ascii_case(&expected),
                        _ => got == expected,
                    };
                    if !same {
                        mismatched += 1;
                    }
                    let silent = args.status || (same && args.quiet);
                    if !silent {
                        println!("{shown}: {}", if same { "OK" } else { "FAILED" });
                    }
                }
                Err(message) => {
                    unreadable += 1;
                    if !args.status {
                        eprintln!("csumkit: {message}");
                        println!("{shown}: FAILED open or read");
                    }
                }
            }
        }
    }
    if checked == 0 && mismatched + unreadable == 0 {
        if !args.status {
            let what = if wrong_length > 0 { "for this --algo and --format " } else { "" };
            eprintln!("csumkit: no properly formatted checksum lines {what}found");
        }
        return ExitCode::FAILURE;
    }
    if !args.status {
        if wrong_length > 0 {
            eprintln!("csumkit: WARNING: {wrong_length} line(s) with a checksum of the wrong length, not checked");
        }
        if malformed > 0 {
            eprintln!("csumkit: WARNING: {malformed} line(s) improperly formatted");
        }
        if unreadable > 0 {
            eprintln!("csumkit: WARNING: {unreadable} listed file(s) could not be read");
        }
        if mismatched > 0 {
            eprintln!("csumkit: WARNING: {mismatched} computed checksum(s) did NOT match");
        }
    }
    if mismatched + unreadable + wrong_length > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn progress_bar(path: &Path) -> Option<ProgressBar> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_newlines_and_backslashes_round_trip() {
        for name in ["plain.txt", "a b", "new\nline", "back\\slash", "cr\r", "\\n literally"] {
            let text = line("e3069283", name);
            assert!(!text.contains('\n'), "{text:?}");
            assert_eq!(parse_line(&text), Some(("e3069283".to_string(), name.to_string())), "{text:?}");
        }
        assert_eq!(line("e3069283", "a\nb"), "\\e3069283  a\\nb");
        assert_eq!(parse_line("e3069283 *bin.dat"), Some(("e3069283".into(), "bin.dat".into())));
        for bad in ["", "e3069283", "e3069283 one-space", "\\e3069283  bad\\q"] {
            assert_eq!(parse_line(bad), None, "{bad:?}");
        }
    }
}
