//! `csumkit pi generate|verify`: protection information of a dump of a
//! PI-formatted device — an extended-LBA file (data + metadata per block)
//! or a data file with a separate metadata file.

use crate::files::{self, AtomicOutput};
use clap::{Args, Subcommand};
use csumkit::pi::{self, Checks, GuardSize, LbaFormat, Order, PiFormat, PiLocation, PiType, Protection, Tags};
use csumkit::Error;
use indicatif::{ProgressBar, ProgressStyle};
use std::fs::File;
use std::io::IsTerminal;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Blocks read, checked and written per step.
const CHUNK_BLOCKS: u64 = 1024;
/// Files at least this large get a progress bar when stderr is a terminal.
const PROGRESS_MIN_BYTES: u64 = 1 << 30;

#[derive(Subcommand)]
pub enum PiCommand {
    /// Write PI for every block (in place, or into a new --metadata file).
    Generate(GenerateArgs),
    /// Check every block's PI and report each failing block. Exit 1 when a
    /// block fails, or when no block was checked at all (every check off,
    /// or every block an escape).
    Verify(VerifyArgs),
}

#[derive(Args)]
pub struct PiArgs {
    /// Guard size in bits: 16 (CRC16 T10-DIF), 32 (CRC32C) or 64 (CRC64-NVMe).
    #[arg(long, default_value_t = 16)]
    guard: u32,
    /// Protection type: 1, 2 or 3.
    #[arg(long = "type", default_value_t = 1)]
    pi_type: u32,
    /// Data and metadata bytes per block, e.g. 512+8, 4096+8, 4096+16, 4096+64.
    #[arg(long, default_value = "4096+8")]
    lba_format: String,
    /// Where the PI sits in the metadata.
    #[arg(long, value_enum, default_value_t = Location::Last)]
    pi_location: Location,
    /// Storage-tag size in bits (default: the smallest the guard size allows).
    #[arg(long)]
    sts: Option<u32>,
    /// Reference tag of the first block. Type 1: its LBA — a full 64-bit
    /// LBA is accepted and its low 32/48 bits (the tag's width) are used,
    /// as the kernel does; types 2 and 3: a value that fits the tag.
    #[arg(long, default_value = "0", value_parser = parse_number)]
    ref_tag: u64,
    /// Application tag.
    #[arg(long, default_value = "0", value_parser = parse_number)]
    app_tag: u64,
    /// Storage tag.
    #[arg(long, default_value = "0", value_parser = parse_number)]
    storage_tag: u64,
    /// Separate metadata file (DIX): FILE then holds data only.
    #[arg(long)]
    metadata: Option<PathBuf>,
    /// The dump.
    file: PathBuf,
}

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    common: PiArgs,
    /// Replace an existing --metadata file (it is written beside it and
    /// renamed over it only when complete).
    #[arg(long, requires = "metadata")]
    force: bool,
}

#[derive(Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    common: PiArgs,
    /// Do not check the guard.
    #[arg(long)]
    no_guard: bool,
    /// Do not check the application tag.
    #[arg(long)]
    no_app_tag: bool,
    /// Do not check the reference tag.
    #[arg(long)]
    no_ref_tag: bool,
    /// Also check the storage tag (under --storage-tag-mask).
    #[arg(long)]
    check_storage_tag: bool,
    /// Application-tag bits compared.
    #[arg(long, default_value = "0xffff", value_parser = parse_number)]
    app_tag_mask: u64,
    /// Storage-tag bits compared with --check-storage-tag (default: all).
    #[arg(long, value_parser = parse_number)]
    storage_tag_mask: Option<u64>,
    /// Whose order: spdk (guard, app tag, ref tag, storage tag) or kernel
    /// (Linux t10_pi_verify: ref tag, then guard; no app or storage tag
    /// check). Escapes follow the NVM Command Set spec under both.
    #[arg(long, value_enum, default_value_t = CheckOrder::Spdk)]
    order: CheckOrder,
    /// Print one JSON document instead of lines.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum CheckOrder {
    Spdk,
    Kernel,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Location {
    First,
    Last,
}

fn parse_number(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("{text:?} is not a number (decimal or 0x hex)"))
}

pub fn run(command: PiCommand) -> ExitCode {
    let result = match &command {
        PiCommand::Generate(args) => generate(args).map(|()| ExitCode::SUCCESS),
        PiCommand::Verify(args) => verify(args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("csumkit pi: {e}");
        ExitCode::from(2)
    })
}

/// The protection and tags the arguments describe.
/// The protection and tags `args` name; `masks`: the application- and
/// storage-tag bits a verify compares (generate writes whole tags).
fn setup(args: &PiArgs, masks: (u64, Option<u64>)) -> Result<(Protection, Tags), Error> {
    let (app_tag_mask, storage_tag_mask) = masks;
    let guard = GuardSize::from_bits(args.guard)?;
    let sts = args.sts.unwrap_or(guard.storage_tag_bits_range().0);
    let format = PiFormat::new(guard, PiType::from_number(args.pi_type)?, sts)?;
    let lba: LbaFormat = args.lba_format.parse()?;
    let location = match args.pi_location {
        Location::First => PiLocation::First,
        Location::Last => PiLocation::Last,
    };
    let p = Protection::new(format, lba, location)?;
    let narrow = |what: &'static str, value: u64, max: u64| {
        if value > max {
            Err(Error::TooLarge { what, value, max })
        } else {
            Ok(value)
        }
    };
    // Type 1 tags are the LBA's low bits (the kernel's lower_32_bits /
    // lower_48_bits of the seed): a full LBA is the natural input.
    let ref_tag = match format.pi_type() {
        PiType::Type1 => args.ref_tag & format.ref_tag_mask(),
        _ => narrow("--ref-tag", args.ref_tag, format.ref_tag_mask())?,
    };
    let tags = Tags {
        ref_tag,
        app_tag: narrow("--app-tag", args.app_tag, 0xFFFF)? as u16,
        app_tag_mask: narrow("--app-tag-mask", app_tag_mask, 0xFFFF)? as u16,
        storage_tag: narrow("--storage-tag", args.storage_tag, format.storage_tag_mask())?,
        storage_tag_mask: match storage_tag_mask {
            Some(mask) => narrow("--storage-tag-mask", mask, format.storage_tag_mask())?,
            None => u64::MAX,
        },
    };
    Ok((p, tags))
}

/// The opened dump: its block count, checked against the sizes.
struct Dump {
    data: File,
    /// A separate metadata file to read (verify).
    metadata: Option<File>,
    /// A separate metadata file being written (generate): renamed into
    /// place when every block is done.
    output: Option<AtomicOutput>,
    blocks: u64,
}

fn io_err(path: &Path, context: &str) -> impl FnOnce(std::io::Error) -> Error {
    let context = format!("{}: {context}", path.display());
    move |source| Error::Io { context, source }
}

/// Opens the dump; with `write`, for generating PI (in place, or into a new
/// metadata file when `force` allows replacing an existing one).
fn open(args: &PiArgs, p: &Protection, write: bool, force: bool) -> Result<Dump, Error> {
    let lba = p.lba();
    let data = files::open_input(&args.file, write && args.metadata.is_none())?;
    let len = files::input_len(&data, &args.file)?;
    let block = if args.metadata.is_some() { lba.data_bytes() } else { lba.extended_bytes() } as u64;
    if !len.is_multiple_of(block) {
        return Err(Error::Invalid {
            what: "dump size",
            detail: format!(
                "{}: {len} bytes is not a whole number of {block}-byte blocks ({lba})",
                args.file.display()
            ),
        });
    }
    let blocks = len / block;
    if write {
        let output = match &args.metadata {
            None => None,
            Some(path) => {
                let out = AtomicOutput::create(path, force, &[&args.file])?;
                out.file().set_len(blocks * lba.metadata_bytes() as u64).map_err(io_err(path, "size"))?;
                Some(out)
            }
        };
        return Ok(Dump { data, metadata: None, output, blocks });
    }
    let metadata = match &args.metadata {
        None => None,
        Some(path) => {
            let file = {
                let f = files::open_input(path, false)?;
                let md_len = files::input_len(&f, path)?;
                if md_len != blocks * lba.metadata_bytes() as u64 {
                    return Err(Error::Invalid {
                        what: "metadata size",
                        detail: format!(
                            "{}: {md_len} bytes; {blocks} blocks of {lba} need {}",
                            path.display(),
                            blocks * lba.metadata_bytes() as u64
                        ),
                    });
                }
                f
            };
            Some(file)
        }
    };
    Ok(Dump { data, metadata, output: None, blocks })
}

/// Calls `step(first_block, blocks, data, metadata)` for each chunk of
/// the dump, with a progress bar on large files.
fn for_each_chunk(
    args: &PiArgs,
    p: &Protection,
    dump: &Dump,
    mut step: impl FnMut(u64, &mut [u8], Option<&mut [u8]>) -> Result<bool, Error>,
) -> Result<(), Error> {
    let lba = p.lba();
    let separate = args.metadata.is_some();
    let unit = if separate { lba.data_bytes() } else { lba.extended_bytes() } as u64;
    let bar = (dump.blocks * unit >= PROGRESS_MIN_BYTES && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(dump.blocks * unit);
        if let Ok(style) =
            ProgressStyle::with_template("{msg} [{bar:40}] {binary_bytes}/{binary_total_bytes} eta {eta}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(args.file.display().to_string());
        bar
    });
    let mut data = vec![0u8; (CHUNK_BLOCKS * unit) as usize];
    let mut metadata = vec![0u8; CHUNK_BLOCKS as usize * lba.metadata_bytes()];
    let md_path = args.metadata.as_deref().unwrap_or(&args.file);
    for first in (0..dump.blocks).step_by(CHUNK_BLOCKS as usize) {
        let n = CHUNK_BLOCKS.min(dump.blocks - first);
        let data = &mut data[..(n * unit) as usize];
        dump.data.read_exact_at(data, first * unit).map_err(io_err(&args.file, "read"))?;
        let metadata = &mut metadata[..n as usize * lba.metadata_bytes()];
        let md_offset = first * lba.metadata_bytes() as u64;
        if let Some(file) = &dump.metadata {
            file.read_exact_at(metadata, md_offset).map_err(io_err(md_path, "read"))?;
        }
        let changed = step(first, data, separate.then_some(&mut *metadata))?;
        if changed {
            match &dump.output {
                Some(out) => out.file().write_all_at(metadata, md_offset).map_err(io_err(md_path, "write"))?,
                None => dump.data.write_all_at(data, first * unit).map_err(io_err(&args.file, "write"))?,
            }
        }
        if let Some(bar) = &bar {
            bar.inc(n * unit);
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(())
}

fn generate(generate_args: &GenerateArgs) -> Result<(), Error> {
    let args = &generate_args.common;
    let (p, tags) = setup(args, (0xFFFF, None))?;
    let mut dump = open(args, &p, true, generate_args.force)?;
    for_each_chunk(args, &p, &dump, |first, data, metadata| {
        let tags = tags.advanced(p.format(), first);
        match metadata {
            Some(md) => pi::generate_separate(&p, data, md, &tags)?,
            None => pi::generate(&p, data, &tags)?,
        }
        Ok(true)
    })?;
    match dump.output.take() {
        Some(out) => out.commit()?,
        None => dump.data.sync_data().map_err(io_err(&args.file, "sync"))?,
    }
    println!(
        "{}: PI written for {} blocks ({}, {}-bit guard, type {})",
        args.file.display(),
        dump.blocks,
        p.lba(),
        p.format().guard().bits(),
        p.format().pi_type().number()
    );
    Ok(())
}

fn verify(args: &VerifyArgs) -> Result<ExitCode, Error> {
    let common = &args.common;
    let (p, tags) = setup(common, (args.app_tag_mask, args.storage_tag_mask))?;
    let checks = Checks {
        guard: !args.no_guard,
        app_tag: !args.no_app_tag,
        ref_tag: !args.no_ref_tag,
        storage_tag: args.check_storage_tag,
        order: match args.order {
            CheckOrder::Spdk => Order::Spdk,
            CheckOrder::Kernel => Order::Kernel,
        },
    };
    let dump = open(common, &p, false, false)?;
    let mut failed = 0u64;
    let mut escaped = 0u64;
    let mut failures_json = Vec::new();
    let unit = if dump.metadata.is_some() { p.lba().data_bytes() } else { p.lba().extended_bytes() } as u64;
    for_each_chunk(common, &p, &dump, |first, data, metadata| {
        let tags = tags.advanced(p.format(), first);
        let failures: Vec<_> = match &metadata {
            Some(md) => {
                escaped += pi::count_escapes_separate(&p, md);
                pi::verify_separate_each(&p, data, md, &tags, checks).collect::<Result<_, _>>()?
            }
            None => {
                escaped += pi::count_escapes(&p, data);
                pi::verify_each(&p, data, &tags, checks).collect::<Result<_, _>>()?
            }
        };
        for mut f in failures {
            f.block += first;
            if args.json {
                failures_json.push(crate::json::object(&[
                    ("block", crate::json::number(f.block)),
                    ("byte_offset", crate::json::number(f.block * unit)),
                    ("message", crate::json::string(&f.to_string())),
                ]));
            } else {
                println!("{}: {f} (byte offset {})", common.file.display(), f.block * unit);
            }
            failed += 1;
        }
        Ok(false)
    })?;
    let anything = pi::checks_anything(p.format(), &tags, checks);
    let verified = if anything { dump.blocks - escaped } else { 0 };
    let unchecked = dump.blocks - verified;
    if args.json {
        use crate::json::{array, number, object, string};
        println!(
            "{}",
            object(&[
                ("file", string(&common.file.to_string_lossy())),
                ("blocks", number(dump.blocks)),
                ("verified", number(verified)),
                ("not_checked", number(unchecked)),
                ("escaped", number(escaped)),
                ("failed", number(failed)),
                ("failures", array(&failures_json)),
            ])
        );
    } else {
        println!(
            "{}: {} blocks: {verified} verified, {unchecked} not checked ({escaped} with escape tags), {failed} failed",
            common.file.display(),
            dump.blocks
        );
    }
    if failed > 0 {
        return Ok(ExitCode::FAILURE);
    }
    if dump.blocks == 0 {
        eprintln!("csumkit pi: {} holds no block: nothing was verified", common.file.display());
        return Ok(ExitCode::FAILURE);
    }
    if verified == 0 {
        eprintln!(
            "csumkit pi: warning: no block of {} was checked ({}): nothing is known about its integrity",
            common.file.display(),
            if anything { "every block carries escape tags" } else { "every check is disabled" }
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
