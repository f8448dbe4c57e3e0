"""Where a file's zeros end: consume-queue and index files are mapped at their full size (6 MB for a default
consume queue) and hold data only at the front, so a store of many small queues is mostly zeros. Holes
(SEEK_DATA/SEEK_HOLE, where the file system has them) are skipped without reading; written zeros are read in
large pieces and tested in bulk, never decoded."""
from __future__ import annotations

import errno
import os

PIECE = 1 << 20
_ZERO = bytes(PIECE)


def next_nonzero(fd: int, pos: int, end: int) -> int | None:
    """Offset of the first non-zero byte of [pos, end) of the file, or None when it holds only zeros (bytes
    past the file's end read as zeros)."""
    seek = hasattr(os, "SEEK_DATA")
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
            piece = os.pread(fd, min(PIECE, min(hole, end) - pos), pos)
            if not piece:
                return None
            if piece != _ZERO[:len(piece)]:
                return pos + len(piece) - len(piece.lstrip(b"\0"))
            pos += len(piece)
    return None


def all_zero(fd: int, pos: int, end: int) -> bool:
    return next_nonzero(fd, pos, end) is None
