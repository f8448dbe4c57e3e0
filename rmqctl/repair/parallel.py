"""`-j N` for `rebuild` and `recover`: the commitlog walk split at record boundaries over worker
processes, merged into exactly what one sequential walk gives.

Split: every file the walk visits (vecdispatch.batches' rules: from `start`, up to `end`, on after a
BLANK, stop after any other end) is cut into ranges (range_bytes) at the nominal points of
resync.split_points, and each range owns the records that START in it: a worker resyncs at
the first valid record at or after the range's start (resync.first_record, the resync verify
uses), walks the chain with the batch kernel (scanvec.walk_file) and hands off at the first record
starting at or after the range's end -- or reports the Stop that ended the chain.

Worker: each batch goes through the very dispatch the sequential pass uses (batch_dispatch.dispatch_batch),
but into recorders instead of the builders: per (topic, queue) the consume-queue units it would append
(phys, size, tagsCode, queue offset, store time) and for the index the records and key hashes it would
insert, as compact numpy arrays -- nothing is written by a worker.

Merge (parent, in commitlog order): a range is taken only when it begins exactly where the walk of the
ranges before it handed off (a range lying wholly before the handoff is dropped; a range that resynced
elsewhere -- a valid-looking record inside another record -- makes the parent walk the rest of that file
itself from the handoff, exactly), so the walk never depends on where the file was cut. The recorded
units are then fed, range after range, into the same builders the sequential pass feeds
(QueueState.put_many per queue, IndexRebuilder.dispatch_many): the builders see the same units and index
items in the same order, only cut into other batches, and both are batch-invariant by contract
(tests/test_rebuild_vec.py proves put_many = put() unit by unit and dispatch_many = the scalar putKey in
random splits). Hence byte-identical files, the same plan and the same journal whatever -j is.

Memory: a worker holds one kernel window (scanvec.WINDOW) plus one range's recorded arrays (about 40 bytes
per consume-queue unit, 16 bytes per record plus 16 per index key); the parent keeps at most
2 x jobs range results in flight (submitted ahead of the one being merged), IN_FLIGHT_BYTES of commitlog in
all up to -j 8 (from -j 9 on ranges stay at MIN_RANGE: 64 MiB per job): with 1 KiB messages about 27 MB of
cq units (rebuild cq) and 25 MB of index keys (two a message), whatever the store size; the builders themselves
stream as in one process.

Not split (one process, as -j 1): stores with batch consume queues (a batch CQ unit needs the record's
properties at build time), --on-corruption quarantine's fillers (pass 2 of recover), the per-record
record streams (DLedger, Spark).
"""
from __future__ import annotations

import dataclasses
import mmap
import os
import sys
from dataclasses import dataclass, field

RANGE_BYTES = 256 * 1024 * 1024   # at most: each range the parent merges costs ~40 us per queue it meets
MIN_RANGE = 32 * 1024 * 1024
IN_FLIGHT_BYTES = 1 << 29          # the commitlog bytes whose results the parent holds at once (2 x jobs ranges)
SPLIT_ENV = "RMQCTL_SPLIT_BYTES"   # tests: tiny ranges, so records straddle many split points
CLOSE_WAIT = 60                    # seconds the ranges in flight get to finish when the walk ends early
INDEX_PIECE = 8192                 # records per IndexRebuilder.dispatch_many call in the merge
MIN_SLOT = 8 * 1024 * 1024         # a range's result travels through shared memory when it fits its slot


def range_bytes(total: int = 0, jobs: int = 1) -> int:
    """The bytes of a range: about a quarter of each worker's share of the `total` bytes walked (balance), within
    [MIN_RANGE, RANGE_BYTES] and IN_FLIGHT_BYTES over the ranges in flight. Measured on 2 cores, -j 2: 6.4 GB of
    1 KiB records in 32 queues took 1.7 s in 32 MiB ranges, 1.4 s in 256 MiB (-j 1: 1.55 s); 1.2 GB in 8192 queues
    (a range's units are appended per queue) 1.08 s in 128 MiB ranges, 1.29 s and a peak RSS of 265 MiB (recover:
    367) in whole files, as ranges of 512 KiB per queue made it (-j 1: 1.24 s)."""
    v = os.environ.get(SPLIT_ENV, "")
    if v.isdigit():
        return max(1, int(v))
    share = min(RANGE_BYTES, IN_FLIGHT_BYTES // (2 * max(1, jobs)), max(MIN_RANGE, total // (4 * max(1, jobs))))
    return max(MIN_RANGE, share)


@dataclass
class RangeResult:
    fi: int                      # index into the visited files
    lo: int
    hi: int | None               # None: to the end of the file
    begin: int | None            # file position of the first record walked (None: none in the range)
    handoff: int | None = None   # first record at/after hi (None: the chain ended in a Stop)
    stop: object = None
    records: int = 0
    last: int | None = None      # absolute offset of the last record walked
    payload: object = None


# -- what the sequential pass would do with each batch, recorded --------------------------------------

class _RecQueue:
    """Stands in for a QueueState in dispatch_batch's multi-dispatch path: records put_many's arguments."""

    max_phys = -1                # nothing known: put_many itself skips what the real queue already holds

    def __init__(self, key, entries: list):
        self.key, self.entries = key, entries

    def put_many(self, phys, size, tags, cq_offset, ts=None) -> None:
        import numpy as np

        if ts is None:
            ts = np.full(len(phys), -1, np.int64)
        self.entries.append(("queue", self.key, (phys, size, tags, cq_offset, ts)))


class _RecStates(dict):
    """dispatch_batch's `states`: a window's units for all its queues are recorded at once (record_window),
    and every queue asked for one by one gets a recorder; both in one list, in dispatch order."""

    def __init__(self):
        super().__init__()
        self.entries: list = []

    def get(self, key, default=None):
        q = dict.get(self, key)
        if q is None:
            q = self[key] = _RecQueue(key, self.entries)
        return q

    def record_window(self, bt, rows, keys, codes) -> None:
        """The rows' units (keys: topic id << 32 | queue id, in this process's Topics)."""
        from rmqctl.repair.batch_dispatch import window_entry

        self.entries.append(("window", window_entry(bt, rows, keys, codes)))


class _RecIndex:
    """Stands in for an IndexRebuilder in dispatch_batch: records dispatch_many's arguments."""

    def __init__(self):
        self.parts: list = []

    def dispatch_many(self, offsets, store_ts, item_row, item_hash) -> None:
        self.parts.append((offsets, store_ts, item_row, item_hash))


_PROC: dict = {}     # per process: (Topics, TopicFilter copy) of each sink


class Dispatch:
    """Consume-queue units and index items of the walked records, for `states` (None: no queues) and
    `rebuilder` (None: no index) -- dispatch_batch's arguments."""

    def __init__(self, store, states, rebuilder, idx_from, staging, *, topic=None, queue=None, skip=None):
        self.store, self.states, self.rebuilder, self.idx_from = store, states, rebuilder, idx_from
        self.staging, self.topic, self.queue, self.skip = staging, topic, queue, skip

    # worker side
    def begin(self):
        from rmqctl.repair import vecdispatch as VD
        from rmqctl.repair.topic_filter import TopicFilter

        key = (os.getpid(), id(self))
        if key not in _PROC:
            skip = TopicFilter(self.skip.known, self.skip.source) if self.skip is not None else None
            _PROC[key] = (VD.Topics(), skip)
        topics, skip = _PROC[key]
        acc = {"q": _RecStates() if self.states is not None else None,
               "i": _RecIndex() if self.rebuilder is not None else None,
               "skip0": dict(skip.counts) if skip is not None else None}
        return acc

    def feed(self, acc, b) -> None:
        from rmqctl.repair.batch_dispatch import dispatch_batch

        topics, skip = _PROC[(os.getpid(), id(self))]
        dispatch_batch(self.store, b, topics, acc["q"], acc["i"], self.idx_from, self.store.config.delay_levels,
                       self.staging, topic=self.topic, queue=self.queue, skip=skip)

    def result(self, acc):
        import numpy as np

        out = {"q": None, "i": None, "skip": None}
        if acc["q"] is not None:
            topics, _ = _PROC[(os.getpid(), id(self))]
            out["q"] = (list(topics.names), _joined_windows(acc["q"].entries))
        ix = acc["i"]
        if ix is not None and ix.parts:
            shift, rows = 0, []
            for p in ix.parts:
                rows.append(p[2] + shift)
                shift += len(p[0])
            out["i"] = (np.concatenate([p[0] for p in ix.parts]), np.concatenate([p[1] for p in ix.parts]),
                        np.concatenate(rows), np.concatenate([p[3] for p in ix.parts]))
        if acc["skip0"] is not None:
            _, skip = _PROC[(os.getpid(), id(self))]
            out["skip"] = {t: n - acc["skip0"].get(t, 0) for t, n in skip.counts.items() if n != acc["skip0"].get(t, 0)}
        return out

    # parent side
    def consume(self, out) -> None:
        import types

        from rmqctl.repair.batch_dispatch import new_queue_state, put_windows

        names, entries = out["q"] or ((), ())
        topics = types.SimpleNamespace(names=names)
        for e in entries:
            if e[0] == "windows":   # the same append as one process's dispatch_batch, for the range's windows
                put_windows(self.store, topics, self.states, e[1], self.staging)
                continue
            t, q = e[1]
            st = self.states.get((t, q))
            if st is None:
                st = self.states[(t, q)] = new_queue_state(self.store, self.staging, t, q)
            st.put_many(*e[2])
        if out["i"] is not None:
            self._index(*out["i"])
        for t, n in (out["skip"] or {}).items():
            self.skip.count(t, n)

    def _index(self, offs, ts, rows, hashes) -> None:
        """dispatch_many in pieces of INDEX_PIECE records: the numpy path sorts each call's items by slot (one call
        per 64 MiB range was 3x slower per item); the compiled path gathers the pieces into runs of its own
        (IndexFileBuilder, RUN_ITEMS)."""
        import numpy as np

        n = len(offs)
        for a in range(0, n, INDEX_PIECE):
            b = min(n, a + INDEX_PIECE)
            i, j = np.searchsorted(rows, [a, b], "left")
            self.rebuilder.dispatch_many(offs[a:b], ts[a:b], rows[i:j] - a, hashes[i:j])


def _joined_windows(entries: list) -> list:
    """Consecutive window entries gathered into one ("windows", [entry, ...]) of up to HeldWindows.HOLD_ROWS rows,
    as one process holds them: the parent appends each run in one piece (batch_dispatch.put_windows; each queue's
    units stay in order), and its temporary arrays stay bounded whatever the range's size."""
    from rmqctl.repair.batch_dispatch import HeldWindows

    out, run, rows = [], [], [0]

    def close():
        if run:
            out.append(("windows", list(run)))
            run.clear()
            rows[0] = 0

    for e in entries:
        if e[0] == "window":
            run.append(e[1])
            rows[0] += len(e[1][0])
            if rows[0] >= HeldWindows.HOLD_ROWS:
                close()
        else:
            close()
            out.append(e)
    close()
    return out


class Dup:
    """recover's DupInfo count over the walked records (merged in order)."""

    def __init__(self, dup):
        self.dup = dup

    def begin(self):
        from rmqctl.repair.dupinfo import DupInfo

        return DupInfo()

    def feed(self, acc, b) -> None:
        acc.feed(b)

    def result(self, acc):
        return acc

    def consume(self, d) -> None:
        m = self.dup
        m.has, m.missing, m.bad = m.has + d.has, m.missing + d.missing, m.bad + d.bad
        if m.first_missing is None:
            m.first_missing = d.first_missing
        if m.first_has is None:
            m.first_has = d.first_has


@dataclass
class Sinks:
    parts: list = field(default_factory=list)

    def begin(self):
        return [s.begin() for s in self.parts]

    def feed(self, acc, b) -> None:
        for s, a in zip(self.parts, acc):
            s.feed(a, b)

    def result(self, acc):
        return [s.result(a) for s, a in zip(self.parts, acc)]

    def consume(self, out) -> None:
        for s, o in zip(self.parts, out):
            s.consume(o)


# -- the split walk ---------------------------------------------------------------------------------

_SPEC: dict = {}     # set before the pool forks: the workers inherit it
STATS = {"rewalks": 0}   # ranges that resynced off the chain (the parent walked the rest of their file)


def _visited(store, files, start, end) -> list:
    """(file, first position, limit) of every file vecdispatch.batches(start, end) may visit, in order."""
    fsize = store.config.commitlog_file_size
    out = []
    for f in files:
        if end is not None and f.start >= end:
            break
        if start is not None and f.start + fsize <= start:
            continue
        pos = 0 if start is None or start <= f.start else start - f.start
        limit = min(f.size, fsize)
        if end is not None:
            limit = min(limit, end - f.start)
        out.append((f, pos, limit))
    return out


def _tasks(visited, nbytes: int):
    from rmqctl.resync import split_points

    for fi, (_f, pos, limit) in enumerate(visited):
        pieces = max(1, -(-limit // nbytes))
        nominal = split_points(limit, limit, pieces) if pieces > 1 else [0, None]
        pts = [pos] + [p for p in nominal[1:-1] if p > pos] + [None]
        for lo, hi in zip(pts, pts[1:]):
            yield fi, lo, hi, lo == pos


def _trim(b, k: int):
    import numpy as np

    return dataclasses.replace(b, **{fl.name: getattr(b, fl.name)[:k] for fl in dataclasses.fields(b)
                                     if isinstance(getattr(b, fl.name), np.ndarray)})


def _walk_range(task) -> RangeResult:
    """The records of visited file fi that start in [lo, hi), from the first valid one (lo itself when
    exact), fed to the sink; the chain's handoff or Stop."""
    import numpy as np

    from rmqctl.resync import first_record
    from rmqctl.repair.vecdispatch import window_size
    from rmqctl.scanvec import walk_file
    from rmqctl.store.commitlog import open_ro

    fi, lo, hi, exact = task[:4]
    spec = _SPEC
    f, _pos, limit = spec["visited"][fi]
    sink = spec["sink"]
    res = RangeResult(fi, lo, hi, None)
    with open_ro(f.path) as fd:
        res.begin = lo if exact else first_record(fd, f.start, f.size, lo, limit if hi is None else min(hi, limit),
                                                      limit)
        if res.begin is None:
            return res
        acc = sink.begin()
        window = window_size()
        buf = _PROC.get((os.getpid(), "buf", window))
        if buf is None:
            buf = _PROC[(os.getpid(), "buf", window)] = bytearray(window)    # one window buffer per process
        gen = walk_file(fd, f.start, f.size, res.begin, limit, path=str(f.path), buf=buf, window=window,
                        **spec["kw"])
        bound = None if hi is None else f.start + hi
        while True:
            try:
                b = next(gen)
            except StopIteration as e:
                res.stop = e.value
                break
            offs = b.offset
            if bound is not None and int(offs[-1]) >= bound:
                k = int(np.searchsorted(offs, bound, "left"))
                res.handoff = int(offs[k]) - f.start
                gen.close()
                if k:
                    b = _trim(b, k)
                    sink.feed(acc, b)
                    res.records += k
                    res.last = int(offs[k - 1])
                break
            sink.feed(acc, b)
            res.records += len(b)
            res.last = int(offs[-1])
        res.payload = sink.result(acc)
    if len(task) > 4:
        res.payload = _to_slot(res.payload, task[4])
    return res


# A range's result (tens of MB of numpy arrays) used to reach the parent pickled through the pool's pipe: copied
# four times, 64 KiB at a time by the parent's result thread, which competes with the merge for the interpreter
# (recover -j 2 on 6.4 GB: workers idle 40 % of the walk). Now its arrays are written once into a slot of shared
# memory mapped before the fork (pickle protocol 5's out-of-band buffers), and copied out once by the parent; only
# the small rest goes through the pipe. A result larger than its slot goes the old way.

def _slot_bytes(range_bytes: int) -> int:
    """A slot holds a quarter of its range's bytes: the arrays of records of 400 bytes or more (cq units, index
    keys, both for recover); ranges of smaller records go through the pipe."""
    return max(MIN_SLOT, range_bytes // 4)


def _to_slot(payload, slot: int):
    import pickle

    mm, size = _SPEC["slots"], _SPEC["slot_bytes"]
    bufs: list = []
    data = pickle.dumps(payload, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    if sum(r.nbytes for r in raws) > size:
        return payload
    at, spans = slot * size, []
    for r in raws:
        mm[at:at + r.nbytes] = r
        spans.append((at, r.nbytes))
        at += r.nbytes
    return _InSlot(data, spans)


@dataclass
class _InSlot:
    data: bytes
    spans: list


def _from_slot(payload, mm):
    """The parent's copy of a result _to_slot left in shared memory (the slot is free once this returns). Its pages
    stay for the next range: giving them back after each copy saved 20-40 MB of peak RSS on 6.4 GB at -j 2 and cost
    0.13-0.3 s (every range's pages faulted in and zeroed again); the ranges in flight bound them anyway."""
    import pickle

    if not isinstance(payload, _InSlot):
        return payload
    with memoryview(mm) as view:
        bufs = [bytearray(view[a:a + n]) for a, n in payload.spans]
    return pickle.loads(payload.data, buffers=bufs)


def splittable(store) -> bool:
    """False where -j falls back to one process: batch consume queues need each record's properties."""
    from rmqctl.repair import batchcq as BQ
    from rmqctl.store import batchcq as B

    return not BQ.batch_topics(store) and not store.queues(B.DIR)


def walk(store, files, start=None, end=None, *, jobs: int, sink, walk=None, progress=None, **kw) -> None:
    """vecdispatch.batches(store, files, start, end, walk=walk, progress=progress, **kw) with every batch
    fed to `sink` -- done by `jobs` processes over ranges, merged in commitlog order (module doc).
    walk.ends gets the same FileEnds as the sequential walk."""
    import collections
    import multiprocessing as mp

    import numpy  # noqa: F401  -- imported once here, inherited by the forked workers

    import rmqctl.scanvec  # noqa: F401
    from rmqctl.repair import batch_dispatch, vecdispatch  # noqa: F401
    from rmqctl.store.commitlog import FileEnd

    visited = _visited(store, files, start, end)
    if not visited:
        return
    rb = range_bytes(sum(limit - pos for _f, pos, limit in visited), jobs)
    vecdispatch.expect_walk(store, files, start, end, jobs, rb)   # auto: numba loaded here, before the fork
    nb = vecdispatch.rebuild_kernel()
    if nb is not None:
        nb.warm()           # the compiled dispatch loaded once, inherited by the workers
    global _SPEC
    tasks = _tasks(visited, rb)
    ahead = 2 * jobs
    slot_bytes = _slot_bytes(rb)
    try:
        slots = mmap.mmap(-1, ahead * slot_bytes)     # shared, inherited by the workers; only written pages count
    except OSError:     # no room to reserve it (strict overcommit): every result goes through the pipe
        slots = None
    free = list(range(ahead))
    _SPEC = {"visited": visited, "sink": sink, "kw": kw, "slots": slots, "slot_bytes": slot_bytes}
    pool = mp.get_context("fork").Pool(jobs)
    try:
        pending: collections.deque = collections.deque()

        def fill():
            while len(pending) < ahead:
                t = next(tasks, None)
                if t is None:
                    return
                slot = free.pop()
                pending.append((t, slot, pool.apply_async(_walk_range, ((*t, slot) if slots is not None else t,))))

        fill()
        cur, handoff, fend = -1, None, None
        while pending:
            t, slot, ar = pending.popleft()
            r = ar.get()
            r.payload = _from_slot(r.payload, slots)
            free.append(slot)
            fill()
            fi = t[0]
            if fi != cur:      # the previous file ended (its last range reaches its end): the next one starts
                cur, handoff = fi, visited[fi][1]
                fend = FileEnd(visited[fi][0], None, 0, None)
            if handoff is None or (r.hi is not None and handoff >= r.hi):
                _advance(progress, visited, r)
                continue
            if r.begin != handoff:
                r = _walk_range((fi, handoff, None, True))   # resynced elsewhere: the rest of the file, exactly
                STATS["rewalks"] += 1
            sink.consume(r.payload)
            _advance(progress, visited, r)
            fend.records += r.records
            if r.last is not None:
                fend.last_valid = r.last
            handoff = r.handoff
            if handoff is None:        # the chain ended in this file
                fend.stop = r.stop
                if _end_file(walk, fend):
                    break              # anything but a BLANK ends the walk (later ranges are never merged)
    finally:
        exc = sys.exc_info()[1]
        _close(pool, pending, wait=exc is None or isinstance(exc, Exception))   # Ctrl-C: at once
        _SPEC = {}
        if slots is not None:
            slots.close()
        for k in [k for k in _PROC if k[0] == os.getpid()]:
            del _PROC[k]


def _close(pool, pending, wait: bool) -> None:
    """Let the ranges still in flight finish before the pool goes: a worker killed while it sends its result
    holds the result queue's lock for ever, and terminate() then hangs. A worker that does not finish in
    CLOSE_WAIT seconds (dead, or stuck on a file) is killed as before."""
    import time

    give_up = time.monotonic() + (CLOSE_WAIT if wait else 0)
    for *_t, ar in pending:
        ar.wait(max(0.0, give_up - time.monotonic()))
    if all(ar.ready() for *_t, ar in pending):
        pool.close()
    else:
        pool.terminate()
    pool.join()


def _end_file(walk, fend) -> bool:
    """Record how the file ended; True when the walk stops there (anything but a BLANK)."""
    from rmqctl.scan import BLANK_RECORD

    if walk is not None:
        walk.ends.append(fend)
    return fend.stop is None or fend.stop.kind != BLANK_RECORD


def _advance(progress, visited, r) -> None:
    if progress:
        _f, _pos, limit = visited[r.fi]
        progress.advance((limit if r.hi is None else r.hi) - r.lo)


def last_record(walk) -> int | None:
    """The offset of the last record a walk saw (what the last batch's last offset is)."""
    for e in reversed(walk.ends):
        if e.last_valid is not None:
            return e.last_valid
    return None


def recover_sink(dup, spec) -> Sinks:
    """recover's pass 1: DUP_INFO counts, and pass 2's dispatch into the speculation's builders
    (rmqctl.repair.speculation) when it runs."""
    parts = [Dup(dup)]
    if spec is not None:
        parts.append(speculation_dispatch(spec))
    return Sinks(parts)


def speculation_dispatch(spec) -> Dispatch:
    """The dispatch into a speculation's builders (its queue states and index), as its own feed does."""
    return Dispatch(spec.store, spec.states, spec.rebuilder, spec.idx["from"] if spec.idx is not None else None,
                    spec.dir)


def dispatch_pass2(store, files, segments, scan_start, states, idx, ctx, cfg, jobs: int):
    """batch_dispatch.dispatch_pass2 without fillers (--on-corruption stop), each segment's walk split over
    `jobs` processes: the same builders, fed the same units in the same order."""
    from rmqctl.errors import ProblemsFound
    from rmqctl.repair.rebuild_index import IndexRebuilder
    from rmqctl.scan import BLANK_RECORD, END
    from rmqctl.store.commitlog import Walk

    rebuilder = None
    if idx is not None:
        (ctx.staging / "index").mkdir(parents=True, exist_ok=True)
        rebuilder = IndexRebuilder(ctx.staging / "index", cfg.hash_slot_num, cfg.index_num, idx["names"],
                                   prev=idx["prev"], prev_name=idx["prev_name"], skip_keys_at=idx["skip"])
    sink = Dispatch(store, states, rebuilder, idx["from"] if idx is not None else None, ctx.staging)
    try:
        for a, b in segments:
            w = Walk()
            walk(store, files, a, b, jobs=jobs, sink=sink, walk=w, check_crc=False)
            stop = w.ends[-1].stop if w.ends else None
            # records before the broker's start file are trusted, as in the sequential pass 2
            if a < scan_start and stop is not None and stop.offset < min(b, scan_start) \
                    and stop.kind not in (END, BLANK_RECORD):
                raise ProblemsFound(f"corrupt record before the broker's recovery start file ({stop.kind}: "
                                    f"{stop.detail}); run `rmqctl recover --from-start`", offset=stop.offset)
        built = rebuilder.finish() if rebuilder else []
    except BaseException:
        if rebuilder:
            rebuilder.abort()
        raise
    return states, built
