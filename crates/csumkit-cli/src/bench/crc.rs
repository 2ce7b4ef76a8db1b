//! `csumkit bench crc`: the incremental-checksum micro table (flip_range vs full CRC),
//! splice, combine/zero_extend, and bulk throughput against crc-fast and the
//! `crc32c` crate — all in one run.

use super::table::{num, ratio, size, Table};
use super::timing::Budget;
use clap::{Args, ValueEnum};
use csumkit::{crc16t10dif, crc32c, crc64nvme, Backend};
use std::hint::black_box;
use std::process::ExitCode;

#[derive(Args)]
pub struct CrcArgs {
    /// Fewer, shorter samples and no 512 MiB bitmap: seconds instead of a minute.
    #[arg(long)]
    quick: bool,
    /// Run only these tables (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Part>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Part {
    Flip,
    Splice,
    Combine,
    Bulk,
}

/// The incremental-checksum patch series' published micro-benchmark (Intel Xeon Ice Lake, kernel crc32c).
const SEED_BITMAP_BYTES: [u64; 7] = [1024, 2048, 4096, 8192, 16384, 32768, 65536];
const SEED_FLIP_NS: [f64; 7] = [48.0, 53.0, 57.0, 63.0, 68.0, 73.0, 78.0];
const SEED_FULL_NS: [f64; 7] = [45.0, 88.0, 182.0, 357.0, 709.0, 1421.0, 2853.0];

/// Random (offset, length) pairs cycled through by the algebra benchmarks.
const RANDOM_CASES: usize = 256;

pub fn run(args: &CrcArgs) -> ExitCode {
    let budget = Budget::new(args.quick);
    let wants = |p: Part| args.only.is_empty() || args.only.contains(&p);
    println!("# csumkit bench crc{}", if args.quick { " --quick" } else { "" });
    println!("{}", super::machine_line());
    println!("crc-fast backend: {}", crc_fast::get_calculator_target(crc_fast::CrcAlgorithm::Crc32Iscsi));
    println!("Medians of {} samples; ns per call, GB/s with 1 GB = 1e9 bytes.", budget.samples);
    budget.warm_up();
    if wants(Part::Flip) {
        flip_table(&budget, args.quick);
    }
    if wants(Part::Splice) {
        splice_table(&budget);
    }
    if wants(Part::Combine) {
        combine_table(&budget);
    }
    if wants(Part::Bulk) {
        bulk_tables(&budget, args.quick);
    }
    ExitCode::SUCCESS
}

/// Deterministic pseudo-random numbers for benchmark inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(len);
        v
    }
}

fn flip_table(budget: &Budget, quick: bool) {
    // 256 and 512 bytes too: where incremental starts to beat a full pass.
    let mut sizes: Vec<u64> = [256, 512].into_iter().chain(SEED_BITMAP_BYTES).collect();
    sizes.extend([1 << 20, 1 << 24]);
    if !quick {
        sizes.push(1 << 29); // 2^32 bits, the largest bitmap
    }
    let mut table = Table::new(&[
        "bitmap",
        "flip(ns)",
        "full(ns)",
        "speedup",
        "published flip(ns)",
        "published full(ns)",
        "published speedup",
    ]);
    let mut rng = Rng(0x5eed_0000);
    for &bytes in &sizes {
        let bitmap = if bytes <= 1 << 24 { rng.bytes(bytes as usize) } else { vec![0x5a; bytes as usize] };
        let total_bits = bytes * 8;
        let cases: Vec<(u64, u64)> = (0..RANDOM_CASES)
            .map(|_| {
                let off = rng.below(total_bits);
                (off, 1 + rng.below(total_bits - off))
            })
            .collect();
        let crc = crc32c::checksum(&bitmap);
        verify_flip(&bitmap, crc, cases[0]);
        let ns = budget.compare(&mut [
            &mut |n| {
                let mut c = crc;
                for i in 0..n as usize {
                    let (off, len) = cases[i % RANDOM_CASES];
                    c = crc32c::flip_range(c, total_bits, off, len).unwrap();
                }
                black_box(c);
            },
            &mut |n| {
                for _ in 0..n {
                    black_box(crc32c::checksum(black_box(&bitmap)));
                }
            },
        ]);
        let (flip, full) = (ns[0], ns[1]);
        let seed = SEED_BITMAP_BYTES.iter().position(|&b| b == bytes);
        let seed_cell = |v: Option<f64>| v.map_or("-".to_string(), num);
        table.row(vec![
            size(bytes),
            num(flip),
            num(full),
            ratio(full / flip),
            seed_cell(seed.map(|i| SEED_FLIP_NS[i])),
            seed_cell(seed.map(|i| SEED_FULL_NS[i])),
            seed.map_or("-".to_string(), |i| ratio(SEED_FULL_NS[i] / SEED_FLIP_NS[i])),
        ]);
    }
    table.print("flip_range vs full CRC32C of a bitmap (random bit range per call; the published large-block-size series' values beside)");
}

/// The benchmark's inputs must give right answers, or its numbers mean nothing.
fn verify_flip(bitmap: &[u8], crc: u32, (off, len): (u64, u64)) {
    let mut flipped = bitmap.to_vec();
    for i in off..off + len {
        flipped[(i / 8) as usize] ^= 1 << (i % 8);
    }
    let got = crc32c::flip_range(crc, bitmap.len() as u64 * 8, off, len).unwrap();
    assert_eq!(got, crc32c::checksum(&flipped), "flip_range disagrees with a full recompute");
}

fn splice_table(budget: &Budget) {
    let mut table = Table::new(&["block", "region", "splice(ns)", "full(ns)", "speedup"]);
    let mut rng = Rng(0x5eed_0001);
    for block_bytes in [4096usize, 65536] {
        let block = rng.bytes(block_bytes);
        let crc = crc32c::checksum(&block);
        for region in [12usize, 64, 264] {
            let cases: Vec<(usize, Vec<u8>)> = (0..RANDOM_CASES)
                .map(|_| (rng.below((block_bytes - region) as u64) as usize, rng.bytes(region)))
                .collect();
            let (off, new) = &cases[0];
            let mut changed = block.clone();
            changed[*off..off + region].copy_from_slice(new);
            let got = crc32c::splice(crc, block_bytes as u64, *off as u64, &block[*off..off + region], new).unwrap();
            assert_eq!(got, crc32c::checksum(&changed), "splice disagrees with a full recompute");
            let ns = budget.compare(&mut [
                &mut |n| {
                    let mut c = crc;
                    for i in 0..n as usize {
                        let (off, new) = &cases[i % RANDOM_CASES];
                        c = crc32c::splice(c, block_bytes as u64, *off as u64, &block[*off..off + region], new)
                            .unwrap();
                    }
                    black_box(c);
                },
                &mut |n| {
                    for _ in 0..n {
                        black_box(crc32c::checksum(black_box(&block)));
                    }
                },
            ]);
            let (splice, full) = (ns[0], ns[1]);
            table.row(vec![
                size(block_bytes as u64),
                format!("{region} B"),
                num(splice),
                num(full),
                ratio(full / splice),
            ]);
        }
    }
    table.print("splice (CRC32C) of a changed region vs full CRC of the block");
}

fn combine_table(budget: &Budget) {
    let mut table = Table::new(&[
        "len_b",
        "crc32c combine",
        "crc32c zero_extend",
        "crc64nvme combine",
        "crc64nvme zero_extend",
        "crc16t10dif combine",
        "crc-fast crc32c combine",
        "crc32c-crate combine",
        "crc-fast crc64nvme combine",
        "crc32c: crc-fast/csumkit",
    ]);
    let chain = |f: &dyn Fn(u64) -> u64| {
        budget.ns_per_op(|n| {
            let mut c = 0x1234_5678u64;
            for _ in 0..n {
                c = f(black_box(c));
            }
            black_box(c);
        })
    };
    for len in [64u64, 4096, 1 << 20, 1 << 30] {
        let ours32 = chain(&|c| crc32c::combine(c as u32, 0xdead_beef, len) as u64);
        let fast32 = chain(&|c| crc_fast::checksum_combine(crc_fast::CrcAlgorithm::Crc32Iscsi, c, 0xdead_beef, len));
        table.row(vec![
            size(len),
            num(ours32),
            num(chain(&|c| crc32c::zero_extend(c as u32, len) as u64)),
            num(chain(&|c| crc64nvme::combine(c, 0xdead_beef, len))),
            num(chain(&|c| crc64nvme::zero_extend(c, len))),
            num(chain(&|c| crc16t10dif::combine(c as u16, 0xbeef, len) as u64)),
            num(fast32),
            num(chain(&|c| ::crc32c::crc32c_combine(c as u32, 0xdead_beef, len as usize) as u64)),
            num(chain(&|c| crc_fast::checksum_combine(crc_fast::CrcAlgorithm::Crc64Nvme, c, 0xdead_beef, len))),
            ratio(fast32 / ours32),
        ]);
    }
    table.print("combine / zero_extend, ns per call (dependent chain)");
}

const BULK_SIZES: [usize; 8] = [16, 64, 256, 1024, 4096, 65536, 1 << 20, 16 << 20];
/// Past the caches: the memory-bound row, left out with `--quick`.
const BULK_LARGE: usize = 256 << 20;

/// A plain read of `buf`: XOR of its 64-bit words (vectorised by the
/// compiler), what a checksum past the caches is compared with.
fn read_all(buf: &[u8]) -> u64 {
    let mut lanes = [0u64; 8];
    let mut chunks = buf.chunks_exact(64);
    for chunk in &mut chunks {
        for (lane, word) in lanes.iter_mut().zip(chunk.chunks_exact(8)) {
            *lane ^= u64::from_le_bytes(word.try_into().unwrap());
        }
    }
    lanes.iter().fold(chunks.remainder().len() as u64, |a, &b| a ^ b)
}

/// A batch of `n` checksums of `buf` through `f`, called directly (the one
/// dynamic call per batch is amortised away).
fn batch<'a>(buf: &'a [u8], f: impl Fn(&[u8]) -> u64 + 'a) -> Box<dyn FnMut(u64) + 'a> {
    Box::new(move |n| {
        for _ in 0..n {
            black_box(f(black_box(buf)));
        }
    })
}

fn bulk_tables(budget: &Budget, quick: bool) {
    use csumkit::Algorithm;
    let mut sizes = BULK_SIZES.to_vec();
    if !quick {
        sizes.push(BULK_LARGE);
    }
    let data = Rng(0x5eed_0002).bytes(*sizes.last().unwrap());
    let active = Backend::active();
    let others: Vec<Backend> = Backend::available().into_iter().filter(|&b| b != active).collect();
    for algorithm in Algorithm::ALL {
        let peer_algorithm = match algorithm {
            Algorithm::Crc32c => crc_fast::CrcAlgorithm::Crc32Iscsi,
            Algorithm::Crc64Nvme => crc_fast::CrcAlgorithm::Crc64Nvme,
            Algorithm::Crc16T10Dif => crc_fast::CrcAlgorithm::Crc16T10Dif,
        };
        let mut header = vec!["size".to_string(), format!("csumkit ({active})")];
        header.extend(others.iter().map(|b| format!("csumkit {b}")));
        header.push("crc-fast".into());
        if algorithm == Algorithm::Crc32c {
            header.push("crc32c crate".into());
        }
        header.push("plain read".into());
        header.push("csumkit/crc-fast".into());
        header.push("csumkit/read".into());
        let mut table = Table::new(&header.iter().map(String::as_str).collect::<Vec<_>>());
        for &len in &sizes {
            let buf = &data[..len];
            // The public free function first: what users call, dispatch included.
            let mut ops = vec![match algorithm {
                Algorithm::Crc32c => batch(buf, |d| crc32c::checksum(d) as u64),
                Algorithm::Crc64Nvme => batch(buf, crc64nvme::checksum),
                Algorithm::Crc16T10Dif => batch(buf, |d| crc16t10dif::checksum(d) as u64),
            }];
            for &b in &others {
                ops.push(match algorithm {
                    Algorithm::Crc32c => {
                        let e = crc32c::Engine::new(b).expect("available backend");
                        batch(buf, move |d| e.checksum(d) as u64)
                    }
                    Algorithm::Crc64Nvme => {
                        let e = crc64nvme::Engine::new(b).expect("available backend");
                        batch(buf, move |d| e.checksum(d))
                    }
                    Algorithm::Crc16T10Dif => {
                        let e = crc16t10dif::Engine::new(b).expect("available backend");
                        batch(buf, move |d| e.checksum(d) as u64)
                    }
                });
            }
            ops.push(batch(buf, move |d| crc_fast::checksum(peer_algorithm, d)));
            if algorithm == Algorithm::Crc32c {
                ops.push(batch(buf, |d| ::crc32c::crc32c(d) as u64));
            }
            ops.push(batch(buf, read_all));
            let mut refs: Vec<&mut dyn FnMut(u64)> =
                ops.iter_mut().map(|op| &mut **op as &mut dyn FnMut(u64)).collect();
            let gbps: Vec<f64> = budget.compare(&mut refs).into_iter().map(|ns| len as f64 / ns).collect();
            let peer = gbps[1 + others.len()];
            let mut row = vec![size(len as u64)];
            row.extend(gbps.iter().map(|&g| num(g)));
            row.push(ratio(gbps[0] / peer));
            row.push(ratio(gbps[0] / gbps[gbps.len() - 1]));
            table.row(row);
        }
        table.print(&format!(
            "bulk {algorithm}, GB/s (csumkit: {active}; crc-fast: {})",
            crc_fast::get_calculator_target(peer_algorithm)
        ));
    }
}
