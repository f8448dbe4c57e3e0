"""The CLI's Spark engine is built on read_commitlog's scan (rmqctl.spark.api.frame), evaluated inside
Dataset.run(): `export` through Spark's writers writes frame() itself; `stats` and the local Parquet export
give frame() a sink that takes each split's messages in the scan task (why: rmqctl.spark.api) -- and
read_commitlog() reads a DLedger store (through mapInArrow on Spark 4 too: the data source reads commitlog
files only)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_fixtures import sample_messages, spark, write_store  # noqa: F401 - spark is a fixture


@pytest.mark.spark
def test_cli_spark_engine_goes_through_frame(spark, tmp_path, monkeypatch):  # noqa: F811
    from rmqctl.spark import api, stats
    from rmqctl.spark.api import open_dataset
    from rmqctl.spark.dataset import ddl
    from rmqctl.spark.export import export

    root = tmp_path / "s" / "store"
    layout = write_store(str(root), sample_messages(120, seed=5), file_size=16 * 1024)
    calls = []
    real = api.frame

    def spy(ds, flt=None, **kw):
        calls.append((ds.running, kw.get("columns"), kw.get("sink_schema") if kw.get("sink") else None))
        return real(ds, flt, **kw)

    monkeypatch.setattr(api, "frame", spy)
    res = stats.compute(open_dataset(spark, [str(root)]))
    assert res["totals"]["messages"] == len(layout)
    assert calls == [(True, stats.STATS_COLUMNS, ddl(stats.PARTIAL_COLUMNS))]
    calls.clear()
    out = export(open_dataset(spark, [str(root)], body=True), str(tmp_path / "j"), "jsonl")
    assert out["messages"] == len(layout) and len(calls) == 1 and calls[0][0] is True and calls[0][2] is None
    rows = [json.loads(line) for f in out["files"] for line in open(f)]
    assert sorted((r["topic"], r["queue_id"], r["queue_offset"], r["physical_offset"]) for r in rows) == sorted(
        t[:4] for t in layout)
    calls.clear()
    out = export(open_dataset(spark, [str(root)], body=True), str(tmp_path / "p"), "parquet")
    assert out["messages"] == len(layout) and [(c[0], c[2]) for c in calls] == [(True, "path string, rows bigint")]


@pytest.mark.spark
def test_read_commitlog_reads_a_dledger_store(spark):  # noqa: F811
    from rmqctl.spark import read_commitlog
    from rmqctl.spark.dataset import local_batches

    store = Path(__file__).resolve().parent.parent / "fixtures" / "stores" / "dledger-v5" / "store"
    want = sorted((r["topic"], r["queue_id"], r["queue_offset"], r["physical_offset"], r["body"])
                  for rb in local_batches(store, name="d", body=True) for r in rb.to_pylist())
    got = sorted((r.topic, r.queue_id, r.queue_offset, r.physical_offset, bytes(r.body))
                 for r in read_commitlog(spark, f"d={store}").collect())
    assert len(want) > 20 and got == want
