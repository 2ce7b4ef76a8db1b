"""csumkit vs the PyPI packages `crc32c` and `google-crc32c`, side by side
in one run (calls interleaved, median of repeats), plus thread scaling.

    python crates/csumkit-py/bench.py [--quick]
"""

import argparse
import platform
import statistics
import threading
import time

import crc32c as crc32c_pkg
import google_crc32c

import csumkit

SIZES = [("64 B", 64), ("4 KiB", 4096), ("1 MiB", 1 << 20)]


def per_call_ns(fn, data, budget_s):
    """Median ns per call over repeats of a batch sized to ~budget_s / 15."""
    batch = 1
    while True:
        t = time.perf_counter_ns()
        for _ in range(batch):
            fn(data)
        if time.perf_counter_ns() - t > budget_s * 1e9 / 15 or batch > 1 << 24:
            break
        batch *= 4
    return batch


def measure(fns, data, repeats, budget_s):
    batches = [per_call_ns(f, data, budget_s) for f in fns]
    samples = [[] for _ in fns]
    for _ in range(repeats):  # round-robin: every column sees the same load
        for i, f in enumerate(fns):
            t = time.perf_counter_ns()
            for _ in range(batches[i]):
                f(data)
            samples[i].append((time.perf_counter_ns() - t) / batches[i])
    return [statistics.median(s) for s in samples]


def thread_scaling(total_bytes, threads):
    blob = bytes(total_bytes // threads)

    def work():
        for _ in range(4):
            csumkit.crc64nvme(blob)

    start = time.perf_counter()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return 4 * total_bytes / (time.perf_counter() - start) / 1e9


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeats, budget = (5, 0.05) if args.quick else (15, 0.6)
    print(f"python {platform.python_version()}, {platform.machine()}; csumkit {csumkit.__version__} "
          f"backend {csumkit.backend}; crc32c {crc32c_pkg.__version__ if hasattr(crc32c_pkg, '__version__') else '?'}, "
          f"google-crc32c implementation {google_crc32c.implementation}")
    print()
    print("| size | csumkit crc32c GB/s | crc32c pkg GB/s | google-crc32c GB/s | vs crc32c | vs google | csumkit crc64nvme GB/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    worst = float("inf")
    for label, n in SIZES:
        data = bytes(range(256)) * (n // 256) if n >= 256 else bytes(range(n))
        ours, pkg, google, c64 = measure(
            [csumkit.crc32c, crc32c_pkg.crc32c, google_crc32c.value, csumkit.crc64nvme], data, repeats, budget)
        gbps = lambda ns: n / ns
        worst = min(worst, pkg / ours, google / ours)
        print(f"| {label} | {gbps(ours):.3f} | {gbps(pkg):.3f} | {gbps(google):.3f} | {pkg / ours:.2f}x | "
              f"{google / ours:.2f}x | {gbps(c64):.3f} |")
        if n == 1 << 20:
            mib = min(pkg / ours, google / ours)
    print()
    print(f"targets: faster than both at every size: worst {worst:.2f}x ({'met' if worst > 1 else 'MISSED'}); "
          f">= 1.5x on CRC32C of 1 MiB: {mib:.2f}x ({'met' if mib >= 1.5 else 'MISSED'})")
    total = (64 if args.quick else 512) << 20
    one, two = thread_scaling(total, 1), thread_scaling(total, 2)
    print(f"thread scaling (crc64nvme, {total >> 20} MiB in 1 vs 2 threads, GIL released above "
          f"{csumkit.GIL_RELEASE_MIN_BYTES} B): {one:.2f} -> {two:.2f} GB/s ({two / one:.2f}x)")


if __name__ == "__main__":
    main()
