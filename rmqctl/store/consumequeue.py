"""One consume queue (consumequeue/<topic>/<queueId>/): 20-byte units addressed by logical offset.

Units are read in bounded batches with the codec derived from formats.consumequeue.ConsumeQueueUnit.
Validity as in ConsumeQueue.recover: offset >= 0 and size > 0 (pre-blank units (0, 0x7FFFFFFF, 0)
pass it; the broker's reader counts them)."""
from __future__ import annotations

import os
import struct
from functools import cached_property

from rmqctl.formats import consumequeue as cqf
from rmqctl.formats._derive import struct_format
from rmqctl.store.commitlog import open_ro
from rmqctl.store.files import FileQueue

UNIT = struct.Struct(struct_format(cqf.ConsumeQueueUnit))
UNIT_SIZE = UNIT.size
BATCH_UNITS = 65536


class ConsumeQueue:
    def __init__(self, store, topic: str, queue_id: int, kind: str = "consumequeue"):
        self.store, self.topic, self.queue_id = store, topic, queue_id
        self.directory = store.root / kind / topic / str(queue_id)
        self.file_size = store.config.cq_file_size

    @cached_property
    def queue(self) -> FileQueue:
        return FileQueue.scan(self.directory, root=self.store.root)

    def read_units(self, f, start_unit: int = 0, count: int | None = None):
        """(phys, size, tags) tuples of one file from unit index start_unit, bounded batches."""
        n_units = min(f.size, self.file_size) // UNIT_SIZE
        end = n_units if count is None else min(n_units, start_unit + count)
        with open_ro(f.path) as fd:
            i = start_unit
            while i < end:
                k = min(BATCH_UNITS, end - i)
                data = os.pread(fd, k * UNIT_SIZE, i * UNIT_SIZE)
                k = len(data) // UNIT_SIZE
                if k == 0:
                    return
                yield from UNIT.iter_unpack(data[:k * UNIT_SIZE])
                i += k

    def write_position(self, f) -> int:
        """Bytes of valid units at the start of a file (the broker's recover scan)."""
        n = 0
        for phys, size, _ in self.read_units(f):
            if phys >= 0 and size > 0:
                n += UNIT_SIZE
            else:
                break
        return n

    def max_offset(self) -> int:
        """getMaxOffsetInQueue: (last file start + its write position) / 20, after recovery's scan of
        the last three files (the first invalid unit ends the queue)."""
        files = self.queue.files
        if not files:
            return 0
        first = max(0, len(files) - 3)
        for i in range(first, len(files)):
            f = files[i]
            wp = self.write_position(f)
            if wp < self.file_size or i == len(files) - 1:
                return (f.start + wp) // UNIT_SIZE
        return 0

    def min_offset(self, commitlog_min: int | None = None) -> int:
        """getMinOffsetInQueue after correctMinOffset(commitlog min offset): the first unit (searched in
        the first file) whose physical offset >= the commitlog min offset; if the queue's last unit
        is already below it, the end of the queue."""
        files = self.queue.files
        if not files:
            return 0
        if commitlog_min is None:
            commitlog_min = self.store.commitlog.min_offset
        max_off = self.max_offset()
        if max_off > 0:
            last = self.unit(max_off - 1)
            if last is not None and last[0] < commitlog_min:
                return max_off
        f = files[0]
        for i, (phys, size, _) in enumerate(self.read_units(f)):
            if not (phys >= 0 and size > 0):
                break
            if phys >= commitlog_min:
                return (f.start + i * UNIT_SIZE) // UNIT_SIZE
        return (f.start // UNIT_SIZE) if max_off == 0 else max_off

    def unit(self, offset: int):
        """(phys, size, tags) at a logical offset, or None if no file holds it."""
        byte = offset * UNIT_SIZE
        f = self.queue.file_for(byte, self.file_size)
        if f is None:
            return None
        rel = (byte - f.start) // UNIT_SIZE
        for u in self.read_units(f, rel, 1):
            return u
        return None

    def units(self, start: int = 0, end: int | None = None):
        """(queue_offset, phys, size, tags) for start <= offset < end over all files."""
        for f in self.queue.files:
            first = f.start // UNIT_SIZE
            last = first + min(f.size, self.file_size) // UNIT_SIZE
            if end is not None and first >= end:
                return
            if last <= start:
                continue
            s = max(start, first) - first
            cnt = None if end is None else min(end, last) - first - s
            for i, u in enumerate(self.read_units(f, s, cnt)):
                yield (first + s + i, *u)

    def offset_by_time(self, timestamp: int, version: int = 5) -> int:
        """The broker's getOffsetInQueueByTime (version 5: 5.3.3 LOWER boundary; 4: 4.9's nearest)."""
        from rmqctl.store.timesearch import offset_in_queue_by_time

        return offset_in_queue_by_time(self, timestamp, version=version)
