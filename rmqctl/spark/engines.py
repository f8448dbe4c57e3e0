"""`--engine spark` for verify and rebuild: the SAME per-file / per-record functions as the default
engine, with the commitlog work done by Spark tasks, so findings and rebuilt files are identical by
construction (and tested equal on every fixture).

verify: rmqctl.check.commitlog.scan_file (one task per commitlog file -- it carries per-file state),
        merged and followed by the queue/index/checkpoint/config checks exactly as verify_store does.
rebuild: the records the default engine's CommitLog.records walk would give, decoded in parallel by
        the split scan (plan.py), streamed to the driver in commitlog order (toLocalIterator), and fed
        to rmqctl.repair.rebuild.analyze_rebuild's own QueueState / IndexRebuilder.

The seams are explicit parameters of the local engines: verify_store(scan_map=) and
analyze_rebuild(records=).
"""
from __future__ import annotations

def verify_store(spark, store, **kw):
    """rmqctl.check.run.verify_store with each commitlog file scanned by a Spark task (the verify
    engine's own scan_file, shipped with its ScanContext)."""
    from rmqctl.check import run
    from rmqctl.spark.ship import absolute_store

    store = absolute_store(store)     # executors do not run in the driver's folder

    def scan_map(args):
        if not args:
            return []
        return spark.sparkContext.parallelize(args, len(args)).map(run._scan_job).collect()

    return run.verify_store(store, jobs=1, scan_map=scan_map, **kw)


class _Rec:
    """The fields analyze_rebuild reads from a kernel Record, shipped from an executor."""

    __slots__ = ("offset", "total_size", "sys_flag", "topic", "queue_id", "queue_offset", "store_timestamp",
                 "properties")

    def __init__(self, t):
        (self.offset, self.total_size, self.sys_flag, self.topic, self.queue_id, self.queue_offset,
         self.store_timestamp, self.properties) = t


def _rec_tuple(r):
    return (r.offset, r.total_size, r.sys_flag, r.topic, r.queue_id, r.queue_offset, r.store_timestamp,
            r.properties)


class _SparkRecords:
    """analyze_rebuild's `records`: streams the Spark scan in commitlog order and reports the stop
    like the sequential walk does."""

    def __init__(self, ds, store, stream):
        self.ds, self.store, self.stream = ds, store, stream

    def __call__(self, walk=None):
        from rmqctl.scan import Stop
        from rmqctl.store.commitlog import FileEnd

        for t in self.stream:
            yield _Rec(t)
        info = self.ds.last_summary.get(self.ds.plan.stores[0].name) or {}
        stop = info.get("stop")
        if walk is not None and stop:
            f = next((f for f in self.store.commitlog.files if f.start == stop["file_start"]), None)
            walk.ends.append(FileEnd(f, Stop(stop["kind"], stop["offset"], stop["offset"] - stop["file_start"],
                                             detail=stop.get("detail", "")), 0, None))


def analyze_rebuild(spark, store, what, staging, **kw):
    """rmqctl.repair.rebuild.analyze_rebuild with the commitlog decoded by Spark."""
    from rmqctl.repair import rebuild
    from rmqctl.spark.dataset import Dataset
    from rmqctl.spark.plan import StoreRef
    from rmqctl.spark.ship import absolute_store

    store = absolute_store(store)     # executors do not run in the driver's folder
    ref = StoreRef("store", "file://" + str(store.root), str(store.root))
    ds = Dataset.open(spark, [ref], config=store.config)
    # Pass 1 (parallel): settle the plan, so the stream below is exactly the sequential walk.
    ds.run(lambda d: d.records_rdd().map(lambda r: 0).count(), progress=False)
    runs = ds.runs

    def stream():
        it = ds.records_rdd().map(_rec_tuple).toLocalIterator(prefetchPartitions=True)
        yield from it

    # Pass 2: stream in partition (= commitlog) order into the default engine's builders.
    from rmqctl.spark.dataset import _status_param

    ds._acc = spark.sparkContext.accumulator({}, _status_param())
    ctx = rebuild.analyze_rebuild(store, what, staging, records=_SparkRecords(ds, store, stream()), **kw)
    from rmqctl.spark.plan import resolve

    exact, _, _ = resolve(ds.plan, ds._acc.value)
    if not exact:   # cannot happen after pass 1 unless the store changed underneath
        raise RuntimeError("the commitlog changed during the rebuild scan; rerun")
    ds.runs = runs
    return ctx
