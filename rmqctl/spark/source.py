"""`spark.read.format("rocketmq").load(STORE)`: the commitlog as a Spark data source (the Python Data
Source API, pyspark.sql.datasource, Spark 4). Register it with rmqctl.spark.register(spark).

Partitions are the commitlog splits plan.py plans for the Dataset (one per file, cut into byte ranges
by read_commitlog(); see below); each task walks its split with the batch kernel and yields Arrow RecordBatches with
the documented schema (rmqctl.spark.schema). The driver never reads record data.

Exactness. The Dataset proves a scan equal to one sequential walk by chaining the tasks' statuses on
the driver, and reruns with a corrected plan when a store is damaged; a data source cannot report
back, so:
  * read_commitlog() (rmqctl.spark.api) settles the plan first with that proof (one extra walk that
    builds no column) and hands the settled splits to the source (option rmqctl.plan): its rows are
    exactly the sequential walk, on damaged stores too (cut at the first bad record, like the broker).
  * a direct load plans one partition per commitlog file and accepts a store only when every task sees the end it must
    have on an undamaged store (a BLANK record at the end of every file but the last, unwritten
    space or the file end in the last): otherwise the task fails with one line naming the file,
    the offset and why -- never silently different rows.

Options (all optional): topic / queue (comma-separated lists), since / until (store time: epoch ms or
ISO 8601; until is exclusive), transactionType, body (true | false | raw; default true), checkCrc
(default true), name (the store column, one store) -- or load("NAME=PATH"). Several stores: load("a,b") or
option("paths", "a,b").

No pyspark import at module level: the classes are made on first use (make_source()), so importing
rmqctl.spark never needs Spark 4.
"""
from __future__ import annotations

import json
from dataclasses import asdict

FORMAT = "rocketmq"
GOOD_LAST = ("zeros", "end")        # how the last file of an undamaged store ends
GOOD_MIDDLE = ("blank",)            # how every other file ends


def supported() -> bool:
    """Whether this pyspark has the Python Data Source API with Arrow batches (Spark 4.0+)."""
    try:
        import pyspark
        from pyspark.sql.datasource import DataSource  # noqa: F401
    except ImportError:
        return False
    return int(pyspark.__version__.split(".")[0]) >= 4


def register(spark) -> bool:
    """Register format "rocketmq" with this session. False (nothing done) on Spark 3.x, which has no
    Python data source: use rmqctl.spark.read_commitlog() there."""
    if not supported():
        return False
    spark.dataSource.register(make_source())
    return True


# --- the plan as an option (driver -> reader) ----------------------------------------------------

def encode_plan(splits, configs: dict, opts: dict, strict: bool, flt=None) -> str:
    """splits: plan.Split list; configs: store name -> {delay_levels, ...}; flt: a dataset.Filter."""
    f = None
    if flt:
        f = {"topics": sorted(flt.topics), "queues": sorted(flt.queues), "keys": sorted(flt.keys),
             "begin": flt.begin, "end": flt.end, "transaction_types": sorted(flt.transaction_types)}
    return json.dumps({"splits": [asdict(s) for s in splits], "configs": configs, "opts": opts,
                       "strict": strict, "filter": f})


def decode_plan(text: str):
    from rmqctl.spark.plan import Split

    from rmqctl.spark.dataset import Filter

    d = json.loads(text)
    cfgs = {k: dict(v, delay_levels=tuple(v["delay_levels"])) for k, v in d["configs"].items()}
    f = d.get("filter")
    flt = None
    if f:
        flt = Filter(frozenset(f["topics"]), frozenset(f["queues"]), frozenset(f["keys"]), f["begin"], f["end"],
                     frozenset(f["transaction_types"]))
    return [Split(**s) for s in d["splits"]], cfgs, d["opts"], d["strict"], flt


def plan_stores(paths, *, split_size=None, parallelism=None, config=None):
    """Driver side, no Spark: (splits, configs) for local store paths, as the Dataset plans them."""
    import os
    from dataclasses import replace

    from rmqctl import dispatch
    from rmqctl.errors import UsageError
    from rmqctl.spark.plan import parse_store_args, plan_local
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    refs = parse_store_args(paths)
    files, configs = {}, {}
    for ref in refs:
        if ref.local is None:
            raise UsageError(f"{ref.uri}: the rocketmq data source reads local paths; use "
                             "rmqctl.spark.read_commitlog() for Hadoop URIs")
        from rmqctl.store.layout import require_store

        require_store(ref.local)      # a store with no commitlog/ yet (no message ever) gives no rows
        store = Store.open(ref.local, config or StoreConfig(), rocksdb=True)
        cfg = store.config
        fl = [(str(f.path), f.start, f.size) for f in store.commitlog.files]
        while fl and _unwritten(fl[-1][0]):
            fl.pop()    # pre-allocated files past the end of data: the sequential walk stops before them
        files[ref.name] = fl
        configs[ref.name] = {"delay_levels": list(cfg.delay_levels), "enable_lmq": dispatch.lmq_on(cfg),
                             "enable_multi_dispatch": dispatch.multi_dispatch_on(cfg),
                             "index_enable": cfg.message_index_enable,
                             "commitlog_file_size": cfg.commitlog_file_size, "mode": "pread"}
    plan = plan_local(refs, files, split_size=split_size, parallelism=parallelism or os.cpu_count() or 2)
    splits = [replace(s, id=i) for i, s in enumerate(plan.splits)]
    return splits, configs


def _unwritten(path: str) -> bool:
    """The file starts with unwritten space (TOTALSIZE 0, MAGIC 0): a walk of it gives nothing."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return len(head) == 8 and not any(head)


def last_files(splits) -> dict:
    """store -> file_index of its last commitlog file (in this plan)."""
    out: dict = {}
    for s in splits:
        out[s.store] = max(out.get(s.store, -1), s.file_index)
    return out


def check_end(split, status, last: bool) -> None:
    """Direct loads: fail (one line) when a task's walk shows a damaged commitlog."""
    from rmqctl.spark.plan import CROSSED

    if status.kind == CROSSED:
        return
    if status.kind in (GOOD_LAST if last else GOOD_MIDDLE):
        return
    if last and status.kind in GOOD_MIDDLE:     # a full last file: the next one is not created yet
        return
    where = split.file_start + status.end_pos
    detail = f" ({status.detail})" if status.detail else ""
    raise ValueError(f"{split.path}: offset {where}: {status.kind}{detail}: the commitlog is damaged here; "
                     "the rocketmq source reads undamaged stores only -- use rmqctl.spark.read_commitlog(), "
                     "which stops at the first bad record like the broker")


def task_batches(split, opts, cfg, cols, flt, strict: bool, last: bool):
    """Executor side: one split's RecordBatches (then the end check on direct loads)."""
    from rmqctl.spark.batches import split_arrow

    status = (yield from split_arrow(split, opts, cfg, cols, flt))[0]
    if strict:
        check_end(split, status, last)


# --- options -> filter ----------------------------------------------------------------------------

def _list(v):
    return [x.strip() for x in (v or "").split(",") if x.strip()]


def _time(v, what):
    if v is None or v == "":
        return None
    from rmqctl.timeparse import parse_time

    return int(parse_time(str(v), what, utc=True))


def options_filter(options: dict):
    from rmqctl.spark.dataset import Filter

    o = {k.lower(): v for k, v in options.items()}
    flt = Filter(frozenset(_list(o.get("topic"))), frozenset(int(q) for q in _list(o.get("queue"))),
                 frozenset(_list(o.get("key"))), _time(o.get("since"), "since"), _time(o.get("until"), "until"),
                 frozenset(t.upper() for t in _list(o.get("transactiontype"))))
    return flt if flt else None


def options_body(options: dict):
    v = str({k.lower(): v for k, v in options.items()}.get("body", "true")).lower()
    if v == "raw":
        return "raw"
    return v in ("true", "1", "yes")


def options_paths(options: dict) -> list[str]:
    o = {k.lower(): v for k, v in options.items()}
    paths = []
    for k in ("path", "paths"):
        v = o.get(k)
        if not v:
            continue
        if v.startswith("["):
            paths += json.loads(v)
        else:
            paths += _list(v)
    if o.get("name") and len(paths) == 1 and "=" not in paths[0].split("/")[0]:
        paths = [f"{o['name']}={paths[0]}"]
    return paths


# --- the pyspark classes ----------------------------------------------------------------------------

_CLASSES: dict = {}


def make_source():
    """The DataSource class (made once; needs Spark 4)."""
    if "source" in _CLASSES:
        return _CLASSES["source"]
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class SplitPartition(InputPartition):
        def __init__(self, split, last: bool):
            super().__init__(split.id)
            self.split, self.last = split, last

    class RocketMQReader(DataSourceReader):
        def __init__(self, options: dict):
            from rmqctl.spark import schema

            self.options = dict(options)
            self.body = options_body(self.options)
            self.columns = schema.columns(bool(self.body))
            self.flt = options_filter(self.options)
            plan = self.options.get("rmqctl.plan")
            if plan:
                self.splits, self.configs, self.opts, self.strict, self.flt = decode_plan(plan)
            else:
                o = {k.lower(): v for k, v in self.options.items()}
                paths = options_paths(self.options)
                if not paths:
                    raise ValueError("rocketmq: give a store path: load(PATH)")
                # one partition per commitlog file: each walk is then the sequential one, so the end
                # check above proves the rows (finer ranges need the driver's proof: read_commitlog)
                self.splits, self.configs = plan_stores(paths, split_size=1 << 62)
                self.opts = {"check_crc": str(o.get("checkcrc", "true")).lower() in ("true", "1", "yes"),
                             "check_phys": True, "check_prop_crc": True}
                self.strict = True
            self.opts = dict(self.opts, body=self.body)
            for c in self.configs.values():
                c["delay_levels"] = tuple(c["delay_levels"])

        def partitions(self):
            last = last_files(self.splits)
            return [SplitPartition(s, s.file_index == last[s.store]) for s in self.splits]

        def read(self, partition):
            s = partition.split
            yield from task_batches(s, self.opts, self.configs[s.store], self.columns, self.flt, self.strict,
                                    partition.last)

    class RocketMQDataSource(DataSource):
        """format("rocketmq"): the messages of one or more RocketMQ store directories."""

        @classmethod
        def name(cls):
            return FORMAT

        def schema(self):
            from rmqctl.spark import schema

            return schema.ddl(bool(options_body(self.options)))

        def reader(self, schema):
            return RocketMQReader(self.options)

    _CLASSES["source"] = RocketMQDataSource
    return RocketMQDataSource
