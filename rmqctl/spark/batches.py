"""Messages as Arrow RecordBatches, built from the batch kernel (rmqctl.scanvec) a window at a time:
what Spark tasks hand to the JVM through mapInArrow, and what the default (non-Spark) engine of
stats/export consumes. No pyspark here.

Columns come straight from the kernel's numpy arrays. Strings (topic, properties names/values, tags,
keys, uniq_key) are byte ranges of the window cut with Arrow kernels, never Python objects per record;
hosts and msg ids are fixed-width bytes formatted once per distinct value (or hex-encoded with numpy).
Properties are parsed exactly like rmqctl.formats.properties.parse_properties (split on \\x02, the first
\\x01 splits name from value, empty names/values dropped, a later duplicate wins and moves last): on
valid UTF-8 splitting bytes equals splitting text, since both separators are ASCII. A window holding
invalid UTF-8, an IPv6 host or a SCHEDULE_TOPIC_XXXX record takes a per-record path for the affected
column only, with the reference functions -- rows are identical to dataset.message_row's.
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqctl import dispatch
from rmqctl.formats.commitlog import MESSAGE_MAGIC_CODE_V2, TRANSACTION_TYPE_NAMES
from rmqctl.formats.index import java_string_hash
from rmqctl.formats.properties import (INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET, INNER_NUM, KEYS, TAGS, UNIQ_KEY,
                                       parse_properties)
from rmqctl.render import offset_msg_id
from rmqctl.scan import FileWalk, host_text
from rmqctl.scanvec import WINDOW, walk_window
from rmqctl.spark.plan import CROSSED, Split, SplitStatus, resync

_SPARK_TYPES = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(), "boolean": pa.bool_(),
                "binary": pa.binary(), "array<string>": pa.list_(pa.string()),
                "map<string,string>": pa.map_(pa.string(), pa.string()),
                # Spark's own Arrow form of TimestampType (microseconds; the zone does not change the instant)
                "timestamp": pa.timestamp("us", tz="UTC"), "date": pa.date32()}
_DAY_MS = 86_400_000
_TX_NAMES = pa.array([TRANSACTION_TYPE_NAMES[i << 2] for i in range(4)], pa.string())
_MAGIC_NAMES = pa.array(["V1", "V2"], pa.string())
_HEX = np.frombuffer(b"0123456789ABCDEF", np.uint8)
_SCHED = dispatch.SCHEDULE_TOPIC.encode()
MIN_WINDOW = 256 * 1024   # near a range's end the window shrinks to this: little decoded past the cut


def arrow_schema(columns) -> pa.Schema:
    return pa.schema([pa.field(n, _SPARK_TYPES[t]) for n, t in columns])


def _spans(buf: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.BinaryArray:
    """Binary array of buf[starts[i]:ends[i]] for ordered, non-overlapping spans: one array over the
    whole buffer whose odd entries are the gaps between spans, then the even entries taken (C copy)."""
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    off = np.empty(2 * n, np.int32)
    off[0::2] = starts
    off[1::2] = ends
    whole = pa.BinaryArray.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(off), buf])
    return whole.take(pa.array(np.arange(0, 2 * n - 1, 2, dtype=np.int32)))


def _to_str(arr: pa.Array):
    """binary -> string when valid UTF-8, else None (the caller decodes with U+FFFD per record)."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        return None


def _gather(b: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    return b[at[:, None] + np.arange(width)]


def _by_record(values: pa.Array, recs: np.ndarray, idx: np.ndarray, n: int) -> pa.Array:
    """Column of n rows: values[idx[k]] at row recs[k], null elsewhere."""
    ix = np.full(n, -1, np.int64)
    ix[recs] = idx
    return values.take(pa.array(ix, mask=ix < 0))


class _Props:
    """The properties of a batch's records, parsed with array operations."""

    def __init__(self, raw: bytes, rel: np.ndarray, length: np.ndarray):
        n = self.n = len(rel)
        self._raw, self._rel, self._len = raw, rel, length
        # the records' properties, contiguous (one C copy); segments end at each \x02 and at each
        # record's end (a final segment without \x02 counts, like the broker)
        cat = _spans(pa.py_buffer(raw), rel, rel + length)
        buf = cat.buffers()[2] or pa.py_buffer(b"")
        base = int(np.frombuffer(cat.buffers()[1], np.int32, 1, cat.offset * 4)[0]) if n else 0
        rec_end = np.cumsum(length) + base
        pb = np.frombuffer(buf, np.uint8)
        e2 = np.flatnonzero(pb == 2)
        e1 = np.flatnonzero(pb == 1)
        # merge the two sorted boundary lists (record ends first on ties: a \x02 opening the next
        # record ends that record's empty segment)
        seg_end = np.empty(n + len(e2), np.int64)
        is_sep = np.ones(n + len(e2), bool)
        at_end = np.arange(n) + np.searchsorted(e2, rec_end, "left")
        seg_end[at_end] = rec_end
        is_sep[at_end] = False
        seg_end[is_sep] = e2
        seg_start = np.empty_like(seg_end)
        seg_start[0] = base
        seg_start[1:] = seg_end[:-1] + is_sep[:-1]
        seg_rec = np.cumsum(~is_sep) - (~is_sep)      # record ends seen before this segment
        k = np.searchsorted(e1, seg_start)
        sep = e1[np.minimum(k, len(e1) - 1)] if len(e1) else np.full(len(seg_start), -1)
        ok = (k < len(e1)) & (sep < seg_end) & (sep > seg_start) & (seg_end > sep + 1)
        s0, s1, s2, rec = seg_start[ok], sep[ok], seg_end[ok], seg_rec[ok]
        names = _spans(buf, s0, s1)
        enc = names.dictionary_encode()
        codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        dictionary = enc.dictionary
        nd = max(1, len(dictionary))
        key = rec * nd + codes
        if len(key) and np.bincount(key).max() > 1:
            # duplicates: the last occurrence wins and takes its position (dict pop + insert)
            _, first_rev = np.unique(key[::-1], return_index=True)
            keep = np.sort(len(key) - 1 - first_rev)
            s0, s1, s2, rec, codes = s0[keep], s1[keep], s2[keep], rec[keep], codes[keep]
            names = names.take(pa.array(keep))
        self.rec, self.codes = rec, codes
        self.name_index = {bytes(v): i for i, v in enumerate(dictionary.to_pylist())}
        self.names = _to_str(names)
        self.values = _to_str(_spans(buf, s1 + 1, s2))
        self.utf8 = self.names is not None and self.values is not None
        self._dicts = None

    def raw_of(self, i: int) -> bytes:
        a = int(self._rel[i])
        return self._raw[a:a + int(self._len[i])]

    def dicts(self) -> list[dict]:
        if self._dicts is None:
            self._dicts = [parse_properties(self.raw_of(i)) for i in range(self.n)]
        return self._dicts

    def where(self, name: str):
        """(records holding `name`, index of its value in self.values)."""
        i = self.name_index.get(name.encode())
        if i is None:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        idx = np.flatnonzero(self.codes == i)
        return self.rec[idx], idx

    def column(self, name: str) -> pa.Array:
        if not self.utf8:
            return pa.array([d.get(name) for d in self.dicts()], pa.string())
        recs, idx = self.where(name)
        return _by_record(self.values, recs, idx, self.n)

    def map(self) -> pa.Array:
        if not self.utf8:
            return pa.array([list(d.items()) for d in self.dicts()], pa.map_(pa.string(), pa.string()))
        counts = np.bincount(self.rec, minlength=self.n)
        off = np.zeros(self.n + 1, np.int32)
        np.cumsum(counts, out=off[1:])
        return pa.MapArray.from_arrays(pa.array(off), self.names, self.values)

    def keys(self) -> pa.Array:
        """KEYS split on single spaces, empty pieces dropped; [] when absent."""
        n = self.n
        if not self.utf8:
            out = []
            for d in self.dicts():
                k = d.get(KEYS)
                out.append([x for x in k.split(" ") if x] if k else [])
            return pa.array(out, pa.list_(pa.string()))
        recs, idx = self.where(KEYS)
        off = np.zeros(n + 1, np.int32)
        if not len(recs):
            return pa.ListArray.from_arrays(pa.array(off), pa.array([], pa.string()))
        parts = pc.split_pattern(self.values.take(pa.array(idx)), " ")
        flat = parts.flatten()
        parent = pc.list_parent_indices(parts).to_numpy(zero_copy_only=False)
        nonempty = pc.greater(pc.binary_length(flat), 0)
        ne = nonempty.to_numpy(zero_copy_only=False)
        np.cumsum(np.bincount(recs[parent[ne]], minlength=n), out=off[1:])
        return pa.ListArray.from_arrays(pa.array(off), flat.filter(nonempty))


def _hosts(b: np.ndarray, at: np.ndarray, v6: np.ndarray) -> pa.Array:
    """'a.b.c.d:port' per record; each distinct (address, port) formatted once."""
    n = len(at)
    if v6.any():
        cache, out = {}, []
        for a, six in zip(at.tolist(), v6.tolist()):
            w = 20 if six else 8
            k = b[a:a + w].tobytes()
            s = cache.get(k)
            if s is None:
                s = cache[k] = host_text(k[:w - 4], int.from_bytes(k[w - 4:], "big", signed=True))
            out.append(s)
        return pa.array(out, pa.string())
    if not n:
        return pa.array([], pa.string())
    g = _gather(b, at, 8).astype(np.uint64)
    key = np.zeros(n, np.uint64)
    for j in range(8):
        key = (key << np.uint64(8)) | g[:, j]
    uniq, inv = np.unique(key, return_inverse=True)
    texts = []
    for u in uniq.tolist():
        raw = u.to_bytes(8, "big")
        texts.append(host_text(raw[:4], int.from_bytes(raw[4:], "big", signed=True)))
    return pa.array(texts, pa.string()).take(pa.array(inv.astype(np.int32)))


def _msg_ids(bt, b, store_at, store6, phys) -> pa.Array:
    n = len(bt)
    if store6.any():
        out = []
        for a, six, ph in zip(store_at.tolist(), store6.tolist(), phys.tolist()):
            w = 16 if six else 4
            out.append(offset_msg_id(b[a:a + w].tobytes(), int.from_bytes(b[a + w:a + w + 4].tobytes(), "big",
                                                                            signed=True), ph))
        return pa.array(out, pa.string())
    m = np.empty((n, 16), np.uint8)
    m[:, :8] = _gather(b, store_at, 8)
    m[:, 8:] = np.asarray(phys, ">i8").view(np.uint8).reshape(n, 8)
    hx = np.empty((n, 32), np.uint8)
    hx[:, 0::2] = _HEX[m >> 4]
    hx[:, 1::2] = _HEX[m & 15]
    off = np.arange(0, 32 * n + 1, 32, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(off), pa.py_buffer(hx.tobytes()))


def _take(bt, keep: np.ndarray):
    """The kernel Batch restricted to `keep` (bool mask) -- per-array compress, no copy of raw."""
    from dataclasses import fields, replace

    return replace(bt, **{f.name: getattr(bt, f.name)[keep] for f in fields(bt)
                          if isinstance(getattr(bt, f.name), np.ndarray)})


def to_arrow(bt, store: str, delay_levels, *, crc_checked: bool, columns, flt=None,
             raw_body: bool = False) -> pa.RecordBatch | None:
    """One kernel Batch -> a RecordBatch with `columns` [(name, spark type)] (a subset/order of the
    messages schema), after the filter. None when no row remains."""
    if flt:
        keep = np.ones(len(bt), bool)
        if flt.queues:
            keep &= np.isin(bt.queue_id, np.fromiter(flt.queues, np.int64))
        if flt.begin is not None:
            keep &= bt.store_timestamp >= flt.begin
        if flt.end is not None:
            keep &= bt.store_timestamp < flt.end
        if flt.transaction_types:
            names = np.array([TRANSACTION_TYPE_NAMES[i << 2] in flt.transaction_types for i in range(4)])
            keep &= names[(bt.sys_flag & 0xC) >> 2]
        if not keep.all():
            bt = _take(bt, keep)
    n = len(bt)
    if not n:
        return None
    raw = bt.raw
    b = np.frombuffer(raw, np.uint8)
    rawbuf = pa.py_buffer(raw)
    cache: dict = {}

    def topic():
        t = cache.get("topic")
        if t is None:
            t = _to_str(_spans(rawbuf, bt.topic_rel, bt.topic_rel + bt.topic_length))
            if t is None:
                t = pa.array(bt.topics(), pa.string())
            cache["topic"] = t
        return t

    def props() -> _Props:
        p = cache.get("props")
        if p is None:
            p = cache["props"] = _Props(raw, bt.props_rel, bt.props_length)
        return p

    if flt and flt.topics:
        keep = pc.is_in(topic(), value_set=pa.array(sorted(flt.topics), pa.string())).to_numpy(zero_copy_only=False)
        if not keep.all():
            bt = _take(bt, keep)
            cache.clear()
            n = len(bt)
            if not n:
                return None
    if flt and flt.keys:
        p = props()
        want = pa.array(sorted(flt.keys), pa.string())
        keep = pc.fill_null(pc.is_in(p.column(UNIQ_KEY), value_set=want), False).to_numpy(zero_copy_only=False)
        ks = p.keys()
        hit = pc.is_in(ks.flatten(), value_set=want).to_numpy(zero_copy_only=False)
        if hit.any():
            parent = pc.list_parent_indices(ks).to_numpy(zero_copy_only=False)
            keep = keep.copy()
            keep[parent[hit]] = True
        if not keep.all():
            bt = _take(bt, keep)
            cache.clear()
            n = len(bt)
            if not n:
                return None

    P = bt.rel
    born6 = (bt.sys_flag & 0x10) != 0
    store6 = (bt.sys_flag & 0x20) != 0
    store_at = P + 48 + np.where(born6, 20, 8) + 8

    def tags_code():
        tags = props().column(TAGS)
        enc = tags.dictionary_encode()
        hashes = pa.array([java_string_hash(s) for s in enc.dictionary.to_pylist()], pa.int64())
        code = pc.fill_null(hashes.take(enc.indices), 0)
        sched = pc.equal(topic(), dispatch.SCHEDULE_TOPIC).to_numpy(zero_copy_only=False)
        if sched.any():                      # delay deadlines: the reference function, per record
            code = code.to_numpy(zero_copy_only=False).copy()
            p, ts = props(), bt.store_timestamp
            for i in np.flatnonzero(sched).tolist():
                code[i] = dispatch.tags_code(dispatch.SCHEDULE_TOPIC, parse_properties(p.raw_of(i)), int(ts[i]),
                                             delay_levels)
            code = pa.array(code, pa.int64())
        return code

    def bodies():
        """(body, body_note): compressed bodies (SYSFLAG 0x1) decompressed row by row (rmqctl.bodies)."""
        if "body" not in cache:
            arr = _spans(rawbuf, bt.body_rel, bt.body_rel + bt.body_length)
            notes = pa.nulls(n, pa.string())
            flagged = np.flatnonzero(bt.sys_flag & 1).tolist()
            if flagged and not raw_body:
                from rmqctl.bodies import body_of

                vals, texts = arr.to_pylist(), [None] * n
                for i in flagged:
                    got = body_of(vals[i], int(bt.sys_flag[i]))
                    vals[i], texts[i] = got.data, got.note
                arr, notes = pa.array(vals, pa.binary()), pa.array(texts, pa.string())
            cache["body"], cache["body_note"] = arr, notes
        return cache["body"], cache["body_note"]

    i32, i64 = pa.int32(), pa.int64()
    build = {
        "store": lambda: pc.fill_null(pa.nulls(n, pa.string()), store),
        "topic": topic,
        "queue_id": lambda: pa.array(bt.queue_id, i32),
        "queue_offset": lambda: pa.array(bt.queue_offset, i64),
        "physical_offset": lambda: pa.array(bt.offset, i64),
        "size": lambda: pa.array(bt.total_size, i32),
        "magic": lambda: _MAGIC_NAMES.take(pa.array((bt.magic_code == MESSAGE_MAGIC_CODE_V2).astype(np.int8))),
        "sys_flag": lambda: pa.array(bt.sys_flag, i32),
        "transaction_type": lambda: _TX_NAMES.take(pa.array(((bt.sys_flag & 0xC) >> 2).astype(np.int8))),
        "flag": lambda: pa.array(bt.flag, i32),
        "body_crc": lambda: pa.array(bt.body_crc, i32),
        "body_crc_ok": lambda: pa.array(np.ones(n, bool)) if crc_checked else pa.nulls(n, pa.bool_()),
        "tags": lambda: props().column(TAGS),
        "tags_code": tags_code,
        "keys": lambda: props().keys(),
        "uniq_key": lambda: props().column(UNIQ_KEY),
        "msg_id": lambda: _msg_ids(bt, b, store_at, store6, bt.physical_offset),
        "born_timestamp": lambda: pa.array(bt.born_timestamp, i64),
        "born_host": lambda: _hosts(b, P + 48, born6),
        "store_timestamp": lambda: pa.array(bt.store_timestamp, i64),
        "store_host": lambda: _hosts(b, store_at, store6),
        "born_time": lambda: pa.array(bt.born_timestamp.astype(np.int64) * 1000, _SPARK_TYPES["timestamp"]),
        "store_time": lambda: pa.array(bt.store_timestamp.astype(np.int64) * 1000, _SPARK_TYPES["timestamp"]),
        "date": lambda: pa.array((bt.store_timestamp.astype(np.int64) // _DAY_MS).astype(np.int32), pa.date32()),
        "reconsume_times": lambda: pa.array(bt.reconsume_times, i32),
        "prepared_transaction_offset": lambda: pa.array(bt.prepared_transaction_offset, i64),
        "body_length": lambda: pa.array(bt.body_length, i32),
        "properties": lambda: props().map(),
        "inner_num": lambda: props().column(INNER_NUM),
        "multi_dispatch": lambda: props().column(INNER_MULTI_DISPATCH),
        "multi_queue_offset": lambda: props().column(INNER_MULTI_QUEUE_OFFSET),
        "body": lambda: bodies()[0],
        "body_note": lambda: bodies()[1],
    }
    arrays = [build[name]() for name, _ in columns]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(columns))


def walk_split_batches(split: Split, opts: dict, fd: int):
    """Generator of the kernel Batches a split owns (same ownership/resync rules as plan.walk_split);
    returns its SplitStatus. Near the range end the window shrinks, so little is decoded past the cut."""
    kw = dict(check_crc=opts.get("check_crc", True), check_phys=opts.get("check_phys", True),
              check_prop_crc=opts.get("check_prop_crc", True), path=split.path)
    fs, size = split.file_start, split.file_size

    def make_walk(pos):
        return FileWalk(fd, fs, size, pos, size, **kw)

    if split.first:
        start = split.start
    else:
        start = resync(lambda pos, k: os.pread(fd, k, pos), make_walk, fs, split.start, split.end)
    if start is None:
        return SplitStatus(split.id, None, split.end, CROSSED, 0, "no record starts in this range")
    pos, n, need = start, 0, 0
    window = opts.get("window", WINDOW)
    while True:
        left = split.end - pos
        win = window if left >= window else max(MIN_WINDOW, left + MIN_WINDOW // 4)
        win = max(win, need)
        bt, nxt, stop = walk_window(fd, fs, size, pos, size, window=win, **kw)
        if len(bt):
            at = bt.win_pos + bt.rel
            if at[-1] >= split.end:
                k = int(np.searchsorted(at, split.end))
                if k:
                    n += k
                    yield _take(bt, np.arange(len(bt)) < k)
                return SplitStatus(split.id, start, int(at[k]), CROSSED, n)
            n += len(bt)
            yield bt
        if stop is not None:
            return SplitStatus(split.id, start, stop.pos, stop.kind, n, stop.detail)
        if nxt >= split.end:
            # the next valid record (validated by the kernel) starts at or past the end: the landing
            return SplitStatus(split.id, start, nxt, CROSSED, n)
        need = int.from_bytes(os.pread(fd, 4, nxt), "big", signed=True) if nxt == pos else 0
        pos = nxt


def split_arrow(split: Split, opts: dict, cfg: dict, columns, flt=None, fd: int | None = None):
    """RecordBatches of one split's messages (filtered); returns (StopIteration.value) (SplitStatus, rows).
    cfg["from_offset"], when given, drops the records before that commitlog offset (incremental export)."""
    own = fd is None
    if own:
        fd = os.open(split.path, os.O_RDONLY)
    rows = 0
    try:
        gen = walk_split_batches(split, opts, fd)
        crc = opts.get("check_crc", True)
        low = cfg.get("from_offset") or 0
        while True:
            try:
                bt = next(gen)
            except StopIteration as e:
                return e.value, rows
            if low and int(bt.offset[0]) < low:
                if int(bt.offset[-1]) < low:
                    continue
                bt = _take(bt, bt.offset >= low)
            rb = to_arrow(bt, split.store, cfg["delay_levels"], crc_checked=crc, columns=columns, flt=flt,
                          raw_body=opts.get("body") == "raw")
            if rb is not None:
                rows += rb.num_rows
                yield rb
    finally:
        if own:
            os.close(fd)
