#!/usr/bin/env bash
# Makes the ext4 test corpus (crates/csumkit/tests/data/ext4/): images in
# every layout `csumkit ext4 check` claims, each made by mke2fs, populated
# by the Linux kernel through a loop mount (an ordinary workload: big
# directories the kernel indexes itself, deletes, renames, hard links, fast
# and slow symlinks, sparse, fragmented and fallocated files, xattrs in the
# inode, in external and shared blocks, ACLs, inline data, ea_inode values),
# and kept only when `e2fsck -fn` calls it clean. Needs root, loop devices,
# e2fsprogs, attr and acl.
#
#   scripts/ext4-corpus.sh [OUTDIR] [LAYOUT...]   # default: the test data dir, every layout
#
# Writes OUTDIR/LAYOUT.img.gz, the kernel's view of its tree while mounted
# (OUTDIR/LAYOUT.view.json.gz: every path's attributes, symlink target,
# xattrs and content CRC-32, from scripts/kernel-view.py) and one line per
# image to OUTDIR/VERDICTS (layout, block size, features, e2fsck verdict,
# kernel, mke2fs version).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-crates/csumkit/tests/data/ext4}
shift || true
[ "$(id -u)" = 0 ] || { echo "ext4-corpus: needs root (loop mounts)" >&2; exit 2; }
for tool in mke2fs e2fsck tune2fs setfattr setfacl gzip python3; do
  command -v "$tool" >/dev/null || { echo "ext4-corpus: $tool not found (apt-get install e2fsprogs attr acl)" >&2; exit 2; }
done

# name|block size|-O features|other mke2fs arguments|size
layouts=(
  "1k|1024|metadata_csum,64bit||24M"
  "2k-noflex|2048|metadata_csum,64bit,^flex_bg||24M"
  "4k|4096|metadata_csum,64bit||32M"
  "4k-32bit|4096|metadata_csum,^64bit||32M"
  "4k-inode128|4096|metadata_csum,64bit|-I 128|32M"
  "bigalloc-1k|1024|metadata_csum,64bit,bigalloc|-C 4096|32M"
  "bigalloc-4k|4096|metadata_csum,64bit,bigalloc|-C 16384|64M"
  "metabg-1k|1024|metadata_csum,64bit,meta_bg,^resize_inode|-g 1024|40M"
  "metabg-sparse2-1k|1024|metadata_csum,64bit,meta_bg,^resize_inode,sparse_super2|-g 1024 -E num_backup_sb=1|40M"
  "metabg-4k|4096|metadata_csum,^64bit,meta_bg,^resize_inode|-g 256|140M"
  "sparse2-4k|4096|metadata_csum,64bit,sparse_super2|-g 2048 -E num_backup_sb=2|64M"
  "inline-4k|4096|metadata_csum,64bit,inline_data||32M"
  "seed-4k|4096|metadata_csum,64bit,metadata_csum_seed||32M"
  "largedir-1k|1024|metadata_csum,64bit,large_dir||24M"
  "eainode-4k|4096|metadata_csum,64bit,ea_inode||32M"
  "noextent-4k|4096|metadata_csum,^64bit,^extent||32M"
  "orphan-mmp-4k|4096|metadata_csum,64bit,orphan_file,mmp|-E mmp_update_interval=1|32M"
)

work=$(mktemp -d /tmp/ext4-corpus.XXXXXX)
mnt="$work/mnt"
mkdir -p "$mnt" "$out"
cleanup() { mountpoint -q "$mnt" && umount "$mnt"; rm -rf "$work"; }
trap cleanup EXIT

# The workload, run by the kernel on the mounted image.
workload() {
  local m=$1 features=$2 bs=$3
  mkdir "$m/small" "$m/big" "$m/huge" "$m/renamed"
  seq -f "$m/small/entry_%05g" 1 40 | xargs touch
  seq -f "$m/big/a_rather_long_file_name_so_that_blocks_fill_%05g" 1 400 | xargs touch
  seq -f "$m/huge/a_rather_long_file_name_so_that_blocks_fill_%05g" 1 3000 | xargs touch
  seq -f "$m/huge/a_rather_long_file_name_so_that_blocks_fill_%05g" 1 3 3000 | xargs rm -f
  for i in $(seq 2 50 3000); do
    [ -e "$m/huge/a_rather_long_file_name_so_that_blocks_fill_$(printf %05d "$i")" ] &&
      mv "$m/huge/a_rather_long_file_name_so_that_blocks_fill_$(printf %05d "$i")" "$m/renamed/r$i"
  done
  echo hello >"$m/small/file"
  ln "$m/small/file" "$m/big/hardlink"
  ln -s file "$m/small/fast-symlink"
  ln -s "$(printf 'a-slow-symlink-target-%.0s' $(seq 1 12))" "$m/small/slow-symlink"
  # Data compresses well (the corpus is committed); its layout is what counts.
  head -c 8192 < <(yes sparse) | dd of="$m/sparse" bs=4096 seek=300 status=none
  for i in $(seq 1 40); do
    head -c 3072 < <(yes "a $i") >>"$m/frag-a"
    sync "$m/frag-a"
    head -c 5120 < <(yes "b $i") >>"$m/frag-b"
    sync "$m/frag-b"
  done
  if [[ $features != *^extent* ]]; then # block-mapped files cannot be fallocated
    fallocate -l 2M "$m/fallocated"
    fallocate -p -o 65536 -l 131072 "$m/fallocated"
  fi
  printf 'tiny' >"$m/tiny"
  mkdir "$m/tinydir" && touch "$m/tinydir/x"
  setfattr -n user.small -v x "$m/small/file"
  setfattr -n user.big -v "$(head -c $((bs * 3 / 8)) /dev/zero | tr '\0' 'v')" "$m/big/hardlink"
  for f in shared-1 shared-2 shared-3; do
    touch "$m/$f"
    setfattr -n user.shared -v "$(head -c $((bs / 4)) /dev/zero | tr '\0' 's')" "$m/$f"
  done
  setfacl -m u:1234:rw,g:4321:r "$m/tiny"
  setfacl -d -m u:1234:rwx "$m/renamed"
  if [[ $features == *ea_inode* ]]; then
    setfattr -n user.huge -v "$(head -c 6000 /dev/zero | tr '\0' 'h')" "$m/tiny"
  fi
  sync
}

want=("$@")
: >"$work/VERDICTS"
kernel=$(uname -r)
mke2fs_version=$( (mke2fs -V 2>&1 || true) | awk 'NR==1 {print $2}')
for entry in "${layouts[@]}"; do
  IFS='|' read -r name bs features extra size <<<"$entry"
  if [ ${#want[@]} -gt 0 ] && [[ ! " ${want[*]} " == *" $name "* ]]; then continue; fi
  img="$work/$name.img"
  # shellcheck disable=SC2086
  mke2fs -q -F -t ext4 -b "$bs" -O "$features" $extra "$img" "$size"
  if [[ $features == *metadata_csum_seed* ]]; then
    tune2fs -U random "$img" >/dev/null   # the seed stays; the UUID no longer gives it
  fi
  mount -t ext4 -o loop "$img" "$mnt"
  workload "$mnt" "$features" "$bs"
  python3 scripts/kernel-view.py "$mnt" | gzip -9 -n >"$work/$name.view.json.gz"
  umount "$mnt"
  if e2fsck -fn "$img" >"$work/e2fsck.log" 2>&1; then
    verdict=clean
  else
    echo "ext4-corpus: $name: e2fsck -fn is not clean; not kept:" >&2
    cat "$work/e2fsck.log" >&2
    continue
  fi
  gzip -9 -n -c "$img" >"$out/$name.img.gz"
  mv "$work/$name.view.json.gz" "$out/$name.view.json.gz"
  printf '%s\t%s\t%s\t%s\te2fsck=%s\tkernel=%s\tmke2fs=%s\n' "$name" "$bs" "$features" "$extra" "$verdict" \
    "$kernel" "$mke2fs_version" >>"$work/VERDICTS"
  echo "$name: $(du -h "$out/$name.img.gz" | cut -f1)" >&2
  rm -f "$img"
done
# Keep the lines of layouts not remade this run.
if [ -f "$out/VERDICTS" ]; then
  awk -F'\t' 'NR == FNR { remade[$1] = 1; next } !/^#/ && !($1 in remade)' "$work/VERDICTS" "$out/VERDICTS" \
    >>"$work/VERDICTS"
fi
{ echo "# layout	block	features	mke2fs args	oracle	kernel	mke2fs (made by scripts/ext4-corpus.sh)"; sort "$work/VERDICTS"; } >"$out/VERDICTS"
