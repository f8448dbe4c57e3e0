"""The consume queues as a Spark DataFrame:

    rmqctl.spark.register(spark)                                          # Spark 4
    spark.read.format("rocketmq.consumequeue").load("/data/broker-a/store")
    rmqctl.spark.read_consumequeue(spark, "/data/broker-a/store", topic="Orders")   # Spark 3.5 and 4

Schema (COLUMNS): store string, topic string, queue_id int, queue_offset bigint, physical_offset
bigint, size int, tags_code bigint -- one row per unit of consumequeue/<topic>/<queueId>/<file>,
the units decoded with the numpy dtype derived from formats/consumequeue.py's ConsumeQueueUnit
(never typed a second time). queue_offset is the unit's logical offset, (file start + 20 * i) / 20.
tags_code is the field as stored: a consumequeue_ext address on a store with enableConsumeQueueExt
(<= -2147483649; `rmqctl dump` resolves it), the delivery time on SCHEDULE_TOPIC_XXXX.

Which units: those `rmqctl dump --json` lists for each file (tested equal): the file's valid prefix
by the broker's recover rule (physical offset >= 0 and size > 0; the first unit failing it ends
the file), pre-blank units (0, 0x7FFFFFFF, 0) included as the broker's reader counts them. Files
are read as they are: a queue whose middle file is short is not cut there (the broker's recover
would end the queue; `rmqctl verify` says so).

Local store paths only (a Hadoop URI is refused in one line: consume queues are many small files,
read_commitlog() covers remote stores); storeType=defaultRocksDB keeps its consume queues in RocksDB,
refused likewise. Partitions: the files in (store, topic, queue, start) order, grouped up to
PART_BYTES each (a queue file is 6 MB by default). Options of the data source: topic, queue
(comma-separated lists), name (the store column, one store); several stores: load("a,b") or
option("paths", "a,b"), NAME=PATH each.

No pyspark import at module level (the classes are made on first use).
"""
from __future__ import annotations

import os

from rmqctl.errors import UsageError

FORMAT = "rocketmq.consumequeue"
COLUMNS = [("store", "string"), ("topic", "string"), ("queue_id", "int"), ("queue_offset", "bigint"),
           ("physical_offset", "bigint"), ("size", "int"), ("tags_code", "bigint")]
PART_BYTES = 64 << 20
READ_BYTES = 8 << 20             # read a file in pieces of at most this (a multiple of 20)


def ddl() -> str:
    return ", ".join(f"{n} {t}" for n, t in COLUMNS)


def plan(paths, topics=None, queues=None) -> list[list[tuple]]:
    """Driver side, no Spark: partitions, each a list of (store, topic, queue_id, path, start, size)."""
    from rmqctl.spark.plan import parse_store_args
    from rmqctl.store.files import FileQueue
    from rmqctl.store.layout import Store, require_store

    if not paths:
        raise UsageError("give at least one store path")
    topics, queues = set(topics or ()), set(int(q) for q in queues or ())
    files = []
    for ref in parse_store_args([str(p) for p in paths]):
        if ref.local is None:
            raise UsageError(f"{ref.uri}: the consume-queue view reads local store paths (read_commitlog() reads "
                             "Hadoop URIs)")
        require_store(ref.local)
        store = Store.open(ref.local, rocksdb=True)
        if store.engine == "rocksdb":
            raise UsageError("storeType=defaultRocksDB: the consume queues are in RocksDB, not in files (rmqctl "
                             "dump reads them)", path=store.consumequeue_dir)
        for topic, qid in store.queues("consumequeue"):
            if (topics and topic not in topics) or (queues and qid not in queues):
                continue
            for f in FileQueue.scan(store.consumequeue_dir / topic / str(qid), root=store.root).files:
                files.append((ref.name, topic, qid, str(f.path), f.start, f.size))
    parts, cur, used = [], [], 0
    for f in files:
        if cur and used + f[5] > PART_BYTES:
            parts.append(cur)
            cur, used = [], 0
        cur.append(f)
        used += f[5]
    if cur:
        parts.append(cur)
    return parts


def file_batch(store: str, topic: str, queue_id: int, path: str, start: int, size: int):
    """Executor side: one file's valid units as an Arrow RecordBatch with COLUMNS (None when none)."""
    import numpy as np
    import pyarrow as pa

    from rmqctl.formats import consumequeue as cqf
    from rmqctl.formats._derive import numpy_dtype
    from rmqctl.store.commitlog import open_ro

    dt = numpy_dtype(cqf.ConsumeQueueUnit)
    usize = dt.itemsize
    pieces, pos = [], 0
    with open_ro(path) as fd:
        end = os.fstat(fd).st_size // usize * usize
        while pos < end:
            data = os.pread(fd, min(READ_BYTES // usize * usize, end - pos), pos)
            if len(data) < usize:
                break
            u = np.frombuffer(data[:len(data) // usize * usize], dt)
            bad = np.flatnonzero((u["physical_offset"] < 0) | (u["size"] <= 0))
            pieces.append(u[:bad[0]] if len(bad) else u)
            if len(bad):
                break
            pos += len(u) * usize
    units = np.concatenate(pieces) if pieces else np.empty(0, dt)
    n = len(units)
    if not n:
        return None
    first = start // usize
    return pa.RecordBatch.from_arrays([
        pa.repeat(pa.scalar(store, pa.string()), n), pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(queue_id, pa.int32()), n), pa.array(np.arange(first, first + n, dtype=np.int64)),
        pa.array(units["physical_offset"].astype(np.int64)), pa.array(units["size"].astype(np.int32)),
        pa.array(units["tags_code"].astype(np.int64))], names=[c for c, _ in COLUMNS])


def partition_batches(files):
    for f in files:
        rb = file_batch(*f)
        if rb is not None:
            yield rb


def read_consumequeue(spark, *paths, topic=None, queue=None, engine: str | None = None):
    """The consume-queue units of the stores at `paths` (PATH or NAME=PATH) as a DataFrame with COLUMNS.
    topic / queue: a value or a list. engine: None (the data source on Spark 4, mapInArrow otherwise),
    "source" or "arrow"."""
    from rmqctl.spark import source

    topics = [topic] if isinstance(topic, str) else list(topic or ())
    queues = [queue] if isinstance(queue, int) else list(queue or ())
    parts = plan(paths, topics, queues)        # bad paths: one line, before any task
    if engine is None:
        engine = "source" if source.supported() else "arrow"
    if engine == "source":
        if not source.supported():
            raise UsageError("the rocketmq.consumequeue data source needs Spark 4 (pyspark.sql.datasource)")
        register(spark)
        import json

        r = spark.read.format(FORMAT).option("paths", json.dumps([str(p) for p in paths]))
        if topics:
            r = r.option("topic", ",".join(topics))
        if queues:
            r = r.option("queue", ",".join(str(q) for q in queues))
        return r.load()
    if not parts:
        return spark.createDataFrame([], ddl())

    def fn(batches):
        for rb in batches:
            for i in rb.column(0).to_pylist():
                yield from partition_batches(parts[i])

    return spark.range(0, len(parts), 1, numPartitions=len(parts)).mapInArrow(fn, ddl())


def register(spark) -> bool:
    from rmqctl.spark import source

    if not source.supported():
        return False
    spark.dataSource.register(make_source())
    return True


_CLASSES: dict = {}


def make_source():
    """The DataSource class (made once; needs Spark 4)."""
    if "source" in _CLASSES:
        return _CLASSES["source"]
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from rmqctl.spark.source import _list, options_paths

    class FilesPartition(InputPartition):
        def __init__(self, i, files):
            super().__init__(i)
            self.files = files

    class ConsumeQueueReader(DataSourceReader):
        def __init__(self, options: dict):
            o = {k.lower(): v for k, v in options.items()}
            paths = options_paths(options)
            if not paths:
                raise ValueError("rocketmq.consumequeue: give a store path: load(PATH)")
            self.parts = plan(paths, _list(o.get("topic")), [int(q) for q in _list(o.get("queue"))])

        def partitions(self):
            return [FilesPartition(i, p) for i, p in enumerate(self.parts)] or [FilesPartition(0, [])]

        def read(self, partition):
            yield from partition_batches(partition.files)

    class ConsumeQueueSource(DataSource):
        """format("rocketmq.consumequeue"): the consume-queue units of one or more store directories."""

        @classmethod
        def name(cls):
            return FORMAT

        def schema(self):
            return ddl()

        def reader(self, schema):
            return ConsumeQueueReader(self.options)

    _CLASSES["source"] = ConsumeQueueSource
    return ConsumeQueueSource
