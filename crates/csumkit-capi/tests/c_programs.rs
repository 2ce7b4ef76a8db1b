//! Builds libcsumkit (static and shared) and drives it from C with the
//! system compiler: `tests/c/test_csumkit.c` checks published values, the
//! algebra and error statuses itself, and prints checksums of pseudo-random
//! data that are compared here with the Rust library; the example program
//! is built against the shared library and run.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the C library into its own directory inside the target
/// directory this test runs from (so `CARGO_TARGET_DIR` is honoured: the
/// outer cargo holds the lock on the workspace's own output) and returns
/// that directory's `debug` folder.
fn build_library() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // This test binary is <target>/<profile>/deps/c_programs-<hash>.
    let exe = std::env::current_exe().expect("test executable path");
    let target_dir = exe.ancestors().nth(3).expect("<target>/<profile>/deps/<test>");
    let target = target_dir.join("capi-c-tests");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", "csumkit-capi", "--target-dir"])
        .arg(&target)
        .current_dir(root)
        .status()
        .expect("run cargo");
    assert!(status.success(), "cargo build -p csumkit-capi failed");
    target.join("debug")
}

fn cc(args: &[&std::ffi::OsStr], output: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&compiler)
        .args(["-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(root.join("include"))
        .args(args)
        .arg("-o")
        .arg(output)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {compiler:?}: {e}"));
    assert!(out.status.success(), "{compiler} failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// The C program's xorshift fill, for the same bytes on this side.
fn fill(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

#[test]
fn c_test_program_passes_and_matches_the_rust_library() {
    let lib = build_library();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = lib.join("test_csumkit_static");
    let (src, archive) = (root.join("tests/c/test_csumkit.c"), lib.join("libcsumkit.a"));
    let libs = ["-lpthread", "-ldl", "-lm"].map(std::ffi::OsStr::new);
    cc(&[src.as_os_str(), archive.as_os_str(), libs[0], libs[1], libs[2]], &exe);
    let out = Command::new(&exe).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "C checks failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let mut compared = 0;
    for line in stdout.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields[0] == "backend" {
            assert_eq!(fields[1], csumkit_core::Backend::active().name());
            assert_eq!(fields[3], env!("CARGO_PKG_VERSION"));
            continue;
        }
        let algorithm = csumkit_core::Algorithm::from_name(fields[0]).unwrap();
        let data = fill(fields[2].parse().unwrap(), fields[1].parse().unwrap());
        assert_eq!(u64::from_str_radix(fields[3], 16).unwrap(), algorithm.checksum(&data), "{line}");
        compared += 1;
    }
    assert_eq!(compared, 45, "{stdout}");
}

#[test]
fn example_links_against_the_shared_library() {
    let lib = build_library();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = lib.join("checksum_file_shared");
    let src = root.join("examples/checksum_file.c");
    let (libdir, rpath) = (format!("-L{}", lib.display()), format!("-Wl,-rpath,{}", lib.display()));
    cc(&[src.as_os_str(), libdir.as_ref(), rpath.as_ref(), "-lcsumkit".as_ref()], &exe);
    let readme = root.join("../../README.md");
    let out = Command::new(&exe).arg(&readme).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let data = std::fs::read(&readme).unwrap();
    let want = format!(
        "crc32c {:08x}  crc64nvme {:016x}  {} bytes",
        csumkit_core::crc32c::checksum(&data),
        csumkit_core::crc64nvme::checksum(&data),
        data.len()
    );
    assert!(String::from_utf8(out.stdout).unwrap().starts_with(&want));
    let missing = Command::new(&exe).arg(root.join("no-such-file")).output().unwrap();
    assert_eq!(missing.status.code(), Some(1));
}
