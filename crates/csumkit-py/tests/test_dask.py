"""Whole-object checksums as Dask tasks equal one pass over the data."""

import random
import subprocess
import sys
from pathlib import Path

import pytest

import csumkit

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
from dask_whole_object import plan_parts, whole_object_checksum  # noqa: E402


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    r = random.Random(11)
    paths = []
    for i, size in enumerate([0, 1, 4095, 4096, 100_000, 1 << 20, 3 * (1 << 20) + 17, 12345]):
        p = root / f"f{i:02}.bin"
        p.write_bytes(r.randbytes(size))
        paths.append(str(p))
    return root, paths


def single_pass(paths, algo):
    f = getattr(csumkit, algo)
    crc = 0
    for p in paths:
        crc = f(Path(p).read_bytes(), crc)
    return crc


@pytest.mark.parametrize("scheduler", ["threads", "processes", "synchronous"])
@pytest.mark.parametrize("algo", ["crc32c", "crc64nvme", "crc16t10dif"])
def test_parts_combined_in_order_equal_one_pass(dataset, scheduler, algo):
    _, paths = dataset
    want = single_pass(paths, algo)
    for part_size in [1, 4096, 777_777, 1 << 30] if scheduler == "threads" else [333_333]:
        if part_size == 1:
            paths_small = paths[:3]  # 1-byte parts: keep the task count small
            crc, total, parts = whole_object_checksum(paths_small, 1, algo, scheduler)
            assert crc == single_pass(paths_small, algo) and parts == total == 4096
            continue
        crc, total, parts = whole_object_checksum(paths, part_size, algo, scheduler)
        assert crc == want
        assert total == sum(Path(p).stat().st_size for p in paths)


def test_parts_cover_every_byte_once(dataset):
    _, paths = dataset
    parts = plan_parts(paths, 1_000_000)
    sizes = [sum(n for _, _, n in part) for part in parts]
    assert all(s == 1_000_000 for s in sizes[:-1]) and 0 < sizes[-1] <= 1_000_000
    with pytest.raises(ValueError, match="part_size must be positive"):
        plan_parts(paths, 0)


def test_example_command_line(dataset):
    root, paths = dataset
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "dask_whole_object.py"), str(root), "--part-size", "1M"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert out.startswith(f"crc64nvme {single_pass(paths, 'crc64nvme'):016x} base64 ")
    assert f"in {len(paths)} files, 5 parts" in out
