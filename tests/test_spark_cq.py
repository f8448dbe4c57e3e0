"""The consume-queue view (rmqctl.spark.consumequeue): spark.read.format("rocketmq.consumequeue") on Spark 4
and read_consumequeue() (mapInArrow; Spark 3.5 and 4) give exactly the units `rmqctl dump --json` lists for
every consume-queue file of two broker-written fixtures read as two stores at once: a store with
enableConsumeQueueExt (ext addresses in tags_code, two files per queue) and one with LMQ queues (%LMQ%
topic names, 14 files)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from oracle_helpers import fixture_dirs
from spark_fixtures import spark  # noqa: F401 - spark is a fixture

STORES = {p.name: p / "store" for p in fixture_dirs() if p.name in ("cqext-v5", "lmq-v5")}
COLS = ["store", "topic", "queue_id", "queue_offset", "physical_offset", "size", "tags_code"]


def _dumped(cli) -> list[tuple]:
    """Every cq_unit `rmqctl dump --json` prints for the queue directories, with its store/topic/queue
    from the file named in the trailer that ends each file."""
    rows = []
    for name, root in STORES.items():
        queues = sorted(str(q) for q in (root / "consumequeue").glob("*/*") if q.is_dir())
        code, out, err = cli("dump", "--json", *queues)
        assert code == 0, err
        units = []
        for line in out.splitlines():
            d = json.loads(line)
            if d["kind"] == "cq_unit":
                units.append(d)
            elif d["kind"] == "trailer":
                f = Path(d["file"])
                for u in units:
                    rows.append((name, f.parent.parent.name, int(f.parent.name), u["logical_offset"],
                                 u["physical_offset"], u["size"], u["tags_code"]))
                units = []
        assert not units
    return sorted(rows)


@pytest.mark.spark
def test_consumequeue_view_equals_dump(spark, cli):  # noqa: F811
    from rmqctl.spark import read_consumequeue, register
    from rmqctl.spark.consumequeue import COLUMNS
    from rmqctl.spark.source import supported

    want = _dumped(cli)
    assert len({r[0] for r in want}) == 2 and any(r[6] <= -2147483649 for r in want)     # ext addresses
    assert any(r[1].startswith("%LMQ%") for r in want) and any(r[3] >= 10 for r in want)   # LMQ, later files
    paths = [f"{n}={p}" for n, p in STORES.items()]
    frames = {"arrow": read_consumequeue(spark, *paths, engine="arrow")}
    if supported():
        assert register(spark)
        frames["format"] = spark.read.format("rocketmq.consumequeue").option("paths", ",".join(paths)).load()
    else:                     # Spark 3.5: no Python data source; the function is the way in
        assert register(spark) is False
    for how, df in frames.items():
        assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
            (n, {"bigint": "bigint"}.get(t, t)) for n, t in COLUMNS], how
        got = sorted(tuple(r[c] for c in COLS) for r in df.collect())
        assert got == want, how
    one = read_consumequeue(spark, STORES["cqext-v5"], topic="TopicF", queue=[1], engine="arrow").collect()
    assert sorted((r.queue_offset, r.physical_offset) for r in one) == sorted(
        (r[3], r[4]) for r in want if r[0] == "cqext-v5" and r[1] == "TopicF" and r[2] == 1) and one
