"""Partition planning on the driver, and the executor-side walk of one split. No pyspark here: the
split walk is plain Python over the record kernel, so the local engine and tests can run it too.

A plan is one split per commitlog file, cut into several byte ranges where a file holds more data
than `split_size`. Ranges are cut blindly (no driver-side read of the data); each task resyncs:

* the task of a file's first range starts at position 0 with no resync (exactly where the broker's
  reader starts);
* a later range's task starts at the first fully valid record (CRC, length formula and PHYSICALOFFSET
  equal to its position) whose start lies in [start, end), using the kernel's FileWalk;
* a task owns the records whose start offset lies in its range, and walks on past `end` to the first
  record starting there (its *landing*) -- records never span files, so nothing is lost at a cut.

Every task reports a SplitStatus (where it started, where it ended and why, how many records it
emitted). `resolve()` chains the statuses on the driver: the result equals one sequential walk
(CommitLog.records with stop_at_bad=True) iff each range started exactly where the previous one
landed and nothing was emitted past the first abnormal stop. When that does not hold (a corrupt
file: a range resynced past the bad record; or, adversarially, a fake record embedded in a body),
`resolve()` returns a corrected plan -- cut at the stop, or the file unsplit -- and the job reruns.
Clean stores, the normal case, run once.
"""
from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field, replace
from urllib.parse import urlparse

from rmqctl.scan import BLANK_RECORD, FileWalk, find_next_record

MB = 1024 * 1024
MIN_SPLIT = 16 * MB
DEFAULT_SPLIT = 256 * MB
CROSSED = "crossed"   # SplitStatus.kind: the walk passed the range end and landed on a valid record


@dataclass(frozen=True)
class StoreRef:
    """One store directory in a job. `uri` is what executors open; `local` is a driver-readable path."""

    name: str
    uri: str
    local: str | None


@dataclass(frozen=True)
class Split:
    id: int
    store: str            # StoreRef.name (the `store` column)
    path: str             # file path (pread mode) or URI (ranged mode: rmqctl.spark.remote)
    file_start: int       # absolute offset of the file (its name)
    file_size: int
    start: int            # range inside the file
    end: int
    first: bool           # the file's first range: start at `start`, no resync
    mode: str = "pread"   # "pread" (executors open the path) or "ranged" (byte ranges of a remote file)
    file_index: int = 0


@dataclass(frozen=True)
class SplitStatus:
    id: int
    first: int | None     # position of the first record the task owned (None: none)
    end_pos: int          # where the walk ended: landing position or stop position
    kind: str             # CROSSED, or the kernel's Stop.kind
    emitted: int          # records yielded (owned)
    detail: str = ""


@dataclass
class Plan:
    splits: list[Split]
    stores: list[StoreRef]
    notes: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(s.end - s.start for s in self.splits)


def store_name(path: str, taken: set) -> str:
    """The `store` column: NAME=PATH wins; else the directory name, or its parent's when it is
    called 'store' (.../broker-a/store -> broker-a); made unique with -2, -3..."""
    p = urlparse(path).path if "://" in path else path
    p = p.rstrip("/") or "/"
    base = posixpath.basename(p)
    if base == "store":
        base = posixpath.basename(posixpath.dirname(p)) or base
    base = _text_name(base)
    name, i = base or "store", 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    taken.add(name)
    return name


def _text_name(name: str) -> str:
    """A name as text Arrow and JSON can hold: bytes of a file name that are not UTF-8 (decoded by Python as
    surrogates) become \\xNN."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def parse_store_args(args) -> list[StoreRef]:
    """STORE arguments: PATH, file://PATH, hdfs://..., s3a://..., optionally prefixed NAME=."""
    refs, taken = [], set()
    for a in args:
        name = None
        head, sep, tail = a.partition("=")
        if sep and "/" not in head and ":" not in head and head:
            name, a = head, tail
        u = urlparse(a)
        if u.scheme in ("", "file"):
            local = os.path.abspath(u.path if u.scheme else a)
            uri = "file://" + local
        else:
            local, uri = None, a.rstrip("/")
        if name is None:
            name = store_name(local or uri, taken)
        else:
            name = _text_name(name)
            if name in taken:
                from rmqctl.errors import UsageError

                raise UsageError(f"store name {name!r} given twice")
            taken.add(name)
        refs.append(StoreRef(name, uri, local))
    return refs


def data_extent(fd: int, size: int, page: int = 4096) -> int:
    """A cheap estimate of where written data ends in a pre-allocated file (binary search on all-zero
    pages). Only used to balance ranges: the last range always runs to the file end, so an estimate
    that is wrong costs time, never records."""
    return zero_tail_start(lambda p: os.pread(fd, page, p), size, page)


def zero_tail_start(read_page, size: int, page: int = 4096) -> int:
    """Where the all-zero pages at the end of a file begin (binary search; read_page(pos) gives the page at
    pos): data_extent over any reader, local or remote (~log2(size/4 KiB) reads)."""
    def zero_page(p):
        d = read_page(p)
        return d.count(0) == len(d)

    if size <= page or not zero_page(size - page):
        return size
    lo, hi = 0, (size - 1) // page   # page hi is zero; find the first zero page after data
    while lo < hi:
        mid = (lo + hi) // 2
        if zero_page(mid * page):
            hi = mid
        else:
            lo = mid + 1
    return min(size, hi * page)


def plan_local(stores: list[StoreRef], files_by_store: dict, *, split_size: int | None = None,
               parallelism: int = 2, mode: str = "pread", extent=None) -> Plan:
    """files_by_store: name -> [(path, file_start, file_size)] in offset order. mode "ranged": the paths
    are remote URIs read by byte range (rmqctl.spark.remote), cut into ranges like pread; `extent(path,
    size)` estimates where the last file's data ends (rmqctl.spark.remote.extent)."""
    extents, total = {}, 0
    for ref in stores:
        for i, (path, _start, size) in enumerate(files_by_store[ref.name]):
            ext = size
            if mode == "pread" and i == len(files_by_store[ref.name]) - 1:
                try:
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        ext = data_extent(fd, size)
                    finally:
                        os.close(fd)
                except OSError:
                    ext = size
            elif mode == "ranged" and i == len(files_by_store[ref.name]) - 1 and extent is not None:
                ext = extent(path, size)
            extents[(ref.name, i)] = ext
            total += ext
    if split_size is None:
        # Enough ranges for every core to have ~3, not so small that resync/task overhead shows.
        split_size = min(DEFAULT_SPLIT, max(MIN_SPLIT, total // max(1, 3 * parallelism) + 1))
    splits: list[Split] = []
    for ref in stores:
        for i, (path, start, size) in enumerate(files_by_store[ref.name]):
            ext = extents[(ref.name, i)]
            n = 1 if mode not in ("pread", "ranged") else max(1, -(-ext // split_size))
            step = -(-ext // n) if ext else size
            cuts = [min(size, k * step) for k in range(n)] + [size]
            for k in range(n):
                splits.append(Split(len(splits), ref.name, path, start, size, cuts[k], cuts[k + 1], k == 0, mode, i))
    return Plan(splits, stores)


# --- executor side --------------------------------------------------------------------------

class BufferWalk(FileWalk):
    """The kernel's FileWalk over bytes already in memory (binaryfiles mode): same checks, same records."""

    def __init__(self, data, *a, **kw):
        super().__init__(-1, *a, **kw)
        self.data = memoryview(data)

    def _read(self, pos: int, n: int):
        chunk = self.data[pos:pos + n]
        self.bytes_read += len(chunk)
        return chunk


def _pread_source(fd):
    return lambda pos, n: os.pread(fd, n, pos)


def resync(read, make_walk, file_start: int, start: int, end: int) -> int | None:
    """First position in [start, end) where a fully valid record starts (PHYSICALOFFSET equal to the
    position, then the kernel's complete check). None when no record starts in the range."""
    return find_next_record(None, file_start, end, start - 1, end, read=read, make_walk=make_walk)


def walk_split(split: Split, opts: dict, data=None):
    """Generator of the Records a split owns; returns (StopIteration.value) its SplitStatus.
    opts: check_crc, check_phys, check_prop_crc. `data`: file bytes in binaryfiles mode."""
    kw = dict(check_crc=opts.get("check_crc", True), check_phys=opts.get("check_phys", True),
              check_prop_crc=opts.get("check_prop_crc", True), path=split.path)
    fd = None
    if data is None:
        fd = os.open(split.path, os.O_RDONLY)
        read = _pread_source(fd)

        def make_walk(pos, _fd=fd):
            return FileWalk(_fd, split.file_start, split.file_size, pos, split.file_size, **kw)
    else:
        mv = memoryview(data)
        read = lambda pos, n: mv[pos:pos + n]  # noqa: E731

        def make_walk(pos):
            return BufferWalk(data, split.file_start, len(data), pos, len(data), **kw)
    try:
        start = split.start if split.first else resync(read, make_walk, split.file_start, split.start, split.end)
        if start is None:
            return SplitStatus(split.id, None, split.end, CROSSED, 0, "no record starts in this range")
        walk = make_walk(start)
        n = 0
        for r in walk:
            if r.offset - split.file_start >= split.end:
                return SplitStatus(split.id, start, r.offset - split.file_start, CROSSED, n)
            n += 1
            yield r
        st = walk.stop
        return SplitStatus(split.id, start, st.pos, st.kind, n, st.detail)
    finally:
        if fd is not None:
            os.close(fd)


# --- driver side: chain the statuses --------------------------------------------------------

def resolve(plan: Plan, statuses: dict) -> tuple[bool, Plan | None, dict]:
    """(exact, corrected plan or None, per-store summary). exact=True means the records the tasks
    emitted are exactly one sequential stop_at_bad walk of each store. Otherwise run corrected plan."""
    by_store: dict[str, list[Split]] = {}
    for s in plan.splits:
        by_store.setdefault(s.store, []).append(s)
    missing = [s.id for s in plan.splits if s.id not in statuses]
    if missing:
        raise RuntimeError(f"no status from {len(missing)} Spark task(s) (partitions not fully consumed)")
    new_splits: list[Split] = []
    exact = True
    summary = {}
    for store, splits in by_store.items():
        files: dict[int, list[Split]] = {}
        for s in splits:
            files.setdefault(s.file_index, []).append(s)
        cut_store = False
        info = {"files": 0, "stop": None}
        for fi in sorted(files):
            fsplits = files[fi]
            if cut_store:
                if any(statuses[s.id].emitted for s in fsplits):
                    exact = False
                continue
            info["files"] += 1
            pos, stop, broken = 0, None, False
            keep: list[Split] = []
            for s in fsplits:
                st = statuses[s.id]
                if stop is not None:
                    if st.emitted:
                        exact = False      # records past the file's stop: drop this range
                    continue
                if pos >= s.end:           # the chain jumped over this range (a record bigger than it)
                    if st.first is not None:
                        broken = True
                        break
                    keep.append(s)
                    continue
                if st.first != pos:
                    broken = True
                    break
                keep.append(s)
                if st.kind == CROSSED:
                    pos = st.end_pos
                else:
                    stop = st      # the rerun's task stops at the same record: no need to clip
            if broken:
                # A range resynced somewhere the chain did not go: walk this file in one piece.
                exact = False
                first = fsplits[0]
                new_splits.append(replace(first, end=first.file_size, first=True))
                info["stop"] = "rerun"
                continue
            new_splits.extend(keep)
            if stop is None or stop.kind != BLANK_RECORD:
                # like CommitLog.records(stop_at_bad=True): only a BLANK continues at the next file
                if fi != max(files):
                    cut_store = True
                info["stop"] = None if stop is None else {"kind": stop.kind, "file_start": fsplits[0].file_start,
                                                          "offset": fsplits[0].file_start + stop.end_pos,
                                                          "detail": stop.detail}
        summary[store] = info
    if exact:
        return True, None, summary
    renum = [replace(s, id=i) for i, s in enumerate(new_splits)]
    return False, Plan(renum, plan.stores, plan.notes), summary
