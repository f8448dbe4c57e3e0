"""`verify --engine spark`: the SAME per-file function as the default engine, with the commitlog
work done by Spark tasks, so findings are identical by construction (and tested equal on every fixture):
rmqctl.check.commitlog.scan_file (one task per commitlog file -- it carries per-file state), merged and
followed by the queue/index/checkpoint/config checks exactly as verify_store does. The seam is an
explicit parameter of the local engine: verify_store(scan_map=).

`rebuild` has no Spark engine (removed; rmqctl.spark.engine_choice.refuse_spark_rebuild): measured on a
generated 2 GiB store (bench/gen_commitlog.py, 1.85 M messages, 2 cores), `rebuild cq --dry-run` took
5.9 s in process and 39 s with --engine spark (a session alone takes 10-30 s to start), and the files
must be written, journaled and undone where the store is, so executors elsewhere cannot help.
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
