"""Where a walk of a commitlog file can start in the middle: nominal split points of a file into ranges,
and the first valid record at or after a position (resynchronisation, rmqctl.scan.find_next_record), with
unwritten zeros and sparse holes skipped first. Shared by verify's parallel scan (rmqctl.check.commitlog)
and the parallel rebuild/recover walk (rmqctl.repair.parallel)."""
from __future__ import annotations

import errno
import os

from rmqctl import scan


def split_points(size: int, file_size: int, pieces: int) -> list[int]:
    """Nominal split positions of one file into `pieces` ranges (the workers resync at record starts)."""
    limit = min(size, file_size)
    return [limit * k // pieces for k in range(pieces)] + [None]


def first_record(fd: int, start: int, size: int, lo: int, hi: int, limit: int) -> int | None:
    """The first position in [lo, hi) where a valid record (scan.find_next_record's sense) starts, or
    None. Zero bytes are skipped with memcmp first: a pre-allocated file is mostly zeros, and a record's
    TOTALSIZE has a non-zero byte among its first four."""
    nz = first_nonzero(fd, lo, min(hi + 3, limit))
    if nz is None:
        return None
    p = scan.find_next_record(fd, start, size, max(lo, nz - 3) - 1, limit,
                              make_walk=lambda c: scan.FileWalk(fd, start, size, c, limit, window=64 * 1024))
    return p if p is not None and p < hi else None


_ZEROS = bytes(1 << 20)


def _skip_hole(fd: int, pos: int, end: int) -> int:
    """The next position >= pos that may hold data: holes of a sparse file read as zeros, and the broker
    sizes new commitlog files without writing them, so a file's unwritten tail is usually one hole."""
    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None:
        return pos
    try:
        return os.lseek(fd, pos, seek_data)
    except OSError as e:
        return end if e.errno == errno.ENXIO else pos    # ENXIO: nothing but holes up to the end of file


def first_nonzero(fd: int, pos: int, end: int) -> int | None:
    """The first non-zero byte in [pos, end), or None (holes skipped, zero chunks compared with memcmp)."""
    chunk = len(_ZEROS)
    pos = _skip_hole(fd, pos, end)
    while pos < end:
        data = os.pread(fd, min(chunk, end - pos), pos)
        if not data:
            return None
        if data == _ZEROS[:len(data)]:     # memcmp: ~10x faster than scanning with lstrip
            pos = _skip_hole(fd, pos + len(data), end)
            continue
        stripped = data.lstrip(b"\0")
        if stripped:
            return pos + len(data) - len(stripped)
        pos += len(data)
    return None
