#!/usr/bin/env bash
# pjdfstest (POSIX semantics) inside `csumkit mount`, then e2fsck -fn on the image.
#   scripts/pjdfstest.sh [TEST_DIR ...]      (default: every test)
# Env: PJDFSTEST_SRC (default: ../shared/tools/pjdfstest beside the checkout, then
# /work/shared/tools/pjdfstest), IMAGE_SIZE (512M), BLOCK_SIZE (4096), CSUMKIT (the
# binary; default target/release/csumkit, built if missing), FEATURES (mke2fs -O; default metadata_csum, with
# the journal a default mount commits into), MOUNT_OPTIONS (more
# `-o` options, e.g. writeback_cache). Needs root, /dev/fuse,
# fuse3, e2fsprogs, autoconf, automake, gcc, make, perl.
# Prints pjdfstest's report, its summary line and e2fsck's verdict; exits 1 when a
# subtest failed or e2fsck -fn found anything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=${PJDFSTEST_SRC:-}
for candidate in "$root/../shared/tools/pjdfstest" /work/shared/tools/pjdfstest; do
  if [ -z "$src" ] && [ -f "$candidate/pjdfstest.c" ]; then src=$candidate; fi
done
if [ -z "$src" ] || [ ! -x "$src/../run-pjdfstest" ]; then
  echo "pjdfstest.sh: pjdfstest source not found (set PJDFSTEST_SRC)" >&2
  exit 3
fi
csumkit=${CSUMKIT:-$root/target/release/csumkit}
[ -x "$csumkit" ] || (cd "$root" && cargo build --release -q -p csumkit-cli)
work=$(mktemp -d /tmp/csumfs-pjdfstest.XXXXXX)
cleanup() {
  fusermount3 -uz "$work/mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/mnt"
truncate -s "${IMAGE_SIZE:-512M}" "$work/img"
mke2fs -q -F -t ext4 -O "${FEATURES:-metadata_csum}" -b "${BLOCK_SIZE:-4096}" "$work/img"
"$csumkit" mount "$work/img" "$work/mnt" -o "allow_other${MOUNT_OPTIONS:+,$MOUNT_OPTIONS}"
set +e
report=$("$src/../run-pjdfstest" "$work/mnt" "$@" 2>&1)
set -e
echo "$report"
fusermount3 -u "$work/mnt"
# The daemon syncs and exits after the unmount; e2fsck waits for it.
for _ in $(seq 100); do pgrep -f "csumkit mount $work/img" >/dev/null || break; sleep 0.1; done
if e2fsck -fn "$work/img" >"$work/fsck" 2>&1; then
  echo "e2fsck -fn: clean"
else
  echo "e2fsck -fn: NOT clean"; cat "$work/fsck"; exit 1
fi
summary=$(echo "$report" | tail -1)
case $summary in
  pjdfstest:*"(0 failed)"*) ;;
  *) echo "pjdfstest.sh: failures (see above)"; exit 1 ;;
esac
if echo "$report" | grep -q 'Bailout called'; then echo "pjdfstest.sh: a test bailed out"; exit 1; fi
