#!/usr/bin/env python3
"""kill -9 the `csumkit mount` daemon in the middle of a data-heavy workload, then
check every byte whose fsync returned.

scripts/kill9.sh kills a metadata-heavy loop and checks that acknowledged files are
there with their sizes. This one is about file data and its checksums: four files
rewritten in place at random offsets (a few bytes to a page: the data rides in the
ByteLog; up to 256 KiB: in place, on the data checksums' intent list), written past
their end, truncated, holes punched and ranges zeroed (blocks freed, then taken by
the next write), replaced whole (a new file written, synced and renamed over the old,
the directory synced), and written 4 100–6 144 blocks at a time (more new checksums than a
log record holds: the checksum tree is committed instead of logging them), each operation
followed by fsync. At a random moment the daemon dies; the image is mounted again (the
log replayed), and every file must read back — no EIO from a checksum — byte for byte
as the acknowledged operations left it, except for the one operation under way when
the daemon died, whose bytes may be there or not; grown by a truncate, each file then
reads zeros past its old end (not the bytes of a lost append). Then unmount and
`e2fsck -fn`.

The bytes a write puts are `random.Random(gen).randbytes(n)`: a block that reads back
with an older write's bytes than the last acknowledged one (stale data replayed) or
the checksum tree's older checksum over newer data (EIO) both fail.

    scripts/kill9-data.py [RUNS]     (default 10; environment: CSUMKIT the binary,
                                      MOUNT_OPTS extra mount options, BLOCK_SIZE 1024,
                                      JOBS workloads at once, 1; SEED the first run's)

Needs root, /dev/fuse, e2fsprogs. Prints one summary line; exit 1 on any finding.
"""

import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSUMKIT = os.environ.get("CSUMKIT", os.path.join(ROOT, "target/release/csumkit"))
MOUNT_OPTS = shlex.split(os.environ.get("MOUNT_OPTS", ""))
BLOCK_SIZE = os.environ.get("BLOCK_SIZE", "1024")
# mke2fs -O: with a journal (the default) the mount commits into it.
FEATURES = os.environ.get("FEATURES", "metadata_csum")
FILES = 4
# A large write: more new checksums than one log record holds (4 064).
LARGE = (4100 * int(BLOCK_SIZE), 6144 * int(BLOCK_SIZE))
# Files stay under this size; the image holds them all with room to spare.
MAX_FILE = 2 * LARGE[1]
JOBS = int(os.environ.get("JOBS", "1"))
IMAGE_BYTES = JOBS * FILES * MAX_FILE + (64 << 20)

WORKLOAD = r"""
import ctypes, json, os, random, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
# FALLOC_FL_KEEP_SIZE with FALLOC_FL_PUNCH_HOLE, and with FALLOC_FL_ZERO_RANGE.
MODES = {"punch": 0x01 | 0x02, "zero": 0x01 | 0x10}
mnt, seed, files, max_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
large = (int(sys.argv[5]), int(sys.argv[6]))
rng = random.Random(seed)
os.mkdir(mnt)
paths = [os.path.join(mnt, f"f{i}") for i in range(files)]
fds = [os.open(p, os.O_CREAT | os.O_RDWR, 0o644) for p in paths]
for fd in fds:
    os.fsync(fd)
dirfd = os.open(mnt, os.O_RDONLY)
os.fsync(dirfd)
os.fsync(os.open(os.path.dirname(mnt), os.O_RDONLY))
print("ready", flush=True)
sizes = [0] * files
gen = 0
while True:
    gen += 1
    f = rng.randrange(files)
    size = sizes[f]
    kind = rng.choices(["small", "medium", "large", "truncate", "punch", "zero", "replace"], [38, 25, 12, 10, 5, 5, 5])[0]
    if kind == "truncate":
        op = {"f": f, "kind": kind, "size": rng.randrange(0, max_file // 2)}
    elif kind in MODES:
        # Inside the file (the size stays): blocks freed, or zeroed, and pieces of blocks zeroed.
        at = rng.randrange(0, max(1, size))
        op = {"f": f, "kind": kind, "at": at, "n": rng.randint(1, max(1, min(size - at, 2 << 20)))}
    elif kind == "replace":
        # An application's atomic update: a new file written and synced, renamed over the old.
        op = {"f": f, "kind": kind, "n": rng.randint(0, 300 << 10)}
    else:
        n = {"small": lambda: rng.randint(1, 4096), "medium": lambda: rng.randint(4097, 256 << 10),
             "large": lambda: rng.randint(*large)}[kind]()
        # Mostly over bytes already there (rewrites in place), sometimes past the end.
        at = rng.randrange(0, max(1, min(size + (64 << 10), max_file - n)))
        op = {"f": f, "kind": "write", "at": at, "n": n}
    op["gen"] = gen
    print("begin", json.dumps(op), flush=True)
    if op["kind"] == "truncate":
        os.ftruncate(fds[f], op["size"])
        sizes[f] = op["size"]
    elif op["kind"] == "replace":
        tmp = paths[f] + ".tmp"
        fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
        data = random.Random(gen).randbytes(op["n"])
        done = 0
        while done < len(data):
            done += os.write(fd, data[done:])
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, paths[f])
        os.fsync(dirfd)
        # The old file goes with its last descriptor (its blocks freed for the next writes).
        os.close(fds[f])
        fds[f] = os.open(paths[f], os.O_RDWR)
        sizes[f] = op["n"]
    elif op["kind"] in MODES:
        if libc.fallocate(fds[f], MODES[op["kind"]], op["at"], op["n"]) != 0:
            raise OSError(ctypes.get_errno(), f"fallocate {op}")
    else:
        data = random.Random(gen).randbytes(op["n"])
        done = 0
        while done < len(data):
            done += os.pwrite(fds[f], data[done:], op["at"] + done)
        sizes[f] = max(size, op["at"] + op["n"])
    os.fsync(fds[f])
    print("acked", gen, flush=True)
"""


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def mount(image, mnt):
    daemon = subprocess.Popen([CSUMKIT, "mount", "-f", image, mnt] + MOUNT_OPTS, stderr=subprocess.PIPE)
    for _ in range(500):
        if os.path.ismount(mnt):
            return daemon
        if daemon.poll() is not None:
            raise SystemExit(f"mount failed: {daemon.stderr.read().decode().strip()}")
        time.sleep(0.01)
    raise SystemExit("mount did not come up in 5 s")


def unmount(daemon, mnt):
    run(["fusermount3", "-u", mnt])
    daemon.wait(timeout=60)


def expected_states(lines):
    """The files as the acknowledged operations left them, and the operation under way."""
    files = [bytearray() for _ in range(FILES)]
    pending = None
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "begin":
            pending = json.loads(rest)
        elif word == "acked" and pending is not None:
            assert int(rest) == pending["gen"], f"acked {rest} while {pending['gen']} was under way"
            apply(files[pending["f"]], pending)
            pending = None
    return files, pending


def apply(content, op):
    if op["kind"] == "truncate":
        del content[op["size"]:]
        content.extend(bytes(op["size"] - len(content)))
    elif op["kind"] == "replace":
        content[:] = random.Random(op["gen"]).randbytes(op["n"])
    elif op["kind"] in ("punch", "zero"):
        end = min(op["at"] + op["n"], len(content))
        content[op["at"]:end] = bytes(max(0, end - op["at"]))
    else:
        end = op["at"] + op["n"]
        if len(content) < end:
            content.extend(bytes(end - len(content)))
        content[op["at"]:end] = random.Random(op["gen"]).randbytes(op["n"])


def judge(name, got, acked, pending):
    """None if `got` is what the acknowledged operations left, with the operation
    under way (`pending`, on this file) applied in part or not at all; else why not."""
    if pending is None:
        if got == acked:
            return None
        return f"{name}: {describe(got, acked)} (no operation was under way on it)"
    done = bytearray(acked)
    apply(done, pending)
    if got == acked or got == done:
        return None
    if pending["kind"] == "truncate":
        return f"{name}: neither before nor after the truncate to {pending['size']}: {describe(got, acked)}"
    if pending["kind"] == "replace":
        return f"{name}: neither the old file nor its replacement ({pending['n']} bytes): {describe(got, acked)}"
    # A write under way: its pieces may have landed in part. The size lies between
    # the old and the new; each byte is the old one or the write's (or zero where
    # the write made the file longer and its piece is not there). A punch or a
    # zeroing under way: the size stays, each byte in its range old or zero.
    at, end = pending["at"], pending["at"] + pending["n"]
    if not len(acked) <= len(got) <= len(done):
        return f"{name}: {len(got)} bytes, not between {len(acked)} and {len(done)} (a {pending['kind']} of {pending['n']} at {at} under way)"
    for start in range(0, len(got), 4096):
        stop = min(start + 4096, len(got))
        piece = got[start:stop]
        if piece == acked[start:stop] or piece == done[start:stop]:
            continue
        for i in range(start, stop):
            ok = [acked[i] if i < len(acked) else 0]
            if at <= i < end:
                ok.append(done[i])
            if got[i] not in ok:
                return f"{name}: byte {i} is {got[i]}, expected one of {ok} (a {pending['kind']} of {pending['n']} at {at} under way)"
    return None


def describe(got, want):
    if len(got) != len(want):
        return f"{len(got)} bytes, {len(want)} acknowledged"
    first = next(i for i in range(len(got)) if got[i] != want[i])
    return f"first wrong byte at {first} of {len(got)}"


def one_run(run_no, seed):
    work = tempfile.mkdtemp(prefix="kill9-data.")
    image, mnt = os.path.join(work, "img"), os.path.join(work, "m")
    os.mkdir(mnt)
    with open(image, "wb") as f:
        f.truncate(IMAGE_BYTES)
    run(["mke2fs", "-q", "-F", "-t", "ext4", "-O", FEATURES, "-b", BLOCK_SIZE, image])
    daemon = mount(image, mnt)
    # Each job rewrites files of its own (in a directory of its own); their
    # fsyncs share the mount's commits.
    logs = [os.path.join(work, f"acked{job}") for job in range(JOBS)]
    workloads = []
    for job, log in enumerate(logs):
        with open(log, "w") as out:
            args = [os.path.join(mnt, f"j{job}"), str(seed * JOBS + job), str(FILES), str(MAX_FILE), *map(str, LARGE)]
            workloads.append(subprocess.Popen([sys.executable, "-c", WORKLOAD, *args], stdout=out, stderr=subprocess.DEVNULL))
    time.sleep(random.Random(seed).uniform(0.3, 4.0))
    daemon.send_signal(signal.SIGKILL)
    daemon.wait()
    for workload in workloads:
        workload.kill()
        workload.wait()
    subprocess.run(["fusermount3", "-uz", mnt], stderr=subprocess.DEVNULL)
    acked, findings, under_way = 0, [], []
    daemon = mount(image, mnt)
    try:
        for job, log in enumerate(logs):
            lines = open(log).read().splitlines()
            acked += sum(1 for line in lines if line.startswith("acked"))
            want, pending = expected_states(lines)
            if pending:
                under_way.append(f"{pending['kind']} of j{job}/f{pending['f']}")
            for i in range(FILES):
                name = f"j{job}/f{i}"
                try:
                    with open(os.path.join(mnt, name), "rb") as f:
                        got = f.read()
                except FileNotFoundError:
                    if "ready" in lines:
                        findings.append(f"{name}: missing")
                    continue
                except OSError as e:
                    findings.append(f"{name}: read failed: {e}")
                    continue
                why = judge(name, got, want[i], pending if pending and pending["f"] == i else None)
                if why:
                    findings.append(why)
                    continue
                # Grown, the file reads zeros past its old end — not the bytes
                # of an append that was lost there.
                os.truncate(os.path.join(mnt, name), len(got) + 5000)
                with open(os.path.join(mnt, name), "rb") as f:
                    f.seek(len(got))
                    grown = f.read()
                if grown != bytes(5000):
                    findings.append(f"{name}: grown by a truncate, byte {len(got) + next(i for i, b in enumerate(grown) if b)} is not zero")
    finally:
        unmount(daemon, mnt)
    fsck = subprocess.run(["e2fsck", "-fn", image], capture_output=True, text=True)
    if fsck.returncode != 0:
        findings.append("e2fsck -fn: " + " / ".join(fsck.stdout.splitlines()[1:4]))
    print(f"run {run_no}: seed {seed}, {acked} operations acknowledged, {', '.join(under_way) or 'nothing'} under way: "
          + ("; ".join(findings) if findings else "ok"), flush=True)
    if findings:
        print(f"  left for a look: {work}", flush=True)
    else:
        subprocess.run(["rm", "-rf", work])
    return acked, findings


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    base = int(os.environ.get("SEED", random.randrange(1 << 30)))
    total, bad = 0, 0
    for r in range(runs):
        acked, findings = one_run(r + 1, base + r)
        total += acked
        bad += bool(findings)
    opts = " ".join(MOUNT_OPTS) or "defaults"
    at_once = f"{JOBS} workloads at once" if JOBS > 1 else "one workload"
    print(f"kill -9 data runs: {runs} ({at_once}, {BLOCK_SIZE}-byte blocks, {opts}, seeds {base}..{base + runs - 1}), "
          f"{total} operations acknowledged, runs with findings: {bad}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
