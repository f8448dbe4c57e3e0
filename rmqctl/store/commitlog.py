"""Reading the commitlog as the broker lays it out: files named by start offset, records never span
files, a BLANK record (or unwritten zeros in the last file) ends each file."""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field

from rmqctl.errors import FormatError, IOFailure
from rmqctl.scan import FileWalk, Record, Stop
from rmqctl.store.files import MappedFile, open_read

ONE_RECORD_READ = 64 * 1024     # most records fit; a longer one costs a second read


@contextmanager
def open_ro(path):
    try:
        fd = open_read(path)
    except FileNotFoundError as e:
        raise IOFailure(e.strerror or str(e), path=path) from e
    try:
        yield fd
    finally:
        os.close(fd)


@dataclass
class FileEnd:
    """How one commitlog file ended during a walk."""

    file: MappedFile
    stop: Stop
    records: int = 0
    last_valid: int | None = None


@dataclass
class Walk:
    """A walk over all commitlog files. `ends` has one FileEnd per file visited."""

    ends: list[FileEnd] = field(default_factory=list)


class CommitLog:
    def __init__(self, store):
        self.store = store
        self.queue = store.commitlog
        self.file_size = store.config.commitlog_file_size

    @property
    def files(self) -> list[MappedFile]:
        return self.queue.files

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    def records(self, start: int | None = None, end: int | None = None, *, check_crc: bool = True,
                check_phys: bool = True, check_prop_crc: bool = True, walk: Walk | None = None,
                stop_at_bad: bool = True):
        """Yield every valid record from `start` (default: first file) across files, like the broker's
        reader: at a BLANK continue with the next file; at anything else stop that file and, with
        stop_at_bad=True, stop altogether (what recovery does). File ends go into `walk.ends`."""
        for f in self.queue.files:
            if end is not None and f.start >= end:
                return
            if start is not None and f.start + self.file_size <= start:
                continue
            pos = 0 if start is None or start <= f.start else start - f.start
            with open_ro(f.path) as fd:
                limit = min(f.size, self.file_size)
                if end is not None:
                    limit = min(limit, end - f.start)
                w = FileWalk(fd, f.start, f.size, pos, limit, check_crc=check_crc, check_phys=check_phys,
                             check_prop_crc=check_prop_crc, path=str(f.path))
                n = 0
                for r in w:
                    n += 1
                    yield r
                if walk is not None:
                    walk.ends.append(FileEnd(f, w.stop, n, w.last_valid))
            if stop_at_bad and w.stop.kind != "blank":
                return

    def read_record(self, offset: int, *, check_crc: bool = True) -> Record:
        """The record at an absolute offset, validated; FormatError naming the file and offset otherwise."""
        f = self.queue.file_for(offset, self.file_size)
        if f is None:
            raise FormatError("no commitlog file holds this offset", path=self.store.commitlog_dir, offset=offset)
        with open_ro(f.path) as fd:
            # one record: a small first read (a longer record is read again at its TOTALSIZE), not a walk window
            w = FileWalk(fd, f.start, f.size, offset - f.start, check_crc=check_crc, path=str(f.path),
                         window=ONE_RECORD_READ)
            for r in w:
                return r
        raise FormatError(f"no valid message here ({w.stop.kind}{': ' + w.stop.detail if w.stop.detail else ''})",
                          path=f.path, offset=offset)

    def store_timestamp(self, offset: int, size: int) -> int:
        """CommitLog.pickupStoreTimestamp: the STORETIMESTAMP of the record at offset (-1 if unreadable)."""
        import struct as _s

        f = self.queue.file_for(offset, self.file_size)
        if f is None or size < 8:
            return -1
        with open_ro(f.path) as fd:
            head = os.pread(fd, 76, offset - f.start)
        if len(head) < 44:
            return -1
        sys_flag = _s.unpack_from(">i", head, 36)[0]
        pos = 48 + (20 if sys_flag & 0x10 else 8)
        if len(head) < pos + 8:
            return -1
        return _s.unpack_from(">q", head, pos)[0]


def data_estimate(path: str, size: int, block: int = 4096) -> int:
    """About how many bytes of a commitlog file hold records: the broker fills a file front to back, so they end
    where the zeros start, found by bisection on `block`-sized pieces (~20 reads). Only sizes the work (which
    kernel, how many ranges); the walk itself decides where the records end."""
    try:
        fd = open_read(path)
    except (OSError, IOFailure):    # the walk reports it
        return 0
    try:
        lo, hi = 0, -(-size // block)
        while lo < hi:
            mid = (lo + hi) // 2
            if os.pread(fd, block, mid * block).strip(b"\0"):
                lo = mid + 1
            else:
                hi = mid
        return min(size, lo * block)
    except OSError:     # unreadable here: the walk reports it
        return 0
    finally:
        os.close(fd)
