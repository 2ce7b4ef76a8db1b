//! `csumkit`: checksum files, show the CRC backend, run benchmarks.
//! Argument parsing and printing only; the work is in the `csumkit` and
//! `csumfs` libraries.

mod bench;
mod encode;
#[cfg(unix)]
mod erofs;
#[cfg(unix)]
mod ext4;
#[cfg(unix)]
mod ext4_read;
#[cfg(unix)]
mod ext4_write;
#[cfg(unix)]
mod files;
#[cfg(unix)]
mod integrity;
mod json;
#[cfg(unix)]
mod mount;
#[cfg(unix)]
mod pi;
mod sum;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

/// Shown under the top-level --help.
const AFTER_HELP: &str = "\
Algorithms: crc32c, crc64nvme, crc16t10dif (case and '-' ignored; no aliases).
Environment: CSUMKIT_BACKEND pins the CRC engine (a name `csumkit backend` lists);
an unknown or unsupported name is reported on stderr and the detected engine used.
Exit status: 0 success; 1 findings (a mismatch, a wrong checksum, a failed or
unverified block); 2 usage, input or I/O error.";

#[derive(Parser)]
#[command(
    name = "csumkit",
    version,
    about = "Fast, verified checksums for storage: CRC32C, CRC64-NVMe, CRC16-T10DIF",
    subcommand_required = true,
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print checksums of files, one line each, like sha256sum.
    Sum(sum::SumArgs),
    /// Show the CRC backend in use and the ones this CPU supports.
    Backend,
    /// Generate or verify T10/NVMe protection information in a device dump.
    #[cfg(unix)]
    #[command(subcommand)]
    Pi(pi::PiCommand),
    /// Read erofs images; check or retrofit their xattr name filters.
    #[cfg(unix)]
    #[command(subcommand)]
    Erofs(erofs::ErofsCommand),
    /// ext4 images without mounting: check (and repair) their metadata_csum
    /// checksums; read them (ls, cat, stat, getfattr); write into them (put,
    /// mkdir, mv, rm); fold in a stopped mount's log (checkpoint).
    #[cfg(unix)]
    #[command(subcommand)]
    Ext4(ext4::Ext4Command),
    /// Serve an ext4 (metadata_csum) image over FUSE: csumfs, read-write.
    #[cfg(unix)]
    #[command(override_usage = "csumkit mount [-f] [-o OPTIONS] IMAGE MOUNTPOINT\n       csumkit mount --stats DIR")]
    Mount(mount::MountArgs),
    /// Verify every file's data in an ext4 image against the checksums
    /// csumkit mount recorded (IMAGE.csums); name each bad block.
    #[cfg(unix)]
    Scrub(mount::ScrubArgs),
    /// Run a benchmark and print its tables.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of csumkit, or with DIR write csumkit.1
    /// and one page per subcommand (csumkit-ext4-check.1, …) into DIR.
    Man {
        /// Where to write every page.
        dir: Option<std::path::PathBuf>,
    },
}

/// The command line, with [`AFTER_HELP`] under the top-level help.
fn command() -> clap::Command {
    Cli::command().after_help(AFTER_HELP)
}

fn main() -> ExitCode {
    // `csumkit sum … | head` should stop quietly, as coreutils do, not panic
    // on a broken pipe.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    #[cfg(unix)]
    files::install_cleanup_handler();
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // CSUMKIT_BACKEND as everywhere csumkit runs (library, C, Python): a
    // valid name pins the engine; an invalid one is reported once on stderr
    // and the detected engine is used. Decided now, so the warning comes first.
    let _ = csumkit::Backend::active();
    match cli.command {
        Command::Sum(args) => sum::run(&args),
        Command::Backend => {
            println!("active: {}", csumkit::Backend::active());
            for backend in csumkit::Backend::ALL {
                let status = if backend.is_available() { "available" } else { "not supported by this CPU" };
                println!("  {:<22} {status}", backend.name());
            }
            ExitCode::SUCCESS
        }
        #[cfg(unix)]
        Command::Pi(command) => pi::run(command),
        #[cfg(unix)]
        Command::Erofs(command) => erofs::run(command),
        #[cfg(unix)]
        Command::Ext4(command) => ext4::run(command),
        #[cfg(unix)]
        Command::Mount(args) => mount::run(&args),
        #[cfg(unix)]
        Command::Scrub(args) => mount::scrub(&args),
        Command::Bench(command) => bench::run(command),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut command(), "csumkit", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { dir: Some(dir) } => {
            match std::fs::create_dir_all(&dir).and_then(|()| clap_mangen::generate_to(command(), &dir)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("csumkit: man: {}: {e}", dir.display());
                    ExitCode::from(2)
                }
            }
        }
        Command::Man { dir: None } => match clap_mangen::Man::new(command()).render(&mut std::io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("csumkit: man: {e}");
                ExitCode::from(2)
            }
        },
    }
}
