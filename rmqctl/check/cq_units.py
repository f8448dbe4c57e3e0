"""Consume-queue units looked up by queue offset, read in bounded pieces (verify's record-to-unit check)."""
from __future__ import annotations

import os
import struct

from rmqctl.errors import IOFailure
from rmqctl.formats.consumequeue import UNIT_SIZE
from rmqctl.store.files import open_read


CQ_UNIT = struct.Struct(">qiq")


CQ_CHUNK_UNITS = 512


def pread_or_empty(path: str, n: int, pos: int) -> bytes:
    """Up to n bytes of a consume-queue file at pos; b"" when the file is missing (the unit is then missing),
    or not read by policy (a link out of the store, a FIFO: the queue walker reports it)."""
    root = path
    for _ in range(5):   # <root>/consumequeue/<topic>/<qid>/<file>
        root = os.path.dirname(root)
    try:
        fd = open_read(path, root)
    except (OSError, IOFailure):
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
