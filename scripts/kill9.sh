#!/usr/bin/env bash
# kill -9 the `csumkit mount` daemon at a random moment (0.1–0.9 s) of a metadata-heavy
# workload (mkdir, create, write, fsync, rename, unlink), N times; then e2fsck -fn on
# each image. Prints how many runs left findings. Needs root, /dev/fuse, e2fsprogs.
#   scripts/kill9.sh [N]     (default 20; CSUMKIT: the binary)
root=$(cd "$(dirname "$0")/.." && pwd)
csumkit=${CSUMKIT:-$root/target/release/csumkit}
n=${1:-20}; bad=0
for run in $(seq $n); do
  d=$(mktemp -d /tmp/crash.XXXX); mkdir $d/m; truncate -s 64M $d/img; mke2fs -q -F -t ext4 -O metadata_csum,^has_journal -b 4096 $d/img
  "$csumkit" mount -f $d/img $d/m -o datasum=off & pid=$!
  for _ in $(seq 100); do mountpoint -q $d/m && break; sleep 0.01; done
  python3 - $d/m > $d/acked 2>/dev/null <<'PY' &
import os, sys
m = sys.argv[1]
i = 0
while True:
    p = f"{m}/d{i%7}"
    os.makedirs(p, exist_ok=True)
    f = f"{p}/f{i}"
    fd = os.open(f, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"x" * (i % 9000))
    os.fsync(fd); os.close(fd)
    print(f, i % 9000, flush=True)
    if i % 3 == 0: os.rename(f, f + ".r"); print("mv", f, flush=True)
    if i % 5 == 0 and i > 10: os.unlink(f"{m}/d{(i-10)%7}/f{i-10}" + (".r" if (i-10) % 3 == 0 else "")); print("rm", i-10, flush=True)
    i += 1
PY
  wl=$!
  sleep 0.$((RANDOM % 9 + 1))
  kill -9 $pid; wait $pid 2>/dev/null; kill $wl 2>/dev/null; wait $wl 2>/dev/null
  fusermount3 -uz $d/m 2>/dev/null
  if ! e2fsck -fn $d/img >$d/fsck 2>&1; then bad=$((bad+1)); [ $bad = 1 ] && grep -v '^Pass\|^e2fsck\|files' $d/fsck | head -8; fi
  rm -rf $d
done
echo "kill -9 runs: $n, e2fsck -fn not clean after: $bad"
