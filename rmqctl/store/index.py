"""Reading index files (index/<yyyyMMddHHmmssSSS>): header, slots, items, chains (§4).

Bounded reads only: a slot is 4 bytes, an item 20 bytes, read with pread at their computed
positions, so a key query touches a handful of pages, never the whole 400 MB file."""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from rmqctl.formats import index as ixf
from rmqctl.formats._derive import struct_format
from rmqctl.store.commitlog import open_ro

HEADER = struct.Struct(struct_format(ixf.IndexHeader))
SLOT = struct.Struct(struct_format(ixf.IndexSlot))
ITEM = struct.Struct(struct_format(ixf.IndexItem))


@dataclass
class IndexHeader:
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


class IndexFile:
    def __init__(self, path, hash_slot_num: int, index_num: int):
        self.path = Path(path)
        self.hash_slot_num, self.index_num = hash_slot_num, index_num
        self.size = self.path.stat().st_size
        self._fd = None

    def __enter__(self):
        self._cm = open_ro(self.path)
        self._fd = self._cm.__enter__()
        return self

    def __exit__(self, *a):
        return self._cm.__exit__(*a)

    @property
    def expected_size(self) -> int:
        return ixf.file_size(self.hash_slot_num, self.index_num)

    def _pread(self, n: int, pos: int) -> bytes:
        data = os.pread(self._fd, n, pos)
        return data if len(data) == n else data.ljust(n, b"\0")  # the broker maps short files zero-extended

    def header(self) -> IndexHeader:
        return IndexHeader(*HEADER.unpack(self._pread(HEADER.size, 0)))

    def slot(self, s: int) -> int:
        return SLOT.unpack(self._pread(4, ixf.HEADER_SIZE + 4 * s))[0]

    def item_pos(self, n: int) -> int:
        return ixf.HEADER_SIZE + 4 * self.hash_slot_num + ixf.ITEM_SIZE * n

    def item(self, n: int) -> tuple[int, int, int, int]:
        """(key_hash, phy_offset, time_diff, pre_index_no) of item number n."""
        return ITEM.unpack(self._pread(ixf.ITEM_SIZE, self.item_pos(n)))

    def items(self, start: int = 1, end: int | None = None, batch: int = 65536):
        """(n, key_hash, phy, time_diff, pre) for items start <= n < end (default: index_count)."""
        if end is None:
            end = self.header().index_count
        n = start
        while n < end:
            k = min(batch, end - n)
            data = self._pread(k * ixf.ITEM_SIZE, self.item_pos(n))
            for i, it in enumerate(ITEM.iter_unpack(data)):
                yield (n + i, *it)
            n += k

    def select_phy_offsets(self, key_hash: int, max_num: int, begin: int, end: int, out: list) -> None:
        """IndexFile.selectPhyOffset: follow the chain of the key's slot, collecting offsets whose item
        hash matches and whose time is within [begin, end]; bounded by index_count steps."""
        h = self.header()
        slot_value = self.slot(key_hash % self.hash_slot_num)
        if slot_value <= ixf.INVALID_INDEX or slot_value > h.index_count or h.index_count <= 1:
            return
        nxt, steps = slot_value, 0
        while len(out) < max_num and steps <= h.index_count:
            steps += 1
            item_hash, phy, time_diff, pre = self.item(nxt)
            if time_diff < 0:
                break
            time_read = h.begin_timestamp + time_diff * 1000
            if item_hash == key_hash and begin <= time_read <= end:
                out.append(phy)
            if pre <= ixf.INVALID_INDEX or pre > h.index_count or pre == nxt or time_read < begin:
                break
            nxt = pre

    def is_time_matched(self, begin: int, end: int) -> bool:
        h = self.header()
        return ((begin < h.begin_timestamp and end > h.end_timestamp)
                or h.begin_timestamp <= begin <= h.end_timestamp
                or h.begin_timestamp <= end <= h.end_timestamp)
