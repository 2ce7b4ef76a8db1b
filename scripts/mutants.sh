#!/usr/bin/env bash
# Mutation testing of the modules whose job is safety (docs/testing.md):
# cargo-mutants plants one small bug at a time in these files and runs the
# package's tests; a mutant the tests do not catch ("missed") is a test to
# write, or an equivalent mutant to explain in docs/mutants.md.
#
#   scripts/mutants.sh                 # every safety module (many hours on 2 cores)
#   scripts/mutants.sh --list          # just list the mutants
#   scripts/mutants.sh -f crates/csumkit/src/alloc/verify.rs   # one file
#   scripts/mutants.sh -f crates/csumfs/src/remove.rs          # one of csumfs's
#   scripts/mutants.sh -f crates/csumfs/src/fuse.rs            # the mount's (csumkit-cli's tests)
#
# The package is the file's (`-p csumkit` or `-p csumfs`); with no `-f`,
# csumkit's files run first, then csumfs's. Extra arguments go to
# cargo-mutants (e.g. `-o DIR`, `--re REGEX`, `-- --test ext4`).
# Results land in mutants.out/ (caught.txt, missed.txt, unviable.txt, timeout.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo mutants --version >/dev/null 2>&1; then
  cargo install --locked cargo-mutants
fi
csumkit_files=(
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
# csumfs's writer: what changes an image, and its metadata log. Every test
# target of the package (e2fsck and the kernel judge the images; about 45 s
# a mutant). For redo.rs alone, the targets that open a logged volume are
# enough and three times faster:
#   scripts/mutants.sh -f crates/csumfs/src/redo.rs -- --lib --test logged \
#     --test pi --test power_cut --test undo --test orphans
csumfs_files=(
  crates/csumfs/src/redo.rs
  crates/csumfs/src/log_writer.rs
  crates/csumfs/src/group_sync.rs
  crates/csumfs/src/remove.rs
  crates/csumfs/src/namespace.rs
  crates/csumfs/src/dir.rs
  crates/csumfs/src/htree.rs
  crates/csumfs/src/dir_write.rs
  crates/csumfs/src/write.rs
  crates/csumfs/src/datasum.rs
  crates/csumfs/src/undo.rs
  crates/csumfs/src/orphan.rs
  crates/csumfs/src/extent_tree.rs
  crates/csumfs/src/migrate.rs
  crates/csumfs/src/ea_inode.rs
  crates/csumfs/src/inline.rs
  crates/csumfs/src/xattr_write.rs
  crates/csumfs/src/acl.rs
  crates/csumfs/src/map.rs
  crates/csumfs/src/data.rs
  crates/csumfs/src/attr.rs
  crates/csumfs/src/volume.rs
  crates/csumfs/src/inode.rs
  crates/csumfs/src/xattr.rs
  crates/csumfs/src/extents.rs
  crates/csumfs/src/immutable.rs
  crates/csumfs/src/reserve.rs
)
# csumfs's FUSE glue: its tests are the mount's, in csumkit-cli (`mount.rs`,
# and `mount_syscalls.rs`, which holds every answer to the kernel's ext4's).
# cargo-mutants 27 runs its baseline on the mutated package's tests whatever
# `--test-package` says, so the baseline is skipped (run those two targets
# first: they must pass unmutated). About 25 minutes at -j 2.
fuse_file=crates/csumfs/src/fuse.rs
run_fuse() {
  cargo mutants --baseline=skip --test-package csumkit-cli --profile mutants --timeout 100 \
    -f "$fuse_file" "$@" -- --test mount --test mount_syscalls
}
# The `mutants` profile (Cargo.toml): optimised like release, without LTO
# and with incremental builds, so each mutant rebuilds in seconds and the
# crash harness and proptests still run fast. A mutant that makes a test
# loop is cut at 100 s (a timeout counts as caught).
run() {
  local package=$1
  shift
  cargo mutants -p "$package" --profile mutants --timeout 100 "$@"
}
if [ "$#" -eq 0 ] || [ "$1" = "--list" ]; then
  args=()
  for f in "${csumkit_files[@]}"; do args+=(-f "$f"); done
  run csumkit "${args[@]}" "$@"
  args=()
  for f in "${csumfs_files[@]}"; do args+=(-f "$f"); done
  run csumfs "${args[@]}" "$@"
  run_fuse "$@"
  exit
fi
package=csumkit
for arg in "$@"; do
  case "$arg" in
    "$fuse_file") package=fuse ;;
    crates/csumfs/*) package=csumfs ;;
  esac
done
if [ "$package" = fuse ]; then
  args=()
  for arg in "$@"; do [ "$arg" = "$fuse_file" ] || [ "$arg" = -f ] || args+=("$arg"); done
  run_fuse "${args[@]}"
  exit
fi
run "$package" "$@"
