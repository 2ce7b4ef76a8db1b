#!/usr/bin/env bash
# kill -9 the `csumkit mount` daemon at a random moment (0.1–0.9 s) of a metadata-heavy
# workload (mkdir, create, write, fsync, rename, unlink), N times; then mount it again
# (which replays the ByteLog, or with MOUNT_OPTS="-o log=off" undoes an operation the kill
# cut short), read back every file whose fsync returned (data checksums verified),
# unmount, and e2fsck -fn each image. Prints how many runs left findings. Needs root,
# /dev/fuse, e2fsprogs.
# JOBS=J runs J such workloads at once, each in a directory of its own (their fsyncs then
# share commits: the mount's group commit).
#   scripts/kill9.sh [N]     (default 20; CSUMKIT: the binary; MOUNT_OPTS: extra mount options;
#                             JOBS: workloads at once, default 1)
root=$(cd "$(dirname "$0")/.." && pwd)
csumkit=${CSUMKIT:-$root/target/release/csumkit}
n=${1:-20}; jobs=${JOBS:-1}; bad=0; lost=0
for run in $(seq $n); do
  d=$(mktemp -d /tmp/crash.XXXX); mkdir $d/m; truncate -s 64M $d/img; mke2fs -q -F -t ext4 -O metadata_csum,^has_journal -b 4096 $d/img
  "$csumkit" mount -f $d/img $d/m $MOUNT_OPTS & pid=$!
  for _ in $(seq 100); do mountpoint -q $d/m && break; sleep 0.01; done
  wls=()
  for job in $(seq $jobs); do
  mkdir -p $d/m/j$job
  python3 - $d/m/j$job > $d/acked$job 2>/dev/null <<'PY' &
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
  wls+=($!)
  done
  sleep 0.$((RANDOM % 9 + 1))
  kill -9 $pid; wait $pid 2>/dev/null; kill "${wls[@]}" 2>/dev/null; wait "${wls[@]}" 2>/dev/null
  fusermount3 -uz $d/m 2>/dev/null
  # Mount again (the log replayed); every file whose fsync returned is there
  # with its size (under its new name once a later fsync made the rename
  # durable), unless the workload removed it; unmount; then e2fsck judges.
  "$csumkit" mount -f $d/img $d/m $MOUNT_OPTS & pid=$!
  for _ in $(seq 100); do mountpoint -q $d/m && break; sleep 0.01; done
  missing=0
  for job in $(seq $jobs); do
  python3 - $d/m/j$job $d/acked$job <<'PY' || missing=1
import os, sys
m, acked = sys.argv[1], open(sys.argv[2]).read().split("\n")
files, moved, removed = {}, set(), set()
for line in acked:
    w = line.split()
    if len(w) == 2 and w[0].startswith("/"): files[w[0]] = int(w[1])
    elif len(w) == 2 and w[0] == "mv": moved.add(w[1])
    elif len(w) == 2 and w[0] == "rm": removed.add(int(w[1]))
last = max((int(f.rsplit("/f", 1)[1]) for f in files), default=0)
for f, size in files.items():
    i = int(f.rsplit("/f", 1)[1])
    # Removed, or being removed when the kill came (iteration last or last+1
    # removes file last-10 or last-9 before saying so).
    if i in removed or last - 10 <= i <= last - 9:
        continue
    # A rename is durable once a later fsync returned (the next file's).
    names = [f + ".r"] if f in moved and i < last else [f, f + ".r"]
    # Read whole: every block with a data checksum is verified (EIO fails).
    if not any(os.path.exists(n) and len(open(n, "rb").read()) == size for n in names):
        print(f"acknowledged {f} ({size} B) missing")
        sys.exit(1)
PY
  done
  lost=$((lost+missing))
  fusermount3 -u $d/m; wait $pid
  if ! e2fsck -fn $d/img >$d/fsck 2>&1; then bad=$((bad+1)); [ $bad = 1 ] && grep -v '^Pass\|^e2fsck\|files' $d/fsck | head -8; fi
  rm -rf $d
done
at_once="one workload"
[ "$jobs" -gt 1 ] && at_once="$jobs workloads at once"
echo "kill -9 runs: $n ($at_once), e2fsck -fn not clean after: $bad, acknowledged files missing in: $lost"
[ "$bad" = 0 ] && [ "$lost" = 0 ]
