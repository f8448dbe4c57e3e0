"""Salvage: the messages each consumer group has not consumed yet (`rmqctl export STORE --unconsumed`).

Which queues: every ``topic@group`` entry of the consumerOffset.json the broker would load (with its .bak
fallback), for every queue of that topic (the table's and the store's consume-queue directories), plus the
retry topic ``%RETRY%<group>`` of every subscription group (subscriptionGroup.json) that has no entry for
it. A queue the group has no committed offset for starts at the queue's min (``no_offset="min"``, what a
consumer of a retry topic does) or is skipped (``"skip"``).

What a row is: the message at each queue offset from the committed offset to the queue's max, as the
broker's ``getMessage`` serves it from that offset. The local engine reads the consume queue unit for each
offset and checks the message it points at (same topic/queue, QUEUEOFFSET, size); offsets whose unit is
missing or wrong, queues without a consume queue, and messages written after the last dispatched one (a
crash store) are placed by one commitlog pass on QUEUEOFFSET, as `rmqctl query` falls back. Every queue
gets a summary: rows placed, from where, and why any offset could not be placed.

The Spark engine reads the whole commitlog as the export dataset and keeps the rows of each queue from
the group's offset on (QUEUEOFFSET; not PREPARED/ROLLBACK); on an intact store both give the same rows.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field

from rmqctl.dispatch import goes_to_consume_queue, lmq_on, lmq_targets, multi_dispatch_on
from rmqctl.scan import is_zero

RETRY_PREFIX = "%RETRY%"
NO_OFFSET = ("min", "skip")
SRC_CQ, SRC_CL = "consume queue", "commitlog"


@dataclass
class Target:
    group: str
    topic: str
    queue_id: int
    committed: int | None


@dataclass
class QueueResult:
    group: str
    topic: str
    queue_id: int
    committed: int | None
    start: int | None = None        # first offset exported
    max_offset: int | None = None   # the queue's max (next offset to be written)
    rows: int = 0
    from_cq: int = 0
    from_commitlog: int = 0
    not_placed: int = 0
    reasons: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"group": self.group, "topic": self.topic, "queue_id": self.queue_id, "committed": self.committed,
                "start": self.start, "max_offset": self.max_offset, "rows": self.rows,
                "from_consume_queue": self.from_cq, "from_commitlog": self.from_commitlog,
                "not_placed": self.not_placed, "reasons": self.reasons}


# --- which queues -----------------------------------------------------------------------------------------
def targets(store, group: str | None = None, no_offset: str = "min", notes: list | None = None) -> list[Target]:
    """The (group, topic, queue, committed offset) to salvage, sorted."""
    from rmqctl.config import offsets as OF
    from rmqctl.config.files import load

    notes = notes if notes is not None else []
    table: dict = {}
    from rmqctl.engine_records import rocksdb_document

    doc = rocksdb_document(store.root, "consumerOffset")   # storeType=defaultRocksDB: config/consumerOffsets/
    if doc is None:
        lo = load(store.root, "consumerOffset")
        for n in lo.notes:
            notes.append(f"consumerOffset.json: {n}")
        doc = lo.doc
    if isinstance(doc, dict):
        for r in OF.rows(doc):
            table.setdefault((r.group, r.topic), {})[r.queue] = r.offset
    groups = []
    gdoc = rocksdb_document(store.root, "subscriptionGroup")
    if gdoc is None:
        gdoc = load(store.root, "subscriptionGroup").doc
    if isinstance(gdoc, dict) and isinstance(gdoc.get("subscriptionGroupTable"), dict):
        groups = list(gdoc["subscriptionGroupTable"])
    have: dict = {}
    for t, q in store.queues():
        have.setdefault(t, set()).add(q)
    for g in groups:
        retry = RETRY_PREFIX + g
        if retry in have:
            table.setdefault((g, retry), {})
    out = []
    for (g, t), qs in sorted(table.items()):
        if group is not None and g != group:
            continue
        for q in sorted(set(qs) | have.get(t, set())):
            c = qs.get(q)
            out.append(Target(g, t, q, c))
    if group is not None and not out:
        notes.append(f"group {group} has no committed offset in consumerOffset.json and no retry topic here")
    return out


# --- local engine -------------------------------------------------------------------------------------------
def _cq_tail_dirty(v) -> bool:
    """Whether the consume queue has bytes past the position the broker's recovery keeps (a damaged unit, not
    just the zeros after the last one): then messages after that point must come from the commitlog."""
    from rmqctl.store.files import FileQueue

    if not v.files or getattr(v, "rocksdb", False):
        return False
    last = v.files[-1]
    fq = FileQueue.scan(last.path.parent)
    if any(f.start > last.start for f in fq.files):
        return True
    fd = os.open(last.path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return last.wrote < size and not is_zero(fd, last.wrote, size)
    finally:
        os.close(fd)


def run_local(store, tgts: list[Target], emit, *, no_offset: str = "min", body: bool = True,
              store_name: str = "store") -> list[QueueResult]:
    """Call emit(row) for each salvaged message (the export messages row with the group after the store);
    returns one QueueResult per target, in target order."""
    from rmqctl.query import QueryEngine
    from rmqctl.spark.dataset import message_row
    from rmqctl.store.timesearch import load_queue

    delay = store.config.delay_levels
    results = [QueueResult(t.group, t.topic, t.queue_id, t.committed) for t in tgts]
    cl_min = store.commitlog.min_offset if store.commitlog.files else 0
    scan_from = None            # commitlog offset the fallback pass starts at (None: no pass needed)
    frontier = 0                # end of the last dispatched message over every consume queue
    views = {}
    rocks = None
    if store.engine == "rocksdb":       # storeType=defaultRocksDB: the consume queues in RocksDB
        from rmqctl.engine_records import RocksQueues

        rocks = RocksQueues(store)
    for topic, qid in store.queues():
        v = rocks.view(topic, qid) if rocks is not None else load_queue(store, topic, qid)
        views[(topic, qid)] = v
        if v.max_offset > 0:
            u = v.unit_at(v.max_offset - 1)
            if u and u[0] >= 0 and u[1] > 0:
                frontier = max(frontier, u[0] + u[1])
    # per queue: offsets to place from the commitlog, and from which offset on every later one is wanted
    wanted: dict = {}           # (topic, qid) -> {"from": tail start, "missing": {offset: [result idx]}}
    with QueryEngine(store) as q:
        for i, (t, res) in enumerate(zip(tgts, results)):
            if t.committed is None and no_offset == "skip":
                res.reasons.append("no committed offset: skipped (--no-offset skip)")
                continue
            v = views.get((t.topic, t.queue_id))
            if v is None or not v.files:
                start = t.committed if t.committed is not None else 0
                res.start = start
                w = wanted.setdefault((t.topic, t.queue_id), {"tails": [], "missing": {}})
                w["tails"].append((start, i))
                scan_from = cl_min
                res.reasons.append("no consume queue: placed from the commitlog")
                continue
            lo, hi = v.min_offset, v.max_offset
            start = lo if t.committed is None else t.committed
            if start < lo:
                res.reasons.append(f"offsets {start}..{lo - 1} are below the queue's min (expired)")
                start = lo
            res.start = start
            res.max_offset = hi
            w = wanted.setdefault((t.topic, t.queue_id), {"tails": [], "missing": {}})
            for off in range(start, hi):
                u = v.unit_at(off)
                r = None
                if u is not None and u[0] >= 0 and u[1] > 0:
                    r, _ = q.read_at(u[0], u[1])
                    if r is not None and (r.total_size != u[1] or q.queue_offset_in(r, t.topic, t.queue_id) != off):
                        r = None
                if r is None:
                    w["missing"].setdefault(off, []).append(i)
                    scan_from = cl_min
                    continue
                row = message_row(r, store_name, delay, body)
                emit(row[:1] + (t.group,) + row[1:])
                res.rows += 1
                res.from_cq += 1
            w["tails"].append((max(start, hi), i))
            if _cq_tail_dirty(v):
                scan_from = cl_min
            elif scan_from is None or frontier < scan_from:
                scan_from = frontier if scan_from is None else min(scan_from, frontier)
        for v in views.values():
            v.close()
        if rocks is not None:
            rocks.close()
        found: dict = {}        # (topic, qid, offset) seen in the pass (first one wins, like a rebuild's unit)
        if scan_from is not None and wanted:
            multi, lmq = multi_dispatch_on(store.config), lmq_on(store.config)
            from rmqctl.engine_records import commitlog_records

            for r in commitlog_records(store, q.cl, scan_from):   # or the messages a DLedger log wraps
                if not goes_to_consume_queue(r.sys_flag):
                    continue
                # the queues the broker dispatches the record to: its own, and its multi-dispatch (LMQ) targets
                places = [(r.topic, r.queue_id, r.queue_offset)]
                if multi:
                    places += lmq_targets(r.topic, r.queue_id, r.properties, lmq)
                row = None
                for topic, qid, off in places:
                    w = wanted.get((topic, qid))
                    if w is None or (topic, qid, off) in found:
                        continue
                    idx = sorted(set(w["missing"].get(off, ())) | {i for s, i in w["tails"] if off >= s})
                    if not idx:
                        continue
                    found[(topic, qid, off)] = True
                    if row is None:
                        r.crc_ok = (zlib.crc32(r.body) & 0x7FFFFFFF) == r.body_crc
                        row = message_row(r, store_name, delay, body)
                    for i in idx:
                        emit(row[:1] + (tgts[i].group,) + row[1:])
                        results[i].rows += 1
                        results[i].from_commitlog += 1
                        if results[i].max_offset is None or off + 1 > results[i].max_offset:
                            results[i].max_offset = off + 1
        for key, w in wanted.items():
            for off, idxs in w["missing"].items():
                if (key[0], key[1], off) in found:
                    continue
                for i in idxs:
                    results[i].not_placed += 1
                    if len(results[i].reasons) < 8:
                        results[i].reasons.append(
                            f"offset {off}: the consume queue unit is damaged and no commitlog message has this "
                            f"queue offset")
        for res in results:
            if res.start is not None and res.max_offset is not None:
                gaps = (res.max_offset - res.start) - res.rows - res.not_placed
                if gaps > 0:
                    res.not_placed += gaps
                    res.reasons.append(f"{gaps} offsets below the max have no message in the commitlog")
            if res.max_offset is None and res.start is not None:
                res.max_offset = res.start
            if res.committed is not None and res.max_offset is not None and res.committed > res.max_offset:
                res.reasons.append(f"committed offset {res.committed} is above the queue's max {res.max_offset}: "
                                   f"nothing to salvage")
    return results


# --- writers --------------------------------------------------------------------------------------------------
def columns(body: bool):
    from rmqctl.spark.dataset import BODY_COLUMN, MESSAGE_COLUMNS

    return MESSAGE_COLUMNS[:1] + [("group", "string")] + MESSAGE_COLUMNS[1:] + ([BODY_COLUMN] if body else [])


class JsonlWriter:
    """JSON Lines as Spark's JSON writer lays the export schema out (binary as base64, null fields kept)."""

    def __init__(self, out_dir: str, body: bool):
        import json

        self._json = json
        self.names = [n for n, _ in columns(body)]
        self.path = os.path.join(out_dir, "part-00000.json")
        self.f = open(self.path, "w", encoding="utf-8")
        self.rows = 0

    def __call__(self, row) -> None:
        import base64

        d = dict(zip(self.names, row))
        if d.get("body") is not None:
            d["body"] = base64.b64encode(bytes(d["body"])).decode("ascii")
        self.f.write(self._json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.rows += 1

    def close(self) -> list[str]:
        self.f.close()
        return [self.path]


class ParquetWriter:
    """Parquet with the export schema (+ group), written in row groups of `batch` rows."""

    def __init__(self, out_dir: str, body: bool, batch: int = 4096):
        from rmqctl.spark.batches import arrow_schema

        self.schema = arrow_schema(columns(body))
        self.path = os.path.join(out_dir, "part-00000.parquet")
        self.batch, self.buf, self.writer, self.rows = batch, [], None, 0

    def __call__(self, row) -> None:
        self.buf.append(row)
        if len(self.buf) >= self.batch:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, self.schema, compression="snappy")
        if self.buf:
            cols = list(zip(*self.buf))
            arrays = []
            for (_name, typ), vals in zip(zip(self.schema.names, self.schema.types), cols):
                if pa.types.is_map(typ):
                    vals = [None if v is None else list(v.items()) for v in vals]
                arrays.append(pa.array(vals, type=typ))
            self.writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
            self.rows += len(self.buf)
            self.buf = []

    def close(self) -> list[str]:
        self._flush()
        self.writer.close()
        return [self.path]


def prepare_out(out: str, overwrite: bool) -> str:
    import shutil

    from rmqctl.errors import UsageError

    if "://" in out and not out.startswith("file://"):
        raise UsageError("--unconsumed --engine local writes to a local directory (use --engine spark for URIs)")
    out = os.path.abspath(out.removeprefix("file://"))
    if os.path.exists(out) and os.listdir(out):
        if not overwrite:
            raise UsageError("output directory exists and is not empty (use --overwrite)", path=out)
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)
    return out


def export_local(store, out: str, fmt: str, *, group=None, no_offset="min", body=True, overwrite=False,
                 store_name="store") -> dict:
    notes: list = []
    tgts = targets(store, group, no_offset, notes)
    out = prepare_out(out, overwrite)
    w = ParquetWriter(out, body) if fmt == "parquet" else JsonlWriter(out, body)
    results = run_local(store, tgts, w, no_offset=no_offset, body=body, store_name=store_name)
    files = w.close()
    open(os.path.join(out, "_SUCCESS"), "wb").close()
    return {"out": out, "format": fmt, "messages": w.rows, "files": files,
            "queues": [r.as_dict() for r in results], "notes": notes}


# --- Spark engine ----------------------------------------------------------------------------------------------
def export_spark(ds, store, out: str, fmt: str, *, group=None, no_offset="min", overwrite=False) -> dict:
    """The same rows from the Spark dataset: every message of a target queue whose QUEUEOFFSET is at or above
    the group's offset (the queue's first message when the group has none)."""
    from pyspark.sql import functions as F

    notes: list = []
    tgts = targets(store, group, no_offset, notes)
    spark = ds.spark
    rows = [(t.group, t.topic, t.queue_id, t.committed) for t in tgts
            if not (t.committed is None and no_offset == "skip")]
    ranges = spark.createDataFrame(rows, "g string, t string, q int, c bigint")
    body = bool(ds.opts.get("body"))
    names = [n for n, _ in columns(body)]
    local_out = os.path.abspath(out.removeprefix("file://")) \
        if ("://" not in out or out.startswith("file://")) else None
    target = out if local_out is None else "file://" + local_out
    result = {}

    def action(ds):
        df = ds.messages(None).where(F.col("transaction_type").isin("NOT", "COMMIT"))
        qmin = df.groupBy("topic", "queue_id").agg(F.min("queue_offset").alias("qmin"),
                                                    F.max("queue_offset").alias("qmax"))
        r = F.broadcast(ranges).join(qmin, (F.col("t") == F.col("topic")) & (F.col("q") == F.col("queue_id")), "left")
        r = r.select("g", "t", "q", "c", F.coalesce(F.greatest(F.col("c"), F.col("qmin")), F.lit(0)).alias("s"),
                     (F.col("qmax") + 1).alias("mx"))
        sel = df.join(F.broadcast(r.select("g", "t", "q", "s")),
                      (F.col("t") == F.col("topic")) & (F.col("q") == F.col("queue_id"))
                      & (F.col("queue_offset") >= F.col("s")))
        sel = sel.withColumn("group", F.col("g")).select(*names)
        w = sel.write.mode("overwrite" if (overwrite or ds.runs > 1) else "errorifexists")
        if fmt == "parquet":
            w.parquet(target)
        else:
            w.option("ignoreNullFields", "false").json(target)
        counts = {(x.g, x.t, x.q): x.n for x in sel.groupBy(F.col("group").alias("g"), F.col("topic").alias("t"),
                                                              F.col("queue_id").alias("q"))
                  .agg(F.count("*").alias("n")).collect()}
        result["ranges"] = {(x.g, x.t, x.q): (x.s, x.mx) for x in r.collect()}
        result["counts"] = counts

    ds.run(action)
    qs = []
    for t in tgts:
        res = QueueResult(t.group, t.topic, t.queue_id, t.committed)
        if t.committed is None and no_offset == "skip":
            res.reasons.append("no committed offset: skipped (--no-offset skip)")
        else:
            s, mx = result["ranges"].get((t.group, t.topic, t.queue_id), (None, None))
            res.start = s
            res.max_offset = mx if mx is not None else s
            res.rows = res.from_commitlog = result["counts"].get((t.group, t.topic, t.queue_id), 0)
            if s is not None and mx is not None and mx - s > res.rows:
                res.not_placed = mx - s - res.rows
                res.reasons.append(f"{res.not_placed} offsets below the max have no message in the commitlog")
        qs.append(res.as_dict())
    written = []
    if local_out is not None:
        for root, _, fnames in os.walk(local_out):
            written.extend(os.path.join(root, n) for n in fnames
                           if not n.startswith((".", "_")) and n.endswith((".parquet", ".json")))
    return {"out": out, "format": fmt, "messages": sum(q["rows"] for q in qs), "files": sorted(written),
            "queues": qs, "notes": notes}


def summary_lines(res: dict) -> list[str]:
    """Per queue: placed / not placed and why (plain text; the CLI escapes and prints)."""
    lines = []
    for q in res["queues"]:
        c = "none" if q["committed"] is None else q["committed"]
        src = []
        if q["from_consume_queue"]:
            src.append(f"{q['from_consume_queue']} from the consume queue")
        if q["from_commitlog"]:
            src.append(f"{q['from_commitlog']} from the commitlog")
        line = (f"{q['group']} {q['topic']} queue {q['queue_id']}: committed {c}, max {q['max_offset']}: "
                f"{q['rows']} placed" + (f" ({', '.join(src)})" if src else ""))
        if q["not_placed"]:
            line += f", {q['not_placed']} not placed"
        if q["reasons"]:
            line += "; " + "; ".join(q["reasons"])
        lines.append(line)
    return lines
