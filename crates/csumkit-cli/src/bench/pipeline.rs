//! `csumkit bench pipeline`: the async data checksum model against measurement. Writes
//! the same data with checksums computed before the write (`sync`) and
//! during it (`async`), and measures the model's three rates (memory copy
//! M, checksum C, storage write S) in the same run, all taking turns, then
//! prints the model's bounds beside the measured rates.

use super::table::{num, size, Table};
use clap::Args;
use csumkit::pipeline::{AlignedBuf, ChecksumFile, FileSink, Mode, Sink, Writer};
use csumkit::Algorithm;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::VecDeque;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct PipelineArgs {
    /// 64 MiB per mode and target: seconds, for CI.
    #[arg(long)]
    quick: bool,
    /// Bytes written per mode and target (default 4G; 64M with --quick).
    #[arg(long, value_parser = super::parse_size)]
    size: Option<u64>,
    /// Directory of the regular-file target (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Bytes per write.
    #[arg(long, default_value = "1M", value_parser = super::parse_size)]
    write_size: u64,
    /// Passes over the data: each measures every rate and mode anew, and
    /// the tables report their medians (a noisy minute on a shared machine
    /// spoils one pass, not the run).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    passes: u16,
    /// Bytes per checksummed block.
    #[arg(long, default_value = "4K", value_parser = super::parse_size)]
    block_size: u64,
}

const GIB: f64 = (1u64 << 30) as f64;
/// Write buffers per mode, and the destinations of the M measurement.
const POOL_BYTES: u64 = 64 << 20;
/// The modes take turns after this many bytes each. Short turns spread a
/// drifting device over all modes alike: on this project's virtual disk,
/// S measured in 64 MiB turns came out 1.6-2.5x what 8 MiB turns gave
/// minutes apart, and above the checksummed modes of the same turns.
const TURN_BYTES: u64 = 8 << 20;
/// The patch series' example: M, C, S in GiB/s and its before/after.
const SEED_RATES: (f64, f64, f64) = (50.0, 45.0, 8.0);

/// The patch series' model, rates in any one unit.
fn model(m: f64, c: f64, s: f64) -> (f64, f64) {
    (1.0 / (1.0 / m + 1.0 / c + 1.0 / s), 1.0 / (1.0 / m + (1.0 / c).max(1.0 / s)))
}

pub fn run(args: &PipelineArgs) -> ExitCode {
    let quick = args.quick;
    let total = args.size.unwrap_or(if quick { 64 << 20 } else { 4 << 30 });
    let (ws, bs) = (args.write_size, args.block_size);
    if !bs.is_power_of_two() || !(512..=1 << 20).contains(&bs) || ws == 0 || !ws.is_multiple_of(bs) || ws > 1 << 30 {
        eprintln!(
            "csumkit: --write-size {ws} must be a multiple of --block-size {bs} (a power of two, 512..1M), at most 1G"
        );
        return ExitCode::from(2);
    }
    if total < ws || !total.is_multiple_of(ws) {
        eprintln!("csumkit: --size {total} must be a non-zero multiple of --write-size {ws}");
        return ExitCode::from(2);
    }
    let passes = usize::from(args.passes);
    if passes as u64 > total / ws {
        eprintln!("csumkit: --passes {passes} is more than the {} writes of --size {total}", total / ws);
        return ExitCode::from(2);
    }
    let dir = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut parents = vec![("file", dir.clone())];
    if Path::new("/dev/shm").is_dir() {
        parents.push(("/dev/shm", PathBuf::from("/dev/shm")));
    }
    // Each target's files in a scratch directory removed on any exit.
    let mut targets = Vec::new();
    for (name, parent) in parents {
        match super::scratch(&parent, &format!("bench-pipeline-{}", name.trim_start_matches('/').replace('/', "-"))) {
            Ok(scratch) => targets.push((name, scratch)),
            Err(e) => {
                eprintln!("csumkit: bench pipeline: {e}");
                return ExitCode::from(2);
            }
        }
    }

    println!("# csumkit bench pipeline{}", if quick { " --quick" } else { "" });
    println!("{}", super::machine_line());
    println!(
        "{} per mode and target in {} writes of {} blocks, in {passes} passes; the modes and the M, C and S \
         measurements take turns every {}; rates in GiB/s (2^30 bytes/s), medians of the passes; the \
         percentages are the passes' median (min-max).",
        size(total),
        size(ws),
        size(bs),
        size(TURN_BYTES)
    );

    let source = source_data(if quick { 32 << 20 } else { 256 << 20 }, ws as usize);
    // For reference only (the model uses the rates measured in the turns).
    let rate_bytes = if quick { 256 << 20 } else { 2 << 30 };
    let m_hot = median(|| copy_rate(&source, ws as usize, rate_bytes));
    let c64 = median(|| checksum_rate(&source, ws as usize, bs as usize, Algorithm::Crc64Nvme, rate_bytes));

    // Each target: every file is written once to allocate it, then once timed.
    let progress = progress_bar(2 * (MODES.len() as u64 + 1) * total * targets.len() as u64);
    let mut rates = Table::new(&["rate", "what", "GiB/s"]);
    let mut models = Table::new(&["target", "S", "model before", "model after", "model gain"]);
    let mut measured = Table::new(&["target", "writes", "GiB/s", "gain over sync", "of model after", "target"]);
    // Whether each async mode met the targets on every target so far.
    let mut met = [true; MODES.len()];
    let mut fell_back = false;
    for (name, scratch) in &targets {
        let dir = scratch.path();
        let data_path = scratch.join("data");
        let outcome = measure_target(&data_path, &source, total, passes, ws, bs, &progress);
        let _ = std::fs::remove_file(data_path.with_extension("raw"));
        for (mode, depth) in MODES {
            let _ = std::fs::remove_file(data_path.with_extension(file_name(mode, depth)));
            let _ = std::fs::remove_file(data_path.with_extension(format!("{}.csum", file_name(mode, depth))));
        }
        let Measured { passes, direct, uring_fell_back } = match outcome {
            Ok(v) => v,
            Err(e) => {
                eprintln!("csumkit: {name} target in {}: {e}", dir.display());
                return ExitCode::from(2);
            }
        };
        fell_back |= uring_fell_back;
        let median_rate = |f: &dyn Fn(&Rates) -> f64| median_of(passes.iter().map(f).collect());
        let (m, c, s) = (median_rate(&|r| r.m), median_rate(&|r| r.c), median_rate(&|r| r.s));
        let (before, after) = model(m, c, s);
        rates.row(vec![
            format!("M {name}"),
            format!("memory copy, {} at a time, into {} of destinations", size(ws), size(POOL_BYTES)),
            num(m),
        ]);
        rates.row(vec![format!("C {name}"), format!("CRC32C of {} blocks", size(bs)), num(c)]);
        rates.row(vec![
            format!("S {name}"),
            format!("{} write to {}{}", size(ws), dir.display(), if direct { ", O_DIRECT" } else { ", buffered" }),
            num(s),
        ]);
        models.row(vec![name.to_string(), num(s), num(before), num(after), percent_change(after / before)]);
        for (k, (mode, depth)) in MODES.into_iter().enumerate() {
            // Each pass against its own bound and its own sync: a noisy
            // minute moves both.
            let of_bound = spread(passes.iter().map(|r| r.modes[k] / model(r.m, r.c, r.s).1).collect());
            let over_sync = spread(passes.iter().map(|r| r.modes[k] / r.modes[0]).collect());
            let (gain, verdict) = if mode == Mode::Sync {
                ("-".to_string(), "-")
            } else {
                let ok = of_bound.median >= 0.9 && over_sync.median >= 1.0;
                met[k] &= ok;
                (over_sync.gain(), if ok { "met" } else { "MISSED" })
            };
            measured.row(vec![
                name.to_string(),
                mode_label(mode, depth),
                num(median_rate(&|r| r.modes[k])),
                gain,
                of_bound.percent(),
                verdict.to_string(),
            ]);
        }
    }
    let (sm, sc, ss) = SEED_RATES;
    let (seed_before, seed_after) = model(sm, sc, ss);
    models.row(vec![
        "published example (M=50 C=45 S=8)".into(),
        num(ss),
        num(seed_before),
        num(seed_after),
        percent_change(seed_after / seed_before),
    ]);
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    rates.row(vec!["M hot".into(), format!("memory copy into one reused {} buffer (reference)", size(ws)), num(m_hot)]);
    rates.row(vec!["C64".into(), format!("CRC64-NVMe of {} blocks (reference)", size(bs)), num(c64)]);
    rates.print("Rates measured on this machine, in the same turns as the writes of each target");
    models.print(&format!(
        "Model: before = 1/(1/M + 1/C + 1/S), after = 1/(1/M + max(1/C, 1/S)) (CRC32C), GiB/s; the patch series' example M={sm} C={sc} S={ss}"
    ));
    measured.print("Measured writes (GiB/s); target: async >= 90% of the model's after and never slower than sync");
    let summary: Vec<String> = MODES
        .into_iter()
        .zip(met)
        .filter(|((mode, _), _)| *mode != Mode::Sync)
        .map(|((mode, depth), ok)| format!("{} {}", mode_label(mode, depth), if ok { "met" } else { "MISSED" }))
        .collect();
    println!(
        "\nTargets on every target: {}{}",
        summary.join("; "),
        if fell_back { " (io_uring unavailable here: those rows ran the worker thread)" } else { "" }
    );
    ExitCode::SUCCESS
}

/// Source data the writes copy from, larger than the caches so that the
/// copy runs at memory speed (the turns walk through all of it).
fn source_data(len: usize, write_size: usize) -> AlignedBuf {
    let len = len.max(write_size).div_ceil(write_size) * write_size;
    let mut source = AlignedBuf::zeroed(len);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for chunk in source.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let bytes = state.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
    source
}

fn median(mut f: impl FnMut() -> f64) -> f64 {
    median_of((0..3).map(|_| f()).collect())
}

fn median_of(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A ratio over the passes.
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

fn spread(v: Vec<f64>) -> Spread {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Spread { median: median_of(v), min, max }
}

impl Spread {
    /// As a fraction of a bound: `97% (91-101)`.
    fn percent(&self) -> String {
        format!("{:.0}% ({:.0}-{:.0})", self.median * 100.0, self.min * 100.0, self.max * 100.0)
    }

    /// As a gain over a baseline: `+17% (+9..+31)`.
    fn gain(&self) -> String {
        let pct = |x: f64| (x - 1.0) * 100.0;
        format!("{:+.0}% ({:+.0}..{:+.0})", pct(self.median), pct(self.min), pct(self.max))
    }
}

/// Memory-to-memory copy into one reused destination, which stays in L2:
/// the upper figure "M hot", for reference beside the model's M.
fn copy_rate(source: &[u8], write_size: usize, bytes: u64) -> f64 {
    let mut destination = AlignedBuf::zeroed(write_size);
    destination.fill(1); // fault the pages in before timing
    let start = Instant::now();
    for piece in source.chunks(write_size).cycle().take((bytes / write_size as u64) as usize) {
        destination.copy_from_slice(std::hint::black_box(piece));
    }
    std::hint::black_box(&destination);
    bytes as f64 / GIB / start.elapsed().as_secs_f64()
}

fn checksum_rate(source: &[u8], write_size: usize, block_size: usize, algorithm: Algorithm, bytes: u64) -> f64 {
    let start = Instant::now();
    let mut acc = 0u64;
    for chunk in source.chunks(write_size).cycle().take((bytes / write_size as u64) as usize) {
        acc ^= block_checksums(chunk, block_size, algorithm);
    }
    std::hint::black_box(acc);
    bytes as f64 / GIB / start.elapsed().as_secs_f64()
}

fn block_checksums(data: &[u8], block_size: usize, algorithm: Algorithm) -> u64 {
    data.chunks(block_size).fold(0, |acc, block| acc ^ algorithm.checksum(block))
}

/// Who takes a turn: the checksummed modes (indices into [`MODES`]), then
/// the three measurements of the model's rates.
const TURNS: usize = MODES.len() + 3;
/// Plain writes from the source: no copy, no checksum (S).
const TURN_S: usize = MODES.len();
/// Copies into a rotating 64 MiB pool, as every mode's first step (M).
const TURN_M: usize = MODES.len() + 1;
/// CRC32C of the source's blocks (C).
const TURN_C: usize = MODES.len() + 2;

/// The model's rates and every mode's, for one target, per pass. The
/// checksummed writers and the plain writer each have their own file,
/// allocated by an untimed first pass; they and the memory-copy and checksum
/// measurements take turns segment by segment (rotating who goes first), so
/// that a drifting device or a noisy neighbour hits the bound and the modes
/// alike.
fn measure_target(
    data_path: &Path,
    source: &[u8],
    total: u64,
    passes: usize,
    ws: u64,
    bs: u64,
    progress: &Option<ProgressBar>,
) -> Result<Measured, csumkit::Error> {
    let path = |what: &str| data_path.with_extension(what);
    let mut raw = FileSink::create(&path("raw"), true)?;
    let direct = raw.is_direct();
    let mut writers = Vec::new();
    for (mode, depth) in MODES {
        let name = file_name(mode, depth);
        let mut sink = FileSink::create(&path(&name), true)?;
        raw_write(&mut sink, source, 0, total, ws).map_err(|e| io_error(&path(&name), "preparing", e))?;
        let store = ChecksumFile::create(&path(&format!("{name}.csum")))?;
        writers.push(Writer::with_depth(sink, store, mode, bs as usize, Algorithm::Crc32c, depth)?);
    }
    raw_write(&mut raw, source, 0, total, ws).map_err(|e| io_error(&path("raw"), "preparing", e))?;
    let uring_fell_back = writers[2].mode() != Mode::Uring;
    if let Some(bar) = progress {
        bar.inc((MODES.len() as u64 + 1) * total);
    }
    // Each mode, and the M measurement, copies into its own rotating 64 MiB
    // of write buffers: cold memory, as a page cache does not hand out the
    // same pages for every write, and never the buffer the checksum worker
    // has just read (its core would still hold those lines).
    // A pool is a queue: the buffer filled next is the one freed longest ago.
    let pool_len = ((POOL_BYTES / ws) as usize).max(URING_DEPTH);
    let mut pools: [VecDeque<AlignedBuf>; MODES.len() + 1] =
        std::array::from_fn(|_| (0..pool_len).map(|_| AlignedBuf::zeroed(ws as usize)).collect());
    for buffer in pools.iter_mut().flatten() {
        buffer.fill(1); // fault the pages in before timing
    }
    let mut checksums = 0u64;
    let mut turn = 0;
    let writes = total / ws;
    let mut measured = Measured { passes: Vec::with_capacity(passes), direct, uring_fell_back };
    for pass in 0..passes as u64 {
        let (from, to) = (writes * pass / passes as u64 * ws, writes * (pass + 1) / passes as u64 * ws);
        let mut seconds = [0.0f64; TURNS];
        let mut at = from;
        while at < to {
            let len = TURN_BYTES.max(ws).min(to - at) / ws * ws;
            for k in 0..TURNS {
                let who = (turn + k) % TURNS;
                let start = Instant::now();
                match who {
                    TURN_S => raw_write(&mut raw, source, at, len, ws)
                        .map_err(|e| io_error(&path("raw"), "measuring S", e))?,
                    TURN_M => {
                        let pool = &mut pools[MODES.len()];
                        for piece in pieces(source, at, len, ws) {
                            let mut buffer = pool.pop_front().expect("a pool of at least one buffer");
                            buffer.copy_from_slice(piece);
                            pool.push_back(buffer);
                        }
                    }
                    TURN_C => {
                        for piece in pieces(source, at, len, ws) {
                            checksums ^= block_checksums(piece, bs as usize, Algorithm::Crc32c);
                        }
                    }
                    mode => checksummed_write(&mut writers[mode], &mut pools[mode], source, at, len, ws)?,
                }
                seconds[who] += start.elapsed().as_secs_f64();
            }
            if let Some(bar) = progress {
                bar.inc((MODES.len() as u64 + 1) * len);
            }
            at += len;
            turn += 1;
        }
        // The fdatasync belongs to each writer's time.
        for (who, writer) in writers.iter_mut().enumerate() {
            let start = Instant::now();
            writer.sync()?;
            seconds[who] += start.elapsed().as_secs_f64();
        }
        let start = Instant::now();
        raw.sync().map_err(|e| io_error(&path("raw"), "syncing", e))?;
        seconds[TURN_S] += start.elapsed().as_secs_f64();
        let rate = |who: usize| (to - from) as f64 / GIB / seconds[who];
        measured.passes.push(Rates {
            m: rate(TURN_M),
            c: rate(TURN_C),
            s: rate(TURN_S),
            modes: std::array::from_fn(rate),
        });
    }
    std::hint::black_box((checksums, &pools));
    Ok(measured)
}

/// Writes in flight in the last column: the caller fills the next buffer
/// while the device still writes the previous ones, so the copy (M)
/// overlaps too and the device never waits for the host between writes.
const URING_DEPTH: usize = 4;

/// The checksummed modes and their depths, in the order of [`Rates`].
const MODES: [(Mode, usize); 4] = [(Mode::Sync, 1), (Mode::Async, 1), (Mode::Uring, 1), (Mode::Uring, URING_DEPTH)];

/// A mode's file name: `sync`, `async`, `uring`, `uring-4`.
fn file_name(mode: Mode, depth: usize) -> String {
    if depth == 1 {
        mode.name().to_string()
    } else {
        format!("{}-{depth}", mode.name())
    }
}

/// One target's measurements.
struct Measured {
    passes: Vec<Rates>,
    direct: bool,
    /// io_uring was unavailable: its column ran the worker thread.
    uring_fell_back: bool,
}

/// One pass's rates in GiB/s.
struct Rates {
    /// Memory copy into cold buffers.
    m: f64,
    /// CRC32C.
    c: f64,
    /// Plain writes, no copy, no checksum.
    s: f64,
    /// Each of [`MODES`].
    modes: [f64; MODES.len()],
}

fn mode_label(mode: Mode, depth: usize) -> String {
    match (mode, depth) {
        (Mode::Sync, _) => "sync".into(),
        (Mode::Async, _) => "async, worker thread".into(),
        (Mode::Uring, 1) => "async, io_uring".into(),
        (Mode::Uring, depth) => format!("async, io_uring, {depth} in flight"),
    }
}

fn percent_change(ratio: f64) -> String {
    format!("{:+.1}%", (ratio - 1.0) * 100.0)
}

fn io_error(path: &Path, context: &str, source: std::io::Error) -> csumkit::Error {
    csumkit::Error::Io { context: format!("{}: {context}", path.display()), source }
}

/// The source's `ws`-byte pieces for the file range `[at, at + len)`: the
/// source wraps around, so that successive turns read all of it (cold)
/// rather than its first few MiB again.
fn pieces(source: &[u8], at: u64, len: u64, ws: u64) -> impl Iterator<Item = &[u8]> {
    let count = source.len() / ws as usize;
    let first = (at / ws) as usize % count;
    source.chunks(ws as usize).cycle().skip(first).take((len / ws) as usize)
}

/// Writes `[at, at + len)` in `ws` pieces straight from the source: no copy
/// and no checksum (the storage rate S).
fn raw_write(sink: &mut FileSink, source: &[u8], at: u64, len: u64, ws: u64) -> std::io::Result<()> {
    for (i, piece) in pieces(source, at, len, ws).enumerate() {
        let mut done = 0;
        while done < piece.len() {
            match sink.write_at(at + i as u64 * ws + done as u64, &piece[done..])? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => done += n,
            }
        }
    }
    Ok(())
}

/// The patch series' write of `[at, at + len)`: copy each piece into the next
/// write buffer of `pool` (M), then checksum and write it (C and S, in
/// sequence or overlapped), with up to the writer's depth in flight; every
/// write is complete when the turn ends.
fn checksummed_write(
    writer: &mut Writer<FileSink, ChecksumFile>,
    pool: &mut VecDeque<AlignedBuf>,
    source: &[u8],
    at: u64,
    len: u64,
    ws: u64,
) -> Result<(), csumkit::Error> {
    for (i, piece) in pieces(source, at, len, ws).enumerate() {
        if writer.in_flight() == writer.depth() {
            pool.push_back(writer.complete().expect("a write in flight")?.buffer);
        }
        let mut buffer = pool.pop_front().expect("a pool of at least the writer's depth");
        buffer.copy_from_slice(piece);
        writer.submit(at + i as u64 * ws, buffer)?;
    }
    while let Some(done) = writer.complete() {
        pool.push_back(done?.buffer);
    }
    Ok(())
}

fn progress_bar(total: u64) -> Option<ProgressBar> {
    if total < 1 << 30 || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("writing [{bar:40}] {binary_bytes}/{binary_total_bytes} eta {eta}").ok()?,
    );
    Some(bar)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_reproduces_the_seed_example() {
        let (before, after) = model(50.0, 45.0, 8.0);
        assert_eq!(format!("{before:.2} {after:.2}"), "5.98 6.90");
    }
}
