#!/usr/bin/env bash
# Mutation testing of the modules whose job is safety (docs/testing.md):
# cargo-mutants plants one small bug at a time in these files and runs the
# package's tests; a mutant the tests do not catch ("missed") is a test to
# write, or an equivalent mutant to explain in docs/mutants.md.
#
#   scripts/mutants.sh                 # every safety module (hours on 2 cores)
#   scripts/mutants.sh --list          # just list the mutants
#   scripts/mutants.sh -f crates/csumkit/src/alloc/verify.rs   # one file
#
# Results land in mutants.out/ (caught.txt, missed.txt, unviable.txt, timeout.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo mutants --version >/dev/null 2>&1; then
  cargo install --locked cargo-mutants
fi
files=(
  crates/csumkit/src/bytelog/log.rs
  crates/csumkit/src/bytelog/format.rs
  crates/csumkit/src/bytelog/group.rs
  crates/csumkit/src/bytelog/medium.rs
  crates/csumkit/src/bytelog/crash.rs
  crates/csumkit/src/pipeline/writer.rs
  crates/csumkit/src/pipeline/store.rs
  crates/csumkit/src/alloc/verify.rs
  crates/csumkit/src/alloc/image.rs
  crates/csumkit/src/pi/protect.rs
  crates/csumkit/src/pi/storage.rs
  crates/csumkit/src/csum_tree.rs
  crates/csumkit/src/ext4/check.rs
  crates/csumkit/src/ext4/checksum.rs
  crates/csumkit/src/ext4/structure.rs
  crates/csumkit/src/ext4/special.rs
)
args=()
if [ "$#" -eq 0 ] || [ "$1" = "--list" ]; then
  for f in "${files[@]}"; do args+=(-f "$f"); done
fi
# The `mutants` profile (Cargo.toml): optimised like release, without LTO
# and with incremental builds, so each mutant rebuilds in seconds and the
# crash harness and proptests still run fast.
exec cargo mutants -p csumkit --profile mutants --timeout 600 "${args[@]}" "$@"
