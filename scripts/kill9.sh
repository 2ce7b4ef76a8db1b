#!/usr/bin/env bash
# kill -9 the `csumkit mount` daemon at a random moment (0.1–0.9 s) of a metadata-heavy
# workload (mkdir, create, write, fsync, rename, unlink), N times; then mount it again
# (which recovers the image's journal — or replays the ByteLog, or with
# MOUNT_OPTS="-o log=off" undoes an operation the kill cut short), read back every file whose fsync returned (data checksums verified),
# unmount, and e2fsck -fn each image. Prints how many runs left findings. Needs root,
# /dev/fuse, e2fsprogs.
# JOBS=J runs J such workloads at once, each in a directory of its own (their fsyncs then
# share commits: the mount's group commit).
#   scripts/kill9.sh [N]     (default 20; CSUMKIT: the binary; MOUNT_OPTS: extra mount options;
#                             JOBS: workloads at once, default 1)
# The image has a journal (mke2fs's default): a default mount commits into it,
# so after the kill the image is an ordinary ext4 image needing recovery. Two
# copies of it are recovered by the kernel (a loop mount) and by e2fsck -fy
# before csumfs mounts the original: each must show every acknowledged file,
# e2fsck -fn must be clean after each, and all three trees must be the same.
# FEATURES=... sets mke2fs -O (metadata_csum,^has_journal: the ByteLog beside
# the image; the kernel's and e2fsck's recoveries are then not asked;
# metadata_csum,fast_commit: fsyncs as fast commits, which e2fsck 1.47.0
# cannot replay — the kernel and csumfs recover those; with MOUNT_OPTS="-o
# bytelog" the ByteLog in the fast-commit area, which the kernel must refuse
# until csumfs's next mount replays it).
root=$(cd "$(dirname "$0")/.." && pwd)
features=${FEATURES:-metadata_csum}
# Every file whose fsync returned, under the mount or tree at $1 (workload
# directories j1..jJ), with its size; 1 if one is missing.
check_acked() {
  local at=$1 status=0
  for job in $(seq $jobs); do
  python3 - $at/j$job $d/acked$job $d/m/j$job <<'PY' || status=1
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
    # The workload's paths, under the tree being checked.
    names = [m + n[len(sys.argv[3]):] for n in names]
    # Read whole: every block with a data checksum is verified (EIO fails).
    if not any(os.path.exists(n) and len(open(n, "rb").read()) == size for n in names):
        print(f"acknowledged {f} ({size} B) missing")
        sys.exit(1)
PY
  done
  return $status
}
# What a tree holds: every path, its kind and size, and a digest of its bytes.
tree_digest() {
  (cd "$1" && find . -path ./lost+found -prune -o -printf '%p %y %s\n' | LC_ALL=C sort && \
    find . -path ./lost+found -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 -r cat | md5sum)
}
# The journal's recovery by the kernel and by e2fsck, each on a copy of the
# killed image; sets kernel_tree and e2fsck_tree; 1 on a finding.
other_recoveries() {
  local status=0
  cp --sparse=always $d/img $d/kernel.img; cp --sparse=always $d/img $d/e2fsck.img
  mkdir -p $d/k
  if mount -t ext4 -o loop $d/kernel.img $d/k 2>$d/kmount; then
    check_acked $d/k || { echo "kernel's recovery:" >&2; status=1; }
    kernel_tree=$(tree_digest $d/k); umount $d/k
    e2fsck -fn $d/kernel.img >$d/fsck-k 2>&1 || { echo "e2fsck -fn after the kernel's recovery:"; head -8 $d/fsck-k; status=1; }
  else
    echo "the kernel refused the killed image: $(cat $d/kmount)"; status=1
  fi
  if [[ $features == *fast_commit* ]]; then
    # e2fsck 1.47.0 cannot replay fast commits (the kernel's own neither):
    # the kernel and csumfs judge.
    e2fsck_tree=$kernel_tree; return $status
  fi
  e2fsck -fy $d/e2fsck.img >$d/fsck-y 2>&1; rc=$?
  if [ $rc -gt 1 ] || grep -q '? yes' $d/fsck-y; then echo "e2fsck -fy (rc $rc):"; head -12 $d/fsck-y; status=1; fi
  e2fsck -fn $d/e2fsck.img >$d/fsck-n 2>&1 || { echo "e2fsck -fn after its recovery:"; head -8 $d/fsck-n; status=1; }
  if mount -t ext4 -o loop,ro $d/e2fsck.img $d/k 2>/dev/null; then
    check_acked $d/k || { echo "e2fsck's recovery:" >&2; status=1; }
    e2fsck_tree=$(tree_digest $d/k); umount $d/k
  fi
  return $status
}
kernel_runs=0
csumkit=${CSUMKIT:-$root/target/release/csumkit}
n=${1:-20}; jobs=${JOBS:-1}; bad=0; lost=0
for run in $(seq $n); do
  d=$(mktemp -d /tmp/crash.XXXX); mkdir $d/m; truncate -s 64M $d/img; mke2fs -q -F -t ext4 -O $features -b 4096 $d/img
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
  if [[ $MOUNT_OPTS == *bytelog* ]]; then
    # The ByteLog in the fast-commit area holds changes: the kernel must refuse.
    cp --sparse=always $d/img $d/kernel.img; mkdir -p $d/k
    if mount -t ext4 -o loop,ro $d/kernel.img $d/k 2>/dev/null; then
      umount $d/k; echo "run $run: the kernel mounted an image whose ByteLog holds changes"; lost=$((lost+1))
    fi
    rm -f $d/kernel.img
  fi
  journaled=0
  if [ -z "$MOUNT_OPTS" ] && [[ $features != *^has_journal* ]]; then
    journaled=1; kernel_tree=; e2fsck_tree=
    other_recoveries || lost=$((lost+1))
    kernel_runs=$((kernel_runs+1))
  fi
  # Mount again (the log replayed); every file whose fsync returned is there
  # with its size (under its new name once a later fsync made the rename
  # durable), unless the workload removed it; unmount; then e2fsck judges.
  "$csumkit" mount -f $d/img $d/m $MOUNT_OPTS & pid=$!
  for _ in $(seq 100); do mountpoint -q $d/m && break; sleep 0.01; done
  missing=0
  check_acked $d/m || missing=1
  lost=$((lost+missing))
  if [ $journaled = 1 ]; then
    csumfs_tree=$(tree_digest $d/m)
    if [ "$csumfs_tree" != "$kernel_tree" ] || [ "$csumfs_tree" != "$e2fsck_tree" ]; then
      echo "run $run: the trees differ (csumfs / kernel / e2fsck):"
      diff <(echo "$csumfs_tree") <(echo "$kernel_tree") | head -6; diff <(echo "$csumfs_tree") <(echo "$e2fsck_tree") | head -6
      lost=$((lost+1))
    fi
  fi
  fusermount3 -u $d/m; wait $pid
  if ! e2fsck -fn $d/img >$d/fsck 2>&1; then bad=$((bad+1)); [ $bad = 1 ] && grep -v '^Pass\|^e2fsck\|files' $d/fsck | head -8; fi
  rm -rf $d
done
at_once="one workload"
[ "$jobs" -gt 1 ] && at_once="$jobs workloads at once"
recovered=""
[ $kernel_runs -gt 0 ] && recovered=", $kernel_runs also recovered by the kernel and by e2fsck -fy"
[ $kernel_runs -gt 0 ] && [[ $features == *fast_commit* ]] && recovered=", $kernel_runs also recovered by the kernel"
echo "kill -9 runs: $n ($at_once$recovered), e2fsck -fn not clean after: $bad, runs with findings: $lost"
[ "$bad" = 0 ] && [ "$lost" = 0 ]
