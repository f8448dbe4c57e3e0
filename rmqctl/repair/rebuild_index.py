"""Build index files from commitlog records exactly as IndexService.buildIndex / IndexFile.putKey do.

Byte-level behaviour reproduced (docs/store-format.md, Index files):
* every dispatched record (any transaction type) first gets-or-creates the last file: a file is created
  when there is none or the last is full (indexCount >= maxIndexNum), with begin/end phy offset and
  timestamp copied from the previous file's end (only when > 0);
* a record is skipped when its offset < the last file's endPhyOffset; ROLLBACK records add no keys;
* keys: UNIQ_KEY, then KEYS split on ' ' (empty pieces skipped), each as `topic#key`; a key that does
  not fit moves to a new file (so one record's keys can straddle two files);
* putKey: timeDiff against the header's beginTimestamp *before* it is set by the first item (the
  first item of a non-first file is measured from the previous file's end; of the very first file it is 0),
  slot chain through preIndexNo, hashSlotCount counts slots that became non-empty;
* header as written by a clean flush (indexCount 1 in a file without items).

File names: the broker names a file by the wall clock at creation (yyyyMMddHHmmssSSS, local time).
A rebuild reuses the existing names in order; further files are named from the store timestamp of
the first record that made the broker create them (the broker's clock at that moment was at most
seconds later), bumped by 1 ms where needed so names stay strictly increasing. This keeps a rebuild
deterministic, so an interrupted run that is re-run converges on the same names.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from rmqctl import writers
from rmqctl.dispatch import index_keys
from rmqctl.formats import commitlog as cl
from rmqctl.formats import index as ixf
from rmqctl.store.files import write_all

HEADER = writers.INDEX_HEADER           # derived from formats.index.IndexHeader / IndexItem
ITEM = writers.INDEX_ITEM
INT_MAX = 2**31 - 1
_ITEM_BUF = 1 << 16   # numpy path: items buffered before they are written (the compiled path writes each run)
RUN_ITEMS = 1 << 18   # compiled path: items put in one run (6 MiB gathered; long runs can go by slot-table blocks)
_ITEM_DT = [("h", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("pre", ">i4")]


def index_name(ts_ms: int) -> str:
    """UtilAll.timeMillisToHumanString: yyyyMMddHHmmssSSS in the local time zone."""
    t = time.localtime(ts_ms // 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ts_ms % 1000:03d}"


def _name_after(prev: str | None, ts_ms: int) -> str:
    name = index_name(max(ts_ms, 0))
    if prev is not None and name <= prev:
        # strictly after the previous name: parse it back and add 1 ms
        base = time.mktime(time.strptime(prev[:14], "%Y%m%d%H%M%S"))
        name = index_name(int(base) * 1000 + int(prev[14:]) + 1)
    return name


_BATCH = 8192


def batch_hash(keys: list[str]) -> list[int]:
    """_jhash of many keys at once: ASCII keys grouped by length and hashed column by column with
    numpy (uint64 arithmetic wraps mod 2^64, so masking to 32 bits gives Java's int overflow)."""
    if len(keys) < 64:
        return [_jhash(k) for k in keys]
    import numpy as np

    out = [0] * len(keys)
    groups: dict[int, list[int]] = {}
    for i, k in enumerate(keys):
        if k.isascii():
            groups.setdefault(len(k), []).append(i)
        else:
            out[i] = _jhash(k)
    for n, idx in groups.items():
        raw = "".join(keys[i] for i in idx).encode("ascii")
        m = np.frombuffer(raw, dtype=np.uint8).reshape(len(idx), n).astype(np.uint64)
        h = np.zeros(len(idx), dtype=np.uint64)
        for j in range(n):
            h = (h * np.uint64(31) + m[:, j]) & np.uint64(0xFFFFFFFF)
        h = h.astype(np.int64)
        h = np.where(h >= 2**31, h - 2**32, h)
        h = np.abs(h)
        h = np.where(h >= 2**31, 0, h)
        for i, v in zip(idx, h.tolist()):
            out[i] = v
    return out


def _jhash(s: str) -> int:
    """abs(String.hashCode) with MIN_VALUE -> 0 (IndexFile.indexKeyHashMethod)."""
    if s.isascii():
        h = 0
        for c in s.encode():
            h = (31 * h + c) & 0xFFFFFFFF
        if h & 0x80000000:
            h -= 1 << 32
    else:
        h = ixf.java_string_hash(s)
    h = abs(h)
    return 0 if h >= (1 << 31) else h


class IndexFileBuilder:
    """One index file under construction, written to `path` (sparse: only touched pages)."""

    def __init__(self, path: Path, name: str, hash_slot_num: int, index_num: int,
                 prev_end_phy: int = 0, prev_end_ts: int = 0):
        import numpy as np

        self.path, self.name = Path(path), name
        self.S, self.N = hash_slot_num, index_num
        self.size = ixf.file_size(hash_slot_num, index_num)
        self.slots = np.zeros(hash_slot_num, np.int32)
        self.begin_ts = self.end_ts = prev_end_ts if prev_end_ts > 0 else 0
        self.begin_phy = self.end_phy = prev_end_phy if prev_end_phy > 0 else 0
        self.hash_slot_count = 0
        self.index_count = 1
        self._buf: list = []
        self._buf_items = 0
        self._buf_first = 1            # item number of the first buffered item
        self._run = None               # compiled path: items gathered but not put yet (h, phy, ts rows)
        self._run_items = self._run_n0 = self._run_b0 = 0
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self._fd, self.size)
        self._items_base = ixf.HEADER_SIZE + 4 * hash_slot_num

    @property
    def full(self) -> bool:
        return self.index_count >= self.N

    @property
    def room(self) -> int:
        return max(0, self.N - self.index_count)

    def put(self, key_hash: int, phy: int, store_ts: int) -> bool:
        import numpy as np

        if self.index_count >= self.N:
            return False
        self.put_many(np.asarray([key_hash], np.int64), np.asarray([phy], np.int64), np.asarray([store_ts], np.int64))
        return True

    def put_many(self, h, phy, ts) -> None:
        """IndexFile.putKey for len(h) <= room items in order (arrays of int64), vectorised: an item's
        preIndexNo is the previous item of its slot in this call, else the slot table's value; the
        slot ends with the last item's number; hashSlotCount counts items that found the slot empty."""
        import numpy as np

        k = len(h)
        if not k:
            return
        assert k <= self.room
        n0 = self.index_count
        from rmqctl.kernels import rebuild_kernel

        if rebuild_kernel() is not None:
            # the same putKey run compiled (rmqctl.kernels.rebuild_nb.put_keys), on runs gathered to RUN_ITEMS:
            # a long run visits the slot table block by block instead of at random
            if not self._run_items:
                self._run_n0, self._run_b0 = n0, self.begin_ts
            if n0 <= 1:
                self.begin_phy, self.begin_ts = int(phy[0]), int(ts[0])
            self._gather(h, phy, ts)
            self._counted(k, phy, ts)
            return
        self._put_run()              # items the compiled path gathered come first
        nums = n0 + np.arange(k, dtype=np.int64)
        slot = h % self.S
        order = np.argsort(slot, kind="stable")
        ss, ns = slot[order], nums[order]
        same = np.zeros(k, bool)
        same[1:] = ss[1:] == ss[:-1]
        tv = self.slots[ss].astype(np.int64)
        tv = np.where((tv <= 0) | (tv > ns), 0, tv)
        pre_sorted = np.where(same, np.concatenate([[0], ns[:-1]]), tv)
        pre = np.empty(k, np.int64)
        pre[order] = pre_sorted
        self.hash_slot_count += int((pre == 0).sum())
        last = np.ones(k, bool)
        last[:-1] = ss[1:] != ss[:-1]
        self.slots[ss[last]] = ns[last]
        # timeDiff against the header's beginTimestamp as it is when the item is put (set by item 1)
        begin = np.full(k, self.begin_ts, np.int64)
        if n0 <= 1:
            self.begin_phy, self.begin_ts = int(phy[0]), int(ts[0])
            begin[1:] = self.begin_ts
        d = ts - begin
        d = np.where(d < 0, 0, d // 1000)
        d = np.where(begin <= 0, 0, np.minimum(d, INT_MAX))
        items = np.empty(k, _ITEM_DT)
        items["h"], items["phy"], items["diff"], items["pre"] = h, phy, d, pre
        self._buf.append(items)
        self._after_put(k, phy, ts)

    def _counted(self, k, phy, ts) -> None:
        self.index_count += k
        self.end_phy, self.end_ts = int(phy[-1]), int(ts[-1])

    def _after_put(self, k, phy, ts) -> None:
        self._counted(k, phy, ts)
        self._buf_items += k
        if self._buf_items >= _ITEM_BUF:
            self._flush_items()

    def _gather(self, h, phy, ts) -> None:
        """Copy items into the run (made on first use), putting it whenever it fills."""
        import numpy as np

        if self._run is None:
            self._run = np.empty((3, min(RUN_ITEMS, self.N)), np.int64)
        cap = self._run.shape[1]
        a, k = 0, len(h)
        while a < k:
            m = self._run_items
            b = min(k, a + cap - m)
            self._run[0, m:m + b - a], self._run[1, m:m + b - a], self._run[2, m:m + b - a] = \
                h[a:b], phy[a:b], ts[a:b]
            self._run_items += b - a
            if self._run_items == cap:
                self._flush_items()
                self._run_n0, self._run_b0 = self._run_n0 + cap, self.begin_ts
            a = b

    def _put_run(self) -> None:
        m = self._run_items
        if not m:
            return
        from rmqctl.kernels import rebuild_nb

        r = self._run
        out, added = rebuild_nb.put_keys(self.slots, self.S, r[0, :m], r[1, :m], r[2, :m], self._run_n0, self._run_b0,
                                         self.begin_ts)
        self.hash_slot_count += added
        self._buf.append(out)
        self._buf_items += m
        self._run_items = 0

    def _flush_items(self) -> None:
        self._put_run()
        if self._buf:
            # written from the items' arrays themselves in gathered writes, not joined into a copy first
            import numpy as np

            pos = self._items_base + ixf.ITEM_SIZE * self._buf_first
            write_all(self._fd, [b.view(np.uint8) for b in self._buf], pos)
            self._buf_first += self._buf_items
            self._buf, self._buf_items = [], 0

    def header_bytes(self) -> bytes:
        return HEADER.pack(self.begin_ts, self.end_ts, self.begin_phy, self.end_phy,
                           self.hash_slot_count, self.index_count)

    def finish(self) -> None:
        self._flush_items()
        os.pwrite(self._fd, self.header_bytes(), 0)
        # skip all-zero stretches of the slot table (1 MiB each): the file is sparse and already zero there
        step = (1 << 20) // 4
        for a in range(0, len(self.slots), step):
            part = self.slots[a:a + step]
            if part.any():
                write_all(self._fd, [part.astype(">i4")], ixf.HEADER_SIZE + 4 * a)
        # no fsync here: a staged file is fsynced by the journal when it is installed (journal.ops.install_file);
        # one equal to the store's file is dropped unwritten, and a killed run rebuilds its staging anyway
        os.close(self._fd)
        self._fd = None
        self.slots = self._run = None

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class IndexRebuilder:
    """IndexService.buildIndex over a stream of records, writing files into `out_dir`.

    `names` are the file names to reuse, in order. `prev` is (end_phy, end_ts) of the last full file
    that is kept (or None to start from nothing), `skip_keys_at` = (phy, n): the record at phy already
    has its first n keys in the kept file (a record whose keys straddled the file boundary)."""

    def __init__(self, out_dir: Path, hash_slot_num: int, index_num: int, names: list[str],
                 prev: tuple[int, int] | None = None, prev_name: str | None = None,
                 skip_keys_at: tuple[int, int] | None = None):
        self.out_dir = Path(out_dir)
        self.S, self.N = hash_slot_num, index_num
        self.names = list(names)
        self.prev_name = prev_name
        self.prev = prev
        self.skip = skip_keys_at
        self.files: list[IndexFileBuilder] = []
        self.current: IndexFileBuilder | None = None
        self.items = 0
        self._pending: list = []

    def _new_file(self, store_ts: int) -> IndexFileBuilder:
        if self.current is not None:
            prev_phy, prev_ts = self.current.end_phy, self.current.end_ts
            self.current.finish()
        elif self.prev is not None:
            prev_phy, prev_ts = self.prev
        else:
            prev_phy = prev_ts = 0
        k = len(self.files)
        last = self.files[-1].name if self.files else self.prev_name
        if k < len(self.names) and (last is None or self.names[k] > last):
            name = self.names[k]
        else:
            name = _name_after(last, store_ts)
        f = IndexFileBuilder(self.out_dir / name, name, self.S, self.N, prev_phy, prev_ts)
        self.files.append(f)
        self.current = f
        return f

    def dispatch(self, offset: int, store_ts: int, sys_flag: int, topic: str, props: dict) -> None:
        """Queue one record; keys are hashed in vectorised batches, then put in order."""
        keys = index_keys(props) if (sys_flag & cl.TRANSACTION_MASK) != cl.TRANSACTION_ROLLBACK_TYPE else []
        self._pending.append((offset, store_ts, [f"{topic}#{k}" for k in keys]))
        if len(self._pending) >= _BATCH:
            self._drain()

    def _drain(self) -> None:
        import numpy as np

        pending, self._pending = self._pending, []
        if not pending:
            return
        hashes = batch_hash([k for p in pending for k in p[2]])
        rows = np.repeat(np.arange(len(pending), dtype=np.int64), [len(p[2]) for p in pending])
        self.dispatch_many(np.asarray([p[0] for p in pending], np.int64), np.asarray([p[1] for p in pending], np.int64),
                           rows, np.asarray(hashes, np.int64))

    def dispatch_many(self, offsets, store_ts, item_row, item_hash) -> None:
        """IndexService.buildIndex for records in commitlog order (offsets, store_ts: one per record)
        whose keys are given as items (item_row: the record, non-decreasing; item_hash: the key hash),
        ROLLBACK records contributing none. Per record the broker first gets-or-creates the last file
        (a new one when it is full, named and timed from this record), skips records before that
        file's endPhyOffset, then puts the keys, moving to a new file when one does not fit. Runs of
        items that fit in the current file are put with one vectorised call."""
        import numpy as np

        if self._pending:
            self._drain()
        n = len(offsets)
        if not n:
            return
        if self.skip is not None:
            hit = np.flatnonzero(offsets == self.skip[0])
            if len(hit):
                j = int(hit[0])
                mine = np.flatnonzero(item_row == j)
                if len(mine):
                    drop = mine[:self.skip[1]]
                    keep = np.ones(len(item_row), bool)
                    keep[drop] = False
                    item_row, item_hash = item_row[keep], item_hash[keep]
                    self.skip = None
        i, k, m = 0, 0, len(item_row)
        first = True
        while i < n:
            f = self.current
            if f is None or f.full:
                f = self._new_file(int(store_ts[i]))
            if first:
                # records before the file's endPhyOffset add nothing (only possible before the first put:
                # later files start at the previous file's end, and offsets only grow)
                first = False
                if m and f.end_phy > 0:
                    keep = offsets[item_row] >= f.end_phy
                    if not keep.all():
                        item_row, item_hash = item_row[keep], item_hash[keep]
                        m = len(item_row)
            if k >= m:
                break
            take = min(f.room, m - k)
            sl = slice(k, k + take)
            rr = item_row[sl]
            f.put_many(item_hash[sl], offsets[rr], store_ts[rr])
            self.items += take
            k += take
            if not f.full:
                break                       # every item fitted
            last_row = int(item_row[k - 1])
            if k < m and int(item_row[k]) == last_row:
                i = last_row                # the record's remaining keys go to a new file, timed by it
            else:
                i = last_row + 1            # the next record (with or without keys) opens the next file

    def finish(self) -> list[IndexFileBuilder]:
        self._drain()
        if self.current is not None:
            self.current.finish()
            self.current = None
        return self.files

    def abort(self) -> None:
        for f in self.files:
            f.abort()
