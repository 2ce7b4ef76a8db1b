#!/usr/bin/env bash
# Makes the jbd2 recovery corpus (crates/csumkit/tests/data/jbd2/): ext4
# images the Linux kernel left with committed transactions in their journal
# — mounted, written, fsynced (a commit; `syncfs` would also write the
# blocks home), then shut down with `xfs_io -x -c shutdown -f` (the journal
# flushed, nothing checkpointed: what a power cut after the last commit
# leaves) and copied before the unmount. For each:
#   NAME.img.gz   the image as the kernel left it (needs_recovery)
#   NAME.kernel   the kernel's recovery (a read-only mount of a copy on a
#                 writable loop device replays the journal and its fast
#                 commits): every block it changed, as "block crc32" lines
#                 (zlib's CRC-32 of the result)
#   NAME.e2fsck   the same for `e2fsck -E journal_only`, when it recovers
#                 the image (1.47.0 fails on some fast-commit journals:
#                 VERDICTS then says so)
# and one line per image in VERDICTS. Needs root, loop devices, e2fsprogs,
# xfsprogs (xfs_io) and python3.
#
#   scripts/journal-corpus.sh [OUTDIR] [LAYOUT...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-crates/csumkit/tests/data/jbd2}
shift || true
[ "$(id -u)" = 0 ] || { echo "journal-corpus: needs root (loop mounts)" >&2; exit 2; }
for tool in mke2fs e2fsck dumpe2fs xfs_io gzip python3; do
  command -v "$tool" >/dev/null || { echo "journal-corpus: $tool not found (apt-get install e2fsprogs xfsprogs)" >&2; exit 2; }
done

# name|block size|-O features|other mke2fs arguments|size|workload
layouts=(
  "v3-4k|4096|metadata_csum,64bit||32M|files"
  "v3-1k|1024|metadata_csum,64bit||24M|files"
  "v3-32bit-4k|4096|metadata_csum,^64bit||32M|files"
  "revoke-4k|4096|metadata_csum,64bit||32M|revoke"
  "wrap-1k|1024|metadata_csum,64bit|-J size=1|24M|many"
  "fastcommit-4k|4096|metadata_csum,64bit,fast_commit||32M|files"
)

work=$(mktemp -d /tmp/journal-corpus.XXXXXX)
mnt="$work/mnt"
mkdir -p "$mnt" "$out"
cleanup() { mountpoint -q "$mnt" && umount "$mnt"; rm -rf "$work"; }
trap cleanup EXIT

workload() {
  local m=$1 kind=$2
  case $kind in
  files)
    mkdir "$m/d"
    for i in $(seq 1 60); do echo "file $i" >"$m/d/f$i"; done
    sync "$m/d/f60"
    echo late >"$m/late"
    mkdir "$m/late_dir"
    rm "$m/d/f3"
    mv "$m/d/f4" "$m/late_dir/moved"
    sync "$m/late"
    ;;
  revoke)
    # A directory's blocks are metadata: freed and reused as file data in a
    # later transaction, they are revoked so an older copy is not replayed.
    mkdir "$m/big"
    seq -f "$m/big/a_long_name_to_fill_directory_blocks_%05g" 1 600 | xargs touch
    sync "$m/big"
    rm -rf "$m/big"
    touch "$m/after_rm" && sync "$m/after_rm"
    head -c 2M /dev/zero | tr '\0' 'd' >"$m/data"
    sync "$m/data"
    ;;
  many)
    # More transactions than the 1024-block log holds: the log wraps.
    mkdir "$m/w"
    for i in $(seq 1 400); do
      echo "$i" >"$m/w/f$i"
      sync "$m/w/f$i"
    done
    ;;
  esac
}

: >"$work/VERDICTS"

# "block crc32" of every block of $2 that differs from $1 ($3: block size).
changed_blocks() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys, zlib
a, b, bs = open(sys.argv[1], 'rb'), open(sys.argv[2], 'rb'), int(sys.argv[3])
n = 0
while True:
    x, y = a.read(bs), b.read(bs)
    if not x:
        break
    if x != y:
        print(n, format(zlib.crc32(y), '08x'))
    n += 1
PY
}

: >"$work/VERDICTS"
kernel=$(uname -r)
e2fsck_version=$( (e2fsck -V 2>&1 || true) | awk 'NR==1 {print $2}')
for entry in "${layouts[@]}"; do
  IFS='|' read -r name bs features extra size kind <<<"$entry"
  if [ $# -gt 0 ] && [[ ! " $* " == *" $name "* ]]; then continue; fi
  img="$work/$name.img"
  # shellcheck disable=SC2086
  mke2fs -q -F -t ext4 -b "$bs" -O "$features" $extra "$img" "$size"
  mount -t ext4 -o loop "$img" "$mnt"
  workload "$mnt" "$kind"
  xfs_io -x -c "shutdown -f" "$mnt"
  cp --sparse=always "$img" "$work/crashed.img"
  umount "$mnt"
  if ! dumpe2fs -h "$work/crashed.img" 2>/dev/null | grep -q needs_recovery; then
    echo "journal-corpus: $name: the kernel left nothing to recover; not kept" >&2
    continue
  fi
  cp --sparse=always "$work/crashed.img" "$work/kernel.img"
  dev=$(losetup -f --show "$work/kernel.img")
  mount -t ext4 -o ro "$dev" "$mnt"
  umount "$mnt"
  losetup -d "$dev"
  changed_blocks "$work/crashed.img" "$work/kernel.img" "$bs" >"$out/$name.kernel"
  cp --sparse=always "$work/crashed.img" "$work/e2fsck.img"
  e2fsck -E journal_only -y "$work/e2fsck.img" >"$work/e2fsck.log" 2>&1 || true
  if grep -q "while recovering" "$work/e2fsck.log"; then
    e2fsck_verdict="failed ($(grep -o '[A-Za-z ]* while recovering' "$work/e2fsck.log" | head -1))"
    rm -f "$out/$name.e2fsck"
  else
    e2fsck_verdict=recovered
    changed_blocks "$work/crashed.img" "$work/e2fsck.img" "$bs" >"$out/$name.e2fsck"
  fi
  gzip -9 -n -c "$work/crashed.img" >"$out/$name.img.gz"
  sequence=$( (dumpe2fs -h "$work/crashed.img" 2>/dev/null || true) | awk '/^Journal sequence/ {print $3}')
  printf '%s\t%s\t%s\t%s\t%s\tkernel changed %s blocks\tjournal sequence %s\te2fsck %s %s\tkernel %s\n' \
    "$name" "$bs" "$features" "$extra" "$kind" "$(wc -l <"$out/$name.kernel")" "$sequence" "$e2fsck_version" \
    "$e2fsck_verdict" "$kernel" >>"$work/VERDICTS"
  echo "$name: $(du -h "$out/$name.img.gz" | cut -f1), kernel changed $(wc -l <"$out/$name.kernel") blocks, e2fsck $e2fsck_verdict" >&2
  rm -f "$work"/*.img
done
if [ -f "$out/VERDICTS" ]; then
  awk -F'\t' 'NR == FNR { remade[$1] = 1; next } !/^#/ && !($1 in remade)' "$work/VERDICTS" "$out/VERDICTS" \
    >>"$work/VERDICTS"
fi
{
  echo "# layout	block	features	mke2fs args	workload	kernel oracle	journal	e2fsck oracle	kernel (scripts/journal-corpus.sh)"
  sort "$work/VERDICTS"
} >"$out/VERDICTS"
