"""The usual layout of a consume-queue directory, and its small files read up to their first hole: what lets the
passes over a store of thousands of queues (recover's queue states, verify's queue checks) decide the usual queues
together, as segment reductions over all their units, and leave every other queue to their one-queue code.

The usual layout: a queue directory inside the store, holding nothing but regular files named by their start
offset, each a multiple of mappedFileSizeConsumeQueue, contiguous, each exactly that size. A small file: its units
lie in one data extent of at most SMALL_FILE bytes, followed by nothing but a hole (the broker's files are sparse:
a queue of a many-queue store holds a few units in a 6 MB mapped file).
"""
from __future__ import annotations

import errno
import os

from rmqctl.formats import OFFSET_NAME
from rmqctl.formats.consumequeue import UNIT_SIZE
from rmqctl.store.files import MappedFile, inside

# a file holding more units than this (3,276) goes through the one-queue code: the arrays of a group cost more passes
# per unit than that code's own, which win back their per-queue cost past about this size
SMALL_FILE = 64 << 10
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def plain_files(store, topic: str, qid: int, d, fs: int) -> list | None:
    """The queue's files as FileQueue.scan gives them (MappedFile, by start), when the queue has the usual layout
    (module doc); else None. An empty directory is usual; a missing or unreadable one is not."""
    try:
        entries = store.queue_dir_entries(topic, qid)
    except OSError:
        return None
    if entries is None or not (store.queue_dir_plain(topic, qid) or inside(d, store.root)):
        return None
    files = []
    for e in entries:
        if e.is_symlink() or not e.is_file(follow_symlinks=False) or not OFFSET_NAME.match(e.name):
            return None
        start = int(e.name)
        try:
            size = e.stat(follow_symlinks=False).st_size
        except OSError:
            return None
        if start % fs or size != fs:
            return None
        files.append(MappedFile(d / e.name, start, size))
    files.sort(key=lambda f: f.start)
    for a, b in zip(files, files[1:]):
        if b.start != a.start + fs:
            return None
    return files


def head(path, fs: int) -> bytes | None:
    """The bytes of a queue file up to the end of its first data extent, when no data follows it and it ends
    within SMALL_FILE bytes (zeros after the units are the caller's to trim); else None. Opened with O_NOFOLLOW
    and O_NONBLOCK: what is no longer the regular file listed fails the seek or the open, and is None."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return None
    try:
        try:
            h = min(os.lseek(fd, 0, os.SEEK_HOLE), fs)
            if h < fs:
                os.lseek(fd, h, os.SEEK_DATA)
                return None         # data after the first hole
        except OSError as e:        # ENXIO: nothing but the hole after h; else no SEEK_HOLE here
            if e.errno != errno.ENXIO:
                return None
        return os.pread(fd, h, 0) if h <= SMALL_FILE else None
    except OSError:
        return None
    finally:
        os.close(fd)


def heads(files: list, fs: int, last: int | None = None) -> list | None:
    """(start, data) of the queue's files (only the `last` ones when given), each padded to whole units; None when
    one is not a small file (head)."""
    out = []
    for f in files[max(0, len(files) - last) if last is not None else 0:]:
        data = head(f.path, fs)
        if data is None:
            return None
        if len(data) % UNIT_SIZE:        # a data extent ends at a page: the unit it cuts ends in the hole
            data = data.ljust(len(data) + UNIT_SIZE - len(data) % UNIT_SIZE, b"\0")
        out.append((f.start, data))
    return out


def within(counts):
    """0..count-1 for each segment of `counts`, concatenated."""
    import numpy as np

    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total) - np.repeat(starts, counts)


def segments(ufunc, values, counts, empty):
    """ufunc reduced over each segment of `values` (consecutive segments of `counts` elements); `empty` for an
    empty one."""
    import numpy as np

    out = np.full(len(counts), empty, np.int64)
    some = counts > 0
    if some.any():
        out[some] = ufunc.reduceat(values, (np.cumsum(counts) - counts)[some])
    return out
