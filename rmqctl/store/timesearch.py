"""The broker's search of a consume queue by store time, as 5.3.3 does it after its own load:
ConsumeQueue.getOffsetInQueueByTime(timestamp, BoundaryType.LOWER) =
MappedFileQueue.getConsumeQueueMappedFileByTime (pick ONE file) + binarySearchInQueueByTime (search in it).

The file list and positions are the broker's post-recovery view (ConsumeQueue.recover: scan the last three
files to the first invalid unit, drop files beyond it; correctMinOffset: binary search in the first file).
Every unit and commitlog header read is a bounded pread, counted in `reads`, so a queue of ten million
units costs a few dozen reads, never a scan. Corner cases kept on purpose because the broker has them:
* only files whose LAST unit (at fileSize-20) is readable get a stop time; the first such file with
  stop time >= T is searched, else the last file, so the answer never leaves that one file;
* the last file is searched up to its write position, except when that is 0 (an empty file after a full
  one): then the whole file is searched, zeros included;
* a unit whose message cannot be read during the bisection makes the broker answer 0;
* units below the commitlog's min offset count as "earlier" without reading the commitlog.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

from rmqctl.store.commitlog import open_ro
from rmqctl.store.files import open_read

UNIT = struct.Struct(">qiq")
U = UNIT.size  # CQ_STORE_UNIT_SIZE = 20


class PickupError(Exception):
    """Where the broker itself would throw (a unit whose size is too small to hold the header it reads)."""


class CommitLogTimes:
    """CommitLog.pickupStoreTimestamp: STORETIMESTAMP of the record at (offset, size), -1 when the range
    is outside the commitlog. The broker also requires offset+size <= its recovered max offset; on a clean
    store no unit points past it, after a crash recovery truncates such units: rmqctl bounds by the file."""

    def __init__(self, store):
        self.store = store
        self.files = store.commitlog.files
        self.file_size = store.config.commitlog_file_size
        self.min_offset = self.files[0].start if self.files else -1
        self._fds: dict = {}
        self.reads = 0

    def close(self):
        for cm, _ in self._fds.values():
            cm.__exit__(None, None, None)
        self._fds.clear()

    def _fd(self, f):
        ent = self._fds.get(f.path)
        if ent is None:
            cm = open_ro(f.path)
            ent = self._fds[f.path] = (cm, cm.__enter__())
        return ent[1]

    def __call__(self, offset: int, size: int) -> int:
        if not self.files or offset < self.min_offset:
            return -1
        f = self.store.commitlog.file_for(offset, self.file_size)
        if f is None or offset - f.start + size > min(f.size, self.file_size):
            return -1
        self.reads += 1
        head = os.pread(self._fd(f), 76, offset - f.start)
        if size < 40 or len(head) < 40:
            raise PickupError(f"unit size {size} cannot hold a message header")
        sys_flag = struct.unpack_from(">i", head, 36)[0]
        pos = 48 + (20 if sys_flag & 0x10 else 8)
        if size < pos + 8:
            raise PickupError(f"unit size {size} cannot hold STORETIMESTAMP at +{pos}")
        return struct.unpack_from(">q", head, pos)[0]


@dataclass
class QueueFile:
    path: object
    start: int
    wrote: int          # write position after recovery (fileSize for every file but the last)


@dataclass
class QueueView:
    """One consume queue as the broker holds it after load + recover + correctMinOffset."""

    topic: str
    queue_id: int
    file_size: int
    files: list = field(default_factory=list)
    min_logic_offset: int = 0       # bytes, like the broker's field
    reads: int = 0                  # CQ units read (each a 20-byte pread)
    notes: list = field(default_factory=list)
    _fds: dict = field(default_factory=dict)

    @property
    def max_offset(self) -> int:
        """getMaxOffsetInQueue, in units."""
        if not self.files:
            return 0
        last = self.files[-1]
        return (last.start + last.wrote) // U

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // U

    def unit(self, f: QueueFile, pos: int):
        """The unit at byte pos of file f (zeros past the end of a short file, like the broker's mapping)."""
        fd = self._fds.get(f.path)
        if fd is None:
            fd = self._fds[f.path] = open_read(f.path)
        self.reads += 1
        data = os.pread(fd, U, pos)
        return UNIT.unpack(data.ljust(U, b"\0"))

    def unit_at(self, offset: int):
        """(phys, size, tags) at a logical offset inside [min, max), else None."""
        if not (self.min_offset <= offset < self.max_offset):
            return None
        byte = offset * U
        for f in self.files:
            if f.start <= byte < f.start + self.file_size:
                return self.unit(f, byte - f.start)
        return None

    def close(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _first_invalid(data: bytes) -> int:
    """Byte position of the first unit with offset < 0 or size <= 0 (len(data) if none)."""
    n = len(data) // U
    if n > 4096:
        import numpy as np  # a 6 MB file: 1 numpy pass instead of 300,000 unpacks

        a = np.frombuffer(data, dtype=np.dtype([("o", ">i8"), ("s", ">i4"), ("t", ">i8")]), count=n)
        bad = np.flatnonzero((a["o"] < 0) | (a["s"] <= 0))
        return int(bad[0]) * U if bad.size else n * U
    for i, (o, s, _) in enumerate(UNIT.iter_unpack(data[:n * U])):
        if o < 0 or s <= 0:
            return i * U
    return n * U


def load_queue(store, topic: str, queue_id: int, commitlog_min: int | None = None) -> QueueView:
    """ConsumeQueue.recover + MappedFileQueue.truncateDirtyFiles + correctMinOffset (5.3.3)."""
    from rmqctl.store.files import FileQueue

    fs = store.config.cq_file_size
    fq = FileQueue.scan(store.root / "consumequeue" / topic / str(queue_id), root=store.root)
    v = QueueView(topic, queue_id, fs)
    files = fq.files
    if not files:
        return v
    # recover(): from file max(0, n-3), a file whose units are all valid continues into the next one
    idx = max(0, len(files) - 3)
    process = files[idx].start
    while True:
        f = files[idx]
        with open_ro(f.path) as fd:
            data = os.pread(fd, fs, 0).ljust(fs, b"\0")
        wp = _first_invalid(data)
        process = f.start + wp
        if wp == fs and idx + 1 < len(files):
            idx += 1
            continue
        break
    for f in files:
        if f.start + fs <= process:
            v.files.append(QueueFile(f.path, f.start, fs))
        elif f.start <= process:       # the file holding processOffset keeps a write position
            v.files.append(QueueFile(f.path, f.start, process - f.start))
        # files entirely beyond processOffset are deleted by the broker
    if commitlog_min is None:
        commitlog_min = store.commitlog.min_offset
    v.min_logic_offset = _correct_min_offset(v, commitlog_min)
    return v


def _correct_min_offset(v: QueueView, cl_min: int) -> int:
    """ConsumeQueue.correctMinOffset from the initial minLogicOffset 0 (what a fresh load has)."""
    min_logic = 0
    if not v.files or min_logic >= v.files[-1].start + v.files[-1].wrote:
        return min_logic
    last = v.files[-1]
    if last.wrote < U:
        v.notes.append(f"consume queue {v.topic}/{v.queue_id}: last file is empty; the broker's "
                       f"correctMinOffset fails here (IllegalArgumentException, apache/rocketmq#9728)")
        return min_logic
    phys, _, _ = v.unit(last, last.wrote - U)
    if phys < cl_min:
        return last.start + last.wrote
    first = v.files[0]
    start = min_logic - first.start
    intact = start >= 0
    start = max(start, 0)
    size = first.wrote - start
    if size <= 0:
        return min_logic
    phys, _, _ = v.unit(first, start)
    if intact and phys >= cl_min:
        return min_logic
    low, high = 0, size - U
    while high - low > U:
        mid = (low + high) // 2 // U * U
        phys, _, _ = v.unit(first, start + mid)
        if phys > cl_min:
            high = mid
        elif phys == cl_min:
            low = high = mid
            break
        else:
            low = mid
    for i in range(low, high + 1, U):
        phys, _, _ = v.unit(first, start + i)
        if phys >= cl_min:
            return first.start + start + i
    return min_logic


def file_by_time(v: QueueView, pickup, timestamp: int) -> QueueFile | None:
    """getConsumeQueueMappedFileByTime, LOWER: the first non-last file whose last unit's store time is
    >= timestamp, else the last file. (Start times are computed by the broker too but unused by LOWER.)"""
    n = len(v.files)
    for i, f in enumerate(v.files):
        if i < n - 1:
            phys, size, _ = v.unit(f, v.file_size - U)
            try:
                stop = pickup(phys, size)
            except PickupError:
                stop = -1   # the broker catches nothing here either, but a -1 stop time is never chosen
            if stop > 0 and stop >= timestamp:
                return f
        else:
            return f
    return None


def offset_in_queue_by_time(cq_or_view, timestamp: int, pickup=None, store=None, version: int = 5,
                            mtime=None) -> int:
    """ConsumeQueue.getOffsetInQueueByTime(timestamp, LOWER): normally the first logical offset whose
    message was stored at or after `timestamp` (max offset if none), with the broker's corner cases.
    version=4 gives 4.9.x's answer instead: the offset whose store time is NEAREST to `timestamp`, in the
    first file whose modification time is >= timestamp (MappedFileQueue.getMappedFileByTime); `mtime`
    (path -> ms) overrides the files' own modification times."""
    v = cq_or_view
    own = None
    if not isinstance(v, QueueView):
        store = cq_or_view.store
        v = load_queue(store, cq_or_view.topic, cq_or_view.queue_id)
    if pickup is None:
        own = pickup = CommitLogTimes(store if store is not None else cq_or_view.store)
    try:
        if version == 4:
            return _search_v4(v, pickup, timestamp, mtime)
        f = file_by_time(v, pickup, timestamp)
        if f is None:
            return 0
        return _binary_search(v, f, pickup, timestamp)
    finally:
        if own is not None:
            own.close()


def _binary_search(v: QueueView, f: QueueFile, pickup, timestamp: int) -> int:
    """binarySearchInQueueByTime (LOWER)."""
    low = v.min_logic_offset - f.start if v.min_logic_offset > f.start else 0
    rng = v.file_size
    if f.wrote != 0 and f.wrote != v.file_size:
        rng = f.wrote
    ceiling = rng - U
    floor = low
    high = ceiling
    min_phys = pickup.min_offset
    # corner case 1: the last unit is older than timestamp
    phys, size, _ = v.unit(f, ceiling)
    if pickup(phys, size) < timestamp:
        return (f.start + ceiling + U) // U
    # corner case 2: the first unit is newer
    phys, size, _ = v.unit(f, floor)
    if pickup(phys, size) > timestamp:
        return f.start // U
    target = right = -1
    while high >= low:
        mid = (low + high) // (2 * U) * U
        phys, size, _ = v.unit(f, mid)
        if phys < min_phys:
            low = mid + U
            continue
        t = pickup(phys, size)
        if t < 0:
            v.notes.append(f"commitlog offset {phys} of unit {(f.start + mid) // U} is unreadable; "
                           f"the broker answers 0 here")
            return 0
        if t == timestamp:
            target = mid
            break
        if t > timestamp:
            high = mid - U
            right = mid
        else:
            low = mid + U
    if target != -1:
        prev = target
        while True:     # walk back over units with the same store time
            attempt = prev - U
            if attempt < floor:
                break
            phys, size, _ = v.unit(f, attempt)
            if pickup(phys, size) == timestamp:
                prev = attempt
                continue
            break
        offset = prev
    else:
        offset = right
    return _jdiv(f.start + offset, U)


def _jdiv(a: int, b: int) -> int:
    """Java long division (truncates toward zero; rightOffset may still be -1)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _file_mtime_ms(path) -> int:
    return int(os.stat(path).st_mtime * 1000)


def _search_v4(v: QueueView, pickup, timestamp: int, mtime=None) -> int:
    """4.9.x ConsumeQueue.getOffsetInQueueByTime: file chosen by mtime (not by content), then a bisection
    that answers an exact match, or the nearer of its two last neighbours (ties go to the earlier one)."""
    if not v.files:
        return 0
    mtime = mtime or _file_mtime_ms
    f = next((f for f in v.files if mtime(f.path) >= timestamp), v.files[-1])
    low = v.min_logic_offset - f.start if v.min_logic_offset > f.start else 0
    high = f.wrote - U
    left = right = target = -1
    left_v = right_v = -1
    min_phys = pickup.min_offset
    while high >= low:
        mid = (low + high) // (2 * U) * U
        phys, size, _ = v.unit(f, mid)
        if phys < min_phys:
            low, left = mid + U, mid
            continue
        t = pickup(phys, size)
        if t < 0:
            return 0
        if t == timestamp:
            target = mid
            break
        if t > timestamp:
            high, right, right_v = mid - U, mid, t
        else:
            low, left, left_v = mid + U, mid, t
    if target != -1:
        offset = target
    elif left_v == -1:
        offset = right
    elif right_v == -1:
        offset = left
    else:
        offset = right if abs(timestamp - left_v) > abs(timestamp - right_v) else left
    return _jdiv(f.start + offset, U)
