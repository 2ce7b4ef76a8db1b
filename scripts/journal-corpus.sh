#!/usr/bin/env bash
# Makes the jbd2 recovery corpus (crates/csumkit/tests/data/jbd2/): ext4
# images the Linux kernel left with committed transactions in their journal
# — mounted, written, fsynced (a commit; `syncfs` would also write the
# blocks home), then shut down with `xfs_io -x -c shutdown -f` (the journal
# flushed, nothing checkpointed: what a power cut after the last commit
# leaves; `noflush` layouts shut down without flushing the log, as a crash
# before the last commit's write) and copied before the unmount. For each:
#   NAME.img.gz   the image as the kernel left it (needs_recovery)
#   NAME.view.json.gz  the kernel's view of the tree after its own recovery
#                 (scripts/kernel-view.py: every path's mode, owner, size,
#                 links, symlink target, xattrs, content CRC-32)
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
for tool in mke2fs e2fsck dumpe2fs xfs_io gzip python3 setfattr setfacl fallocate; do
  command -v "$tool" >/dev/null || { echo "journal-corpus: $tool not found (apt-get install e2fsprogs xfsprogs attr acl)" >&2; exit 2; }
done

# name|block size|-O features|other mke2fs arguments|size|mount options|workload|shutdown
# The kernel writes csum_v3 with metadata_csum, v1 (COMPAT_CHECKSUM) with
# journal_checksum alone, none without either; it never writes csum_v2.
layouts=(
  "v3-4k|4096|metadata_csum,64bit||32M||files|flush"
  "v3-2k|2048|metadata_csum,64bit||32M||rich|flush"
  "v3-1k|1024|metadata_csum,64bit||24M||rich|flush"
  "v3-32bit-4k|4096|metadata_csum,^64bit||32M||files|flush"
  "noflush-4k|4096|metadata_csum,64bit||32M||rich|noflush"
  "async-4k|4096|metadata_csum,64bit||32M|journal_async_commit,data=writeback|rich|flush"
  "v1csum-4k|4096|^metadata_csum,64bit||32M|journal_checksum|files|flush"
  "nocsum-4k|4096|^metadata_csum,64bit||32M||files|flush"
  "revoke-4k|4096|metadata_csum,64bit||32M||revoke|flush"
  "wrap-1k|1024|metadata_csum,64bit|-J size=1|24M||many|flush"
  "fastcommit-4k|4096|metadata_csum,64bit,fast_commit||32M||files|flush"
  "fastcommit-1k|1024|metadata_csum,64bit,fast_commit||24M||rich|flush"
  "fastcommit-noflush-4k|4096|metadata_csum,64bit,fast_commit||32M||fsyncs|noflush"
  "fastcommit-noflush-1k|1024|metadata_csum,64bit,fast_commit||24M||fsyncs|noflush"
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
  rich)
    # Every kind of metadata: an htree directory, xattrs in the inode and
    # in a block, ACLs (access and default), hard and symbolic links,
    # truncates both ways, fallocate (unwritten extents), owners, setuid;
    # then changes after the last fsync that must not survive.
    mkdir "$m/d" "$m/htree" "$m/acl"
    for i in $(seq 1 40); do head -c $((i * 1500)) /dev/urandom >"$m/d/f$i"; done
    seq -f "$m/htree/entry_with_a_long_name_%05g" 1 500 | xargs touch
    setfattr -n user.small -v inline "$m/d/f1"
    setfattr -n user.big -v "$(head -c 700 /dev/zero | tr '\0' x)" "$m/d/f2"
    setfacl -m u:1000:rw,g:100:r "$m/d/f5"
    setfacl -d -m u:1000:rx "$m/acl"
    echo inherits >"$m/acl/child"
    ln "$m/d/f6" "$m/d/f6.link"
    ln -s f7 "$m/d/short.sym"
    ln -s "$(printf 'a%.0s' $(seq 1 100))" "$m/d/long.sym"
    truncate -s 100 "$m/d/f8"
    truncate -s 1M "$m/d/f9"
    fallocate -l 256K "$m/d/falloc"
    fallocate -p -o 4096 -l 8192 "$m/d/f40"
    chown 1000:100 "$m/d/f10"
    chmod 4755 "$m/d/f11"
    rm "$m/d/f12" "$m/htree/entry_with_a_long_name_00007"
    mv "$m/d/f13" "$m/acl/renamed"
    sync "$m/d/f1"
    echo after >"$m/after_sync"
    rm "$m/d/f14"
    ;;
  fsyncs)
    # Fsyncs the kernel logs as fast commits after a full commit (`sync`),
    # the log not flushed at the shutdown: only the fast-commit area holds
    # them.
    mkdir "$m/d"
    for i in $(seq 1 20); do head -c $((i * 700)) /dev/urandom >"$m/d/f$i"; done
    sync
    head -c 5000 /dev/urandom >>"$m/d/f1" && sync "$m/d/f1"
    echo new >"$m/d/new" && sync "$m/d/new"
    truncate -s 100 "$m/d/f2" && sync "$m/d/f2"
    head -c 9000 /dev/urandom | dd of="$m/d/f3" bs=1 seek=20000 conv=notrunc status=none && sync "$m/d/f3"
    fallocate -l 64K "$m/d/f4" && sync "$m/d/f4"
    ln "$m/d/f5" "$m/d/f5.link" && sync "$m/d/f5"
    rm "$m/d/f6" && sync "$m/d"
    mkdir "$m/d/sub" && echo inside >"$m/d/sub/g" && sync "$m/d/sub/g"
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
  IFS='|' read -r name bs features extra size options kind shutdown <<<"$entry"
  if [ $# -gt 0 ] && [[ ! " $* " == *" $name "* ]]; then continue; fi
  img="$work/$name.img"
  # shellcheck disable=SC2086
  mke2fs -q -F -t ext4 -b "$bs" -O "$features" $extra "$img" "$size"
  mount -t ext4 -o "loop${options:+,$options}" "$img" "$mnt"
  workload "$mnt" "$kind"
  if [ "$shutdown" = flush ]; then xfs_io -x -c "shutdown -f" "$mnt"; else xfs_io -x -c shutdown "$mnt"; fi
  cp --sparse=always "$img" "$work/crashed.img"
  umount "$mnt"
  if ! dumpe2fs -h "$work/crashed.img" 2>/dev/null | grep -q needs_recovery; then
    echo "journal-corpus: $name: the kernel left nothing to recover; not kept" >&2
    continue
  fi
  cp --sparse=always "$work/crashed.img" "$work/kernel.img"
  dev=$(losetup -f --show "$work/kernel.img")
  kernel_mount=ro
  if ! mount -t ext4 -o ro "$dev" "$mnt" 2>/dev/null; then
    # Linux 6.18 fails its fast-commit replay on a read-only mount
    # ("JBD2: journal recovery failed"); a read-write one replays it.
    losetup -d "$dev"
    cp --sparse=always "$work/crashed.img" "$work/kernel.img"
    dev=$(losetup -f --show "$work/kernel.img")
    mount -t ext4 "$dev" "$mnt"
    kernel_mount=rw
  fi
  python3 scripts/kernel-view.py "$mnt" | gzip -9 -n >"$out/$name.view.json.gz"
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
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\tkernel (%s mount) changed %s blocks\tjournal sequence %s\te2fsck %s %s\tkernel %s\n' \
    "$name" "$bs" "$features" "$extra" "$options" "$kind" "$shutdown" "$kernel_mount" "$(wc -l <"$out/$name.kernel")" "$sequence" "$e2fsck_version" \
    "$e2fsck_verdict" "$kernel" >>"$work/VERDICTS"
  echo "$name: $(du -h "$out/$name.img.gz" | cut -f1), kernel changed $(wc -l <"$out/$name.kernel") blocks, e2fsck $e2fsck_verdict" >&2
  rm -f "$work"/*.img
done
if [ -f "$out/VERDICTS" ]; then
  awk -F'\t' 'NR == FNR { remade[$1] = 1; next } !/^#/ && !($1 in remade)' "$work/VERDICTS" "$out/VERDICTS" \
    >>"$work/VERDICTS"
fi
{
  echo "# layout	block	features	mke2fs args	mount options	workload	shutdown	kernel oracle	journal	e2fsck oracle	kernel (scripts/journal-corpus.sh)"
  sort "$work/VERDICTS"
} >"$out/VERDICTS"
