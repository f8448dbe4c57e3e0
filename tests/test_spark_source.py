"""The way in from Spark itself -- rmqctl.spark.read_commitlog() and spark.read.format("rocketmq") -- and
export's documented layout and incremental runs, against the in-process engine (local_batches).

Runs on Spark 4 (the data source) and on Spark 3.5 (the min venv: no Python data source; the same
DataFrame through the mapInArrow fallback, and the data source refused in one clear error). Two
Spark test functions sharing the session of tests/spark_fixtures.py."""
from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from oracle_helpers import fixture_dirs
from spark_fixtures import sample_messages, spark, write_store  # noqa: F401 - spark is a fixture

FIXTURES = [p for p in fixture_dirs() if p.name in ("basic-multifile-v5", "compressed-v5", "ipv6-v4", "empty-v5")]


def _legacy_cols():
    from rmqctl.spark.dataset import MESSAGE_COLUMNS

    return [c for c, _ in MESSAGE_COLUMNS] + ["body", "body_note"]


def _norm(v):
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, dict):
        return tuple(sorted(v.items()))
    if isinstance(v, list):
        if v and isinstance(v[0], tuple):          # a map read back by pyarrow: [(k, v)...]
            return tuple(sorted(v))
        return tuple(v)
    return v


def _rows(dicts, cols):
    return sorted(tuple(_norm(d[c]) for c in cols) for d in dicts)


def _local(path, name, flt=None, low=None):
    """The in-process engine's rows (the default engine of stats; the reference)."""
    from rmqctl.spark.dataset import local_batches

    out = []
    for rb in local_batches(path, name=name, body=True, flt=flt):
        out += rb.to_pylist()
    return [r for r in out if low is None or r["physical_offset"] >= low]


def _spark_rows(df):
    return [r.asDict() for r in df.collect()]


def _bad_store(root):
    """A store whose second file has a flipped body byte: the broker's walk stops there."""
    msgs = sample_messages(400, seed=3)
    layout = write_store(str(root), msgs)
    f = sorted((root / "commitlog").iterdir())[1]
    start = int(f.name)
    victim = next(e for e, m in zip(layout, msgs) if e[3] > start + 20000 and len(m["body"]) > 10)
    data = bytearray(f.read_bytes())
    data[victim[3] - start + 88 + 5] ^= 0x55
    f.write_bytes(bytes(data))
    return victim[3]


@pytest.mark.spark
def test_read_commitlog_and_data_source_equal_local(spark, tmp_path):
    import pyspark

    import rmqctl.spark
    from rmqctl.errors import UsageError
    from rmqctl.spark import schema, source
    from rmqctl.spark.dataset import Filter

    assert len(FIXTURES) == 4
    assert not any((p / "store" / "commitlog").exists() for p in FIXTURES if p.name == "empty-v5")   # no commitlog/
    gen = tmp_path / "gen"
    layout = write_store(str(gen), sample_messages(300, seed=9))
    bad = tmp_path / "bad"
    bad_at = _bad_store(bad)
    stores = [(p.name, p / "store") for p in FIXTURES] + [("gen", gen), ("bad", bad)]
    args = [f"{n}={p}" for n, p in stores]
    cols = _legacy_cols()
    want = _rows([r for n, p in stores for r in _local(p, n)], cols)
    assert 0 < sum(1 for r in want if r[0] == "bad") < 400                   # the damage was injected: cut there
    assert max(r[4] for r in want if r[0] == "bad") < bad_at

    # read_commitlog: ranges inside files (resync; the damaged store needs the settling rerun)
    df = rmqctl.spark.read_commitlog(spark, *args, split_size=32768)
    assert df.columns == schema.names(True)
    assert [f.dataType.simpleString() for f in df.schema.fields] == [t for _, t in schema.columns(True)]
    got = _spark_rows(df)
    assert _rows(got, cols) == want
    def instant(ms):     # how pyspark hands a timestamp to Python: a naive local time
        return dt.datetime.fromtimestamp(ms // 1000).replace(microsecond=ms % 1000 * 1000)

    for r in got:        # timestamps: the same instants as the ms columns
        assert r["store_time"] == instant(r["store_timestamp"]) and r["born_time"] == instant(r["born_timestamp"])

    # filters and an incremental start, run in the tasks
    since = layout[120][5]
    df = rmqctl.spark.read_commitlog(spark, f"gen={gen}", topic=["Orders", "TopicA"], queue=[0, 2],
                                     since=dt.datetime.fromtimestamp(since / 1000, dt.timezone.utc), body=False)
    assert df.columns == schema.names(False)
    flt = Filter(topics=frozenset({"Orders", "TopicA"}), queues=frozenset({0, 2}), begin=since)
    want_f = _rows(_local(gen, "gen", flt), [c for c in cols if not c.startswith("body")])
    assert _rows(_spark_rows(df), [c for c in cols if not c.startswith("body")]) == want_f and 0 < len(want_f) < 200
    if int(pyspark.__version__.split(".")[0]) >= 4:
        assert source.supported() and rmqctl.spark.register(spark)
        # a direct load: one partition per commitlog file, undamaged stores
        good = ",".join(a for a in args if not a.startswith("bad="))
        df = spark.read.format("rocketmq").load(good)
        # (pre-allocated files past the end of data hold nothing: not planned)
        files = [f for n, p in stores if n != "bad" and (p / "commitlog").is_dir()
                 for f in (p / "commitlog").iterdir() if any(f.read_bytes()[:8])]
        assert df.rdd.getNumPartitions() == len(files) > len(stores)
        assert _rows(_spark_rows(df), cols) == [r for r in want if r[0] != "bad"]
        df = spark.read.format("rocketmq").option("topic", "Orders").option("body", "false").load(str(gen))
        assert df.columns == schema.names(False)
        assert sorted(r.physical_offset for r in df.collect()) == sorted(e[3] for e in layout if e[0] == "Orders")
        # a damaged store: the task fails with the file, the offset and why (never other rows)
        with pytest.raises(Exception) as e:
            spark.read.format("rocketmq").load(str(bad)).collect()
        msg = str(e.value)
        assert "bad_body_crc" in msg and f"offset {bad_at}" in msg and "read_commitlog" in msg
    else:
        # Spark 3.5: no Python data source -- the fallback above gave the DataFrame; asking for the source fails clearly
        assert not source.supported() and rmqctl.spark.register(spark) is False
        with pytest.raises(UsageError, match="needs Spark 4"):
            rmqctl.spark.read_commitlog(spark, f"gen={gen}", engine="source")


def _read_out(out):
    import pyarrow.dataset as pads

    return pads.dataset(str(out), format="parquet", partitioning="hive").to_table().to_pylist()


@pytest.mark.spark
def test_export_layout_incremental_since_and_schema(cli, spark, tmp_path):
    import pyarrow.parquet as pq

    from rmqctl.spark import schema

    # the schema, without Spark
    code, out, err = cli("export", "--schema", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["version"] == schema.SCHEMA_VERSION == 2 and [c["name"] for c in d["columns"]] == schema.names(True)
    code, out, err = cli("export", "--schema")
    assert code == 0 and "store_time" in out and "timestamp" in out and "version 2" in out
    code, out, err = cli("export", str(tmp_path), "--out", str(tmp_path / "x"), "--conf", "nokey")
    assert code == 2 and err.count("\n") == 1 and "KEY=VALUE" in err
    (tmp_path / "junk.state").write_text('{"x": 1}')
    real = str(next(p for p in FIXTURES if p.name == "basic-multifile-v5") / "store")
    code, out, err = cli("export", real, "--out", str(tmp_path / "x"), "--from-offsets",
                         str(tmp_path / "junk.state"))
    assert code == 2 and err.count("\n") == 1 and "not an export state file" in err

    # messages on both sides of a UTC midnight, the second half appended after the first export
    midnight = 1_700_006_400_000                        # 2023-11-15T00:00:00Z
    msgs = sample_messages(400, seed=7, t0=midnight - 200 * 1500)
    root = tmp_path / "broker-a" / "store"
    write_store(str(root), msgs[:230])
    before = {f.name: f.read_bytes() for f in (root / "commitlog").iterdir()}
    out, state = tmp_path / "lake", tmp_path / "lake.state"
    code, o, err = cli("export", str(root), "--out", str(out), "--from-offsets", str(state), "--json")
    assert code == 0, err
    assert json.loads(o)["messages"] == 230
    first_stop = json.loads(state.read_text())["stores"]["broker-a"]["commitlog_offset"]
    layout = write_store(str(root), msgs)                # the broker appends: 171 messages more
    assert layout[230][3] == first_stop                  # the state names the next record's offset
    for name, data in before.items():                    # an append: the bytes exported stay as they were
        now = (root / "commitlog" / name).read_bytes()
        cut = max(0, min(len(data), first_stop - int(name)))
        assert now[:cut] == data[:cut]
    code, o, err = cli("export", str(root), "--out", str(out), "--from-offsets", str(state), "--json")
    assert code == 0, err
    assert json.loads(o)["messages"] == 171
    code, o, err = cli("export", str(root), "--out", str(out), "--from-offsets", str(state), "--json")
    assert code == 0 and json.loads(o)["messages"] == 0  # nothing new: nothing exported
    rows = _read_out(out)
    assert sorted(r["physical_offset"] for r in rows) == sorted(e[3] for e in layout)   # none lost, none twice
    cols = [c for c in _legacy_cols() if c != "store"]
    assert _rows(rows, cols) == _rows(_local(root, "broker-a"), cols)
    # the layout: store=/topic=/date= (UTC date of store_time), partition columns not in the files
    dates = sorted(os.listdir(out / "store=broker-a" / "topic=Orders"))
    assert dates == ["date=2023-11-14", "date=2023-11-15"]
    for r in rows:
        assert str(r["date"]) == dt.datetime.fromtimestamp(r["store_timestamp"] / 1000, dt.timezone.utc).strftime(
            "%Y-%m-%d")
    part = next((out / "store=broker-a" / "topic=Orders" / "date=2023-11-15").glob("*.parquet"))
    names = pq.read_schema(part).names
    assert "store_time" in names and "topic" not in names and "date" not in names
    import duckdb    # the test extra; reads the layout back with its partition columns

    q = (f"select count(*), count(distinct physical_offset), count(distinct date) from "
         f"read_parquet('{out}/**/*.parquet', hive_partitioning=1) where store = 'broker-a'")
    assert duckdb.connect().execute(q).fetchone() == (401, 401, 2)
    # replay reads the files one by one: it takes store/topic back from the folder names
    code, o, err = cli("replay", str(out), "--to", "127.0.0.1:9", "--dry-run", "--json")
    rep = json.loads(o)
    empty = sum(1 for r in rows if not r["body"] and r["transaction_type"] in ("NOT", "COMMIT"))
    assert code in (0, 4) and rep["rows"] == 401 and rep["failed"] == empty, (o, err)    # the client refuses those
    assert rep["sent"] + rep["failed"] + sum(rep["not_sent"].values()) == 401 and rep["sent"] > 300, rep
    meta = json.loads((out / "_rmqctl").read_text())
    assert meta["schema_version"] == 2 and len(meta["runs"]) == 3
    assert meta["runs"][1]["stores"]["broker-a"] == {"from_offset": first_stop, "to_offset": layout[-1][3] +
                                                     layout[-1][4]}

    # --since (time-based), flat; JSON Lines partitioned by date through Spark's writer
    since = msgs[330]["store_ts"]
    code, o, err = cli("export", str(root), "--out", str(tmp_path / "s"), "--since", str(since),
                       "--partition-by", "none", "--json")
    assert code == 0, err
    want = sorted(e[3] for e in layout if e[5] >= since)
    got = pq.read_table(str(tmp_path / "s")).column("physical_offset").to_pylist()
    assert json.loads(o)["messages"] == len(want) > 0 and sorted(got) == want
    code, o, err = cli("export", str(root), "--out", str(tmp_path / "j"), "--format", "jsonl", "--partition-by",
                       "date", "--no-body", "--json")
    assert code == 0, err
    per_date = {d.name: sum(len(f.read_text().splitlines()) for f in d.glob("*.json"))
                for d in (tmp_path / "j").iterdir() if d.is_dir()}
    assert per_date == {"date=2023-11-14": 200, "date=2023-11-15": 201}
