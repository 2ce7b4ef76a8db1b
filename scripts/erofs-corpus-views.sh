#!/usr/bin/env bash
# Re-records the oracles of every committed erofs corpus image, the image
# bytes unchanged: the kernel's view (scripts/kernel-view.py: attributes,
# xattrs, each regular file's CRC-32) through a read-only loop mount, and
# upstream fsck.erofs's verdict (FSCK_EROFS, default the 1.9.3 build of
# scripts/erofs-corpus.sh). Needs root. Usage: scripts/erofs-corpus-views.sh [NAME...]
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=crates/csumkit/tests/data/erofs-corpus
fsck=${FSCK_EROFS:-/opt/erofs-v1.9.3/bin/fsck.erofs}
command -v "$fsck" >/dev/null || { echo "erofs-corpus-views: $fsck not found" >&2; exit 2; }
work=$(mktemp -d)
trap 'umount "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/mnt"
names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
  for json in "$corpus"/*.json; do names+=("$(basename "$json" .json)"); done
fi
for name in "${names[@]}"; do
  gzip -dc "$corpus/$name.erofs.gz" >"$work/image"
  mount -t erofs -o loop,ro "$work/image" "$work/mnt"
  python3 scripts/kernel-view.py "$work/mnt" >"$work/view.json"
  umount "$work/mnt"
  if "$fsck" "$work/image" >"$work/fsck.log" 2>&1; then verdict=clean; else verdict="exit $?"; fi
  python3 - "$corpus/$name.json" "$work/view.json" "$(uname -r)" "$("$fsck" -V | head -1): $verdict" <<'PY'
import json, sys
path, view, release, fsck = sys.argv[1:5]
oracle = json.load(open(path))
oracle["entries"] = json.load(open(view))
oracle["kernel"], oracle["kernel_release"] = "mounted", release
oracle["fsck_erofs"] = fsck
json.dump(oracle, open(path, "w"), sort_keys=True, separators=(",", ":"))
PY
  echo "$name: $(grep -o '"crc32"' "$corpus/$name.json" | wc -l) files' contents recorded" >&2
done
