#!/usr/bin/env bash
# Makes the erofs test corpus (crates/csumkit/tests/data/erofs-corpus/):
# one source tree (every xattr namespace, ACLs, long and many xattrs, hard
# links, symlinks, a 400-entry directory, compressible data), built by
# Debian's mkfs.erofs 1.5 and by upstream erofs-utils 1.7.1 and 1.9.3 with
# every metadata option the reader must handle or refuse by name; the
# kernel mounts each image and its view (every path's type, mode, owner,
# size, link count, symlink target, xattrs, file CRC-32s) is recorded as
# the oracle; scripts/erofs-corpus-views.sh then adds fsck.erofs's verdict.
# Needs root (loop mounts), python3, attr/acl for the tree.
#
#   scripts/erofs-corpus.sh [OUTDIR]
#
# MKFS_1_7 / MKFS_1_9: mkfs.erofs binaries of those versions (default
# /opt/erofs-v1.7.1/bin/mkfs.erofs, /opt/erofs-v1.9.3/bin/mkfs.erofs: build
# them from https://github.com/erofs/erofs-utils tags v1.7.1 and v1.9.3
# with ./autogen.sh && ./configure --enable-lz4 --enable-lzma --with-libzstd
# --with-zlib --disable-fuse --prefix=/opt/erofs-vX && make install).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-crates/csumkit/tests/data/erofs-corpus}
mkfs15=${MKFS_1_5:-/usr/bin/mkfs.erofs}
mkfs17=${MKFS_1_7:-/opt/erofs-v1.7.1/bin/mkfs.erofs}
mkfs19=${MKFS_1_9:-/opt/erofs-v1.9.3/bin/mkfs.erofs}
[ "$(id -u)" = 0 ] || { echo "erofs-corpus: needs root (loop mounts)" >&2; exit 2; }
for tool in "$mkfs15" "$mkfs17" "$mkfs19" setfattr setfacl python3 gzip; do
  command -v "$tool" >/dev/null || { echo "erofs-corpus: $tool not found" >&2; exit 2; }
done

work=$(mktemp -d /tmp/erofs-corpus.XXXXXX)
mnt="$work/mnt"
mkdir -p "$mnt" "$out"
cleanup() { mountpoint -q "$mnt" && umount "$mnt"; rm -rf "$work"; }
trap cleanup EXIT

# The source tree.
src="$work/src"
mkdir -p "$src/etc" "$src/big" "$src/acl/sub" "$src/data"
echo 'motd' >"$src/etc/motd"
setfattr -n security.capability -v 0x0100000200200000000000000000000000000000 "$src/etc/motd"
setfattr -n user.mime_type -v text/plain "$src/etc/motd"
setfattr -n trusted.overlay.opaque -v y "$src/etc"
for i in $(seq 1 60); do setfattr -n "user.attr_$i" -v "value $i" "$src/etc/motd"; done
long=$(printf 'n%.0s' $(seq 1 250))
touch "$src/etc/$long"
setfattr -n "user.$(printf 'x%.0s' $(seq 1 200))" -v "" "$src/etc/$long"
for i in $(seq 1 400); do touch "$src/big/entry_$(printf %04d "$i")"; done
for i in $(seq 1 3); do
  touch "$src/data/shared_$i"
  setfattr -n user.long.prefix.common -v "same value" "$src/data/shared_$i"
  setfattr -n user.long.prefix.own -v "own $i" "$src/data/shared_$i"
done
ln "$src/etc/motd" "$src/etc/motd.link"
ln -s ../etc/motd "$src/data/symlink"
setfattr -h -n trusted.symlink -v yes "$src/data/symlink"
ln -s "$(printf 'a-long-symlink-target-%.0s' $(seq 1 10))" "$src/data/long-symlink"
setfacl -m u:1234:rw,g:4321:r "$src/acl/file" 2>/dev/null || { touch "$src/acl/file"; setfacl -m u:1234:rw,g:4321:r "$src/acl/file"; }
setfacl -d -m u:1234:rwx "$src/acl/sub"
python3 - "$src/data" <<'PY'
import sys, os
d = sys.argv[1]
with open(os.path.join(d, "compressible"), "w") as f:
    for i in range(20000):
        f.write(f"line {i} of a file that compresses well\n")
with open(os.path.join(d, "tail"), "wb") as f:
    f.write(bytes(range(256)) * 23 + b"tail")
PY
: >"$src/data/empty"
chown -R 1000:1000 "$src/big"
chmod 0700 "$src/acl/sub"
(cd "$work" && tar --xattrs --xattrs-include='*' --acls -cf src.tar -C src .)

# name|mkfs|options
images=(
  "1.5-default|$mkfs15|"
  "1.5-x1|$mkfs15|-x1"
  "1.5-lz4hc|$mkfs15|-zlz4hc"
  "1.7-b512|$mkfs17|-b512"
  "1.7-b1024|$mkfs17|-b1024"
  "1.7-b2048-x1|$mkfs17|-b2048 -x1"
  "1.7-lzma-ztailpacking|$mkfs17|-zlzma -Eztailpacking"
  "1.7-fragments-dedupe|$mkfs17|-zlz4hc -Efragments,dedupe"
  "1.7-chunks|$mkfs17|--chunksize=4096"
  "1.7-xattr-prefix|$mkfs17|-x1 --xattr-prefix=user.long.prefix."
  "1.7-prefix-fragments|$mkfs17|-zlz4hc -Efragments --xattr-prefix=user.long.prefix."
  "1.9-default|$mkfs19|"
  "1.9-b512-extended|$mkfs19|-b512 -Eforce-inode-extended"
  "1.9-b1024-nosbcrc|$mkfs19|-b1024 -Enosbcrc"
  "1.9-deflate|$mkfs19|-zdeflate"
  "1.9-zstd-ztailpacking|$mkfs19|-zzstd -Eztailpacking"
  "1.9-root-xattr-isize|$mkfs19|--root-xattr-isize=128"
  "1.9-plain-prefixes|$mkfs19|-zlz4 -Efragments,plain-xattr-prefixes --xattr-prefix=user.long.prefix."
  "1.9-prefix-fragments|$mkfs19|-zlz4 -Efragments --xattr-prefix=user.long.prefix."
  "1.9-dot-omitted|$mkfs19|-Edot-omitted"
  "1.9-48bit|$mkfs19|-E48bit"
  "1.9-compressed-dirs|$mkfs19|-zlz4hc --zD"
  "1.9-metabox|$mkfs19|-zlz4 -m4096"
  "1.9-tar|$mkfs19|--tar=f"
)

oracle() { # the kernel's view of the mounted tree, as JSON
  python3 scripts/kernel-view.py "$1"
}

for entry in "${images[@]}"; do
  IFS='|' read -r name mkfs options <<<"$entry"
  img="$work/$name.erofs"
  version=$("$mkfs" -V 2>&1 | head -1 || true)
  # shellcheck disable=SC2086
  if [[ $options == *--tar=* ]]; then
    "$mkfs" -T0 -U 11111111-2222-3333-4444-555555555555 $options "$img" "$work/src.tar" >"$work/mkfs.log" 2>&1
  else
    "$mkfs" -T0 -U 11111111-2222-3333-4444-555555555555 $options "$img" "$src" >"$work/mkfs.log" 2>&1
  fi || { echo "erofs-corpus: $name: mkfs failed:" >&2; cat "$work/mkfs.log" >&2; continue; }
  if mount -t erofs -o loop,ro "$img" "$mnt" 2>"$work/mount.log"; then
    view=$(oracle "$mnt")
    umount "$mnt"
    kernel="mounted"
  else
    view="[]"
    kernel="refused: $(tr '\n' ' ' <"$work/mount.log")"
  fi
  gzip -9 -n -c "$img" >"$out/$name.erofs.gz"
  python3 - "$out/$name.json" "$name" "$version" "$options" "$kernel" "$(uname -r)" <<PY
import json, sys
path, name, version, options, kernel, release = sys.argv[1:7]
entries = json.loads('''$view''')
json.dump({"image": name + ".erofs.gz", "made_with": version, "options": options,
           "kernel": kernel, "kernel_release": release, "entries": entries},
          open(path, "w"), sort_keys=True, separators=(",", ":"))
PY
  echo "$name: $(du -h "$out/$name.erofs.gz" | cut -f1) kernel $kernel" >&2
done
