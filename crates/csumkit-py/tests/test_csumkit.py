"""csumkit's Python API: check values, peers on random data, every buffer
type, streaming vs one-shot, the algebra vs recomputation, errors, files,
threads."""

import base64
import mmap
import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import crc32c as crc32c_pkg
import google_crc32c
import numpy as np
import pytest

import csumkit

CHECK = b"123456789"
ALGOS = {"crc32c": csumkit.crc32c, "crc64nvme": csumkit.crc64nvme, "crc16t10dif": csumkit.crc16t10dif}
CLASSES = {"crc32c": csumkit.Crc32c, "crc64nvme": csumkit.Crc64Nvme, "crc16t10dif": csumkit.Crc16T10Dif}
SIZES = [0, 1, 2, 7, 8, 15, 16, 17, 63, 64, 65, 255, 256, 1000, 4095, 4096, 4097, 65535, 65536, 65537, 1 << 20]


def rand(n, seed=0):
    return random.Random(seed * 1_000_003 + n).randbytes(n)


def test_check_values_and_module_attributes():
    assert csumkit.crc32c(CHECK) == 0xE3069283
    assert csumkit.crc64nvme(CHECK) == 0xAE8B14860A799888
    assert csumkit.crc16t10dif(CHECK) == 0xD0DB
    assert csumkit.Crc32c(CHECK).hexdigest() == "e3069283"
    assert csumkit.Crc64Nvme(CHECK).digest() == bytes.fromhex("ae8b14860a799888")
    assert csumkit.Crc16T10Dif(CHECK).intdigest() == 0xD0DB
    assert isinstance(csumkit.backend, str) and csumkit.backend
    assert csumkit.__version__


@pytest.mark.parametrize("n", SIZES)
def test_crc32c_matches_both_pypi_packages(n):
    data = rand(n, 1)
    ours = csumkit.crc32c(data)
    assert ours == crc32c_pkg.crc32c(data)
    assert ours == google_crc32c.value(data)
    assert csumkit.crc32c(data[n // 3 :], csumkit.crc32c(data[: n // 3])) == ours


def test_every_buffer_type(tmp_path):
    data = rand(100_000, 2)
    want = csumkit.crc64nvme(data)
    path = tmp_path / "m.bin"
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert csumkit.crc64nvme(mapped) == want
    arr = np.frombuffer(data, dtype=np.uint8)
    for buf in [bytearray(data), memoryview(data), arr, arr.view(np.float64), arr.reshape(1000, 100)]:
        assert csumkit.crc64nvme(buf) == want
    assert csumkit.crc32c(memoryview(data)[10:20]) == csumkit.crc32c(data[10:20])


@pytest.mark.parametrize("name", ALGOS)
def test_streaming_equals_one_shot(name):
    data = rand(300_000, 3)
    r = random.Random(4)
    cuts = sorted(r.randrange(len(data)) for _ in range(20))
    h = CLASSES[name]()
    value = 0
    for a, b in zip([0] + cuts, cuts + [len(data)]):
        h.update(data[a:b])
        value = ALGOS[name](data[a:b], value)
    want = ALGOS[name](data)
    assert h.intdigest() == value == want
    assert h.digest() == want.to_bytes(h.digest_size, "big")
    assert h.hexdigest() == want.to_bytes(h.digest_size, "big").hex()
    assert h.name == name
    c = h.copy()
    c.update(b"more")
    assert h.intdigest() == want and c.intdigest() == ALGOS[name](data + b"more")


@pytest.mark.parametrize("name", ALGOS)
def test_algebra_against_recomputation(name):
    f = ALGOS[name]
    r = random.Random(5)
    for _ in range(50):
        a, b = rand(r.randrange(0, 5000), r.random()), rand(r.randrange(0, 5000), r.random())
        assert csumkit.combine(f(a), f(b), len(b), name) == f(a + b)
        zeros = r.randrange(0, 10_000)
        assert csumkit.zero_extend(f(a), zeros, name) == f(a + bytes(zeros))
        buf = bytearray(rand(r.randrange(1, 3000), r.random()))
        bits = len(buf) * 8
        off = r.randrange(bits)
        length = r.randrange(bits - off + 1)
        before = f(buf)
        for bit in range(off, off + length):  # Linux bitmap order: LSB first
            buf[bit // 8] ^= 1 << (bit % 8)
        assert csumkit.flip_range(before, bits, off, length, name) == f(buf)
        at = r.randrange(len(buf))
        n = r.randrange(len(buf) - at + 1)
        new = rand(n, r.random())
        old = bytes(buf[at : at + n])
        before = f(buf)
        buf[at : at + n] = new
        assert csumkit.splice(before, len(buf), at, old, new, name) == f(buf)


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(TypeError, match="bytes-like object is required"):
        csumkit.crc32c("text")
    with pytest.raises(ValueError, match=r"value must be an int in 0..2\*\*32"):
        csumkit.crc32c(b"x", 1 << 32)
    with pytest.raises(ValueError, match="value must be an int"):
        csumkit.crc16t10dif(b"x", -1)
    with pytest.raises(ValueError, match="unknown algorithm"):
        csumkit.combine(1, 2, 3, "md5")
    with pytest.raises(ValueError, match="outside the 8-bit buffer"):
        csumkit.flip_range(0, 8, 4, 5)
    with pytest.raises(ValueError, match="a splice keeps the length"):
        csumkit.splice(0, 10, 0, b"ab", b"abc")
    with pytest.raises(ValueError, match="len_b must be a non-negative int"):
        csumkit.combine(1, 2, -3)
    with pytest.raises(ValueError, match="C-contiguous"):
        csumkit.crc32c(np.arange(10)[::2])
    with pytest.raises(TypeError):
        csumkit.Crc32c().update(12)
    with pytest.raises(FileNotFoundError, match="no-such-file"):
        csumkit.file_checksum("no-such-file")
    with pytest.raises(ValueError, match="format must be"):
        csumkit.file_checksum(__file__, format="b32")


def test_file_checksum_is_the_s3_form_and_uses_all_cores(tmp_path):
    small = tmp_path / "small"
    small.write_bytes(CHECK)
    # S3 reports x-amz-checksum-crc64nvme as base64 of the big-endian checksum.
    s3 = base64.b64encode(bytes.fromhex("ae8b14860a799888")).decode()
    assert csumkit.file_checksum(small, algorithm="crc64nvme", format="base64") == s3
    # The defaults are every function's: CRC32C, and hex as `csumkit sum` prints.
    assert csumkit.file_checksum(small) == "e3069283"
    assert csumkit.file_checksum(str(small), "crc32c", "hex") == "e3069283"
    big = tmp_path / "big"  # above the multi-core threshold
    data = rand(80 << 20, 6)
    big.write_bytes(data)
    assert csumkit.file_checksum(big, "crc32c", "int") == crc32c_pkg.crc32c(data)
    assert csumkit.file_checksum(big, algorithm="crc64nvme", format="int") == csumkit.crc64nvme(data)


def test_threads_get_the_same_answers():
    blobs = [rand(n, 7) for n in (10, 5000, 70_000, 3 << 20)]
    want = [(csumkit.crc32c(b), csumkit.crc64nvme(b)) for b in blobs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda b: (csumkit.crc32c(b), csumkit.crc64nvme(b)), blobs * 8))
    assert got == want * 8


def test_gil_is_released_for_large_buffers():
    # Another thread, woken just before a long call, can only run Python code
    # during the call if the call released the GIL; holding it would delay
    # the other thread until the call returned.
    import time

    data = bytes(256 << 20)
    go, stamps = threading.Event(), []
    t = threading.Thread(target=lambda: (go.wait(), stamps.append(time.perf_counter())))
    t.start()
    t0 = time.perf_counter()
    go.set()
    csumkit.crc32c(data)
    t1 = time.perf_counter()
    t.join()
    assert stamps[0] < t0 + (t1 - t0) / 2, (t0, stamps[0], t1)
