#!/usr/bin/env bash
# Re-records the kernel's view (scripts/kernel-view.py: attributes, xattrs,
# each regular file's CRC-32) of every committed erofs corpus image, the
# image bytes unchanged: mount it read-only through a loop device, record,
# unmount. Needs root. Usage: scripts/erofs-corpus-views.sh [NAME...]
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=crates/csumkit/tests/data/erofs-corpus
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
  python3 - "$corpus/$name.json" "$work/view.json" "$(uname -r)" <<'PY'
import json, sys
path, view, release = sys.argv[1:4]
oracle = json.load(open(path))
oracle["entries"] = json.load(open(view))
oracle["kernel"], oracle["kernel_release"] = "mounted", release
json.dump(oracle, open(path, "w"), sort_keys=True, separators=(",", ":"))
PY
  echo "$name: $(grep -o '"crc32"' "$corpus/$name.json" | wc -l) files' contents recorded" >&2
done
