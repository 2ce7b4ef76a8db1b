#!/usr/bin/env bash
# fio with verify=crc32c inside `csumkit mount`, then the kernel's judgement:
# unmount, e2fsck -fn, `csumkit scrub` (every data checksum matches), mount the
# image with the kernel's ext4 (loop) and have
# fio verify every block it wrote again there (--verify_only).
#   scripts/fio-verify.sh [--quick]      (--quick: smaller files, for CI)
# Env: IMAGE_SIZE (1G; 256M with --quick), BLOCK_SIZE (4096), CSUMKIT (binary),
# FEATURES (mke2fs -O; default metadata_csum: with the journal a mount commits into).
# Needs root, /dev/fuse, fuse3, fio, e2fsprogs. Exits 1 on any verify error or
# an unclean e2fsck.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
quick=0; [ "${1:-}" = --quick ] && quick=1
csumkit=${CSUMKIT:-$root/target/release/csumkit}
[ -x "$csumkit" ] || (cd "$root" && cargo build --release -q -p csumkit-cli)
if [ $quick = 1 ]; then size=24M; rsize=8M; image=${IMAGE_SIZE:-256M}; else size=128M; rsize=64M; image=${IMAGE_SIZE:-1G}; fi
work=$(mktemp -d /tmp/csumfs-fio.XXXXXX)
cleanup() {
  fusermount3 -uz "$work/mnt" 2>/dev/null || true
  umount "$work/kernel" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/mnt" "$work/kernel"
truncate -s "$image" "$work/img"
mke2fs -q -F -t ext4 -O "${FEATURES:-metadata_csum}" -b "${BLOCK_SIZE:-4096}" "$work/img"
# One job file: sequential 1 MiB writes, 4 KiB random writes, a mixed random
# read/write job — two processes each, all at once, every block verified.
cat >"$work/jobs.fio" <<JOBS
[global]
directory=$work/mnt
verify=crc32c
verify_fatal=1
do_verify=1
numjobs=2
group_reporting=0
[seq]
rw=write
bs=1M
size=$size
[rand]
rw=randwrite
bs=4k
size=$rsize
[mixed]
rw=randrw
rwmixread=30
bs=16k
size=$rsize
JOBS
"$csumkit" mount "$work/img" "$work/mnt"
status=0
# fio keeps its verify state files in the current directory: the work dir.
(cd "$work" && fio --output-format=terse --terse-version=3 jobs.fio) >"$work/fio.out" 2>&1 || status=$?
awk -F';' 'NF > 50 {printf "fio %-6s write %8.1f MB/s  read %8.1f MB/s  errors %s\n", $3, $48/1024, $7/1024, $5}' "$work/fio.out"
if [ $status != 0 ]; then echo "fio-verify.sh: fio failed inside csumkit mount:"; cat "$work/fio.out"; exit 1; fi
fusermount3 -u "$work/mnt"
for _ in $(seq 100); do pgrep -f "csumkit mount $work/img" >/dev/null || break; sleep 0.1; done
if e2fsck -fn "$work/img" >"$work/fsck" 2>&1; then echo "e2fsck -fn: clean"; else echo "e2fsck -fn: NOT clean"; cat "$work/fsck"; exit 1; fi
# Every block fio wrote has a data checksum that matches (seed 002).
"$csumkit" scrub "$work/img" | tail -1
mount -t ext4 -o loop "$work/img" "$work/kernel"  # fio opens its files read-write even to verify
# The same jobs, verify only, against what the kernel reads.
sed -i "s|directory=$work/mnt|directory=$work/kernel|" "$work/jobs.fio"
sed -i 's/^\[mixed\]/[mixed]\nverify=0/' "$work/jobs.fio"  # a mixed job's last state is not one verify pass
if (cd "$work" && fio --verify_only jobs.fio) >"$work/verify.out" 2>&1; then
  echo "kernel ext4 re-verified every block fio wrote: ok"
else
  echo "fio-verify.sh: the kernel reads different data:"; cat "$work/verify.out"; exit 1
fi
