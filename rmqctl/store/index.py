"""Reading index files (index/<yyyyMMddHHmmssSSS>): header, slots, items, chains (docs/store-format.md, "Index files").

Bounded reads only: a slot is 4 bytes, an item 20 bytes, read with pread at their computed
positions, so a key query touches a handful of pages, never the whole 400 MB file."""
from __future__ import annotations

import os
import stat
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

    def loaded_header(self) -> IndexHeader:
        """IndexHeader.load as the broker keeps it in memory: read once, indexCount <= 0 becomes 1."""
        h = getattr(self, "_hdr", None)
        if h is None:
            h = self.header()
            if h.index_count <= 0:
                h.index_count = 1
            self._hdr = h
        return h

    def problems(self) -> list[str]:
        """Header values that make the file unusable (not the broker's checks: it has none)."""
        h, out = self.loaded_header(), []
        if self.size < ixf.HEADER_SIZE:
            out.append(f"file is {self.size} bytes, shorter than the header")
        if h.index_count > self.index_num:
            out.append(f"indexCount {h.index_count} > maxIndexNum {self.index_num}")
        if h.hash_slot_count < 0 or h.hash_slot_count > self.hash_slot_num:
            out.append(f"hashSlotCount {h.hash_slot_count} outside [0, {self.hash_slot_num}]")
        if h.index_count > 1 and h.begin_timestamp > h.end_timestamp:
            out.append(f"beginTimestamp {h.begin_timestamp} > endTimestamp {h.end_timestamp}")
        return out

    def select_phy_offsets(self, key_hash: int, max_num: int, begin: int, end: int, out: list,
                           problems: list | None = None) -> int:
        """IndexFile.selectPhyOffset: follow the chain of the key's slot, collecting offsets whose item
        hash matches and whose time (file begin + timeDiff seconds) is within [begin, end]. Returns the
        number of items read. A chain that loops makes the broker spin until max_num is reached (or
        forever): here it is cut at the first repeated item and reported in `problems`."""
        h = self.loaded_header()
        slot = key_hash % self.hash_slot_num
        slot_value = self.slot(slot)
        if slot_value <= ixf.INVALID_INDEX or slot_value > h.index_count or h.index_count <= 1:
            return 0
        limit = self.expected_size   # the broker maps exactly this many bytes (short files zero-extended)
        nxt, seen, reads = slot_value, set(), 0
        while len(out) < max_num:
            if self.item_pos(nxt) + ixf.ITEM_SIZE > limit:   # the broker's buffer read throws: logged, partial
                if problems is not None:
                    problems.append(f"{self.path.name}: item {nxt} lies outside the file")
                break
            if nxt in seen:
                if problems is not None:
                    problems.append(f"{self.path.name}: slot {slot} chain loops at item {nxt} "
                                    f"(the broker's query would not return)")
                break
            seen.add(nxt)
            reads += 1
            item_hash, phy, time_diff, pre = self.item(nxt)
            if time_diff < 0:
                break
            time_read = h.begin_timestamp + time_diff * 1000
            if item_hash == key_hash and begin <= time_read <= end:
                out.append(phy)
            if pre <= ixf.INVALID_INDEX or pre > h.index_count or pre == nxt or time_read < begin:
                break
            nxt = pre
        return reads

    def is_time_matched(self, begin: int, end: int) -> bool:
        h = self.loaded_header()
        return ((begin < h.begin_timestamp and end > h.end_timestamp)
                or h.begin_timestamp <= begin <= h.end_timestamp
                or h.begin_timestamp <= end <= h.end_timestamp)


@dataclass
class OffsetQuery:
    """IndexService.queryOffset's answer plus what rmqctl saw on the way."""

    phys_offsets: list
    files_searched: list
    item_reads: int
    problems: list


def query_offset(files: list, topic: str, key: str, max_num: int, begin: int, end: int) -> OffsetQuery:
    """IndexService.queryOffset over open IndexFiles in name order: maxNum = min(max_num, 64); files
    newest -> oldest; a file is searched when isTimeMatched; stop after a file whose beginTimestamp <
    begin, or once maxNum offsets are collected. Hash collisions are NOT removed (the broker does not)."""
    max_num = min(max_num, ixf.MAX_MSGS_NUM_BATCH)
    kh = ixf.key_hash(topic, key)
    out, searched, reads, problems = [], [], 0, []
    for f in reversed(files):
        if f.is_time_matched(begin, end):
            searched.append(f.path.name)
            reads += f.select_phy_offsets(kh, max_num, begin, end, out, problems)
        if f.loaded_header().begin_timestamp < begin:
            break
        if len(out) >= max_num:
            break
    return OffsetQuery(out, searched, reads, problems)


# --- geometry taken from the file ------------------------------------------------------------------
# maxHashSlotNum / maxIndexNum are not stored in an index file, but its size (40 + 4*slots + 20*items) and
# content pin them down: the broker writes item n at 40 + 4*slots + 20*n from n = 1 (item 0 stays zero), item 1
# has no predecessor, every slot holds the newest item of its bucket (keyHash % slots) and a full file has
# indexCount == maxIndexNum.

def _plausible(pread, size: int, slots: int, items: int, hdr, samples: int = 32) -> bool:
    """Whether an index file reads consistently with (slots, items): items 1 and newest carry the header's
    begin/end offsets, chains stay in their bucket, every sampled item lies under its slot's head."""
    count = hdr.index_count
    if slots < 1 or items < max(count, 1) or ixf.file_size(slots, items) != size:
        return False
    if count <= 1:
        return True   # nothing written: any geometry of this size fits
    base = ixf.HEADER_SIZE + 4 * slots
    if pread(ixf.ITEM_SIZE, base) != b"\0" * ixf.ITEM_SIZE:
        return False
    step = max(1, (count - 1) // samples)
    for n in sorted({1, count - 1, *range(1, count, step)}):
        h, phy, _td, pre = ITEM.unpack(pread(ixf.ITEM_SIZE, base + ixf.ITEM_SIZE * n))
        if (n == 1 and phy != hdr.begin_phy_offset) or (n == count - 1 and phy != hdr.end_phy_offset):
            return False
        if h < 0 or pre < 0 or pre >= n or (n == 1 and pre != 0):
            return False
        head = SLOT.unpack(pread(4, ixf.HEADER_SIZE + 4 * (h % slots)))[0]
        if not n <= head < count or (n == count - 1 and head != n):
            return False
        if pre > 0 and ITEM.unpack(pread(ixf.ITEM_SIZE, base + ixf.ITEM_SIZE * pre))[0] % slots != h % slots:
            return False
    return True


def _search(fd, size: int, count: int, end_phy: int, chunk: int = 1 << 18) -> list:
    """Every (slots, items) whose item 0 is zero, item 1 has no predecessor and whose newest item holds the header's
    endPhyOffset and heads its slot.
    Candidates (slots = words - 5*items) are taken `chunk` at a time with two sequential reads each (bounded
    memory, ~15 MB), the slot lookups of the few survivors one by one."""
    import numpy as np

    words = (size - ixf.HEADER_SIZE) // 4
    newest = count - 1
    hi = words - 5 * count           # items >= count
    lo = hi % 5 or 5                 # slots >= 1, same residue
    out = []

    def read_words(w0, n):
        data = os.pread(fd, 4 * n, ixf.HEADER_SIZE + 4 * w0).ljust(4 * n, b"\0")
        return np.frombuffer(data, ">i4")

    for k0 in range(lo, hi + 1, 5 * chunk):
        ks = np.arange(k0, min(k0 + 5 * chunk, hi + 1), 5, dtype=np.int64)
        k1 = int(ks[-1])
        a = read_words(k0, k1 - k0 + 10)
        rel = ks - k0
        ok = np.ones(ks.size, bool)
        for j in range(5):
            ok &= a[rel + j] == 0          # item 0 is never written
        ok &= a[rel + 9] == 0              # item 1's preIndexNo
        b = read_words(k0 + 5 * newest, k1 - k0 + 3)
        h = b[rel].astype(np.int64)
        phy = (b[rel + 1].astype(np.int64) << 32) | (b[rel + 2].astype(np.int64) & 0xFFFFFFFF)
        ok &= (h >= 0) & (phy == end_phy)
        cand, hv = ks[ok], h[ok]
        slot_of = hv % cand
        heads = {int(x): SLOT.unpack(os.pread(fd, 4, ixf.HEADER_SIZE + 4 * int(x)).ljust(4, b"\0"))[0]
                 for x in np.unique(slot_of)}
        for k, sl in zip(cand.tolist(), slot_of.tolist()):
            if heads.get(sl) == newest:
                out.append((k, (words - k) // 5))
    return out


def solve_geometry(path, hints=()) -> tuple | None:
    """(slots, items) of an index file from its size and content; `hints` (candidate (slots, items) pairs, e.g.
    the broker config, the defaults, other files of the store) are tried first. None when the file cannot tell:
    too short, nothing written yet, or no geometry reads consistently (a damaged file)."""
    path = Path(path)
    size = path.stat().st_size
    if size < ixf.HEADER_SIZE + 4 + ixf.ITEM_SIZE or (size - ixf.HEADER_SIZE) % 4:
        return None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))   # never block on a FIFO
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None

        def pread(n, pos):
            return os.pread(fd, n, pos).ljust(n, b"\0")

        hdr = IndexHeader(*HEADER.unpack(pread(HEADER.size, 0)))
        count = hdr.index_count
        if count <= 1:
            return None
        words = (size - ixf.HEADER_SIZE) // 4
        full = (words - 5 * count, count)   # a full file: indexCount == maxIndexNum
        for cand in (*hints, full):
            if _plausible(pread, size, *cand, hdr):
                return tuple(cand)
        found = [c for c in _search(fd, size, count, hdr.end_phy_offset) if _plausible(pread, size, *c, hdr)]
        return found[0] if len(found) == 1 else None
    finally:
        os.close(fd)
