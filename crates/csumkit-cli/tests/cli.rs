//! The `csumkit` binary as a user runs it.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn csumkit(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_csumkit"))
        .args(args)
        .env_remove("CSUMKIT_BACKEND")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn csumkit");
    let input = stdin.unwrap_or_default().to_vec();
    let mut pipe = child.stdin.take().unwrap();
    std::thread::spawn(move || pipe.write_all(&input));
    child.wait_with_output().unwrap()
}

/// Says that the running test skipped itself because `what` is missing,
/// visibly: libtest captures `print!`/`eprint!`, not writes to the stderr
/// handle. With `CI` set a missing tool is a failure.
fn skip(what: &str, install: &str) {
    assert!(std::env::var_os("CI").is_none(), "{what} is required in CI ({install})");
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {what} not found ({install})");
}

static TEMP_ROOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// One directory for this test binary's files, removed when the test
/// harness exits (statics are never dropped, so an `atexit` hook does it).
fn temp_root() -> &'static std::path::Path {
    extern "C" fn remove_temp_root() {
        if let Some(dir) = TEMP_ROOT.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    TEMP_ROOT.get_or_init(|| {
        let dir = tempfile::Builder::new().prefix("csumkit-cli-test-").tempdir().unwrap().keep();
        // SAFETY: registers a plain function with no captured state.
        unsafe { libc::atexit(remove_temp_root) };
        dir
    })
}

fn temp_file(name: &str, contents: &[u8]) -> std::path::PathBuf {
    let path = temp_root().join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn sum_prints_check_values_in_every_format() {
    let path = temp_file("check.txt", b"123456789");
    let p = path.to_str().unwrap();
    for (algo, format, want) in [
        ("crc32c", "hex", "e3069283"),
        ("crc32c", "base64", "4waSgw=="),
        ("crc32c", "decimal", "3808858755"),
        ("crc64nvme", "hex", "ae8b14860a799888"),
        ("crc64nvme", "base64", "rosUhgp5mIg="),
        ("crc16t10dif", "hex", "d0db"),
    ] {
        let out = csumkit(&["sum", "--algo", algo, "--format", format, p], None);
        assert!(out.status.success(), "{algo} {format}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{want}  {p}\n"));
    }
}

#[test]
fn sum_reads_stdin_and_matches_the_library() {
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let out = csumkit(&["sum", "-a", "crc64nvme", "-"], Some(&data));
    assert!(out.status.success());
    let want = format!("{:016x}  -\n", csumkit::crc64nvme::checksum(&data));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), want);
}

/// `csumkit sum PATH`'s line for a file.
fn sum_line(path: &str) -> Vec<u8> {
    csumkit(&["sum", path], None).stdout
}

#[test]
fn sum_check_verifies_its_own_output_like_sha256sum() {
    let a = temp_file("check-a.txt", b"123456789");
    let odd_name = temp_root().join("odd\nname\\x.txt");
    std::fs::write(&odd_name, b"hello").unwrap();
    let (pa, po) = (a.to_str().unwrap(), odd_name.to_str().unwrap());
    let out = csumkit(&["sum", pa, po], None);
    assert!(out.status.success());
    let listing = String::from_utf8(out.stdout).unwrap();
    // The odd name stays on one line, escaped as coreutils does.
    assert_eq!(listing.lines().count(), 2, "{listing}");
    assert!(listing.lines().nth(1).unwrap().starts_with('\\'), "{listing}");
    let list = temp_file("sums.txt", listing.as_bytes());
    let l = list.to_str().unwrap();
    let out = csumkit(&["sum", "--check", l], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains(&format!("{pa}: OK")) && stdout.matches(": OK").count() == 2, "{stdout}");
    // --quiet prints nothing for matches; a changed file is FAILED, exit 1.
    assert!(csumkit(&["sum", "-c", "--quiet", l], None).stdout.is_empty());
    std::fs::write(&a, b"123456780").unwrap();
    let out = csumkit(&["sum", "-c", l], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{pa}: FAILED")));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 computed checksum(s) did NOT match"));
    let out = csumkit(&["sum", "-c", "--status", l], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
    // A listed file that is gone, and a malformed line.
    std::fs::remove_file(&a).unwrap();
    let out = csumkit(&["sum", "-c", l], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{pa}: FAILED open or read")));
    let junk = temp_file("junk.txt", b"not a checksum line\n");
    let out = csumkit(&["sum", "-c", junk.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no properly formatted checksum lines found"));
    // Beside a good line, a malformed one is a warning.
    let mixed =
        temp_file("mixed.txt", format!("{}not a checksum line\n", String::from_utf8_lossy(&sum_line(po))).as_bytes());
    let out = csumkit(&["sum", "-c", mixed.to_str().unwrap()], None);
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 line(s) improperly formatted"));
    // Other formats check too; with no file, standard input is read.
    let b64 = csumkit(&["sum", "-a", "crc64nvme", "-f", "base64", po], None).stdout;
    let list64 = temp_file("sums64.txt", &b64);
    assert!(csumkit(&["sum", "-a", "crc64nvme", "-f", "base64", "-c", list64.to_str().unwrap()], None)
        .status
        .success());
    let out = csumkit(&["sum"], Some(b"123456789"));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "e3069283  -\n");
}

#[test]
fn json_output_is_json() {
    let a = temp_file("json-a.txt", b"123456789");
    let out = csumkit(&["sum", "--json", a.to_str().unwrap(), "/nonexistent/csumkit-json"], None);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["checksum"], "e3069283");
    assert_eq!(v[0]["algorithm"], "crc32c");
    assert!(v[1]["error"].as_str().unwrap().contains("csumkit-json"));
    let dump: Vec<u8> = (0..2 * 4104).map(|i| (i % 199) as u8).collect();
    let d = temp_file("json-dump.bin", &dump);
    let p = d.to_str().unwrap();
    assert!(csumkit(&["pi", "generate", p], None).status.success());
    let out = csumkit(&["pi", "verify", "--json", p], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["blocks"].as_u64(), v["verified"].as_u64(), v["failed"].as_u64()), (Some(2), Some(2), Some(0)));
    if let Some(image) = shared_erofs("mixed.erofs") {
        let out = csumkit(&["erofs", "check", "--json", image.to_str().unwrap()], None);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["inodes"].as_u64().unwrap() > 0 && v["mismatches"].as_array().is_some(), "{v}");
    }
}

#[test]
fn help_completions_and_man_page() {
    let help = |args: &[&str]| String::from_utf8(csumkit(args, None).stdout).unwrap();
    // The algorithms, environment and exit footer: under the top-level help only.
    let top = help(&["--help"]);
    for needle in ["crc64nvme", "CSUMKIT_BACKEND", "Exit status: 0"] {
        assert!(top.contains(needle), "{needle}: {top}");
    }
    let verify = help(&["pi", "verify", "--help"]);
    assert!(verify.contains("--guard") && verify.contains("--app-tag-mask") && !verify.contains("CSUMKIT_BACKEND"));
    // generate writes whole tags: verify's masks are not offered there.
    assert!(!help(&["pi", "generate", "--help"]).contains("mask"));
    let ext4 = help(&["ext4", "--help"]);
    for sub in ["check", "ls", "cat", "put", "mkdir", "mv", "rm", "checkpoint"] {
        assert!(ext4.contains(sub), "ext4 --help names {sub}: {ext4}");
    }
    // IMAGE and MOUNTPOINT are not optional; each -o option has its own line.
    let mount = help(&["mount", "--help"]);
    assert!(mount.contains("Usage: csumkit mount [-f] [-o OPTIONS] IMAGE MOUNTPOINT"), "{mount}");
    for option in ["nonempty", "writeback_cache", "datasum=on|off", "log=PATH|off"] {
        let line =
            mount.lines().find(|l| l.trim_start().starts_with(option)).unwrap_or_else(|| panic!("{option}: {mount}"));
        assert!(line.len() < 110, "{line}");
    }
    let man_dir = temp_root().join("man");
    assert!(csumkit(&["man", man_dir.to_str().unwrap()], None).status.success());
    for page in ["csumkit.1", "csumkit-ext4-check.1", "csumkit-mount.1", "csumkit-pi-verify.1"] {
        assert!(man_dir.join(page).exists(), "{page}");
    }
    for shell in ["bash", "zsh", "fish"] {
        let out = csumkit(&["completions", shell], None);
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("csumkit"), "{shell}");
    }
    let out = csumkit(&["man"], None);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains(".TH csumkit 1"));
}

#[test]
fn missing_file_is_one_line_and_the_others_still_print() {
    let good = temp_file("good.txt", b"hello");
    let out = csumkit(&["sum", "/nonexistent/csumkit-missing", good.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("csumkit: cannot open /nonexistent/csumkit-missing"), "{stderr}");
    assert!(String::from_utf8(out.stdout).unwrap().ends_with(&format!("  {}\n", good.display())));
}

#[test]
fn bad_arguments_are_clear_errors() {
    let out = csumkit(&["sum", "--algo", "md5", "x"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8(out.stderr).unwrap().contains("unknown algorithm \"md5\""));
    let out = Command::new(env!("CARGO_BIN_EXE_csumkit"))
        .args(["backend"])
        .env("CSUMKIT_BACKEND", "avx9000")
        .output()
        .unwrap();
    // As in the library and the bindings: reported, and the detected engine used.
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("ignoring CSUMKIT_BACKEND") && stderr.contains("unknown backend"), "{stderr}");
    let detected = csumkit::Backend::detect().name();
    assert!(String::from_utf8(out.stdout).unwrap().starts_with(&format!("active: {detected}")));
}

#[test]
fn backend_lists_the_portable_engine() {
    let out = csumkit(&["backend"], None);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with("active: "));
    assert!(stdout.contains("portable-slice16"));
    let pinned = Command::new(env!("CARGO_BIN_EXE_csumkit"))
        .args(["backend"])
        .env("CSUMKIT_BACKEND", "portable")
        .output()
        .unwrap();
    assert!(String::from_utf8(pinned.stdout).unwrap().starts_with("active: portable-slice16"));
}

#[test]
fn bench_crc_quick_prints_all_four_tables() {
    let out = csumkit(&["bench", "crc", "--quick"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    for title in [
        "flip_range vs full CRC32C",
        "splice (CRC32C)",
        "combine / zero_extend",
        "bulk crc32c",
        "bulk crc64nvme",
        "bulk crc16t10dif",
    ] {
        assert!(stdout.contains(title), "missing table {title}:\n{stdout}");
    }
}

#[test]
fn bench_fallocate_quick_prints_both_tables_and_the_breakdown() {
    let out = csumkit(&["bench", "fallocate", "--quick"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "Blocks per group up to 65528",
        "Blocks per group up to 524288",
        "| +free_space_tree |",
        "Where the time goes",
        "+free_space_tree vs Before at 64k",
        "First fit in a fragmented group",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?}:\n{stdout}");
    }
    assert!(stdout.lines().any(|l| l.contains(" 64k ") && l.contains(" 524288 ")), "{stdout}");
    // 7 block sizes x 2 tables, 4 breakdown rows, 2 fragmented-search rows.
    let rows = stdout.lines().filter(|l| l.starts_with("|") && l.contains("k |") && !l.contains("Blksz"));
    assert_eq!(rows.clone().count(), 14 + 4 + 2, "{stdout}");
}

#[test]
fn bench_fallocate_rejects_impossible_sizes() {
    for args in [["--block-sizes", "3K"], ["--chunk", "1000"], ["--block-sizes", "128K"]] {
        let out = csumkit(&["bench", "fallocate", "--quick", args[0], args[1]], None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

#[test]
fn bench_pipeline_quick_prints_rates_model_and_both_modes() {
    let dir = temp_root().join("pipeline");
    std::fs::create_dir_all(&dir).unwrap();
    let out = csumkit(&["bench", "pipeline", "--quick", "--size", "8M", "--dir", dir.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "Rates measured on this machine",
        "M file |",
        "C file |",
        "S file |",
        "in 5 passes",
        "async, io_uring, 4 in flight",
        "model before",
        "published example (M=50 C=45 S=8)",
        "5.980",
        "6.897",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?}:\n{stdout}");
    }
    // The bench cleans up after itself.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir(&dir).unwrap();
    for bad in [&["--write-size", "1000"][..], &["--passes", "0"], &["--size", "4M", "--passes", "5"]] {
        let out = csumkit(&[&["bench", "pipeline", "--quick"][..], bad].concat(), None);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(!String::from_utf8(out.stderr).unwrap().trim().is_empty(), "{bad:?} says why");
    }
}

#[test]
fn bench_offload_quick_prints_the_three_configs_and_pi_speed() {
    let dir = temp_root().join("offload");
    std::fs::create_dir_all(&dir).unwrap();
    let out = csumkit(&["bench", "offload", "--quick", "--dir", dir.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    for needle in
        ["1: 4K, csum tree", "2: 4K+8 host PI", "3: 4K+8 PRACT", "186 / 66", "129 / 9", "16b", "32b", "64b", "x plain"]
    {
        assert!(stdout.contains(needle), "missing {needle:?}:\n{stdout}");
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "device files removed");
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn pi_generate_then_verify_reports_each_failing_block() {
    let mut dump = vec![0u8; 8 * 4104];
    for (i, b) in dump.iter_mut().enumerate() {
        *b = (i * 7 % 251) as u8;
    }
    let path = temp_file("pi-dump.bin", &dump);
    let p = path.to_str().unwrap();
    let out = csumkit(&["pi", "generate", "--guard", "16", "--type", "1", "--lba-format", "4096+8", p], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = csumkit(&["pi", "verify", p], None);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim_end(),
        format!("{p}: 8 blocks: 8 verified, 0 not checked (0 with escape tags), 0 failed")
    );
    // Flip a data bit of block 2 and a reference-tag bit of block 6.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[2 * 4104 + 100] ^= 4;
    bytes[6 * 4104 + 4103] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let out = csumkit(&["pi", "verify", p], None);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].starts_with(&format!("{p}: block 2: guard check failed")), "{stdout}");
    assert_eq!(
        lines[1],
        format!("{p}: block 6: reference tag check failed: expected 0x6, found 0x7 (byte offset 24624)")
    );
    assert_eq!(lines[2], format!("{p}: 8 blocks: 8 verified, 0 not checked (0 with escape tags), 2 failed"));
    // DIX: data and metadata in two files.
    let data = temp_file("pi-data.bin", &dump[..4 * 4096]);
    let md = data.with_extension("md");
    let (d, m) = (data.to_str().unwrap(), md.to_str().unwrap());
    let out = csumkit(&["pi", "generate", "--guard", "64", "--lba-format", "4096+16", "--metadata", m, d], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::metadata(&md).unwrap().len(), 64);
    let out = csumkit(&["pi", "verify", "--guard", "64", "--lba-format", "4096+16", "--metadata", m, d], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// `--ref-tag` takes a full LBA for type 1 (its low 32 bits, as the
/// kernel), not for type 3; `--order kernel` never compares the
/// application tag and reports a wrong reference tag before a wrong guard.
#[test]
fn pi_verify_full_lba_ref_tags_and_the_kernels_order() {
    let dump: Vec<u8> = (0..4 * 4104).map(|i| (i * 13 % 251) as u8).collect();
    let path = temp_file("pi-order.bin", &dump);
    let p = path.to_str().unwrap();
    let lba = "0x1200000005"; // an LBA past 2^32: its tag is 5
    let out = csumkit(&["pi", "generate", "--ref-tag", lba, p], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for tag in [lba, "5"] {
        let out = csumkit(&["pi", "verify", "--ref-tag", tag, p], None);
        assert!(out.status.success(), "{tag}: {}", String::from_utf8_lossy(&out.stdout));
    }
    let out = csumkit(&["pi", "verify", "--type", "3", "--ref-tag", lba, p], None);
    assert_eq!(out.status.code(), Some(2), "type 3 tags are opaque values, not LBAs");
    // Block 1: a data bit and a reference-tag bit; block 3: an application-tag bit.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4104 + 10] ^= 1;
    bytes[4104 + 4103] ^= 1;
    bytes[3 * 4104 + 4098] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let verify = |order: &str| {
        let out = csumkit(&["pi", "verify", "--ref-tag", "5", "--order", order, p], None);
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8(out.stdout).unwrap()
    };
    let spdk = verify("spdk");
    assert!(spdk.contains("block 1: guard check failed"), "{spdk}");
    assert!(spdk.contains("block 3: application tag check failed"), "{spdk}");
    let kernel = verify("kernel");
    assert!(kernel.contains("block 1: reference tag check failed"), "{kernel}");
    assert!(!kernel.contains("block 3"), "{kernel}");
}

#[test]
fn pi_generate_never_destroys_an_input_or_an_existing_file() {
    let dump: Vec<u8> = (0..4 * 4096).map(|i| (i * 13 % 251) as u8).collect();
    let path = temp_file("pi-keep.bin", &dump);
    let p = path.to_str().unwrap();
    // The metadata file is the dump itself: refused, the dump untouched.
    let out = csumkit(&["pi", "generate", "--metadata", p, p], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is the input"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&path).unwrap(), dump);
    // An existing metadata file is kept unless --force.
    let md = temp_file("pi-keep.md", b"precious");
    let m = md.to_str().unwrap();
    let out = csumkit(&["pi", "generate", "--metadata", m, p], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pass --force"));
    assert_eq!(std::fs::read(&md).unwrap(), b"precious");
    let out = csumkit(&["pi", "generate", "--metadata", m, "--force", p], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::metadata(&md).unwrap().len(), 4 * 8);
    assert_eq!(std::fs::read(&path).unwrap(), dump);
    let out = csumkit(&["pi", "verify", "--metadata", m, p], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    // A failed run (the dump is not whole blocks) leaves no temporary file
    // and the old metadata in place.
    let odd = temp_file("pi-odd-keep.bin", &dump[..4000]);
    let out = csumkit(&["pi", "generate", "--metadata", m, "--force", odd.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::metadata(&md).unwrap().len(), 4 * 8);
    let leftovers: Vec<_> = std::fs::read_dir(temp_root())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn pi_verify_that_checks_nothing_fails_and_says_so() {
    let dump: Vec<u8> = (0..4 * 4104).map(|i| (i % 241) as u8).collect();
    let path = temp_file("pi-nothing.bin", &dump);
    let p = path.to_str().unwrap();
    assert!(csumkit(&["pi", "generate", p], None).status.success());
    let out = csumkit(&["pi", "verify", "--no-guard", "--no-app-tag", "--no-ref-tag", p], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 verified, 4 not checked"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("every check is disabled"));
    // Every tuple all-ones: escapes, so nothing is verified.
    let mut escaped = dump.clone();
    for block in escaped.chunks_exact_mut(4104) {
        block[4096..].fill(0xFF);
    }
    std::fs::write(&path, &escaped).unwrap();
    let out = csumkit(&["pi", "verify", p], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 verified, 4 not checked (4 with escape tags), 0 failed"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("escape tags"));
}

/// A verifying command that verified nothing fails: an empty or
/// all-malformed checksum list, a list made with another algorithm, an
/// empty PI dump.
#[test]
fn verifying_commands_fail_when_they_verified_nothing() {
    let file = temp_file("nothing-data.txt", b"123456789");
    let f = file.to_str().unwrap();
    for (name, list) in [("empty", String::new()), ("malformed", "not a checksum line\n\n".to_string())] {
        let sums = temp_file(&format!("nothing-{name}.sums"), list.as_bytes());
        let out = csumkit(&["sum", "--check", sums.to_str().unwrap()], None);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("no properly formatted checksum lines found"), "{name}");
    }
    // A CRC32C list checked as CRC64-NVMe: named once, not FAILED per line.
    let sums = temp_file("nothing-crc32c.sums", format!("e3069283  {f}\ne3069283  {f}\n").as_bytes());
    let out = csumkit(&["sum", "--check", "--algo", "crc64nvme", sums.to_str().unwrap()], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("FAILED"));
    assert!(stderr.contains("has 8 characters, but a crc64nvme in hex has 16"), "{stderr}");
    assert_eq!(stderr.matches("has 8 characters").count(), 1, "{stderr}");
    // The same list with the right --algo passes.
    assert!(csumkit(&["sum", "--check", sums.to_str().unwrap()], None).status.success());
    let empty = temp_file("nothing.pi", b"");
    let out = csumkit(&["pi", "verify", empty.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no block"));
}

#[test]
fn image_commands_refuse_directories_fifos_and_character_devices_without_hanging() {
    let fifo = temp_root().join("a-fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let dir = temp_root().to_str().unwrap();
    let f = fifo.to_str().unwrap();
    let mountpoint = temp_root().join("fifo-mountpoint");
    std::fs::create_dir_all(&mountpoint).unwrap();
    let mp = mountpoint.to_str().unwrap();
    for (path, what) in [(dir, "is a directory"), (f, "is a FIFO"), ("/dev/null", "is a character device")] {
        let mut commands = vec![
            vec!["pi", "verify", path],
            vec!["pi", "generate", path],
            vec!["ext4", "check", path],
            vec!["ext4", "ls", path, "/"],
            vec!["ext4", "cat", path, "/a"],
            vec!["ext4", "stat", path, "/"],
            vec!["ext4", "getfattr", path, "/"],
            vec!["ext4", "put", path, "/etc/hostname", "/a"],
            vec!["ext4", "checkpoint", path],
            vec!["scrub", path],
            vec!["erofs", "check", path],
            vec!["erofs", "ls", path, "/"],
        ];
        // A mount refuses the image before it needs FUSE only when /dev/fuse is there.
        if std::path::Path::new("/dev/fuse").exists() {
            commands.push(vec!["mount", "-o", "ro", path, mp]);
        }
        for args in commands {
            let start = std::time::Instant::now();
            let out = csumkit(&args, None);
            assert!(start.elapsed() < std::time::Duration::from_secs(20), "{args:?} hung");
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            let stderr = String::from_utf8(out.stderr).unwrap();
            assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
            assert!(
                stderr.contains(what) && stderr.contains("not a regular file or block device"),
                "{args:?}: {stderr}"
            );
        }
    }
}

#[test]
fn bench_numeric_flags_are_checked_when_parsed() {
    for args in [
        &["bench", "bytelog", "--seconds", "0"][..],
        &["bench", "bytelog", "--seconds", "nan"],
        &["bench", "bytelog", "--seconds", "inf"],
        &["bench", "bytelog", "--seconds", "1e30"],
        &["bench", "bytelog", "--seconds=-1"],
        &["bench", "bytelog", "--crash", "0"],
        &["bench", "offload", "--rounds", "0"],
        &["bench", "offload", "--writers", "0"],
        &["bench", "offload", "--iodepth", "0"],
        &["bench", "xattr", "--runs", "0"],
        &["bench", "xattr", "--files", "0"],
        &["bench", "pipeline", "--passes", "0"],
    ] {
        let out = csumkit(args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.starts_with("error: invalid value"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn an_interrupted_benchmark_removes_its_files() {
    let dir = temp_root().join("bench-interrupt");
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_csumkit"))
        .args(["bench", "bytelog", "--dir", dir.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let scratch = dir.join(format!("csumkit-bench-bytelog-file-{pid}"));
    let start = std::time::Instant::now();
    while !scratch.exists() && start.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(scratch.exists(), "the benchmark never created {}", scratch.display());
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!scratch.exists(), "{} left behind", scratch.display());
    assert!(!std::path::Path::new(&format!("/dev/shm/csumkit-bench-bytelog-{pid}")).exists());
}

#[test]
fn pi_bad_parameters_are_one_line_errors() {
    let path = temp_file("pi-odd.bin", &[0u8; 5000]);
    let p = path.to_str().unwrap();
    for (args, message) in [
        (vec!["pi", "verify", p], "5000 bytes is not a whole number of 4104-byte blocks (4096+8)"),
        (vec!["pi", "verify", "--guard", "64", p], "64-bit guard PI needs 16"),
        (vec!["pi", "verify", "--guard", "24", p], "24 bits (expected 16, 32 or 64)"),
        (vec!["pi", "verify", "--type", "4", p], "4 (expected 1, 2 or 3)"),
        (vec!["pi", "verify", "--lba-format", "4096-8", p], "expected DATA+META"),
        (vec!["pi", "verify", "--app-tag", "70000", p], "--app-tag = 70000 exceeds the limit of 65535"),
        (vec!["pi", "verify", "--guard", "32", "--lba-format", "4096+16", "--sts", "8", p], "allows 16..=64"),
    ] {
        let out = csumkit(&args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

#[test]
fn bench_bytelog_quick_prints_both_media_replay_and_crash_count() {
    let out = csumkit(&["bench", "bytelog", "--quick", "--crash", "20000"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    for needle in
        ["DAX stand-in", "regular file", "ByteLog B/commit", "single-TLV commit persists", "replay:", "crash harness:"]
    {
        assert!(stdout.contains(needle), "missing {needle:?}:\n{stdout}");
    }
    assert!(stdout.contains("no acknowledged record lost"));
}

fn shared_erofs(name: &str) -> Option<std::path::PathBuf> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../csumkit/tests/data/erofs").join(name);
    if path.exists() {
        return Some(path);
    }
    skip(&path.display().to_string(), "the committed test images");
    None
}

/// `erofs cat` writes a file's bytes whatever its layout: the same file of
/// an uncompressed image, an LZ4 one (compressed directories), a metabox
/// one and a chunked one (all from the kernel-checked corpus) is the same
/// bytes; a directory is refused with exit 2.
#[test]
fn erofs_cat_reads_every_layout_alike() {
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../csumkit/tests/data/erofs-corpus");
    let mut seen = Vec::new();
    for name in ["1.9-default", "1.9-compressed-dirs", "1.9-metabox", "1.7-chunks"] {
        let Ok(out) = Command::new("gzip").arg("-dc").arg(corpus.join(format!("{name}.erofs.gz"))).output() else {
            return skip("gzip", "apt-get install gzip");
        };
        let image = temp_file(&format!("{name}.erofs"), &out.stdout);
        let out = csumkit(&["erofs", "cat", image.to_str().unwrap(), "/data/compressible"], None);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        seen.push((name, out.stdout));
        let out = csumkit(&["erofs", "cat", image.to_str().unwrap(), "/data"], None);
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("/data is a directory"), "{name}");
    }
    assert!(seen[0].1.len() > 100_000, "the file has {} bytes", seen[0].1.len());
    for (name, bytes) in &seen[1..] {
        assert!(*bytes == seen[0].1, "{name}: other bytes than the uncompressed image's");
    }
}

#[test]
fn erofs_ls_getxattr_check_and_add_filter() {
    let Some(image) = shared_erofs("mixed.erofs") else { return };
    let image = image.to_str().unwrap();
    let out = csumkit(&["erofs", "ls", image, "/"], None);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("a.txt"));
    let out = csumkit(&["erofs", "getxattr", image, "/a.txt", "user.x"], None);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "user.x=\"y\"");
    let out = csumkit(&["erofs", "getxattr", image, "/a.txt", "security.capability"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ruled out by the name filter"));
    let out = csumkit(&["erofs", "check", image], None);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("every name filter matches"));
    // Errors are one line and exit 2.
    for args in [
        vec!["erofs", "getxattr", image, "/a.txt", "bogus.name"],
        vec!["erofs", "ls", image, "/no/such/path"],
        vec!["erofs", "check", "/nonexistent.erofs"],
    ] {
        let out = csumkit(&args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1, "{args:?}");
    }
    // A wrong filter (superblock checksum re-sealed) fails check; add-filter fixes it.
    let mut bytes = std::fs::read(image).unwrap();
    let bad = csumkit::erofs::Image::open(&bytes).unwrap();
    let inode = bad.lookup("/a.txt").unwrap();
    let at = inode.xattr_offset().unwrap() as usize;
    bytes[at] ^= 0x01;
    let crc = csumkit::erofs::Superblock::compute_checksum(&bytes, 4096).unwrap();
    bytes[1028..1032].copy_from_slice(&crc.to_le_bytes());
    let copy = temp_file("wrong-filter.erofs", &bytes);
    let copy = copy.to_str().unwrap();
    let out = csumkit(&["erofs", "check", copy], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("mismatch nid"));
    assert!(csumkit(&["erofs", "add-filter", copy], None).status.success());
    assert!(csumkit(&["erofs", "check", copy], None).status.success());
}

/// A kernel-made ea_inode image is checked through: each value's bytes
/// against its hash, counted and clean, `--repair --yes` changes no byte.
/// An image with a structure the checker does not verify (a journal
/// awaiting replay, flagged by debugfs) is never called "all checksums
/// valid": the text names what was not checked, as does `--json`.
#[test]
fn ext4_check_names_what_it_did_not_check() {
    let unpack = |name: &str| {
        let packed =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../csumkit/tests/data/ext4/{name}.img.gz"));
        let out = Command::new("gzip").arg("-dc").arg(&packed).output().ok()?;
        assert!(out.status.success(), "gzip -dc {}", packed.display());
        Some(temp_file(&format!("{name}.img"), &out.stdout))
    };
    let Some(image) = unpack("eainode-4k") else {
        skip("gzip", "apt-get install gzip");
        return;
    };
    let path = image.to_str().unwrap();
    let out = csumkit(&["ext4", "check", path], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(", 1 ea_inode values") && text.contains("all checksums valid"), "{text}");
    let before = std::fs::read(&image).unwrap();
    let out = csumkit(&["ext4", "check", "--repair", "--yes", path], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(std::fs::read(&image).unwrap() == before, "--repair --yes changed a clean image");

    // needs_recovery over an empty journal: the journal is read, and the
    // image is all checked.
    let Some(image) = unpack("4k") else { return };
    let path = image.to_str().unwrap();
    match Command::new("debugfs").args(["-w", "-R", "feature needs_recovery", path]).output() {
        Ok(out) => assert!(out.status.success(), "debugfs: {}", String::from_utf8_lossy(&out.stderr)),
        Err(_) => return skip("debugfs", "apt-get install e2fsprogs"),
    }
    let out = csumkit(&["ext4", "check", path], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("journal checked (checksums csum_v3): empty, nothing to replay"), "{text}");
    assert!(text.contains("all checksums valid") && !text.contains("NOT CHECKED"), "{text}");

    // A journal on another device (has_journal, no journal inode) is not
    // checked here, and said so.
    let Some(image) = unpack("4k") else { return };
    let path = image.to_str().unwrap();
    let out = Command::new("debugfs").args(["-w", "-R", "ssv journal_inum 0", path]).output().unwrap();
    assert!(out.status.success(), "debugfs: {}", String::from_utf8_lossy(&out.stderr));
    let out = csumkit(&["ext4", "check", path], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("NOT CHECKED 1 external journal") && !text.contains("all checksums valid"), "{text}");
    assert!(text.contains("all checked checksums valid; not checked: 1 external journal"), "{text}");
    let out = csumkit(&["ext4", "check", "--json", path], None);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains(r#""not_checked":[{"what":"external journal","count":1"#), "{json}");
}

/// An image the kernel left with committed transactions in its journal
/// (csumkit's `tests/data/jbd2`): `ext4 check` reads the journal, replays
/// it in memory and checks the result, the file unchanged; `ext4 ls`
/// says it replayed; `ext4 recover` writes it home (e2fsck -fn clean) and
/// has nothing to do the second time; `ext4 check --repair` recovers
/// first. A journal whose checksum fails inside the log is BAD, exit 1,
/// and nothing is written.
#[test]
fn ext4_check_and_recover_read_the_kernels_journal() {
    let unpack = |name: &str| {
        let packed =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../csumkit/tests/data/jbd2/{name}.img.gz"));
        let out = Command::new("gzip").arg("-dc").arg(&packed).output().unwrap();
        assert!(out.status.success(), "gzip -dc {}", packed.display());
        temp_file(&format!("journal-{name}.img"), &out.stdout)
    };
    let image = unpack("v3-2k");
    let path = image.to_str().unwrap();
    let before = std::fs::read(&image).unwrap();
    let out = csumkit(&["ext4", "check", path], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("journal checked (") && text.contains("checksums csum_v3) and replayed in memory"), "{text}");
    assert!(text.contains("all checksums valid") && !text.contains("NOT CHECKED"), "{text}");
    let out = csumkit(&["ext4", "check", "--json", path], None);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains(r#""checksums":"csum_v3""#) && json.contains(r#""error":null}"#), "{json}");
    let out = csumkit(&["ext4", "ls", path, "/d"], None);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("journal replayed in memory"), "{out:?}");
    assert!(std::fs::read(&image).unwrap() == before, "reading commands changed the image");

    let out = csumkit(&["ext4", "recover", path], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("replayed into the image"), "{text}");
    let out = csumkit(&["ext4", "recover", path], None);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to do"), "{out:?}");
    if let Ok(fsck) = Command::new("e2fsck").arg("-fn").arg(path).output() {
        assert!(fsck.status.success(), "e2fsck -fn: {}", String::from_utf8_lossy(&fsck.stdout));
    } else {
        skip("e2fsck", "apt-get install e2fsprogs");
    }

    let image = unpack("v3-4k");
    let path = image.to_str().unwrap();
    let out = csumkit(&["ext4", "check", "--repair", "--yes", path], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("replayed into the image"), "{text}");

    // A logged block's copy changed: its tag checksum fails inside the log.
    let image = unpack("v3-4k");
    let mut bytes = std::fs::read(&image).unwrap();
    let layout = csumkit::ext4::Layout::parse(&bytes).unwrap();
    let journal = csumkit::ext4::jbd2::Journal::open(&bytes, &layout).unwrap().unwrap();
    let recovery = journal.recover(&bytes, layout.blocks_count).unwrap();
    let replay = recovery.blocks.values().next().unwrap();
    let at = journal.blocks[replay.journal_block as usize] * layout.block_size + 100;
    bytes[at as usize] ^= 1;
    std::fs::write(&image, &bytes).unwrap();
    let out = csumkit(&["ext4", "check", image.to_str().unwrap()], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("BAD journal: ") && text.contains("fails"), "{text}");
    let out = csumkit(&["ext4", "recover", image.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("transaction"), "{out:?}");
    assert!(std::fs::read(&image).unwrap() == bytes, "a refused recovery wrote the image");
}

/// `ext4 ls|cat|stat|getfattr` read a kernel-made image without mounting
/// it; a missing path or attribute is exit 1, a damaged inode exit 2.
#[test]
fn ext4_read_commands_on_a_kernel_made_image() {
    let packed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../csumkit/tests/data/ext4/4k.img.gz");
    let Ok(out) = Command::new("gzip").arg("-dc").arg(&packed).output() else {
        skip("gzip", "apt-get install gzip");
        return;
    };
    let image = temp_file("read.img", &out.stdout);
    let img = image.to_str().unwrap();
    let text = |args: &[&str]| {
        let out = csumkit(args, None);
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, ls) = text(&["ext4", "ls", img, "/small"]);
    assert_eq!(code, Some(0));
    assert!(ls.lines().any(|l| l.starts_with("-rw-r--r--   2 ") && l.ends_with(" file")), "{ls}");
    assert!(ls.lines().any(|l| l.starts_with("lrwxrwxrwx") && l.ends_with("fast-symlink -> file")), "{ls}");
    assert_eq!(ls.lines().count(), 2 + 40 + 3, "., .., 40 entries, file and two symlinks: {ls}");
    assert_eq!(text(&["ext4", "cat", img, "/small/file"]), (Some(0), "hello\n".to_string()));
    let (code, stat) = text(&["ext4", "stat", img, "/small/file"]);
    assert!(code == Some(0) && stat.contains("Links: 2") && stat.contains("Size: 6"), "{stat}");
    assert_eq!(
        text(&["ext4", "getfattr", "-n", "user.small", img, "/small/file"]),
        (Some(0), "user.small=\"x\"\n".into())
    );
    assert_eq!(text(&["ext4", "getfattr", "-n", "user.none", img, "/small/file"]).0, Some(1));
    assert_eq!(text(&["ext4", "cat", img, "/no/such"]).0, Some(1));
    // The inode of /small/file with one byte changed: its checksum fails.
    let ino: u64 = stat.split("Inode: ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    let mut bytes = std::fs::read(&image).unwrap();
    let layout = csumkit::ext4::Layout::parse(&bytes).unwrap();
    let group = layout.group(&bytes, (ino - 1) / layout.inodes_per_group).unwrap();
    let at = group.inode_table * layout.block_size + (ino - 1) % layout.inodes_per_group * layout.inode_size;
    bytes[at as usize + 0x10] ^= 1;
    std::fs::write(&image, &bytes).unwrap();
    let out = csumkit(&["ext4", "cat", img, "/small/file"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("checksum"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text(&["ext4", "cat", "--no-verify", img, "/small/file"]), (Some(0), "hello\n".to_string()));
}

/// `ext4 cat` follows symlinks as cat does and refuses what has no data
/// in the image; `ext4 ls` prints every name on one line, escaped as
/// `ls -b` does.
#[test]
fn ext4_cat_follows_symlinks_and_ls_escapes_names() {
    let Some(mkfs) = ["/usr/sbin/mke2fs", "/sbin/mke2fs"].into_iter().find(|p| std::path::Path::new(p).exists()) else {
        skip("mke2fs", "apt-get install e2fsprogs");
        return;
    };
    let tree = temp_root().join("odd-tree");
    std::fs::create_dir_all(tree.join("d")).unwrap();
    std::fs::write(tree.join("d/file"), b"through the links\n").unwrap();
    std::os::unix::fs::symlink("d/file", tree.join("rel")).unwrap();
    std::os::unix::fs::symlink("/rel", tree.join("abs")).unwrap();
    std::os::unix::fs::symlink("loop", tree.join("loop")).unwrap();
    std::os::unix::fs::symlink("d", tree.join("dirlink")).unwrap();
    std::fs::write(tree.join("new\nline"), b"").unwrap();
    std::fs::write(tree.join("sp ace\\"), b"").unwrap();
    let fifo = std::ffi::CString::new(tree.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let image = temp_root().join("odd.img");
    let out = Command::new(mkfs)
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,^has_journal", "-d"])
        .arg(&tree)
        .arg(&image)
        .arg("8M")
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs -d: {}", String::from_utf8_lossy(&out.stderr));
    let img = image.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = csumkit(args, None);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for link in ["/rel", "/abs", "/dirlink/file"] {
        assert_eq!(run(&["ext4", "cat", img, link]).1, "through the links\n", "{link}");
    }
    let (code, _, stderr) = run(&["ext4", "cat", img, "/loop"]);
    assert!(code == Some(2) && stderr.contains("more than 40 symlinks"), "{stderr}");
    let (code, _, stderr) = run(&["ext4", "cat", img, "/d"]);
    assert!(code == Some(1) && stderr.contains("/d: is a directory"), "{stderr}");
    let (code, _, stderr) = run(&["ext4", "cat", img, "/fifo"]);
    assert!(code == Some(2) && stderr.contains("/fifo is a FIFO: its data is not in the image"), "{stderr}");
    assert_eq!(run(&["ext4", "cat", img]).0, Some(2), "cat needs a path");
    let (code, ls, _) = run(&["ext4", "ls", img, "/"]);
    assert_eq!(code, Some(0));
    assert!(ls.lines().any(|l| l.ends_with(" new\\nline")), "{ls}");
    assert!(ls.lines().any(|l| l.ends_with(" sp\\ ace\\\\")), "{ls}");
}

/// `ext4 put` copies a host tree into a fresh image like `cp -a` (no root,
/// no loop device): a sparse file keeps its holes, a symlink, a hard link,
/// a FIFO, an xattr and times come along; `ext4 mkdir`, `ext4 mv` and
/// `ext4 rm [-r]` change it; e2fsck -fn calls every result clean and csumfs
/// reads every file back. A second mkdir is EEXIST (exit 1), `mv -n` onto a
/// name and `rm` of a directory without -r are refused (exit 1), and a
/// missing source changes nothing (exit 2).
#[test]
fn ext4_put_mkdir_mv_rm_build_an_image_e2fsck_accepts() {
    use std::os::unix::ffi::OsStrExt;
    let Some(mkfs) = ["/usr/sbin/mke2fs", "/sbin/mke2fs"].into_iter().find(|p| std::path::Path::new(p).exists()) else {
        skip("mke2fs", "apt-get install e2fsprogs");
        return;
    };
    let image = temp_file("put.img", b"");
    let status = Command::new(mkfs)
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,64bit"])
        .arg(&image)
        .arg("32M")
        .status()
        .unwrap();
    assert!(status.success());
    let img = image.to_str().unwrap();
    let tree = temp_root().join("put-tree");
    let _ = std::fs::remove_dir_all(&tree);
    std::fs::create_dir_all(tree.join("inner")).unwrap();
    std::fs::write(tree.join("a.txt"), b"alpha\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(tree.join("inner/big.bin"), &big).unwrap();
    // Sparse: 10 bytes at 5 MiB, then a hole to 6 MiB.
    let sparse = std::fs::File::create(tree.join("sparse")).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"0123456789", 5 << 20).unwrap();
    sparse.set_len(6 << 20).unwrap();
    drop(sparse);
    std::os::unix::fs::symlink("a.txt", tree.join("link")).unwrap();
    std::fs::hard_link(tree.join("a.txt"), tree.join("inner/hard")).unwrap();
    let cpath = |p: &std::path::Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: NUL-terminated paths and names, buffers of the lengths given.
    unsafe {
        assert_eq!(libc::mkfifo(cpath(&tree.join("fifo")).as_ptr(), 0o640), 0);
        let name = std::ffi::CString::new("user.origin").unwrap();
        let set = libc::setxattr(cpath(&tree.join("a.txt")).as_ptr(), name.as_ptr(), b"host".as_ptr().cast(), 4, 0);
        assert_eq!(set, 0, "setxattr: {}", std::io::Error::last_os_error());
        // A name that is not UTF-8 is copied as its bytes (it was written
        // as U+FFFD twice).
        let name = std::ffi::CString::new(&b"user.\xff\xfe"[..]).unwrap();
        let set = libc::setxattr(cpath(&tree.join("a.txt")).as_ptr(), name.as_ptr(), b"bytes".as_ptr().cast(), 5, 0);
        assert_eq!(set, 0, "setxattr: {}", std::io::Error::last_os_error());
        let times = [
            libc::timespec { tv_sec: 1_000_000_000, tv_nsec: 123_456_789 },
            libc::timespec { tv_sec: 1_234_567_890, tv_nsec: 987_654_321 },
        ];
        assert_eq!(libc::utimensat(libc::AT_FDCWD, cpath(&tree.join("a.txt")).as_ptr(), times.as_ptr(), 0), 0);
    }
    let out = csumkit(&["ext4", "put", img, tree.to_str().unwrap(), "/"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("copied 8 entries"));
    assert!(csumkit(&["ext4", "mkdir", img, "/made"], None).status.success());
    // Like cp -a, a put goes on past an entry it cannot copy, names it and
    // exits 1; the image itself, inside the tree, is never copied into itself.
    let partial = temp_root().join("partial-tree");
    std::fs::create_dir_all(partial.join("sub")).unwrap();
    std::fs::write(partial.join("sub/kept"), b"kept").unwrap();
    std::fs::write(partial.join("zz-after"), b"after").unwrap();
    let inner = partial.join("inner.img");
    std::fs::copy(&image, &inner).unwrap();
    let out = csumkit(&["ext4", "put", inner.to_str().unwrap(), partial.to_str().unwrap(), "/partial"], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("inner.img: the image itself is not copied into itself"), "{stderr}");
    assert!(stderr.contains("1 entry not copied"), "{stderr}");
    let v = csumfs::Volume::open(&inner, csumfs::Options::default()).unwrap();
    assert!(v.resolve("/partial/sub/kept").is_ok() && v.resolve("/partial/zz-after").is_ok());
    assert!(v.resolve("/partial/inner.img").is_err());
    drop(v);
    assert_eq!(csumkit(&["ext4", "mkdir", img, "/made"], None).status.code(), Some(1));
    // Errors name the path given, not an inode number.
    let out = csumkit(&["ext4", "mkdir", img, "/put-tree/a.txt/x"], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/put-tree/a.txt: not a directory") && !stderr.contains("inode"), "{stderr}");
    let e2fsck = ["/usr/sbin/e2fsck", "/sbin/e2fsck"].into_iter().find(|p| std::path::Path::new(p).exists()).unwrap();
    let clean = || {
        let check = Command::new(e2fsck).arg("-fn").arg(&image).output().unwrap();
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
    };
    clean();
    {
        let v = csumfs::Volume::open(&image, csumfs::Options::default()).unwrap();
        let a = v.resolve("/put-tree/a.txt").unwrap();
        assert_eq!(v.read_all(&a).unwrap(), b"alpha\n");
        assert_eq!((a.links, a.mtime.sec, a.mtime.nsec, a.atime.sec), (2, 1_234_567_890, 987_654_321, 1_000_000_000));
        assert_eq!(v.getxattr(&a, "user.origin").unwrap(), b"host");
        assert_eq!(v.getxattr(&a, std::ffi::OsStr::from_bytes(b"user.\xff\xfe")).unwrap(), b"bytes");
        assert_eq!(v.xattrs(&a).unwrap().len(), 2);
        assert_eq!(v.resolve("/put-tree/inner/hard").unwrap().ino, a.ino, "the hard link is one inode");
        assert_eq!(v.read_all(&v.resolve("/put-tree/inner/big.bin").unwrap()).unwrap(), big);
        let sparse = v.resolve("/put-tree/sparse").unwrap();
        assert_eq!(sparse.size, 6 << 20);
        assert!(sparse.blocks <= 16, "the holes stayed holes: {} sectors", sparse.blocks);
        let content = v.read_all(&sparse).unwrap();
        assert_eq!(&content[5 << 20..(5 << 20) + 10], b"0123456789");
        assert!(content[..5 << 20].iter().all(|&b| b == 0));
        assert_eq!(v.read_link(&v.resolve("/put-tree/link").unwrap()).unwrap(), b"a.txt");
        let fifo = v.resolve("/put-tree/fifo").unwrap();
        assert_eq!((fifo.mode & 0o170_000, fifo.mode & 0o7777), (0o010_000, 0o640));
    }
    // getfattr prints names as their bytes, and takes one that way.
    let out = csumkit(&["ext4", "getfattr", img, "/put-tree/a.txt"], None);
    let line = b"user.\xff\xfe=\"bytes\"\n";
    assert!(out.stdout.windows(line.len()).any(|w| w == line), "{}", out.stdout.escape_ascii());
    let out = Command::new(env!("CARGO_BIN_EXE_csumkit"))
        .args(["ext4", "getfattr", "-n"])
        .arg(std::ffi::OsStr::from_bytes(b"user.\xff\xfe"))
        .args([img, "/put-tree/a.txt"])
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"user.\xff\xfe=\"bytes\"\n", "{}", String::from_utf8_lossy(&out.stderr));
    // mv into a directory, mv -n onto a name, rm without and with -r.
    assert!(csumkit(&["ext4", "mv", img, "/put-tree/sparse", "/made"], None).status.success());
    assert_eq!(csumkit(&["ext4", "mv", img, "-n", "/put-tree/link", "/put-tree/a.txt"], None).status.code(), Some(1));
    assert!(csumkit(&["ext4", "mv", img, "/put-tree/link", "/made/renamed-link"], None).status.success());
    assert_eq!(csumkit(&["ext4", "rm", img, "/put-tree/inner"], None).status.code(), Some(1));
    let out = csumkit(&["ext4", "rm", img, "-r", "/put-tree/inner"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(csumkit(&["ext4", "rm", img, "/put-tree/fifo"], None).status.success());
    clean();
    {
        let v = csumfs::Volume::open(&image, csumfs::Options::default()).unwrap();
        assert_eq!(v.resolve("/made/sparse").unwrap().size, 6 << 20);
        assert_eq!(v.read_link(&v.resolve("/made/renamed-link").unwrap()).unwrap(), b"a.txt");
        assert!(v.resolve("/put-tree/inner").is_err() && v.resolve("/put-tree/fifo").is_err());
        assert_eq!(v.resolve("/put-tree/a.txt").unwrap().links, 1, "its hard link went with inner/");
    }
    let before = std::fs::read(&image).unwrap();
    let out = csumkit(&["ext4", "put", img, "/nonexistent/source", "/x"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(std::fs::read(&image).unwrap() == before, "a refused put changed the image");
    // An immutable file (chattr +i) is not removed: one line, exit 1, the
    // image unchanged.
    {
        let options = csumfs::Options { write: true, ..csumfs::Options::default() };
        let mut v = csumfs::Volume::open(&image, options).unwrap();
        let a = v.resolve("/put-tree/a.txt").unwrap();
        v.set_flags(a.ino, a.flags | 0x10).unwrap();
        v.sync().unwrap();
    }
    let before = std::fs::read(&image).unwrap();
    let out = csumkit(&["ext4", "rm", img, "/put-tree/a.txt"], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is immutable") && stderr.lines().count() == 1, "{stderr}");
    assert!(std::fs::read(&image).unwrap() == before, "a refused rm changed the image");
    clean();
    std::fs::remove_dir_all(&tree).unwrap();
}

#[test]
fn bench_ext4_quick_prints_its_table() {
    if !std::path::Path::new("/usr/sbin/mke2fs").exists() && !std::path::Path::new("/sbin/mke2fs").exists() {
        skip("mke2fs", "apt-get install e2fsprogs");
        return;
    }
    let dir = temp_root().join("bench-ext4");
    std::fs::create_dir_all(&dir).unwrap();
    let out = csumkit(&["bench", "ext4", "--quick", "--files", "40", "--dir", dir.to_str().unwrap()], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for row in
        ["|  1 KiB |         8192 |", "|  4 KiB |        32768 |", "| 64 KiB |        65528 |", "fallocate 128 KiB"]
    {
        assert!(text.contains(row), "{row}: {text}");
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "scratch images removed");
    assert_eq!(csumkit(&["bench", "ext4", "--files", "0"], None).status.code(), Some(2));
}

#[test]
fn ext4_check_reports_then_repairs_with_yes() {
    let Some(mkfs) = ["/usr/sbin/mke2fs", "/sbin/mke2fs"].into_iter().find(|p| std::path::Path::new(p).exists()) else {
        skip("mke2fs", "apt-get install e2fsprogs");
        return;
    };
    let image = temp_file("ext4.img", b"");
    let status = Command::new(mkfs)
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,64bit", "-b", "4096"])
        .arg(&image)
        .arg("16M")
        .status()
        .unwrap();
    assert!(status.success());
    let path = image.to_str().unwrap();
    let out = csumkit(&["ext4", "check", path], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checksums valid"));
    let clean = std::fs::read(&image).unwrap();
    // A bit set in the inode bitmap: its free count no longer matches the
    // descriptor's, so the wrong checksum covers wrong content. Reported,
    // exit 1, and even --repair --yes writes nothing (e2fsck's job).
    let mut bytes = clean.clone();
    let layout = csumkit::ext4::Layout::parse(&bytes).unwrap();
    let group = layout.group(&bytes, 0).unwrap();
    bytes[(group.inode_bitmap * layout.block_size) as usize + 1] ^= 0x80;
    std::fs::write(&image, &bytes).unwrap();
    let out = csumkit(&["ext4", "check", path], None);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("BAD inode bitmap group 0") && stdout.contains("structural damage"), "{stdout}");
    let out = csumkit(&["ext4", "check", path, "--repair", "--yes"], None);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("run e2fsck"));
    assert!(std::fs::read(&image).unwrap() == bytes, "damaged content was re-sealed");
    // A changed volume label: sound content, stale checksum — repairable.
    let mut bytes = clean.clone();
    bytes[1024 + 0x78] ^= 0x20;
    std::fs::write(&image, &bytes).unwrap();
    // --repair without a terminal and without --yes refuses.
    let out = csumkit(&["ext4", "check", path, "--repair"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(std::fs::read(&image).unwrap() == bytes);
    let out = csumkit(&["ext4", "check", path, "--repair", "--yes"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("rewrote 1 checksums"));
    assert!(csumkit(&["ext4", "check", path], None).status.success());
    // --repair --yes on a clean image changes no byte.
    std::fs::write(&image, &clean).unwrap();
    assert!(csumkit(&["ext4", "check", path, "--repair", "--yes"], None).status.success());
    assert!(std::fs::read(&image).unwrap() == clean, "a clean image was changed");
    // A truncated copy (half, one byte short) is an error, never "valid".
    for len in [clean.len() / 2, clean.len() - 1] {
        let short = temp_file("ext4-short.img", &clean[..len]);
        let out = csumkit(&["ext4", "check", short.to_str().unwrap()], None);
        assert_eq!(out.status.code(), Some(2), "{len}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("truncated"), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = csumkit(&["ext4", "check", "/etc/hostname"], None);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bench_xattr_quick_prints_cold_and_warm_with_the_seed() {
    if !std::path::Path::new("/usr/bin/mkfs.erofs").exists() {
        skip("mkfs.erofs", "apt-get install erofs-utils");
        return;
    }
    let out = csumkit(&["bench", "xattr", "--quick", "--files", "2000", "--runs", "1"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    for needle in ["cold", "warm", "468 → 370", "answered by the filter alone", "2000 with xattrs"] {
        assert!(stdout.contains(needle), "missing {needle:?}:\n{stdout}");
    }
}

/// `ext4 mkdir` on an image the kernel left needing recovery recovers its
/// journal (fast commits too) into the image first: the new directory and
/// the fast commit's file are both there, and e2fsck finds it clean.
#[test]
fn ext4_writes_recover_the_kernels_journal_first() {
    let packed = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../csumkit/tests/data/jbd2/fastcommit-noflush-1k.img.gz");
    let out = Command::new("gzip").arg("-dc").arg(&packed).output().unwrap();
    assert!(out.status.success());
    let image = temp_file("journal-mkdir.img", &out.stdout);
    let path = image.to_str().unwrap();
    let out = csumkit(&["ext4", "mkdir", path, "/made"], None);
    assert!(out.status.success(), "{out:?}");
    let out = csumkit(&["ext4", "ls", path, "/d/sub/g"], None);
    assert!(out.status.success(), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("replayed"), "replayed twice: {out:?}");
    let out = csumkit(&["ext4", "ls", path, "/made"], None);
    assert!(out.status.success(), "{out:?}");
    match Command::new("e2fsck").arg("-fn").arg(path).output() {
        Ok(fsck) => assert!(fsck.status.success(), "e2fsck -fn: {}", String::from_utf8_lossy(&fsck.stdout)),
        Err(_) => skip("e2fsck", "apt-get install e2fsprogs"),
    }
}
