"""The Spark pipeline against the broker's view (fixture manifests) and the local engine.

One session-scoped local[2] SparkSession; every fixture store runs in ONE job (several stores at once
is a feature under test), so the whole module costs a few Spark jobs."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from oracle_helpers import fixture_dirs, load_manifest
from spark_fixtures import sample_messages, spark, write_store  # noqa: F401 - spark is a fixture

pytestmark = pytest.mark.spark
FIXTURES = [p for p in fixture_dirs() if (p / "store" / "commitlog").is_dir()]
NAMES = [p.name for p in FIXTURES]
TX = {0: "NOT", 4: "PREPARED", 8: "COMMIT", 12: "ROLLBACK"}


def _refs(extra=()):
    from rmqctl.spark.plan import parse_store_args

    return parse_store_args([f"{p.name}={p / 'store'}" for p in FIXTURES] + list(extra))


def _local_rows(name, path, body=False, flt=None):
    from rmqctl.spark.dataset import local_messages

    return list(local_messages(path, name=name, body=body, flt=flt))


def _norm_row(row):
    row = tuple(row)
    out = []
    for v in row:
        if isinstance(v, (bytearray, memoryview)):
            v = bytes(v)
        elif isinstance(v, dict):
            v = tuple(sorted(v.items()))
        elif isinstance(v, list):
            v = tuple(tuple(x) if isinstance(x, tuple) else x for x in v)
            if v and isinstance(v[0], tuple):        # map read back by pyarrow as [(k, v)...]
                v = tuple(sorted(v))
        out.append(v)
    return tuple(out)


def test_fixtures_present():
    assert len(FIXTURES) >= 20, "fixture stores missing (fixtures/stores/*/manifest.json)"


@pytest.fixture(scope="module")
def all_stats(spark):
    from rmqctl.spark import stats
    from rmqctl.spark.dataset import Dataset

    ds = Dataset.open(spark, _refs(), split_size=4096)       # tiny ranges: resync on every file
    return stats.compute(ds), ds


def test_stats_equal_broker_view(all_stats):
    result, ds = all_stats
    assert ds.runs == 1
    assert sorted(result["stores"]) == sorted(NAMES)
    by_store = {}
    for q in result["queues"]:
        by_store.setdefault(q["store"], {})[(q["topic"], q["queue_id"])] = q
    for fx in FIXTURES:
        view = load_manifest(fx)["broker_view"]
        # every queue the broker has is listed; one holding only multi-dispatched units (%LMQ% queues)
        # has no messages of its own: those units are counted as multi_dispatched_units
        want = Counter({(vq["topic"], vq["queue_id"]): 0 for vq in view["queues"]})
        want.update((m["topic"], m["queue_id"]) for m in view["messages"])
        got = {k: q["messages"] for k, q in by_store.get(fx.name, {}).items()}
        assert got == dict(want), fx.name
        if not fx.name.startswith("crash"):     # a crash store's queues differ from the broker's recovered ones
            home = {m["physical_offset"]: (m["topic"], m["queue_id"]) for m in view["messages"]}
            multi = {k: q["multi_dispatched_units"] for k, q in by_store.get(fx.name, {}).items()
                     if q.get("multi_dispatched_units")}
            want_multi = {(vq["topic"], vq["queue_id"]): sum(
                home.get(u["physical_offset"]) not in (None, (vq["topic"], vq["queue_id"])) for u in vq["units"])
                for vq in view["queues"]}
            assert multi == {k: n for k, n in want_multi.items() if n}, fx.name
        want_bytes = Counter({k: 0 for k in want})
        for m in view["messages"]:
            want_bytes[(m["topic"], m["queue_id"])] += m["size"]
        assert {k: q["bytes"] for k, q in by_store.get(fx.name, {}).items()} == dict(want_bytes), fx.name
        for vq in view["queues"]:
            q = by_store[fx.name].get((vq["topic"], vq["queue_id"]))
            assert q is not None and (q["max_offset"] or 0) == vq["max_offset"], (fx.name, vq["topic"], vq["queue_id"])
        ts = [m["store_timestamp"] for m in view["messages"]]
        topics = [t for t in result["topics"] if t["store"] == fx.name]
        if ts:
            assert min(t["first_store_timestamp"] for t in topics) == min(ts)
            assert max(t["last_store_timestamp"] for t in topics) == max(ts)
        assert sum(t["messages"] for t in topics) == len(view["messages"])
    # the rate series sums to the message count
    assert sum(n for pts in result["rate"]["series"].values() for _, n in pts) == result["totals"]["messages"]
    # size histogram accounts for every message
    assert sum(sum(t["size_histogram"].values()) for t in result["topics"]) == result["totals"]["messages"]


def test_distinct_keys_estimate(all_stats):
    result, _ = all_stats
    fx = next(p for p in FIXTURES if p.name == "basic-multifile-v5")
    msgs = load_manifest(fx)["broker_view"]["messages"]
    exact = len({k for m in msgs if m["topic"] == "TopicC" for k in m["properties"].get("KEYS", "").split(" ") if k})
    got = next(t for t in result["topics"] if t["store"] == fx.name and t["topic"] == "TopicC")["distinct_keys"]
    assert abs(got - exact) <= max(2, exact * 0.05)


def test_export_parquet_roundtrip_every_fixture(spark, tmp_path):
    """Parquet read back == the local engine's decoded messages == the broker's messages."""
    import pyarrow.parquet as pq

    from rmqctl.spark.dataset import MESSAGE_COLUMNS, Dataset
    from rmqctl.spark.export import export

    ds = Dataset.open(spark, _refs(), body="raw")    # stored bodies: the oracle's body_b64 is not decompressed
    res = export(ds, str(tmp_path / "out"), "parquet")
    table = pq.read_table(str(tmp_path / "out"))
    from rmqctl.spark import schema

    assert table.column_names == schema.names(True)      # the documented schema (with store_time, born_time)
    cols = [c for c, _ in MESSAGE_COLUMNS] + ["body", "body_note"]
    got = sorted(_norm_row(r[c] for c in cols) for r in table.to_pylist())
    want = sorted(_norm_row(r) for fx in FIXTURES for r in _local_rows(fx.name, fx / "store", body="raw"))
    assert res["messages"] == len(want) == len(got)
    assert got == want
    # and against the broker's own decoder, field by field
    idx = {c: i for i, c in enumerate(cols)}
    by_key = {(r[idx["store"]], r[idx["physical_offset"]]): r for r in got}
    n = 0
    for fx in FIXTURES:
        for m in load_manifest(fx)["broker_view"]["messages"]:
            r = by_key[(fx.name, m["physical_offset"])]
            for f in ("topic", "queue_id", "queue_offset", "size", "sys_flag", "flag", "body_crc", "born_timestamp",
                      "born_host", "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset",
                      "msg_id"):
                assert r[idx[f]] == m[f], (fx.name, m["physical_offset"], f)
            assert r[idx["body"]] == base64.b64decode(m["body_b64"])
            assert dict(r[idx["properties"]]) == m["properties"]
            # the oracle prints MessageSysFlag.getTransactionValue: (sys_flag & 0xC) >> 2
            assert r[idx["transaction_type"]] == TX[m["transaction_type"] << 2] == TX[m["sys_flag"] & 0xC]
            n += 1
    assert n == len(got)


def test_binaryfiles_and_resync_equal_local(spark, tmp_path):
    """--io binaryfiles over file:// and a corrupt store scanned in tiny ranges give the local engine's rows."""
    from rmqctl.spark.dataset import Dataset
    from rmqctl.spark.plan import parse_store_args

    bad = tmp_path / "bad"
    msgs = sample_messages(400, seed=3)
    layout = write_store(str(bad), msgs)
    f = sorted((bad / "commitlog").iterdir())[1]
    start = int(f.name)
    victim = next(e for e, m in zip(layout, msgs) if e[3] > start + 20000 and len(m["body"]) > 10)
    data = bytearray(f.read_bytes())
    data[victim[3] - start + 88 + 5] ^= 0x55   # a body byte in the second file: the walk stops there
    f.write_bytes(bytes(data))
    f.write_bytes(bytes(data))
    stores = [FIXTURES[0], next(p for p in FIXTURES if p.name.startswith("crash-multifile"))]
    args = [f"{p.name}={p / 'store'}" for p in stores] + [f"bad={bad}"]
    want = sorted(_norm_row(r) for p in stores for r in _local_rows(p.name, p / "store")) + \
        [_norm_row(r) for r in _local_rows("bad", bad)]
    want.sort()
    assert 0 < len(_local_rows("bad", bad)) < 400
    for io, split in (("binaryfiles", None), ("pread", 2048)):
        ds = Dataset.open(spark, parse_store_args(args), io=io, split_size=split)
        got = sorted(_norm_row(r) for r in ds.run(lambda d: d.messages().collect()))
        assert got == want, io
        if io == "pread":
            assert ds.runs == 2                # the first run resynced past the bad record; rerun cut it
            assert ds.last_summary["bad"]["stop"]["kind"] == "bad_body_crc"


def test_dispatch_rows_match_broker_queues(spark):
    from rmqctl.config.topics import configured_batch_topics
    from rmqctl.spark.dataset import Dataset

    ds = Dataset.open(spark, _refs())
    rows = ds.run(lambda d: d.dispatch().collect())
    cq = {}
    for r in rows:
        if r.kind == "cq":
            cq.setdefault((r.store, r.topic, r.queue_id), []).append((r.queue_offset, r.physical_offset, r.size,
                                                                      r.tags_code))
    for fx in FIXTURES:
        # batch topics: queue.type=BatchCQ in topics.json (a queue may have no folder yet) or a folder
        folders = {p.name for p in (fx / "store" / "batchconsumequeue").glob("*")}
        batch = configured_batch_topics(fx / "store") | folders
        for vq in load_manifest(fx)["broker_view"]["queues"]:
            units = sorted(cq.get((fx.name, vq["topic"], vq["queue_id"]), []))
            # with enableConsumeQueueExt the unit stores an address into consumequeue_ext and the dispatched
            # tagsCode lives in the ext unit; a dispatch row carries the dispatched tagsCode
            want = [(u["queue_offset"], u["physical_offset"], u["size"], (u.get("ext") or u)["tags_code"])
                    for u in vq["units"]]
            if vq["topic"] in batch:    # one unit per batch record; the broker's view lists it for each inner offset
                want = sorted(set(want))
            assert [u for u in units if u[0] >= vq["min_offset"]] == want, (fx.name, vq["topic"], vq["queue_id"])


def test_cli_stats_and_export(cli, spark, tmp_path):
    store = tmp_path / "broker-a" / "store"
    msgs = sample_messages(300, seed=5)
    write_store(str(store), msgs, consumer_offsets={("TopicA", "g1"): {0: 3, 1: 0}, ("Orders", "g2"): {2: 10**6}})
    chart = tmp_path / "rate.html"
    code, out, err = cli("stats", str(store), "--json", "--chart", str(chart), "--engine", "spark")
    assert code == 0, err
    res = json.loads(out)
    assert res["stores"] == ["broker-a"]
    rows = _local_rows("broker-a", store)
    assert res["totals"]["messages"] == len(rows) == len(msgs)
    mx = Counter()
    for r in rows:
        if r[8] in ("NOT", "COMMIT"):
            mx[(r[1], r[2])] = max(mx[(r[1], r[2])], r[3] + 1)
    lag = {(d["group"], d["topic"], d["queue_id"]): d for d in res["consumer_lag"]}
    assert lag[("g1", "TopicA", 0)]["lag"] == mx[("TopicA", 0)] - 3
    assert lag[("g1", "TopicA", 1)]["lag"] == mx[("TopicA", 1)]
    assert lag[("g2", "Orders", 2)]["lag"] == 0          # committed beyond max: no negative lag
    html = chart.read_text()
    assert "<svg" in html and "http" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "TopicA" in html
    # text output: tables on stdout
    code, out, err = cli("stats", str(store))
    assert code == 0 and "Topics" in out and "Consumer lag" in out and "TopicA" in out
    # export jsonl with filters == local filtering
    begin = msgs[50]["store_ts"]
    code, out, err = cli("export", str(store), "--format", "jsonl", "--out", str(tmp_path / "j"), "--topic", "TopicA",
                         "--topic", "Orders", "--begin", str(begin), "--transaction-type", "NOT", "--json")
    assert code == 0, err
    from rmqctl.spark.dataset import Filter

    want = _local_rows("broker-a", store, body=True,
                       flt=Filter(topics=frozenset({"TopicA", "Orders"}), begin=begin,
                                  transaction_types=frozenset({"NOT"})))
    got = []
    for f in (tmp_path / "j").glob("*.json"):
        got += [json.loads(line) for line in f.read_text().splitlines() if line]
    assert json.loads(out)["messages"] == len(want) == len(got) > 0
    assert sorted(g["physical_offset"] for g in got) == sorted(r[4] for r in want)
    g0 = min(got, key=lambda g: g["physical_offset"])
    w0 = min(want, key=lambda r: r[4])
    assert base64.b64decode(g0["body"]) == w0[-2] and g0["properties"] == w0[-3] and g0["body_note"] == w0[-1]
    # --key
    code, out, err = cli("export", str(store), "--out", str(tmp_path / "k"), "--key", "k7", "--json")
    assert code == 0, err
    nk = sum(1 for r in rows if "k7" in r[14])
    assert json.loads(out)["messages"] == nk > 0
    # existing output without --overwrite: usage error, one line
    code, out, err = cli("export", str(store), "--out", str(tmp_path / "k"))
    assert code == 2 and err.count("\n") == 1


def test_duckdb_reads_export(spark, tmp_path):
    import duckdb  # in the test extra: the issue promises DuckDB can read the export
    from rmqctl.spark.dataset import Dataset
    from rmqctl.spark.export import export

    ds = Dataset.open(spark, _refs()[:2])
    export(ds, str(tmp_path / "o"), "parquet")
    n = duckdb.connect().execute(f"select count(*) from read_parquet('{tmp_path / 'o'}/*.parquet')").fetchone()[0]
    assert n == sum(len(load_manifest(p)["broker_view"]["messages"]) for p in FIXTURES[:2])


@pytest.mark.parametrize("args", [["--help"], ["dump", "--help"], ["query", "--help"], ["config", "--help"],
                                  ["dump", "FIXTURE"], ["stats", "--help"]])
def test_quick_path_never_imports_pyspark(args):
    args = [str(FIXTURES[0] / "store") if a == "FIXTURE" else a for a in args]
    code = ("import sys\nfrom rmqctl.cli import run\nrc = run(%r)\n"
            "bad = [m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.') or m == 'py4j']\n"
            "sys.stderr.write('IMPORTED %%s\\n' %% bad if bad else 'CLEAN\\n')\nsys.exit(int(rc))\n" % (args,))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, NO_COLOR="1"))
    assert r.stderr.strip().endswith("CLEAN"), r.stderr[-500:]
    assert r.returncode == 0


def test_plan_without_spark_equals_local_on_every_fixture():
    """The executor code path (walk_split + resolve) in plain Python, tiny and odd range sizes."""
    from rmqctl.spark.plan import parse_store_args, plan_local, resolve, walk_split
    from rmqctl.store.layout import Store

    for fx in FIXTURES:
        ref = parse_store_args([f"{fx.name}={fx / 'store'}"])[0]
        files = [(str(f.path), f.start, f.size) for f in Store.open(fx / "store").commitlog.files]
        want = [r[4] for r in _local_rows(fx.name, fx / "store")]
        for size in (97, 1000, 1 << 20):
            plan = plan_local([ref], {ref.name: files}, split_size=size)
            for _ in range(3):
                got, st = [], {}
                for s in plan.splits:
                    g = walk_split(s, {})
                    try:
                        while True:
                            got.append(next(g).offset)
                    except StopIteration as e:
                        st[s.id] = e.value
                exact, fixed, _ = resolve(plan, st)
                if exact:
                    break
                plan = fixed
            assert exact and got == want, (fx.name, size)


def test_stats_default_engine_equals_spark(all_stats):
    """The default (non-Spark) engine runs the same task function in-process: identical results,
    HLL estimates included (the registers are deterministic)."""
    from rmqctl.spark import stats

    result, _ = all_stats
    local = stats.compute_local(None, names=_refs())
    assert {k: v for k, v in local.items() if k != "scan"} == {k: v for k, v in result.items() if k != "scan"}
    assert local["totals"]["messages"] == sum(len(load_manifest(p)["broker_view"]["messages"]) for p in FIXTURES)


def test_direct_parquet_export_after_rerun(spark, tmp_path):
    """Tasks write their own part files; a corrupt store scanned in tiny ranges needs a second run:
    the first run's files are discarded, the output equals the local engine's rows exactly once."""
    import pyarrow.parquet as pq

    from rmqctl.spark.dataset import MESSAGE_COLUMNS, Dataset
    from rmqctl.spark.export import export
    from rmqctl.spark.plan import parse_store_args

    bad = tmp_path / "bad"
    msgs = sample_messages(400, seed=11)
    layout = write_store(str(bad), msgs)
    f = sorted((bad / "commitlog").iterdir())[1]
    start = int(f.name)
    victim = next(e for e, m in zip(layout, msgs) if e[3] > start + 20000 and len(m["body"]) > 10)
    data = bytearray(f.read_bytes())
    data[victim[3] - start + 88 + 5] ^= 0x55
    f.write_bytes(bytes(data))
    ds = Dataset.open(spark, parse_store_args([f"bad={bad}"]), split_size=2048, body=True)
    res = export(ds, str(tmp_path / "out"), "parquet")
    assert ds.runs == 2
    want = sorted(_norm_row(r) for r in _local_rows("bad", bad, body=True))
    table = pq.read_table(str(tmp_path / "out"))
    cols = [c for c, _ in MESSAGE_COLUMNS] + ["body", "body_note"]
    got = sorted(_norm_row(r[c] for c in cols) for r in table.to_pylist())
    assert res["messages"] == len(got) == len(want) > 0 and got == want
    assert sorted(os.listdir(tmp_path / "out")) == sorted(["_SUCCESS", "_rmqctl"] +
                                                          [os.path.basename(p) for p in res["files"]])
