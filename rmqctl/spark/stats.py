"""`rmqctl stats`: per store/topic/queue figures from the commitlog, in ONE scan.

The messages are read_commitlog's scan (rmqctl.spark.api.frame) projected to STATS_COLUMNS, with a
sink: each task -- one commitlog range, see plan.py -- aggregates its own messages in numpy
(SplitAggregate): one partial row per (topic, queue, minute) -- counts, bytes, times, sizes, next
queue offset, a power-of-two size histogram -- and one HyperLogLog register set per (topic, queue)
for KEYS and for UNIQ_KEY. Only those partials reach the JVM (why not the messages: rmqctl.spark.api,
+54 % CPU measured). Spark merges the partials in the executors (groupBy/agg at minute grain, then
queues and the rate series; register sets by element-wise max in numpy per hashed partition, reduced
to their estimates there), so the driver receives only the final tables (spark_merge). The default
(non-Spark) engine runs the same aggregation over whole files in one process and merges in Python
(Merge): both give identical results.
Counts, bytes, times and offsets are exact; distinct key counts are HLL estimates (~1.6% at lgK 12).
"""
from __future__ import annotations

from rmqctl import fastjson

HIST_LO, HIST_HI = 6, 27          # buckets [2^b, 2^(b+1)) for b in 6..27 (records are >= 91 bytes)
NB = HIST_HI - HIST_LO + 1
MINUTE = 60_000
STATS_COLUMNS = ["store", "topic", "queue_id", "queue_offset", "size", "transaction_type", "store_timestamp",
                 "uniq_key", "keys", "inner_num", "multi_dispatch", "multi_queue_offset"]   # only what is read
MAX_POINTS = 600                  # per topic in the rate series: bucket width grows with the time span
HLL_LG = 12                       # 4096 registers: ~1.6% standard error
_NUM = ["messages", "bytes", "first_ts", "last_ts", "min_size", "max_size", "next_off"]
PARTIAL_COLUMNS = ([("store", "string"), ("topic", "string"), ("queue_id", "int"), ("minute", "bigint")]
                   + [(c, "int" if c.endswith("_size") else "bigint") for c in _NUM]
                   + [(f"h{b}", "bigint") for b in range(HIST_LO, HIST_HI + 1)]
                   + [("multi", "bigint")]   # multi-dispatched (LMQ) units: in the queue, not messages of it
                   + [("keys_hll", "binary"), ("uniq_hll", "binary")])


def hist_label(b: int) -> str:
    def h(n):
        for unit in ("B", "KiB", "MiB"):
            if n < 1024:
                return f"{n}{unit}"
            n //= 1024
        return f"{n}GiB"
    return f"{h(1 << b)}-{h(1 << (b + 1))}"


# --- HyperLogLog on numpy (deterministic: the same registers in every process) -----------------

def hash64(arr):
    """64-bit FNV-1a of each string's UTF-8 bytes, finished with murmur3's fmix64, vectorised over
    byte columns (strings are short: keys, message ids)."""
    import numpy as np

    n = len(arr)
    if n == 0:
        return np.empty(0, np.uint64)
    bufs = arr.buffers()
    offs = np.frombuffer(bufs[1], np.int32, n + 1, arr.offset)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None and bufs[2].size else np.zeros(1, np.uint8)
    start, ln = offs[:-1].astype(np.int64), np.diff(offs)
    h = np.full(n, 0xCBF29CE484222325, np.uint64)
    prime = np.uint64(0x100000001B3)
    with np.errstate(over="ignore"):
        for j in range(int(ln.max())):
            live = ln > j
            byte = data[np.minimum(start + j, len(data) - 1)].astype(np.uint64)
            h = np.where(live, (h ^ byte) * prime, h)
        h ^= ln.astype(np.uint64)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xC4CEB9FE1A85EC53)
        h ^= h >> np.uint64(33)
    return h


def hll_update(regs, group, hashes) -> None:
    """regs: uint8 (groups, 2^HLL_LG); group: row of regs per hash."""
    import numpy as np

    if not len(hashes):
        return
    idx = (hashes >> np.uint64(64 - HLL_LG)).astype(np.int64)
    rest = hashes & np.uint64((1 << (64 - HLL_LG)) - 1)
    _, exp = np.frexp(rest.astype(np.float64))          # exact: rest < 2^52
    rank = (64 - HLL_LG + 1 - exp).astype(np.uint8)      # leading zeros + 1 (53 when rest == 0)
    flat = regs.reshape(-1)
    np.maximum.at(flat, group * (1 << HLL_LG) + idx, rank)


def hll_estimate(regs) -> int:
    import numpy as np

    if regs is None:
        return 0
    m = regs.size
    est = 0.7213 / (1 + 1.079 / m) * m * m / float(np.sum(np.ldexp(1.0, -regs.astype(np.int64))))
    zeros = int(np.count_nonzero(regs == 0))
    if est <= 2.5 * m and zeros:
        est = m * np.log(m / zeros)
    return int(round(est))


# --- the per-task aggregation ---------------------------------------------------------------

class SplitAggregate:
    """Partials of one task's messages (RecordBatches with STATS_COLUMNS, commitlog order)."""

    def __init__(self):
        self.groups: dict = {}     # (topic, queue_id, minute) -> [messages, bytes, first, last, min, max, next, hist]
        self.hll: dict = {}        # (topic, queue_id) -> (keys regs, uniq regs)

    def add(self, rb) -> None:
        import numpy as np
        import pyarrow.compute as pc

        n = rb.num_rows
        if not n:
            return
        col = rb.column
        tenc = col(STATS_COLUMNS.index("topic")).dictionary_encode()
        topics = tenc.dictionary.to_pylist()
        tcode = tenc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        q = col(STATS_COLUMNS.index("queue_id")).to_numpy().astype(np.int64)
        size = col(STATS_COLUMNS.index("size")).to_numpy().astype(np.int64)
        ts = col(STATS_COLUMNS.index("store_timestamp")).to_numpy()
        qoff = col(STATS_COLUMNS.index("queue_offset")).to_numpy()
        minute = ts // MINUTE
        tx = col(STATS_COLUMNS.index("transaction_type"))
        dispatched = pc.is_in(tx, value_set=_dispatched_types()).to_numpy(zero_copy_only=False)
        inner = np.ones(n, np.int64)
        inn = col(STATS_COLUMNS.index("inner_num"))
        if inn.null_count != n:                       # batch messages: INNER_NUM, like a cast to long
            for i, v in enumerate(inn.to_pylist()):
                if v is not None:
                    inner[i] = _as_long(v, 1)
        w = np.ones(n, np.int64)         # 1: a message of the queue; 0: a multi-dispatched unit in it
        x = _multi_rows(col, n, dispatched, topics, tcode, q)
        if x is not None:
            # a target queue's unit counts for its offsets, times and sizes, not as a message (no double count)
            rows, xt, xq, xo = x
            topics = topics + [t for t in xt if t not in topics]
            tnum = {t: i for i, t in enumerate(topics)}
            tcode = np.concatenate((tcode, np.array([tnum[t] for t in xt], np.int64)))
            q = np.concatenate((q, xq))
            size, ts = np.concatenate((size, size[rows])), np.concatenate((ts, ts[rows]))
            qoff, inner = np.concatenate((qoff, xo)), np.concatenate((inner, np.ones(len(rows), np.int64)))
            dispatched = np.concatenate((dispatched, np.ones(len(rows), bool)))
            w = np.concatenate((w, np.zeros(len(rows), np.int64)))
            minute = ts // MINUTE
        m_all = len(w)
        nxt = np.where(dispatched, qoff + inner, np.iinfo(np.int64).min)
        _, e = np.frexp(size.astype(np.float64))
        bucket = np.clip(e - 1, HIST_LO, HIST_HI) - HIST_LO
        # group ids: (topic, queue, minute) folded into one small int (dense ranges in practice:
        # a window covers a few queues and minutes), else by sorting
        qc, nq = _dense(q)
        mc, nm = _dense(minute)
        key = (tcode * nq + qc) * nm + mc
        if len(topics) * nq * nm <= 1 << 22:
            present = np.bincount(key)
            uniq = np.flatnonzero(present)
            lut = np.zeros(len(present), np.int64)
            lut[uniq] = np.arange(len(uniq))
            inv = lut[key]
        else:
            uniq, inv = np.unique(key, return_inverse=True)
        G = len(uniq)
        cnt = np.bincount(inv, weights=w, minlength=G).astype(np.int64)
        nbytes = np.bincount(inv, weights=size * w, minlength=G)
        multi = np.bincount(inv, weights=1 - w, minlength=G).astype(np.int64)
        big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        first, last = np.full(G, big), np.full(G, small)
        smin, smax, nmax = np.full(G, big), np.full(G, small), np.full(G, small)
        np.minimum.at(first, inv, ts)
        np.maximum.at(last, inv, ts)
        np.minimum.at(smin, inv, size)
        np.maximum.at(smax, inv, size)
        np.maximum.at(nmax, inv, nxt)
        hist = np.bincount(inv * NB + bucket, weights=w, minlength=G * NB).astype(np.int64).reshape(G, NB)
        rep = np.zeros(G, np.int64)
        rep[inv[::-1]] = np.arange(m_all)[::-1]        # a row of each group, for its key values
        nil = np.iinfo(np.int64).min
        for g, r in enumerate(rep.tolist()):
            k = (topics[tcode[r]], int(q[r]), int(minute[r]))
            a = self.groups.get(k)
            if a is None:
                self.groups[k] = [int(cnt[g]), int(nbytes[g]), int(first[g]), int(last[g]), int(smin[g]),
                                  int(smax[g]), None if nmax[g] == nil else int(nmax[g]), hist[g].copy(),
                                  int(multi[g])]
            else:
                a[0] += int(cnt[g])
                a[1] += int(nbytes[g])
                a[2], a[3] = min(a[2], int(first[g])), max(a[3], int(last[g]))
                a[4], a[5] = min(a[4], int(smin[g])), max(a[5], int(smax[g]))
                if nmax[g] != nil:
                    a[6] = int(nmax[g]) if a[6] is None else max(a[6], int(nmax[g]))
                a[7] += hist[g]
                a[8] += int(multi[g])
        # HLL per (topic, queue): the messages' own keys
        tcode, qc = tcode[:n], qc[:n]
        tq = tcode * nq + qc
        tq_u, tq_inv = np.unique(tq, return_inverse=True)
        kregs = np.zeros((len(tq_u), 1 << HLL_LG), np.uint8)
        uregs = np.zeros((len(tq_u), 1 << HLL_LG), np.uint8)
        keys = col(STATS_COLUMNS.index("keys"))
        flat = keys.flatten()
        if len(flat):
            parent = pc.list_parent_indices(keys).to_numpy(zero_copy_only=False)
            hll_update(kregs, tq_inv[parent], hash64(flat))
        uk = col(STATS_COLUMNS.index("uniq_key"))
        if uk.null_count != n:
            has = uk.is_valid().to_numpy(zero_copy_only=False)
            hll_update(uregs, tq_inv[has], hash64(uk.filter(uk.is_valid())))
        first_row = np.zeros(len(tq_u), np.int64)
        first_row[tq_inv[::-1]] = np.arange(n)[::-1]
        for g, r in enumerate(first_row.tolist()):
            k = (topics[tcode[r]], int(q[r]))
            cur = self.hll.get(k)
            if cur is None:
                self.hll[k] = (kregs[g].copy(), uregs[g].copy())
            else:
                np.maximum(cur[0], kregs[g], out=cur[0])
                np.maximum(cur[1], uregs[g], out=cur[1])

    def partials(self, store: str):
        """The task's output: a RecordBatch with PARTIAL_COLUMNS (minute rows, then HLL rows)."""
        import pyarrow as pa

        from rmqctl.spark.batches import arrow_schema

        rows = {c: [] for c, _ in PARTIAL_COLUMNS}
        for (t, q, m), a in self.groups.items():
            for c, v in zip(("store", "topic", "queue_id", "minute", *_NUM), (store, t, q, m, *a[:7])):
                rows[c].append(v)
            for b in range(NB):
                rows[f"h{HIST_LO + b}"].append(int(a[7][b]))
            rows["multi"].append(int(a[8]) if len(a) > 8 else 0)
            rows["keys_hll"].append(None)
            rows["uniq_hll"].append(None)
        for (t, q), regs in self.hll.items():
            for c in rows:
                rows[c].append(None)
            rows["store"][-1], rows["topic"][-1], rows["queue_id"][-1] = store, t, q
            rows["keys_hll"][-1], rows["uniq_hll"][-1] = regs[0].tobytes(), regs[1].tobytes()
        schema = arrow_schema(PARTIAL_COLUMNS)
        return pa.RecordBatch.from_arrays([pa.array(rows[c], schema.field(c).type) for c, _ in PARTIAL_COLUMNS],
                                          schema=schema)


def _multi_rows(col, n, dispatched, topics, tcode, q):
    """Multi-dispatch (LMQ) targets of a batch's dispatched messages (rmqctl.dispatch.lmq_targets; %LMQ%
    names on queue 0, as with enableLmq): (row, target topic names, queue ids, queue offsets) or None."""
    import numpy as np

    from rmqctl import dispatch

    mo = col(STATS_COLUMNS.index("multi_queue_offset"))
    if mo.null_count == n:
        return None
    md = col(STATS_COLUMNS.index("multi_dispatch")).to_pylist()
    rows, xt, xq, xo = [], [], [], []
    for i, off in enumerate(mo.to_pylist()):
        if off is None or not dispatched[i]:
            continue
        props = {"INNER_MULTI_DISPATCH": md[i], "INNER_MULTI_QUEUE_OFFSET": off}
        for name, tq, to in dispatch.lmq_targets(topics[tcode[i]], int(q[i]), props, True):
            rows.append(i)
            xt.append(name)
            xq.append(tq)
            xo.append(to)
    if not rows:
        return None
    return np.array(rows, np.int64), xt, np.array(xq, np.int64), np.array(xo, np.int64)


def _dense(a):
    """(codes, range): a - min when the range is small, else ranks from np.unique."""
    import numpy as np

    lo, hi = int(a.min()), int(a.max())
    if hi - lo < 1 << 16:
        return a - lo, hi - lo + 1
    u, inv = np.unique(a, return_inverse=True)
    return inv, len(u)


def _dispatched_types():
    import pyarrow as pa

    return pa.array(["NOT", "COMMIT"], pa.string())


def _as_long(v: str, default: int) -> int:
    t = v.strip()
    try:
        n = int(t, 10)
    except ValueError:
        return default
    return n if -(1 << 63) <= n < (1 << 63) else default


def _merge_regs(a, b):
    import numpy as np

    return np.maximum(np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)).tobytes()


# --- merging: Spark, or in-process for the default engine ----------------------------------

class Merge:
    """Merges partial rows (PARTIAL_COLUMNS) from any number of tasks: minute rows by (store, topic,
    queue, minute), register sets by (store, topic, queue). Used by the driver, by the executors'
    pre-merge on big jobs, and by the default engine -- one merge, so every engine gives one result."""

    def __init__(self):
        self.minutes: dict = {}
        self.regs: dict = {}

    def add(self, rb) -> None:
        import numpy as np

        cols = {c: rb.column(i).to_pylist() for i, (c, _) in enumerate(PARTIAL_COLUMNS)
                if c not in ("keys_hll", "uniq_hll")}
        kh, uh = rb.column(len(PARTIAL_COLUMNS) - 2), rb.column(len(PARTIAL_COLUMNS) - 1)
        hcols = [cols[f"h{b}"] for b in range(HIST_LO, HIST_HI + 1)]
        for i in range(rb.num_rows):
            if cols["minute"][i] is None:
                k = (cols["store"][i], cols["topic"][i], cols["queue_id"][i])
                kr = np.frombuffer(kh[i].as_py(), np.uint8)
                ur = np.frombuffer(uh[i].as_py(), np.uint8)
                cur = self.regs.get(k)
                self.regs[k] = (kr, ur) if cur is None else (np.maximum(cur[0], kr), np.maximum(cur[1], ur))
                continue
            k = (cols["store"][i], cols["topic"][i], cols["queue_id"][i], cols["minute"][i])
            vals = [cols[c][i] for c in _NUM]
            hist = np.array([h[i] for h in hcols], np.int64)
            a = self.minutes.get(k)
            if a is None:
                self.minutes[k] = vals + [hist, cols["multi"][i] or 0]
                continue
            a[8] += cols["multi"][i] or 0
            a[0] += vals[0]
            a[1] += vals[1]
            a[2], a[3] = min(a[2], vals[2]), max(a[3], vals[3])
            a[4], a[5] = min(a[4], vals[4]), max(a[5], vals[5])
            if vals[6] is not None:
                a[6] = vals[6] if a[6] is None else max(a[6], vals[6])
            a[7] += hist

    def result(self, stores, offsets, scan) -> dict:
        import numpy as np

        queues: dict = {}
        for (st, t, q, _m), a in sorted(self.minutes.items()):
            d = queues.get((st, t, q))
            if d is None:
                queues[(st, t, q)] = {"store": st, "topic": t, "queue_id": q, **dict(zip(_NUM, a[:7])),
                                      **{f"h{HIST_LO + b}": int(a[7][b]) for b in range(NB)},
                                      "peak_per_minute": a[0], "multi": a[8]}
                continue
            d["multi"] += a[8]
            d["messages"] += a[0]
            d["bytes"] += a[1]
            d["first_ts"], d["last_ts"] = min(d["first_ts"], a[2]), max(d["last_ts"], a[3])
            d["min_size"], d["max_size"] = min(d["min_size"], a[4]), max(d["max_size"], a[5])
            if a[6] is not None:
                d["next_off"] = a[6] if d["next_off"] is None else max(d["next_off"], a[6])
            d["peak_per_minute"] = max(d["peak_per_minute"], a[0])
            for b in range(NB):
                d[f"h{HIST_LO + b}"] += int(a[7][b])
        qs = list(queues.values())
        width = _width(min((d["first_ts"] for d in qs), default=0), max((d["last_ts"] for d in qs), default=0))
        series: dict = {}
        for (_st, t, _q, m), a in self.minutes.items():
            k = (t, (m // width) * width)
            series[k] = series.get(k, 0) + a[0]
        topic_regs: dict = {}
        for d in qs:
            r = self.regs.get((d["store"], d["topic"], d["queue_id"]))
            d["distinct_keys"], d["distinct_uniq_keys"] = (0, 0) if r is None else (hll_estimate(r[0]),
                                                                                    hll_estimate(r[1]))
            if r is not None:
                k = (d["store"], d["topic"])
                t = topic_regs.get(k)
                topic_regs[k] = (r[0], r[1]) if t is None else (np.maximum(t[0], r[0]), np.maximum(t[1], r[1]))
        topic_est = {k: (hll_estimate(v[0]), hll_estimate(v[1])) for k, v in topic_regs.items()}
        return _result(stores, qs, [(t, x, n) for (t, x), n in series.items()], width, topic_est, offsets, scan)


def compute(ds, flt=None) -> dict:
    """Run the stats job over a Dataset; returns the JSON-ready result. The scan's tasks aggregate
    their messages into partial rows (SplitAggregate); Spark merges those in the executors with
    groupBy/agg (minute rows, then queues; the rate series; register sets element-wise by max, and
    their estimates); the driver receives only the final tables -- one row per queue, per topic's
    key estimates and per rate point -- never a row per minute or a register set."""
    from rmqctl.spark.dataset import ddl

    from rmqctl.spark.api import frame

    def action(ds):
        # read_commitlog's scan (api.frame), projected to what stats reads, each split's messages
        # aggregated in its own task (the sink) into partial rows (PARTIAL_COLUMNS), merged by Spark
        parts = frame(ds, flt, columns=STATS_COLUMNS, sink=lambda split: SplitAggregate(),
                      sink_schema=ddl(PARTIAL_COLUMNS))
        return spark_merge(parts)

    queues, topic_est, series, width = ds.run(action)
    return _result([i.ref.name for i in ds.stores], queues, series, width, topic_est,
                   [(i.ref.name, i.consumer_offsets, (i.ref.local or i.ref.uri) + "/config/consumerOffset.json")
                    for i in ds.stores],
                   {"bytes": ds.total_bytes, "splits": len(ds.plan.splits), "runs": ds.runs,
                    "stops": ds.last_summary})


_KEY = ("store", "topic", "queue_id")
_HIST = [f"h{b}" for b in range(HIST_LO, HIST_HI + 1)]


def spark_merge(parts):
    """The partial rows (a DataFrame with PARTIAL_COLUMNS) merged by Spark in ONE job: returns (queue
    rows as dicts with their distinct-key estimates, {(store, topic): (keys, uniq keys)} estimates,
    rate series [(topic, bucket minute, messages)], bucket width in minutes). The partials are
    persisted so the scan runs once for the branches that read them."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    parts = parts.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        minutes = (parts.where(F.col("minute").isNotNull())
                   .groupBy(*_KEY, "minute")
                   .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"),
                        F.min("first_ts").alias("first_ts"), F.max("last_ts").alias("last_ts"),
                        F.min("min_size").alias("min_size"), F.max("max_size").alias("max_size"),
                        F.max("next_off").alias("next_off"),     # max ignores nulls: null when none dispatched
                        *[F.sum(h).alias(h) for h in _HIST], F.sum("multi").alias("multi")))
        queues = (minutes.groupBy(*_KEY)
                  .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"),
                       F.min("first_ts").alias("first_ts"), F.max("last_ts").alias("last_ts"),
                       F.min("min_size").alias("min_size"), F.max("max_size").alias("max_size"),
                       F.max("next_off").alias("next_off"), *[F.sum(h).alias(h) for h in _HIST],
                       F.max("messages").alias("peak_per_minute"), F.sum("multi").alias("multi")))
        regs = parts.where(F.col("minute").isNull()).select(*_KEY, "keys_hll", "uniq_hll")
        q_est = _hll_groups(regs, list(_KEY))
        t_est = _hll_groups(regs.drop("queue_id"), ["store", "topic"])
        # the rate series' bucket width follows the whole time span (at most MAX_POINTS per topic)
        span = minutes.agg(F.min("first_ts").alias("lo"), F.max("last_ts").alias("hi"))
        span_min = F.greatest(F.lit(1), F.expr(f"(hi - lo) div {MINUTE}") + 1)          # as _width()
        width = F.greatest(F.lit(1), F.ceil(span_min / MAX_POINTS)).cast("bigint")
        series = (minutes.select("topic", "minute", "messages").crossJoin(F.broadcast(span.select(width.alias("w"))))
                  .groupBy("topic", (F.floor(F.col("minute") / F.col("w")) * F.col("w")).cast("bigint").alias("x"))
                  .agg(F.sum("messages").alias("messages"), F.first("w").alias("w")))
        out = (queues.join(q_est, list(_KEY), "left").withColumn("kind", F.lit("q"))
               .unionByName(t_est.withColumn("kind", F.lit("t")), allowMissingColumns=True)
               .unionByName(series.withColumn("kind", F.lit("s")), allowMissingColumns=True))
        rows = _collect(out)
    finally:
        parts.unpersist()
    qrows, topic_est, points, width = [], {}, [], 1
    for r in rows:
        kind = r.pop("kind")
        if kind == "q":
            r["distinct_keys"], r["distinct_uniq_keys"] = r.pop("keys_est") or 0, r.pop("uniq_est") or 0
            qrows.append(r)
        elif kind == "t":
            topic_est[(r["store"], r["topic"])] = (r["keys_est"], r["uniq_est"])
        else:
            points.append((r["topic"], r["x"], r["messages"]))
            width = r["w"]
    return qrows, topic_est, points, width


def _hll_groups(regs, keys):
    """Register sets merged by `keys` in the executors -- rows hashed to partitions by key, each
    partition merged in numpy (element-wise max, one Python call per partition, not per group) --
    and reduced to their estimates: columns keys + keys_est, uniq_est."""
    from pyspark.sql import functions as F

    out = ", ".join([f"{k} {'int' if k == 'queue_id' else 'string'}" for k in keys] + ["keys_est bigint",
                                                                                          "uniq_est bigint"])
    n = max(1, regs.sparkSession.sparkContext.defaultParallelism)
    return regs.repartition(n, *[F.col(k) for k in keys]).mapInArrow(_hll_merge_task(keys), out)


def _hll_merge_task(keys):
    def fn(batches):
        import numpy as np
        import pyarrow as pa

        state: dict = {}
        for rb in batches:
            n = rb.num_rows
            if not n:
                continue
            names = rb.schema.names
            kv = list(zip(*[rb.column(names.index(k)).to_pylist() for k in keys]))
            groups: dict = {}
            inv = np.fromiter((groups.setdefault(k, len(groups)) for k in kv), np.int64, n)
            order = np.argsort(inv, kind="stable")
            starts = np.flatnonzero(np.r_[True, np.diff(inv[order]) != 0])
            merged = [np.maximum.reduceat(_regs_matrix(rb.column(names.index(c)))[order], starts, axis=0)
                      for c in ("keys_hll", "uniq_hll")]
            for key, g in groups.items():
                kr, ur = merged[0][g], merged[1][g]
                cur = state.get(key)
                state[key] = (kr, ur) if cur is None else (np.maximum(cur[0], kr), np.maximum(cur[1], ur))
        cols = {k: [key[i] for key in state] for i, k in enumerate(keys)}
        est = [(hll_estimate(a), hll_estimate(b)) for a, b in state.values()]
        yield pa.RecordBatch.from_pydict(
            cols | {"keys_est": [e[0] for e in est], "uniq_est": [e[1] for e in est]},
            schema=pa.schema([(k, pa.int32() if k == "queue_id" else pa.string()) for k in keys]
                             + [("keys_est", pa.int64()), ("uniq_est", pa.int64())]))

    return fn


def _regs_matrix(col):
    """A binary column of register sets (each 2^HLL_LG bytes) as a (rows, 2^HLL_LG) uint8 matrix."""
    import numpy as np

    m, n = 1 << HLL_LG, len(col)
    offs = np.frombuffer(col.buffers()[1], np.int32)[col.offset:col.offset + n + 1]
    if col.null_count == 0 and offs[-1] - offs[0] == n * m and np.all(np.diff(offs) == m):
        return np.frombuffer(col.buffers()[2], np.uint8)[offs[0]:offs[-1]].reshape(n, m)
    return np.frombuffer(b"".join(v or bytes(m) for v in col.to_pylist()), np.uint8).reshape(n, m)


def _collect(df) -> list[dict]:
    """A (small, final) DataFrame's rows as dicts, through Arrow where pyspark has it."""
    if hasattr(df, "toArrow"):
        return df.toArrow().to_pylist()
    return [r.asDict() for r in df.collect()]


def compute_local(store_paths, flt=None, *, config=None, check_crc=True, names=None) -> dict:
    """The default (non-Spark) engine: the same task function over each store's whole files in this
    process (commitlog order, stopping like CommitLog.records(stop_at_bad=True)), the same Merge."""
    from rmqctl.spark.dataset import local_batches
    from rmqctl.spark.plan import parse_store_args
    from rmqctl.terminal import progress

    refs = parse_store_args([str(p) for p in store_paths]) if names is None else names
    merge = Merge()
    offsets, stops, nbytes = [], {}, 0
    for ref in refs:
        agg = SplitAggregate()
        scan: dict = {}
        with progress(_commitlog_bytes(ref.local), f"stats {ref.name}") as bar:
            for rb in local_batches(ref.local, name=ref.name, config=config, flt=flt, columns=STATS_COLUMNS,
                                    check_crc=check_crc, scan=scan, progress=bar.advance):
                agg.add(rb)
        merge.add(agg.partials(ref.name))
        stops[ref.name] = scan.get("summary", {})
        nbytes += scan.get("bytes", 0)
        offsets.append((ref.name, scan.get("consumer_offsets"), ref.local + "/config/consumerOffset.json"))
    return merge.result([r.name for r in refs], offsets, {"bytes": nbytes, "splits": 0, "runs": 1, "stops": stops})


def _commitlog_bytes(store_path) -> int:
    """Bytes of the commitlog files (the progress bar's total); 1 when unknown."""
    from pathlib import Path

    try:
        return sum(p.stat().st_size for p in (Path(store_path) / "commitlog").iterdir() if p.is_file()) or 1
    except OSError:
        return 1


def _width(lo: int, hi: int) -> int:
    span_min = max(1, (hi - lo) // MINUTE + 1)
    return max(1, -(-span_min // MAX_POINTS))       # minutes per point


def _result(stores, queues, series, width, topic_est, offsets, scan) -> dict:
    """The JSON-ready result from merged queue rows (dicts with their distinct-key estimates), the
    rate series [(topic, bucket minute, messages)] and {(store, topic): (keys, uniq keys)} estimates."""
    def hist_of(r):
        return {hist_label(b): r[f"h{b}"] for b in range(HIST_LO, HIST_HI + 1) if r[f"h{b}"]}

    def base(r, kest, uest):
        n = r["messages"] or 0
        return {"messages": n, "bytes": r["bytes"] or 0, "first_store_timestamp": r["first_ts"],
                "last_store_timestamp": r["last_ts"], "min_size": r["min_size"], "max_size": r["max_size"],
                "avg_size": round((r["bytes"] or 0) / n, 1) if n else None,
                "distinct_keys": kest, "distinct_uniq_keys": uest, "size_histogram": hist_of(r)}

    qrows = sorted(({"store": r["store"], "topic": r["topic"], "queue_id": r["queue_id"],
                     **base(r, r["distinct_keys"], r["distinct_uniq_keys"]),
                     "max_offset": r["next_off"], "peak_per_minute": r["peak_per_minute"],
                     **({"multi_dispatched_units": r["multi"]} if r.get("multi") else {})} for r in queues),
                   key=lambda d: (d["store"], d["topic"], d["queue_id"]))
    topics: dict = {}
    for r in queues:
        k = (r["store"], r["topic"])
        t = topics.get(k)
        if t is None:
            topics[k] = t = {"store": r["store"], "topic": r["topic"], "queues": 0, "messages": 0, "bytes": 0,
                             "first_ts": r["first_ts"], "last_ts": r["last_ts"], "min_size": r["min_size"],
                             "max_size": r["max_size"], **{f"h{b}": 0 for b in range(HIST_LO, HIST_HI + 1)}}
        t["queues"] += 1
        t["messages"] += r["messages"] or 0
        t["bytes"] += r["bytes"] or 0
        t["first_ts"], t["last_ts"] = min(t["first_ts"], r["first_ts"]), max(t["last_ts"], r["last_ts"])
        t["min_size"], t["max_size"] = min(t["min_size"], r["min_size"]), max(t["max_size"], r["max_size"])
        for b in range(HIST_LO, HIST_HI + 1):
            t[f"h{b}"] += r[f"h{b}"] or 0
    trows = sorted(({"store": t["store"], "topic": t["topic"], "queues": t["queues"],
                     **base(t, *topic_est.get((t["store"], t["topic"]), (0, 0)))}
                    for t in topics.values()), key=lambda d: (d["store"], -d["messages"], d["topic"]))
    rate: dict[str, list] = {}
    for topic, x, n in sorted(series):
        rate.setdefault(topic, []).append([x * MINUTE, n])
    max_off = {(q["store"], q["topic"], q["queue_id"]): q["max_offset"] for q in qrows}
    lag = []
    for name, raw, path in offsets:
        lag.extend(consumer_lag(name, raw, max_off, path=path))
    totals = {"messages": sum(t["messages"] for t in trows), "bytes": sum(t["bytes"] for t in trows),
              "topics": len({t["topic"] for t in trows}), "queues": len(qrows)}
    return {"stores": stores, "totals": totals, "topics": trows, "queues": qrows,
            "rate": {"bucket_ms": width * MINUTE, "unit": "messages per minute", "per_minute_divisor": width,
                     "series": rate},
            "consumer_lag": lag, "scan": scan}


def consumer_lag(store: str, raw: bytes | None, max_off: dict, path: str = "consumerOffset.json") -> list[dict]:
    """Per group/topic/queue: committed offset (config/consumerOffset.json) vs the queue's max offset
    (next queue offset after the last dispatched message in the commitlog)."""
    if not raw:
        return []
    doc = fastjson.loads(raw, path=path)
    table = doc.get("offsetTable") if isinstance(doc, dict) else None
    out = []
    for key, qmap in (table or {}).items():
        topic, sep, group = str(key).rpartition("@")
        if not sep or not isinstance(qmap, dict):
            continue
        for qid, off in qmap.items():
            try:
                qid = int(qid)
            except (TypeError, ValueError):
                continue
            mx = max_off.get((store, topic, qid))
            out.append({"store": store, "group": group, "topic": topic, "queue_id": qid,
                        "consumer_offset": off, "max_offset": mx,
                        "lag": None if mx is None or not isinstance(off, int) else max(0, mx - off)})
    out.sort(key=lambda d: (d["group"], d["topic"], d["queue_id"]))
    return out


# --- the picture: messages per minute per topic, self-contained (inline SVG, no network) ---------

_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]


def _esc(s: str) -> str:
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;"))


def chart_svg(result: dict, width: int = 960, height: int = 420, top: int = 9) -> str:
    """Line chart of messages per minute per topic (the `top` busiest topics, the rest as 'other')."""
    import datetime as dt

    rate = result["rate"]
    div = rate.get("per_minute_divisor", 1)
    series = rate["series"]
    order = sorted(series, key=lambda t: -sum(n for _, n in series[t]))
    shown, rest = order[:top], order[top:]
    lines = {t: {ts: n / div for ts, n in series[t]} for t in shown}
    if rest:
        other: dict = {}
        for t in rest:
            for ts, n in series[t]:
                other[ts] = other.get(ts, 0) + n / div
        lines["other"] = other
    xs = sorted({ts for pts in lines.values() for ts in pts})
    ml, mr, mt, mb = 70, 180, 30, 50
    pw, ph = width - ml - mr, height - mt - mb
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<text x="{ml}" y="18" font-size="14">Messages per minute per topic '
           f'({_esc(", ".join(result.get("stores", [])))})</text>']
    if not xs:
        out.append(f'<text x="{ml}" y="{mt + ph / 2}">no messages</text></svg>')
        return "\n".join(out)
    x0, x1 = xs[0], max(xs[-1], xs[0] + 1)
    ymax = max(max(p.values()) for p in lines.values()) or 1

    def X(ts):
        return ml + (ts - x0) / (x1 - x0) * pw

    def Y(v):
        return mt + ph - v / ymax * ph

    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    for i in range(5):
        v = ymax * i / 4
        out.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#eee"/>'
                   f'<text x="{ml - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:,.1f}</text>')
    for i in range(5):
        ts = x0 + (x1 - x0) * i / 4
        label = dt.datetime.fromtimestamp(ts / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
        out.append(f'<text x="{X(ts):.1f}" y="{mt + ph + 18}" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{ml + pw / 2}" y="{height - 8}" text-anchor="middle">store time (UTC), '
               f'{rate["bucket_ms"] // 60000} min per point</text>')
    for i, (topic, pts) in enumerate(lines.items()):
        c = _COLORS[i % len(_COLORS)]
        path = " ".join(f"{X(ts):.1f},{Y(pts.get(ts, 0)):.1f}" for ts in xs)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{path}">'
                   f'<title>{_esc(topic)}</title></polyline>')
        out.append(f'<rect x="{ml + pw + 12}" y="{mt + i * 18}" width="10" height="10" fill="{c}"/>'
                   f'<text x="{ml + pw + 26}" y="{mt + i * 18 + 9}">{_esc(topic[:24])}</text>')
    out.append("</svg>")
    return "\n".join(out)


def chart_html(result: dict) -> str:
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rmqctl stats</title></head>\n"
            "<body style=\"font-family:sans-serif\">\n" + chart_svg(result) + "\n</body></html>\n")
