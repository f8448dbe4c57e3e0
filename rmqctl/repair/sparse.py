"""Hole-aware reads of big store files: byte equality of two files and the last non-zero byte, with
flat memory (SEEK_DATA / SEEK_HOLE skip the holes of sparse index and commitlog files)."""
from __future__ import annotations

import os
from pathlib import Path


def same_file(a: Path, b: Path) -> bool:
    """Byte equality of two files, read into two reused 4 MiB buffers (flat memory: mapping a 400 MB
    index file would count its pages in the RSS). Stretches that are holes in both files (index files
    are sparse: most item pages are never touched) are equal without reading them."""
    size = a.stat().st_size
    if size != b.stat().st_size:
        return False
    step = 4 << 20
    ba, bb = bytearray(step), bytearray(step)
    with open(a, "rb", buffering=0) as fa, open(b, "rb", buffering=0) as fb:
        pos = 0
        while pos < size:
            pos = min(next_data(fa.fileno(), pos, size), next_data(fb.fileno(), pos, size))
            if pos >= size:
                return True
            n = min(step, size - pos)
            fa.seek(pos)
            fb.seek(pos)
            na, nb = fa.readinto(memoryview(ba)[:n]), fb.readinto(memoryview(bb)[:n])
            if na != nb or not na:
                return na == nb
            if not (ba == bb if na == step else ba[:na] == bb[:nb]):   # bytearray ==: memcmp
                return False
            pos += na
    return True


def next_data(fd: int, pos: int, size: int) -> int:
    """The next offset >= pos that is not inside a hole (size when none; pos without SEEK_DATA)."""
    try:
        return os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as e:
        import errno

        return size if e.errno == errno.ENXIO else pos


def last_nonzero(fd: int, start: int, end: int, read: list | None = None) -> int:
    """rmqctl.scan.last_nonzero, fast on the usual tail of a commitlog (hundreds of MB of zeros, often
    a hole): holes are skipped with SEEK_DATA/SEEK_HOLE, data extents are checked 8 MiB at a time
    with numpy, backwards, and only the chunk holding the last non-zero byte is stripped. ``read``: a
    list that gets (offset, bytes) of that chunk, for a caller that wants the bytes too."""
    import numpy as np

    extents = []
    pos = start
    try:
        while pos < end:
            d = os.lseek(fd, pos, os.SEEK_DATA)
            if d >= end:
                break
            h = min(os.lseek(fd, d, os.SEEK_HOLE), end)
            extents.append((d, h))
            pos = h
    except OSError as e:    # ENXIO: no data after pos; anything else (no SEEK_DATA support): scan it all
        import errno

        if e.errno != errno.ENXIO:
            extents = [(start, end)]
    step = 8 << 20
    for a, b in reversed(extents):
        hi = b
        while hi > a:
            lo = max(a, hi - step)
            data = os.pread(fd, hi - lo, lo)
            if np.frombuffer(data, np.uint8).any():
                stripped = data.rstrip(b"\0")
                if read is not None:
                    read.append((lo, data))
                return lo + len(stripped)
            hi = lo
    return start
