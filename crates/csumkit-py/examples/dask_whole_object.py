"""Whole-object checksum of a dataset, computed in parts as Dask tasks.

The files of a directory, in sorted order, are taken as one object (their
concatenation) and cut into parts of `part_size` bytes, parts crossing file
boundaries where they fall. Each part is checksummed by a Dask task; the
parts' checksums are joined in order with `csumkit.combine`, which needs only
each part's checksum and length. The result equals one pass over the whole
concatenation — the way multipart uploads get a full-object CRC.

    python dask_whole_object.py DIR [--part-size 8M] [--algo crc64nvme]
                                    [--scheduler threads|processes|tcp://HOST:8786]

On a real cluster, pass the scheduler's address (needs `dask[distributed]`
and the same files at the same paths on every worker, e.g. a shared
filesystem); everything else is unchanged.
"""

from __future__ import annotations

import argparse
import base64
import os
from pathlib import Path

import dask

import csumkit

Piece = tuple[str, int, int]  # path, offset, length


def plan_parts(paths: list[str], part_size: int) -> list[list[Piece]]:
    """Cut the concatenation of `paths` into parts of `part_size` bytes."""
    if part_size <= 0:
        raise ValueError(f"part_size must be positive, got {part_size}")
    parts: list[list[Piece]] = []
    current: list[Piece] = []
    room = part_size
    for path in paths:
        size, offset = os.path.getsize(path), 0
        while offset < size:
            take = min(room, size - offset)
            current.append((path, offset, take))
            offset += take
            room -= take
            if room == 0:
                parts.append(current)
                current, room = [], part_size
    if current:
        parts.append(current)
    return parts


def checksum_part(pieces: list[Piece], algo: str) -> tuple[int, int]:
    """Checksum and length of one part (runs on a Dask worker)."""
    update = getattr(csumkit, algo)
    crc, total = 0, 0
    for path, offset, length in pieces:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        if len(data) != length:
            raise OSError(f"{path}: expected {length} bytes at {offset}, read {len(data)}")
        crc = update(data, crc)
        total += length
    return crc, total


def whole_object_checksum(paths: list[str], part_size: int, algo: str = "crc64nvme", scheduler=None) -> tuple[int, int, int]:
    """(checksum, bytes, parts) of the concatenation of `paths`."""
    parts = plan_parts(paths, part_size)
    tasks = [dask.delayed(checksum_part)(pieces, algo) for pieces in parts]
    results = dask.compute(*tasks, scheduler=scheduler)
    crc, total = 0, 0
    for part_crc, length in results:  # in order: combine is not commutative
        crc = csumkit.combine(crc, part_crc, length, algo)
        total += length
    return crc, total, len(parts)


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--part-size", type=parse_size, default=8 << 20)
    parser.add_argument("--algo", default="crc64nvme", choices=["crc32c", "crc64nvme", "crc16t10dif"])
    parser.add_argument("--scheduler", default="threads", help="threads, processes, or a dask.distributed address")
    args = parser.parse_args()
    paths = sorted(str(p) for p in args.dir.rglob("*") if p.is_file())
    scheduler = args.scheduler
    if "://" in scheduler:
        from dask.distributed import Client  # only needed for a real cluster

        Client(scheduler)
        scheduler = None  # the client becomes the default scheduler
    crc, total, parts = whole_object_checksum(paths, args.part_size, args.algo, scheduler)
    width = {"crc32c": 4, "crc64nvme": 8, "crc16t10dif": 2}[args.algo]
    print(f"{args.algo} {crc:0{width * 2}x} base64 {base64.b64encode(crc.to_bytes(width, 'big')).decode()}"
          f"  {total} bytes in {len(paths)} files, {parts} parts")


if __name__ == "__main__":
    main()
