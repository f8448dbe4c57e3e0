"""Batch consume queues (5.x topics with the attribute queue.type=BatchCQ): reading and the broker's lookups.

``batchconsumequeue/<topic>/<queueId>/<20 digits>``: 46-byte units (formats.batch_consumequeue) appended in
order; a file name is the byte offset of its first unit (unit index x 46), files are
mapperFileSizeBatchConsumeQueue bytes (default 300,000 units). A unit covers the queue offsets
[msgBaseOffset, msgBaseOffset + batchSize) (an inner batch: INNER_BASE/INNER_NUM; any other record: its
QUEUEOFFSET and 1). Reading a file stops at the first unit with offset < 0, size <= 0, msgBaseOffset < 0 or
batchSize <= 0 (BatchConsumeQueue.recover).

Lookups follow BatchConsumeQueue (5.3.3) with its default searchBcqByCacheEnable=true: the file is picked
through per-file caches of the first unit's msgBaseOffset / store time (floor entry; the last file is tried
first), then a binary search inside that one file. So a time between the last unit of one file and the first
unit of the next resolves in the EARLIER file, to its last unit's msgBaseOffset.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from rmqctl.formats import batch_consumequeue as bcqf
from rmqctl.formats._derive import struct_format
from rmqctl.store.files import FileQueue, open_read

UNIT = struct.Struct(struct_format(bcqf.BatchConsumeQueueUnit))
UNIT_SIZE = bcqf.UNIT_SIZE
DIR = "batchconsumequeue"
INNER_NUM, INNER_BASE = "INNER_NUM", "INNER_BASE"


@dataclass(frozen=True)
class Unit:
    pos: int            # logical byte position in the queue (file start + index * 46)
    phys: int
    size: int
    tags: int
    store_ts: int
    base: int
    batch: int
    compacted: int
    reserved: int

    @property
    def end_offset(self) -> int:
        return self.base + self.batch


def valid(phys: int, size: int, base: int, batch: int) -> bool:
    return phys >= 0 and size > 0 and base >= 0 and batch > 0


def inner_batch(props: dict, queue_offset: int) -> tuple[int, int]:
    """(msgBaseOffset, batchSize) of a record's unit, as CommitLog.checkMessageAndReturnSize sets them."""
    if INNER_NUM in props and INNER_BASE in props:
        try:
            base, n = int(props[INNER_BASE]), int(props[INNER_NUM])
            if -(1 << 15) <= n < (1 << 15):
                return base, n
        except ValueError:
            pass
    return queue_offset, 1


class BatchQueue:
    """One batch consume queue as the broker loads it."""

    def __init__(self, store, topic: str, queue_id: int):
        self.store, self.topic, self.queue_id = store, topic, queue_id
        self.directory = store.root / DIR / topic / str(queue_id)
        self.file_size = store.config.bcq_file_size
        self.fq = FileQueue.scan(self.directory, root=store.root)
        self._cache: dict = {}

    @property
    def files(self):
        return self.fq.files

    def file_units(self, f) -> list[Unit]:
        """The valid units at the start of one file (up to the first invalid one)."""
        u = self._cache.get(f.start)
        if u is not None:
            return u
        fd = open_read(f.path, self.store.root)
        try:
            data = os.pread(fd, min(f.size, self.file_size), 0)
        finally:
            os.close(fd)
        out = []
        for i in range(len(data) // UNIT_SIZE):
            t = UNIT.unpack_from(data, i * UNIT_SIZE)
            if not valid(t[0], t[1], t[4], t[5]):
                break
            out.append(Unit(f.start + i * UNIT_SIZE, *t))
        if len(self._cache) > 8:
            self._cache.clear()
        self._cache[f.start] = out
        return out

    def units(self):
        for f in self.files:
            yield from self.file_units(f)

    # --- the broker's offsets ------------------------------------------------------------------
    def min_offset(self, commitlog_min: int | None = None) -> int:
        """reviseMinOffsetInQueue: the first file's first unit (-1 when it has none). (commitlog_min: accepted
        for the plain queues' signature.)"""
        if not self.files:
            return -1
        u = self.file_units(self.files[0])
        return u[0].base if u else -1

    def max_offset(self) -> int:
        """reviseMaxOffsetInQueue: the last unit of the last file (of the one before when the last is empty)."""
        for f in reversed(self.files[-2:]):
            u = self.file_units(f)
            if u:
                return u[-1].end_offset
        return 0

    def _nonempty(self):
        return [(f, u) for f in self.files if (u := self.file_units(f))]

    def _pick(self, key, value):
        """The file the broker searches: the last file when its first unit's key <= value, else the floor
        entry of the per-file cache of first-unit keys (a later file with an equal key replaces the
        earlier one); None when value is below every first unit."""
        files = self._nonempty()
        if not files:
            return None
        last = self.files[-1]
        lu = self.file_units(last)
        if lu and key(lu[0]) <= value:
            return lu
        cache: dict = {}
        for _, u in files:
            cache[key(u[0])] = u
        floor = [k for k in cache if k <= value]
        return cache[max(floor)] if floor else None

    def unit_for(self, offset: int) -> Unit | None:
        """getBatchMsgIndexBuffer(offset): the unit getMessage serves for a queue offset, None if none."""
        if offset >= self.max_offset():
            return None
        u = self._pick(lambda x: x.base, offset)
        if u is None:
            return None
        i = _binary_search([x.base for x in u], offset)
        return u[i] if i >= 0 else None

    def offset_by_time(self, ts: int, version: int = 5) -> int:
        """ConsumeQueueStore.getOffsetInQueueByTime(ts) (BoundaryType.LOWER) on this queue (5.x only: version
        is accepted for the plain queues' signature)."""
        r = self._offset_by_time(ts)
        r = max(r, self.min_offset())
        return min(r, self.max_offset())

    def _offset_by_time(self, ts: int) -> int:
        files = self._nonempty()
        if not files:
            return -1
        last = self.file_units(self.files[-1])
        if last and last[0].store_ts <= ts:
            u = last
        else:
            cache: dict = {}
            for _, x in files:
                cache[x[0].store_ts] = x
            floor = [k for k in cache if k <= ts]
            u = cache[max(floor)] if floor else self.file_units(self.files[0])
            if not u:
                return -1
        if ts >= u[-1].store_ts:
            return u[-1].base
        i = _binary_search_right([x.store_ts for x in u], ts)
        return u[i].base if i >= 0 else -1


def _binary_search(vals: list, target: int) -> int:
    """BatchConsumeQueue.binarySearch over unit values (indexes instead of byte positions)."""
    left, right = 0, len(vals) - 1
    max_right = right
    while left <= right:
        mid = (left + right) // 2
        v = vals[mid]
        if v == target:
            return mid
        if v > target:
            right = mid - 1
        else:
            if mid == left:
                if mid + 1 <= max_right and vals[mid + 1] <= target:
                    return mid + 1
                return mid
            left = mid
    return -1


def _binary_search_right(vals: list, target: int) -> int:
    """BatchConsumeQueue.binarySearchRight(..., BoundaryType.LOWER)."""
    left, right = 0, len(vals) - 1
    while left <= right:
        mid = (left + right) // 2
        v = vals[mid]
        if mid == right:
            return mid if v >= target else -1
        if mid == left:
            if v >= target:
                return mid
            left = mid + 1
        elif v < target:
            left = mid + 1
        else:
            right = mid
    return -1
