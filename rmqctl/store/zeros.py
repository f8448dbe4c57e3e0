"""Where a file's zeros end: consume-queue and index files are mapped at their full size (6 MB for a default
consume queue) and hold data only at the front, so a store of many small queues is mostly zeros. Holes
(SEEK_DATA/SEEK_HOLE, where the file system has them) are skipped without reading; written zeros are read in
large pieces and tested in bulk, never decoded."""
from __future__ import annotations

import errno
import os
import threading

PIECE = 1 << 20
_ZERO = bytes(PIECE)
_BUF = threading.local()      # one reused piece buffer per thread (a fresh 1 MiB bytes per read costs 2x)


def next_nonzero(fd: int, pos: int, end: int) -> int | None:
    """Offset of the first non-zero byte of [pos, end) of the file, or None when it holds only zeros (bytes
    past the file's end read as zeros)."""
    seek = hasattr(os, "SEEK_DATA")
    buf = getattr(_BUF, "buf", None)
    if buf is None:
        buf = _BUF.buf = bytearray(PIECE)
    view = memoryview(buf)
    while pos < end:
        hole = end
        if seek:
            try:
                pos = os.lseek(fd, pos, os.SEEK_DATA)
                hole = os.lseek(fd, pos, os.SEEK_HOLE)
            except OSError as e:
                if e.errno == errno.ENXIO:      # no data at or after pos
                    return None
                seek = False                    # not supported here: read
            if pos >= end:
                return None
        while pos < min(hole, end):
            n = _read_into(fd, view[:min(PIECE, min(hole, end) - pos)], pos)
            if not n:
                return None
            if n == PIECE and buf == _ZERO:
                pos += n
                continue
            piece = bytes(view[:n])
            if piece != _ZERO[:n]:
                return pos + len(piece) - len(piece.lstrip(b"\0"))
            pos += len(piece)
    return None


def _read_into(fd: int, view, pos: int) -> int:
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], pos)
    data = os.pread(fd, len(view), pos)
    view[:len(data)] = data
    return len(data)


def all_zero(fd: int, pos: int, end: int) -> bool:
    return next_nonzero(fd, pos, end) is None
