"""Consume-queue units looked up by queue offset, read in bounded pieces (verify's record-to-unit check)."""
from __future__ import annotations

import os
import struct

from rmqctl.errors import IOFailure
from rmqctl.formats.consumequeue import UNIT_SIZE
from rmqctl.store.files import open_plain, open_read


CQ_UNIT = struct.Struct(">qiq")


CQ_CHUNK_UNITS = 512


def pread_or_empty(path: str, n: int, pos: int, dir_inside: bool = False) -> bytes:
    """Up to n bytes of a consume-queue file at pos; b"" when the file is missing (the unit is then missing),
    or not read by policy (a link out of the store, a FIFO: the queue walker reports it). ``dir_inside``: the
    file's directory was judged to lie inside the store already; a regular file in it is then opened after one
    lstat (its links not resolved again: thousands of queues are read per range), anything else judged fully."""
    fd = open_plain(path) if dir_inside else None
    if fd is None:
        root = path
        for _ in range(4):   # <root>/consumequeue/<topic>/<qid>/<file>: four levels up
            root = os.path.dirname(root)
        try:
            fd = open_read(path, root)
        except (OSError, IOFailure):
            return b""
    elif fd < 0:
        return b""
    try:
        return os.pread(fd, n, pos)
    finally:
        os.close(fd)


class CqReader:
    """Positional consume-queue unit lookup with one cached chunk per queue."""

    def __init__(self, root: str, cq_file_size: int):
        self.base = os.path.join(root, "consumequeue")
        self.cq_file_size = cq_file_size
        self.cache: dict = {}

    def unit(self, topic: str, qid: int, q: int):
        byte = q * UNIT_SIZE
        fstart = byte - byte % self.cq_file_size
        pos = byte - fstart
        key = (topic, qid)
        c = self.cache.get(key)
        if c is None or c[0] != fstart or not (c[1] <= pos < c[1] + len(c[2])):
            path = os.path.join(self.base, topic, str(qid), f"{fstart:020d}")
            data = pread_or_empty(path, min(CQ_CHUNK_UNITS * UNIT_SIZE, self.cq_file_size - pos), pos)
            data = data[:len(data) - len(data) % UNIT_SIZE]
            c = self.cache[key] = (fstart, pos, data)
            if not data:
                return None
        rel = pos - c[1]
        if rel + UNIT_SIZE > len(c[2]):
            return None
        return CQ_UNIT.unpack_from(c[2], rel)


_SPARE: list = []      # the buffer of the last pool released in this process


def forget_spare() -> None:
    """The walk is over: the buffer kept for the next pool is given back (peak memory)."""
    _SPARE.clear()


class CqPool:
    """verify's consume-queue read-ahead: one cached piece per queue (queue number g), all in one byte pool,
    described by arrays a compiled kernel reads (rmqctl.kernels.verify_nb.plan): the piece's file start f0[g]
    (-1: none), its first byte position in that file p0[g], its unit count n[g] and where its bytes lie in the
    pool, at[g]. A queue's next piece takes its place when it fits there. `trim` (called where no place handed
    out is in use any more) empties the pool once it holds more than `cap` bytes; between two trims it grows
    instead, copying what it holds, so the places handed out stay valid."""

    def __init__(self, cap: int):
        import numpy as np

        self.cap = cap
        # the whole cap at once (a page is mapped when a piece first fills it), or the buffer the pool before
        # released, whose pages are mapped already: a buffer grown by doubling mapped twice the cap's pages again
        # for every range (a sixth of verify's time on a store of 8,192 queues)
        self.buf = _SPARE.pop() if _SPARE else np.empty(cap, np.uint8)
        self.used = 0
        self.f0 = np.full(64, -1, np.int64)
        self.p0, self.n, self.at, self.room = (np.zeros(64, np.int64) for _ in range(4))

    def holds(self, g: int, f0: int, p0: int, p1: int) -> bool:
        """The piece of queue g holds bytes [p0, p1) of its file starting at f0."""
        return g < len(self.f0) and self.f0[g] == f0 and self.p0[g] <= p0 and p1 <= self.p0[g] + UNIT_SIZE * self.n[g]

    def trim(self) -> None:
        import numpy as np

        if self.used > self.cap:
            self.f0[:] = -1
            self.room[:] = 0
            self.used = 0
            if len(self.buf) > self.cap:
                self.buf = np.empty(self.cap, np.uint8)

    def put(self, g: int, f0: int, p0: int, data: bytes) -> None:
        """Queue g's piece is now the units of `data`, bytes from p0 of its file starting at f0."""
        import numpy as np

        if g >= len(self.f0):
            k = max(2 * len(self.f0), g + 1) - len(self.f0)
            self.f0 = np.concatenate((self.f0, np.full(k, -1, np.int64)))
            self.p0, self.n, self.at, self.room = (np.concatenate((a, np.zeros(k, np.int64)))
                                                   for a in (self.p0, self.n, self.at, self.room))
        k = len(data) // UNIT_SIZE * UNIT_SIZE
        if k > self.room[g]:
            end = self.used + k
            if end > len(self.buf):
                buf = np.empty(max(2 * len(self.buf), end), np.uint8)
                buf[:self.used] = self.buf[:self.used]
                self.buf = buf
            self.at[g], self.room[g], self.used = self.used, k, end
        a = int(self.at[g])
        self.buf[a:a + k] = np.frombuffer(data, np.uint8, k)
        self.f0[g], self.p0[g], self.n[g] = f0, p0, k // UNIT_SIZE

    def release(self) -> None:
        """The pool is done with: its buffer goes to the next pool of this process."""
        if len(self.buf) == self.cap:
            _SPARE[:] = [self.buf]

    def units(self, g: int):
        """Queue g's piece, bytes (a view of the pool)."""
        a = int(self.at[g])
        return self.buf[a:a + UNIT_SIZE * int(self.n[g])]
