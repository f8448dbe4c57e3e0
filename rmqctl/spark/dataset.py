"""The commitlog as a Spark dataset: a DataFrame of messages, and the dispatch rows consume queues
and index files are built from.

Messages: each task walks its range with the batch kernel (rmqctl.scanvec) and builds Arrow
RecordBatches column by column (rmqctl.spark.batches), handed to Spark through mapInArrow -- no Python
object per row. The default (non-Spark) engine runs the same function in-process (local_batches);
both are tested equal to message_row() over rmqctl.scan.FileWalk, the reference. Dispatch rows and the
engines' record streams (verify/rebuild) still go row by row through the record kernel and the
broker's dispatch rules (rmqctl.dispatch).

Messages schema (one row per message record, in commitlog order within a store):

    store                        string   the store's name (NAME=PATH, or the directory name)
    topic                        string
    queue_id                     int
    queue_offset                 bigint   QUEUEOFFSET (0 for PREPARED/ROLLBACK)
    physical_offset              bigint   the record's commitlog offset
    size                         int      TOTALSIZE
    magic                        string   V1 | V2
    sys_flag                     int
    transaction_type             string   NOT | PREPARED | COMMIT | ROLLBACK
    flag                         int
    body_crc                     int
    body_crc_ok                  boolean  null when CRC checking was off
    tags                         string   TAGS property
    tags_code                    bigint   the consume-queue tagsCode (delay deadline on SCHEDULE_TOPIC_XXXX)
    keys                         array<string>  KEYS split on single spaces
    uniq_key                     string   UNIQ_KEY (the client message id)
    msg_id                       string   offset message id (store host + offset)
    born_timestamp               bigint   ms since the epoch (producer clock)
    born_host                    string
    store_timestamp              bigint   ms since the epoch (broker clock)
    store_host                   string
    reconsume_times              int
    prepared_transaction_offset  bigint
    body_length                  int
    properties                   map<string,string>
    body                         binary   only with body=True: decompressed when SYSFLAG 0x1 says compressed
                                          (zlib, lz4, zstd; rmqctl.bodies), as stored with body="raw"
    body_note                    string   only with body: why a compressed body is as stored (unknown
                                          type, corrupt stream), else null

Dispatch rows (kind 'cq': one per consume-queue unit, incl. LMQ targets; kind 'index': one per
index key): store, kind, topic, queue_id, queue_offset, physical_offset, size, tags_code,
store_timestamp, key. tags_code is the dispatched tagsCode; with enableConsumeQueueExt the unit on disk
holds an address into consumequeue_ext instead, and this code is in the ext unit.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from rmqctl import dispatch
from rmqctl.formats.commitlog import TRANSACTION_TYPE_NAMES
from rmqctl.formats.properties import KEY_SEPARATOR, KEYS, TAGS, UNIQ_KEY
from rmqctl.render import offset_msg_id
from rmqctl.spark.plan import Plan, Split, SplitStatus, StoreRef, plan_local, resolve, walk_split

MESSAGE_COLUMNS = [
    ("store", "string"), ("topic", "string"), ("queue_id", "int"), ("queue_offset", "bigint"),
    ("physical_offset", "bigint"), ("size", "int"), ("magic", "string"), ("sys_flag", "int"),
    ("transaction_type", "string"), ("flag", "int"), ("body_crc", "int"), ("body_crc_ok", "boolean"),
    ("tags", "string"), ("tags_code", "bigint"), ("keys", "array<string>"), ("uniq_key", "string"),
    ("msg_id", "string"), ("born_timestamp", "bigint"), ("born_host", "string"),
    ("store_timestamp", "bigint"), ("store_host", "string"), ("reconsume_times", "int"),
    ("prepared_transaction_offset", "bigint"), ("body_length", "int"),
    ("properties", "map<string,string>"),
]
BODY_COLUMN = ("body", "binary")
BODY_NOTE_COLUMN = ("body_note", "string")
DISPATCH_COLUMNS = [
    ("store", "string"), ("kind", "string"), ("topic", "string"), ("queue_id", "int"),
    ("queue_offset", "bigint"), ("physical_offset", "bigint"), ("size", "int"), ("tags_code", "bigint"),
    ("store_timestamp", "bigint"), ("key", "string"),
]


def ddl(columns) -> str:
    return ", ".join(f"{n} {t}" for n, t in columns)


@dataclass(frozen=True)
class Filter:
    """Predicates evaluated on the executors before a row is built (cheap rejection)."""

    topics: frozenset = frozenset()
    queues: frozenset = frozenset()
    keys: frozenset = frozenset()
    begin: int | None = None       # store_timestamp >= begin (ms)
    end: int | None = None         # store_timestamp < end (ms)
    transaction_types: frozenset = frozenset()

    def __bool__(self):
        return bool(self.topics or self.queues or self.keys or self.begin is not None or self.end is not None
                    or self.transaction_types)

    def accepts(self, r) -> bool:
        if self.topics and r.topic not in self.topics:
            return False
        if self.queues and r.queue_id not in self.queues:
            return False
        if self.begin is not None and r.store_timestamp < self.begin:
            return False
        if self.end is not None and r.store_timestamp >= self.end:
            return False
        if self.transaction_types and TRANSACTION_TYPE_NAMES[r.sys_flag & 0xC] not in self.transaction_types:
            return False
        if self.keys:
            p = r.properties
            ks = set(k for k in (p.get(KEYS) or "").split(KEY_SEPARATOR) if k)
            if p.get(UNIQ_KEY):
                ks.add(p[UNIQ_KEY])
            if not (ks & self.keys):
                return False
        return True


def message_row(r, store: str, delay_levels, body: bool) -> tuple:
    p = r.properties
    keys = p.get(KEYS)
    row = (store, r.topic, r.queue_id, r.queue_offset, r.offset, r.total_size, "V2" if r.version == 2 else "V1",
           r.sys_flag, TRANSACTION_TYPE_NAMES[r.sys_flag & 0xC], r.flag, r.body_crc, r.crc_ok, p.get(TAGS),
           dispatch.tags_code(r.topic, p, r.store_timestamp, delay_levels),
           [k for k in keys.split(KEY_SEPARATOR) if k] if keys else [], p.get(UNIQ_KEY),
           offset_msg_id(r.store_host_raw, r.store_port, r.physical_offset), r.born_timestamp, r.born_host,
           r.store_timestamp, r.store_host, r.reconsume_times, r.prepared_transaction_offset, r.body_length, p)
    if not body:
        return row
    if not r.sys_flag & 1:
        return row + (r.body, None)
    from rmqctl.bodies import body_of

    b = body_of(r.body, r.sys_flag, raw=body == "raw")
    return row + (b.data, b.note)


def dispatch_rows(r, store: str, delay_levels, enable_lmq: bool, enable_multi: bool, index_enable: bool):
    """CommitLogDispatcherBuildConsumeQueue / BuildIndex for one record, as rows."""
    p = r.properties
    code = None
    if dispatch.goes_to_consume_queue(r.sys_flag):
        code = dispatch.tags_code(r.topic, p, r.store_timestamp, delay_levels)
        yield (store, "cq", r.topic, r.queue_id, r.queue_offset, r.offset, r.total_size, code, r.store_timestamp, None)
        if enable_multi:
            for name, qid, qoff in dispatch.lmq_targets(r.topic, r.queue_id, p, enable_lmq):
                yield (store, "cq", name, qid, qoff, r.offset, r.total_size, code, r.store_timestamp, None)
    if index_enable and dispatch.goes_to_index(r.sys_flag):
        for k in dispatch.index_keys(p):
            yield (store, "index", r.topic, r.queue_id, r.queue_offset, r.offset, r.total_size, code,
                   r.store_timestamp, k)


def _status_param():
    from pyspark.accumulators import AccumulatorParam

    class DictParam(AccumulatorParam):
        def zero(self, v):
            return {}

        def addInPlace(self, a, b):
            a.update(b)
            return a

    return DictParam()


def _task(splits, acc, opts, kind, stores_cfg, flt):
    """Executor body: walk each split with the kernel, yield row tuples, report the SplitStatus."""
    for split in splits:
        cfg = stores_cfg[split.store]
        if split.mode == "ranged":               # a remote file: its byte range staged locally
            from rmqctl.spark.remote import ranged

            gen = ranged(split, opts, lambda s: walk_split(s, opts))
        else:
            gen = walk_split(split, opts)
        status, rows = None, 0
        try:
            if kind == "messages":
                delay, body = cfg["delay_levels"], opts.get("body", False)
                while True:
                    r = next(gen)
                    if flt is None or flt.accepts(r):
                        rows += 1
                        yield message_row(r, split.store, delay, body)
            elif kind == "dispatch":
                args = (cfg["delay_levels"], cfg["enable_lmq"], cfg["enable_multi_dispatch"], cfg["index_enable"])
                while True:
                    r = next(gen)
                    yield from dispatch_rows(r, split.store, *args)
            else:                                # "records": raw Records for engines (RDD only)
                while True:
                    yield next(gen)
        except StopIteration as e:
            status = e.value
        acc.add({split.id: status, ("rows", split.id): rows})


# derived, for stats: the INNER_NUM property (batch messages), the multi-dispatch (LMQ) properties
EXTRA_COLUMNS = {"inner_num": "string", "multi_dispatch": "string", "multi_queue_offset": "string"}


def message_columns(names=None, body: bool = False) -> list:
    """[(name, spark type)]: the full messages schema (+ body), or the named columns in that order."""
    from rmqctl.spark import schema

    full = MESSAGE_COLUMNS + [BODY_COLUMN, BODY_NOTE_COLUMN]
    if names is None:
        return MESSAGE_COLUMNS + ([BODY_COLUMN, BODY_NOTE_COLUMN] if body else [])
    # the export schema's timestamp columns and the derived partition column are built on demand too
    types = dict(full) | EXTRA_COLUMNS | dict(schema.columns(True)) | {"date": "date"}
    unknown = [n for n in names if n not in types]
    if unknown:
        raise ValueError(f"unknown message columns {unknown}")
    return [(n, types[n]) for n in names]


def _arrow_task(by_id, order, acc, opts, cfg, columns, flt, reducer=None):
    """The mapInArrow function: each input row names a split (its id); the split is walked by the batch
    kernel and its messages yielded as RecordBatches
    -- or, with `reducer` (split -> an object with add(batch) and partials(store)), fed to it and
    its partials yielded once the split is done. The SplitStatus goes to the accumulator for the
    driver's resolve()."""

    def fn(batches):
        import os as _os

        from rmqctl.spark.batches import split_arrow

        for rb in batches:
            for split in [by_id[order[i]] for i in rb.column(0).to_pylist()]:
                fd = None
                red = reducer(split) if reducer is not None else None
                try:
                    if "dledger" in cfg[split.store]:
                        gen = _dledger_split_arrow(split, opts, cfg[split.store], columns, flt, fd)
                    elif split.mode == "ranged":     # a remote file: its byte range staged locally
                        from rmqctl.spark.remote import ranged

                        gen = ranged(split, opts, lambda s: split_arrow(s, opts, cfg[s.store], columns, flt))
                    else:
                        gen = split_arrow(split, opts, cfg[split.store], columns, flt, fd)
                    while True:
                        try:
                            rb = next(gen)
                        except StopIteration as e:
                            status, rows = e.value
                            break
                        if red is None:
                            yield rb
                        else:
                            red.add(rb)
                finally:
                    if fd is not None:
                        _os.close(fd)
                if red is not None:
                    yield red.partials(split.store)
                acc.add({split.id: status, ("rows", split.id): rows})

    return fn


@dataclass
class StoreInfo:
    ref: StoreRef
    files: list          # [(path_or_uri, file_start, size)]
    config: dict         # delay_levels, enable_lmq, enable_multi_dispatch, index_enable, commitlog_file_size
    consumer_offsets: bytes | None = None


def open_stores(spark, refs: list[StoreRef], config=None, io: str = "auto") -> list[StoreInfo]:
    """Driver side: list each store's commitlog files and read the small config files. Local stores are
    read with pread, remote ones by byte range (rmqctl.spark.remote); io="binaryfiles" is an alias."""
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    out = []
    for ref in refs:
        mode = "pread" if ref.local else "ranged"
        base = config or StoreConfig()
        if ref.local and _dledger_dir(ref.local):
            out.append(_dledger_store(ref, base))      # a DLedger commitlog: one task per data file
            continue
        if ref.local:
            store = Store.open(ref.local, base, rocksdb=True)     # storeType=defaultRocksDB: its commitlog is files
            cfg = store.config
            if mode == "pread":
                files = [(str(f.path), f.start, f.size) for f in store.commitlog.files]
            else:
                files = [("file://" + str(f.path), f.start, f.size) for f in store.commitlog.files]
            co = store.config_dir / "consumerOffset.json"
            offsets = _small_file(co, store.root)
            if offsets is None and store.engine == "rocksdb":
                from rmqctl.engine_records import rocksdb_consumer_offsets

                offsets = rocksdb_consumer_offsets(store.root)
        else:
            from rmqctl.spark import remote

            cfg = base
            files, offsets = remote.open_store(ref.uri, remote.driver_opts(spark))
            if files and "commitlog_file_size" not in cfg.explicit:
                from dataclasses import replace

                cfg = replace(cfg, commitlog_file_size=max(f[2] for f in files))
        out.append(StoreInfo(ref, files, {
            "delay_levels": tuple(cfg.delay_levels), "enable_lmq": dispatch.lmq_on(cfg),
            "enable_multi_dispatch": dispatch.multi_dispatch_on(cfg), "index_enable": cfg.message_index_enable,
            "commitlog_file_size": cfg.commitlog_file_size, "mode": mode}, offsets))
    return out


@dataclass
class Dataset:
    """A planned scan over one or more stores. Build DataFrames with messages()/dispatch(), then run
    the action through run() so the split statuses are checked (and the job rerun when needed)."""

    spark: object
    stores: list[StoreInfo]
    plan: Plan
    opts: dict = field(default_factory=dict)
    last_summary: dict = field(default_factory=dict)
    runs: int = 0
    rows: int = 0          # message rows yielded by the last (exact) run, after filters
    running: bool = False  # inside run(): frames report their split statuses to its proof

    @classmethod
    def open(cls, spark, refs, *, config=None, io="auto", split_size=None, check_crc=True, body=False):
        infos = open_stores(spark, refs, config, io)
        par = spark.sparkContext.defaultParallelism
        plans = []
        ropts = extent = None
        if any(i.config["mode"] == "ranged" for i in infos):
            from rmqctl.spark import remote

            ropts = remote.driver_opts(spark)
            extent = remote.extent(ropts)
        for mode in ("pread", "ranged"):
            group = [i for i in infos if i.config["mode"] == mode and "dledger" not in i.config]
            if group:
                plans.append(plan_local([i.ref for i in group], {i.ref.name: i.files for i in group},
                                        split_size=split_size, parallelism=par, mode=mode, extent=extent))
        plans += [Plan([Split(k, i.ref.name, p, st, sz, 0, sz, True, "pread", k)
                        for k, (p, st, sz) in enumerate(i.files)], [i.ref]) for i in infos if "dledger" in i.config]
        splits = []
        for p in plans:
            splits.extend(p.splits)
        from dataclasses import replace

        splits = [replace(s, id=i) for i, s in enumerate(splits)]
        plan = Plan(splits, [i.ref for i in infos])
        opts = {"check_crc": check_crc, "check_phys": True, "check_prop_crc": True, "body": body, "remote": ropts}
        return cls(spark, infos, plan, opts)

    @property
    def total_bytes(self) -> int:
        return self.plan.total_bytes

    def _rdd(self, kind: str, flt: Filter | None, acc):
        for i in self.stores:
            if "dledger" in i.config:
                from rmqctl.errors import UnsupportedStoreError

                raise UnsupportedStoreError("DLedger commitlog: the Spark engine reads its messages for stats and "
                                            "export only", path=i.ref.local)
        sc = self.spark.sparkContext
        cfg = {i.ref.name: i.config for i in self.stores}
        opts = dict(self.opts)
        splits = list(self.plan.splits)
        if not splits:                    # no commitlog file at all
            return sc.emptyRDD()
        rdd = sc.parallelize(splits, len(splits))
        flt = flt if flt else None
        return rdd.mapPartitions(lambda it: _task(it, acc, opts, kind, cfg, flt))

    def messages(self, flt: Filter | None = None, *, columns=None):
        """The messages DataFrame (what rmqctl.spark.api.frame(engine="arrow") gives): decoded by the batch
        kernel and handed to Spark as Arrow RecordBatches (mapInArrow). `columns`: names to build (a
        subset, in that order, of the schema plus the derived EXTRA_COLUMNS) -- unbuilt columns cost
        nothing. Inside run() the scan is proved equal to a sequential walk (and rerun when it is not);
        outside run() it is a plain DataFrame over the planned splits, whose statuses nobody checks."""
        cols = message_columns(columns, self.opts.get("body", False))
        return self._frames(flt, cols, ddl(cols), None, self._accumulator())

    def _frames(self, flt, cols, schema, reducer, _acc):
        acc = _acc if _acc is not None else self._accumulator()
        cfg = {i.ref.name: i.config for i in self.stores}
        opts = dict(self.opts)
        flt = flt if flt else None
        splits = list(self.plan.splits)
        if not splits:                     # no commitlog file at all
            return self.spark.createDataFrame([], schema)
        by_id = {s.id: s for s in splits}
        ids = self.spark.range(0, len(splits), 1, numPartitions=len(splits))
        task = _arrow_task(by_id, [s.id for s in splits], acc, opts, cfg, cols, flt, reducer)
        return ids.mapInArrow(task, schema)

    def dispatch(self):
        return self.spark.createDataFrame(self._rdd("dispatch", None, self._accumulator()), ddl(DISPATCH_COLUMNS),
                                          verifySchema=False)

    def records_rdd(self):
        """RDD of kernel Records (for engines that reuse per-record functions on the executors)."""
        return self._rdd("records", None, self._accumulator())

    def _accumulator(self):
        """run()'s status accumulator; outside run(), one that nobody reads (no AttributeError)."""
        acc = getattr(self, "_acc", None)
        if acc is None:
            acc = self._acc = self.spark.sparkContext.accumulator({}, _status_param())
        return acc

    def run(self, action, *, progress: bool = True, max_runs: int = 4):
        """action(dataset) builds DataFrames with self.messages()/dispatch() and runs its Spark jobs;
        returns its result once the statuses prove the scan equals a sequential walk."""
        while True:
            self._acc = self.spark.sparkContext.accumulator({}, _status_param())
            self.runs += 1
            self.running = True
            try:
                with _Progress(self.spark, self.total_bytes, enabled=progress):
                    result = action(self)
            finally:
                self.running = False
            statuses: dict[int, SplitStatus] = self._acc.value
            exact, fixed, summary = resolve(self.plan, statuses)
            self.last_summary = summary
            self.rows = sum(v for k, v in statuses.items() if isinstance(k, tuple))
            if exact:
                return result
            if self.runs >= max_runs:
                raise RuntimeError("the commitlog scan did not converge (corrupt store?)")
            self.plan = fixed


class _Progress:
    """A progress bar on a TTY from Spark's status tracker (completed tasks of active stages)."""

    def __init__(self, spark, total_bytes: int, enabled: bool = True):
        from rmqctl.terminal import stderr_is_tty

        self.spark, self.total = spark, max(1, total_bytes)
        self.enabled = enabled and stderr_is_tty()
        self._stop = threading.Event()

    def __enter__(self):
        if self.enabled:
            from rmqctl.terminal import progress

            self._bar = progress(self.total, "scanning").__enter__()
            self._t = threading.Thread(target=self._poll, daemon=True)
            self._t.start()
        return self

    def _poll(self):
        tracker = self.spark.sparkContext.statusTracker()
        done_bytes = 0
        while not self._stop.wait(0.5):
            try:
                tasks = completed = 0
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info:
                        tasks += info.numTasks
                        completed += info.numCompletedTasks
                if tasks:
                    want = int(self.total * completed / tasks)
                    if want > done_bytes:
                        self._bar.advance(want - done_bytes)
                        done_bytes = want
            except Exception:  # noqa: BLE001 - a progress bar must never fail the job
                return

    def __exit__(self, *a):
        if self.enabled:
            self._stop.set()
            self._t.join(timeout=2)
            self._bar.__exit__(*a)
        return False


def local_messages(store_path, *, name="store", config=None, flt: Filter | None = None, body=False):
    """The default (non-Spark) engine's view of the same rows: one sequential CommitLog.records walk.
    Used by tests and the benchmark as the reference."""
    from rmqctl.store.commitlog import CommitLog
    from rmqctl.store.layout import Store

    store = Store.open(store_path, config)
    delay = tuple(store.config.delay_levels)
    for r in CommitLog(store).records(stop_at_bad=True):
        if flt is None or flt.accepts(r):
            yield message_row(r, name, delay, body)



def local_batches(store_path, *, name="store", config=None, flt: Filter | None = None, body=False, columns=None,
                  check_crc=True, scan: dict | None = None, progress=None):
    """The default (non-Spark) engine: the store's messages as Arrow RecordBatches from the same batch
    path the Spark tasks run, one file after another in this process, stopping where
    CommitLog.records(stop_at_bad=True) stops (only a BLANK continues at the next file). `scan`, when
    given, receives {"bytes", "summary" (like Dataset.last_summary[name]), "consumer_offsets"}."""
    from rmqctl.engine_records import dledger_dir

    if dledger_dir(store_path) is not None:      # DLedger commitlog: the messages its entries wrap
        yield from _dledger_batches(store_path, name, config, flt, body, columns, check_crc, scan, progress)
        return
    from rmqctl.scan import BLANK_RECORD
    from rmqctl.spark.batches import split_arrow
    from rmqctl.store.layout import Store

    # the commitlog only: a storeType=defaultRocksDB store reads like any other here
    store = Store.open(store_path, config, rocksdb=True)
    cfg = {"delay_levels": tuple(store.config.delay_levels)}
    cols = message_columns(columns, body)
    opts = {"check_crc": check_crc, "check_phys": True, "check_prop_crc": True, "body": body}
    info = {"files": 0, "stop": None}
    if scan is not None:
        scan["bytes"] = sum(f.size for f in store.commitlog.files)
        co = store.config_dir / "consumerOffset.json"
        scan["consumer_offsets"] = _small_file(co, store.root)
        if scan["consumer_offsets"] is None and (store.config_dir / "consumerOffsets" / "CURRENT").is_file():
            from rmqctl.store.rocksdb_cq import offsets_json   # storeType=defaultRocksDB: offsets in RocksDB

            scan["consumer_offsets"] = offsets_json(store.root)
        scan["summary"] = info
    for i, f in enumerate(store.commitlog.files):
        split = Split(i, name, str(f.path), f.start, f.size, 0, f.size, True, "pread", i)
        info["files"] += 1
        status = (yield from split_arrow(split, opts, cfg, cols, flt))[0]
        if progress is not None:
            progress(f.size)
        if status.kind != BLANK_RECORD:
            info["stop"] = {"kind": status.kind, "file_start": f.start, "offset": f.start + status.end_pos,
                            "detail": status.detail}
            return


def _dledger_dir(path):
    from rmqctl.engine_records import dledger_dir

    return dledger_dir(path)


def _dledger_store(ref, base) -> StoreInfo:
    """StoreInfo of a DLedger store: its data files that hold entries, each with the number of entries DLedger's
    walk keeps there (the driver walks the entry headers; the tasks decode the messages)."""
    from rmqctl import engine_records as er

    store = er.open_store(ref.local, base)
    cfg = store.config
    files, stop = er.dledger_plan(store.root)
    return StoreInfo(ref, [(p, st, sz) for p, st, sz, _n in files], {
        "delay_levels": tuple(cfg.delay_levels), "enable_lmq": dispatch.lmq_on(cfg),
        "enable_multi_dispatch": dispatch.multi_dispatch_on(cfg), "index_enable": cfg.message_index_enable,
        "commitlog_file_size": cfg.commitlog_file_size, "mode": "pread",
        "dledger": {p: n for p, _st, _sz, n in files}, "dledger_stop": stop,
        "dledger_last": files[-1][0] if files else None}, er.dledger_scan(store)["consumer_offsets"])


def _dledger_split_arrow(split, opts, cfg, columns, flt=None, fd=None):
    """split_arrow for one DLedger data file: RecordBatches of its entries' messages; returns (SplitStatus, rows).
    Not the last file and sound: a BLANK (the walk goes on at the next file), as resolve() expects."""
    from rmqctl.engine_records import dledger_file_batches
    from rmqctl.scan import BLANK_RECORD, END
    from rmqctl.spark.batches import to_arrow

    crc = opts.get("check_crc", True)
    gen = dledger_file_batches(split.path, cfg["dledger"][split.path], check_crc=crc,
                               check_prop_crc=opts.get("check_prop_crc", True))
    rows = n = 0
    while True:
        try:
            bt = next(gen)
        except StopIteration as e:
            bad = e.value
            break
        n += len(bt)
        rb = to_arrow(bt, split.store, cfg["delay_levels"], crc_checked=crc, columns=columns, flt=flt,
                      raw_body=opts.get("body") == "raw")
        if rb is not None:
            rows += rb.num_rows
            yield rb
    last = split.path == cfg["dledger_last"]
    stop = bad or (cfg["dledger_stop"] if last else None)
    if stop is not None:
        st = SplitStatus(split.id, 0, stop["offset"] - split.file_start, stop["kind"], n, stop.get("detail", ""))
    else:
        st = SplitStatus(split.id, 0, split.file_size, END if last else BLANK_RECORD, n)
    return st, rows


def _dledger_batches(store_path, name, config, flt, body, columns, check_crc, scan, progress):
    """local_batches of a DLedger store: the wrapped messages' kernel Batches (rmqctl.engine_records) as rows."""
    from rmqctl import engine_records as er
    from rmqctl.spark.batches import to_arrow

    store = er.open_store(store_path, config)
    delay = tuple(store.config.delay_levels)
    cols = message_columns(columns, body)
    info: dict = {}
    if scan is not None:
        scan.update(er.dledger_scan(store))
        scan["summary"] = info
    for bt in er.dledger_kernel_batches(store.root, check_crc=check_crc, info=info, progress=progress):
        rb = to_arrow(bt, name, delay, crc_checked=check_crc, columns=cols, flt=flt, raw_body=body == "raw")
        if rb is not None:
            yield rb


def _small_file(path, root):
    """The bytes of a small store file, or None when missing, a link out of the store or not a regular file."""
    from rmqctl.store.files import read_bytes, read_refusal

    if not path.exists() or read_refusal(path, root):
        return None
    return read_bytes(path, root)
