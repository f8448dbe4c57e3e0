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
import stat

from rmqctl.formats import OFFSET_NAME
from rmqctl.formats.consumequeue import UNIT_SIZE
from rmqctl.store.files import inside

# a file holding more units than this (3,276) goes through the one-queue code: the arrays of a group cost more passes
# per unit than that code's own, which win back their per-queue cost past about this size
SMALL_FILE = 64 << 10
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def read_usual(store, topic: str, qid: int, fs: int, last: int | None = None) -> tuple[list, list] | None:
    """((start, path) of each of the queue's files, by start; (start, data) of each file read, padded to whole
    units) when the queue has the usual layout and every file read is small (module doc), else None. Only the
    `last` files are read when given (the others' sizes are checked without reading them)."""
    files = plain_files(store, topic, qid, fs)
    if files is None:
        return None
    k = max(0, len(files) - last) if last is not None else 0
    for _, path in files[:k]:
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size != fs:
            return None
    out = []
    for start, path in files[k:]:
        data = head(path, fs)
        if data is None:
            return None
        if len(data) % UNIT_SIZE:        # a data extent ends at a page: the unit it cuts ends in the hole
            data = data.ljust(len(data) + UNIT_SIZE - len(data) % UNIT_SIZE, b"\0")
        out.append((start, data))
    return files, out


def plain_files(store, topic: str, qid: int, fs: int) -> list | None:
    """(start, path) of the queue's files by start when their directory, names, types and starts are those of
    the usual layout (their sizes are read_usual's to check); else None. An empty directory is usual; a missing
    or unreadable one is not."""
    try:
        entries = store.queue_dir_entries(topic, qid)
    except OSError:
        return None
    if entries is None or not (store.queue_dir_plain(topic, qid)
                               or inside(os.path.join(store.root, "consumequeue", topic, str(qid)), store.root)):
        return None
    files = []
    for e in entries:
        if e.is_symlink() or not e.is_file(follow_symlinks=False) or not OFFSET_NAME.match(e.name):
            return None
        start = int(e.name)
        if start % fs:
            return None
        files.append((start, e.path))
    files.sort()
    for a, b in zip(files, files[1:]):
        if b[0] != a[0] + fs:
            return None
    return files


def head(path, fs: int) -> bytes | None:
    """The bytes of a queue file up to the end of its first data extent, when the file is regular, of size fs,
    no data follows that extent and it ends within SMALL_FILE bytes (zeros after the units are the caller's to
    trim); else None. Opened with O_NOFOLLOW and O_NONBLOCK (a file swapped for a link or a FIFO since it was
    listed fails the open or the checks); its kind and size come from the open file."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != fs:
            return None
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


_RAW = None


def trim_zero_units(units, counts):
    """Each file's units (consecutive segments of `counts` units) up to its last non-zero one, and their counts:
    the zeros after them (most of what a read to the first hole gives, which ends at a page) are left out before
    any array is built over the units."""
    import numpy as np

    global _RAW
    if _RAW is None:    # the fields as unsigned integers in the machine's order: a zero unit reads as zeros either way
        _RAW = np.dtype({"names": ["a", "b", "c"], "formats": ["u8", "u4", "u8"], "offsets": [0, 8, 12],
                         "itemsize": UNIT_SIZE})
    w = units.view(_RAW)
    at = np.flatnonzero(((w["a"] | w["c"]) | w["b"]) != 0)
    start = np.cumsum(counts) - counts
    last = np.full(len(counts), -1, np.int64)
    if len(at):
        f_at = np.searchsorted(start, at, "right") - 1
        ends = np.flatnonzero(np.append(f_at[1:] != f_at[:-1], True))     # each file's last non-zero unit
        last[f_at[ends]] = at[ends] - start[f_at[ends]]
    if (last + 1 == counts).all():
        return units, counts
    # +1 where a file with a non-zero unit starts, -1 after its last one: a running sum of 1 marks what is kept
    some = last >= 0
    mark = np.zeros(len(units) + 1, np.int8)
    mark[start[some]] = 1
    mark[(start + last + 1)[some]] -= 1
    return units[np.cumsum(mark[:-1], dtype=np.int8).view(bool)], last + 1

