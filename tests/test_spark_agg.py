"""Spark at scale, the engine side: stats merged by Spark in the executors (the driver gets only the final
tables), --engine auto|local|spark, the in-process export, the checks made before a session starts (store
arguments, an unreachable or wrong master, a master that never registers), rebuild without a Spark engine,
and Dataset.messages() outside run().

Spark tests share the one session of the test run (spark_fixtures.spark); the checks before the session
run the CLI in-process with session start-up replaced by a failure, so they prove no JVM was started."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spark_fixtures import sample_messages, spark, write_store  # noqa: F401 - spark is a fixture

RMQCTL = Path(sys.executable).parent / "rmqctl"


def _store(tmp_path, name="broker-a", n=400, seed=3, minutes_apart=1500):
    root = tmp_path / name / "store"
    msgs = sample_messages(n, seed=seed, t0=1_700_000_000_000)
    for i, m in enumerate(msgs):
        m["store_ts"] = 1_700_000_000_000 + i * minutes_apart
    write_store(str(root), msgs, file_size=32 * 1024,
                consumer_offsets={("TopicA", "g1"): {0: 3, 1: 0}, ("Orders", "g2"): {2: 10**6}})
    return root


@pytest.fixture
def no_session(monkeypatch):
    """Session start-up made to fail loudly: a check that passes it would be a check after the JVM."""
    from rmqctl.spark import session

    def boom(*a, **k):
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(session, "get_session", boom)


# --- stats merged in the executors ------------------------------------------------------------------

@pytest.mark.spark
def test_stats_spark_merge_equals_local_and_driver_gets_final_tables(spark, tmp_path, monkeypatch):
    """Two stores, a few messages a second, tiny ranges (many tasks, each with partial rows per queue and
    minute): the Spark merge equals the in-process engine, and the driver collects once, one row per
    queue, per topic and per rate point -- fewer than the minute rows the merge started from."""
    from rmqctl.spark import stats
    from rmqctl.spark.dataset import Dataset, local_batches
    from rmqctl.spark.plan import parse_store_args

    a = _store(tmp_path, "broker-a", n=300, seed=3, minutes_apart=400)
    b = _store(tmp_path, "broker-b", n=200, seed=4, minutes_apart=900)
    refs = parse_store_args([str(a), str(b)])
    collected = []
    real = stats._collect

    def spy(df):
        rows = real(df)
        collected.append(len(rows))
        return rows

    monkeypatch.setattr(stats, "_collect", spy)
    ds = Dataset.open(spark, refs, split_size=16384)
    assert len(ds.plan.splits) > 12                          # many tasks, each with its own partials
    got = stats.compute(ds)
    want = stats.compute_local(None, names=refs)
    assert {k: v for k, v in got.items() if k != "scan"} == {k: v for k, v in want.items() if k != "scan"}
    assert got["totals"]["messages"] == 300 + 1 + 200 + 1
    points = sum(len(v) for v in got["rate"]["series"].values())
    assert collected == [len(got["queues"]) + len(got["topics"]) + points]       # one collect: final rows
    merge = stats.Merge()
    for ref in refs:
        agg = stats.SplitAggregate()
        for rb in local_batches(ref.local, name=ref.name, columns=stats.STATS_COLUMNS):
            agg.add(rb)
        merge.add(agg.partials(ref.name))
    assert collected[0] < len(merge.minutes)                 # the minute grain stayed in the executors


@pytest.mark.spark
def test_stats_rate_width_follows_the_span(spark, tmp_path):
    """A span of ~21 h: the series' bucket width grows (2+ minutes per point), the same in both engines."""
    from rmqctl.spark import stats
    from rmqctl.spark.dataset import Dataset
    from rmqctl.spark.plan import parse_store_args

    a = _store(tmp_path, "wide", n=250, seed=9, minutes_apart=300_000)
    refs = parse_store_args([str(a)])
    got = stats.compute(Dataset.open(spark, refs, split_size=16384))
    want = stats.compute_local(None, names=refs)
    assert got["rate"]["per_minute_divisor"] > 1
    assert got["rate"] == want["rate"] and got["queues"] == want["queues"] and got["topics"] == want["topics"]


# --- engine choice -----------------------------------------------------------------------------------

def test_engine_choice(tmp_path, monkeypatch):
    from rmqctl.errors import UsageError
    from rmqctl.spark.engine_choice import choose
    from rmqctl.spark.plan import parse_store_args

    root = _store(tmp_path)
    refs = parse_store_args([str(root)])
    monkeypatch.delenv("RMQCTL_AUTO_SPARK_BYTES", raising=False)
    assert choose("auto", None, refs) == "local"                   # small store: no session start-up
    assert choose("auto", "local[2]", refs) == "spark"             # a master given: Spark
    assert choose("auto", None, parse_store_args(["hdfs://nn:8020/s"])) == "spark"
    assert choose("auto", None, refs, local_ok=False) == "spark"
    assert choose("spark", None, refs) == "spark"
    monkeypatch.setenv("RMQCTL_AUTO_SPARK_BYTES", "1000")         # above the threshold
    assert choose("auto", None, refs) == "spark"
    with pytest.raises(UsageError, match="local paths only"):
        choose("local", None, parse_store_args(["s3a://b/store"]))
    with pytest.raises(UsageError, match="--engine local writes"):
        choose("local", None, refs, local_ok=False, why_not_local="writes Parquet to a local --out")


def test_auto_runs_stats_and_export_in_process(cli, no_session, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from rmqctl.spark import stats
    from rmqctl.spark.dataset import local_messages
    from rmqctl.spark.plan import parse_store_args

    monkeypatch.delenv("SPARK_MASTER", raising=False)
    monkeypatch.delenv("RMQCTL_AUTO_SPARK_BYTES", raising=False)
    root = _store(tmp_path)
    code, out, err = cli("stats", str(root), "--json")
    assert code == 0, err
    res = json.loads(out)
    want = stats.compute_local(None, names=parse_store_args([str(root)]))
    assert {k: v for k, v in res.items() if k not in ("scan", "schema")} == \
        {k: v for k, v in want.items() if k != "scan"}
    dest = tmp_path / "out"
    code, out, err = cli("export", str(root), "--out", str(dest), "--topic", "TopicA", "--json")
    assert code == 0, err
    assert json.loads(out)["messages"] > 0 and (dest / "_SUCCESS").exists()
    table = pq.read_table(dest)
    rows = [r for r in local_messages(root, name="broker-a") if r[1] == "TopicA"]
    assert table.num_rows == len(rows) == json.loads(out)["messages"]
    assert table.column("physical_offset").to_pylist() == [r[4] for r in rows]
    bodies = [bytes(r[-2]) for r in local_messages(root, name="broker-a", body=True) if r[1] == "TopicA"]
    assert table.column("body").to_pylist() == bodies and any(bodies)


@pytest.mark.spark
def test_local_export_equals_spark(spark, tmp_path):
    import pyarrow.parquet as pq

    from rmqctl.spark.dataset import Dataset
    from rmqctl.spark.export import export
    from rmqctl.local_export import export_local
    from rmqctl.spark.plan import parse_store_args
    from rmqctl.spark.schema import DEFAULT_PARTITION_BY

    refs = parse_store_args([str(_store(tmp_path, "a", seed=1)), str(_store(tmp_path, "b", seed=2))])
    export(Dataset.open(spark, refs, body=True, split_size=16384), str(tmp_path / "s"), "parquet")
    res = export_local(refs, str(tmp_path / "l"), "parquet", body=True)
    key = [("store", "ascending"), ("physical_offset", "ascending")]
    s, lo = pq.read_table(tmp_path / "s").sort_by(key), pq.read_table(tmp_path / "l").sort_by(key)
    assert res["messages"] == s.num_rows == 802
    assert lo.schema.names == s.schema.names
    assert lo.to_pylist() == s.to_pylist()
    # the default layout (store=/topic=/date=): the same folders and files' rows both ways
    export(Dataset.open(spark, refs, body=False, split_size=16384), str(tmp_path / "sp"), "parquet",
           partition_by=DEFAULT_PARTITION_BY)
    export_local(refs, str(tmp_path / "p"), "parquet", body=False, partition_by=DEFAULT_PARTITION_BY)
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["_SUCCESS", "store=a", "store=b"]
    assert (tmp_path / "p" / "store=a" / "topic=Orders").is_dir()

    def folders(root):
        return sorted(str(d.relative_to(root)) for d in root.rglob("date=*"))

    assert folders(tmp_path / "p") == folders(tmp_path / "sp") and folders(tmp_path / "p")
    for d in folders(tmp_path / "p"):
        a = pq.read_table(tmp_path / "p" / d).sort_by([("physical_offset", "ascending")])
        b = pq.read_table(tmp_path / "sp" / d).sort_by([("physical_offset", "ascending")])
        assert a.to_pylist() == b.to_pylist(), d


# --- checks before the session ----------------------------------------------------------------------

@pytest.mark.parametrize("cmd", [["stats"], ["export", "--out", "OUT"], ["stats", "--engine", "spark"],
                                 ["export", "--engine", "spark", "--out", "OUT"]])
def test_bad_store_arguments_one_line_before_the_session(cli, no_session, tmp_path, cmd):
    (tmp_path / "notastore").mkdir()
    (tmp_path / "cfgonly" / "config").mkdir(parents=True)
    cmd = [str(tmp_path / "o") if a == "OUT" else a for a in cmd]
    cases = {tmp_path / "missing": "no such store directory",
             tmp_path / "notastore": "not a store directory (no commitlog/",
             tmp_path / "cfgonly": "no commitlog/ in this store"}
    for path, text in cases.items():
        code, out, err = cli(*cmd, str(path))
        assert code == 2, (path, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"rmqctl: {path}: {text}"), lines


def test_existing_export_output_is_refused_before_the_session(cli, no_session, tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x").write_text("keep")
    code, out, err = cli("export", str(_store(tmp_path)), "--out", str(tmp_path / "o"), "--engine", "spark")
    assert code == 2 and err.strip() == f"rmqctl: {tmp_path / 'o'}: output directory exists and is not empty " \
        "(use --overwrite)"
    assert (tmp_path / "o" / "x").read_text() == "keep"


def test_unreachable_master_one_line_exit_8_before_the_session(cli, no_session, tmp_path):
    root = _store(tmp_path)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                                 # nothing listens there now
    for cmd in (["stats"], ["export", "--out", str(tmp_path / "o")], ["verify"]):
        t0 = time.monotonic()
        code, out, err = cli(*cmd, str(root), "--master", f"spark://127.0.0.1:{port}")
        assert code == 8, err
        assert time.monotonic() - t0 < 15
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"spark://127.0.0.1:{port}" in lines[0] and "cannot reach" in lines[0], lines


def _server(handler):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held = []

    def loop():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            held.append(c)
            handler(c)

    threading.Thread(target=loop, daemon=True).start()
    return srv, held


def test_a_proxy_answering_for_the_master_is_refused_before_the_session(cli, no_session, tmp_path):
    """What a transparent HTTP proxy does to spark://10.x:7077 here: accepts, answers 400."""
    def http(c):
        try:
            c.recv(64)
            c.sendall(b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n")
        finally:
            c.close()

    srv, _ = _server(http)
    try:
        url = f"spark://127.0.0.1:{srv.getsockname()[1]}"
        code, out, err = cli("stats", str(_store(tmp_path)), "--master", url)
    finally:
        srv.close()
    assert code == 8
    lines = err.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "not a Spark master" in lines[0] and "400" in lines[0], lines


def _spark_rpc_peer(c):
    """Answers a request frame as Spark's RPC server does for an unknown endpoint (an RpcFailure frame
    echoing the request id, as seen from pyspark 3.5.0 and 4.3.0 masters), then keeps the connection
    open and says nothing more."""
    import struct

    got = c.recv(4096)
    if len(got) >= 17 and got[8] == 3:
        err = b"org.apache.spark.SparkException: Could not find rmqctl-probe."
        msg = b"\x05" + got[9:17] + struct.pack(">i", len(err)) + err
        c.sendall(struct.pack(">q", 8 + len(msg)) + msg)


def test_probe_accepts_what_a_spark_master_does():
    """The probe is an RPC request for an endpoint that does not exist: a Spark RPC server answers with an
    RpcFailure carrying the request id; one that closes at once (authentication or TLS turned on) is let
    through too; a peer that accepts and stays silent is refused within the answer wait."""
    from rmqctl.spark.preflight import probe_master, rpc_probe_frame

    frame = rpc_probe_frame("127.0.0.1", 7077)
    assert int.from_bytes(frame[:8], "big") == len(frame) and frame[8] == 3     # length, RpcRequest
    for handler in (_spark_rpc_peer, lambda c: (c.recv(8), c.close())):
        srv, _ = _server(handler)
        try:
            probe_master(f"spark://127.0.0.1:{srv.getsockname()[1]}")
        finally:
            srv.close()
    srv, held = _server(lambda c: None)
    try:
        t0 = time.monotonic()
        with pytest.raises(Exception, match="did not answer"):
            probe_master(f"spark://127.0.0.1:{srv.getsockname()[1]}", timeout=0.5)
        assert time.monotonic() - t0 < 3
    finally:
        srv.close()


@pytest.mark.spark
def test_unreachable_master_one_line_within_15_s_of_the_command_start(tmp_path):
    """A master port that accepts TCP but never answers (a silent listener) and a refused one: the console
    script itself (interpreter start-up included) prints one line naming the URL and exits 8 within 15 s,
    without starting a JVM. Both run at once; measured ~5.3 s and ~0.3 s here."""
    root = _store(tmp_path)
    srv, held = _server(lambda c: None)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    refused = s.getsockname()[1]
    s.close()
    urls = [f"spark://127.0.0.1:{srv.getsockname()[1]}", f"spark://127.0.0.1:{refused}"]
    env = dict(__import__("os").environ)
    env.pop("SPARK_MASTER", None)
    try:
        t0 = time.monotonic()
        runs = [subprocess.Popen([str(RMQCTL), "stats", str(root), "--master", u], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env) for u in urls]
        done = []
        for r in runs:
            out, err = r.communicate(timeout=60)
            done.append((r.returncode, err.decode(), time.monotonic() - t0))
    finally:
        srv.close()
    assert held, "the silent listener was never connected to"
    for url, (code, err, took), why in zip(urls, done, ("did not answer", "refused")):
        lines = err.strip().splitlines()
        assert code == 8, err
        assert len(lines) == 1 and url in lines[0] and why in lines[0], lines
        assert took < 15, (url, took)


@pytest.mark.spark
def test_a_master_that_never_registers_is_bounded(tmp_path):
    """Answers the probe like a Spark RPC server, then nothing: the JVM starts, the registration watchdog
    (3 s here) ends it; one line, exit 8 -- not Spark's 3 x 20 s retries and a Java stack."""
    root = _store(tmp_path)
    srv, held = _server(_spark_rpc_peer)
    try:
        url = f"spark://127.0.0.1:{srv.getsockname()[1]}"
        env = dict(__import__("os").environ, RMQCTL_SPARK_REGISTER_TIMEOUT="3")     # from the JVM's start
        env.pop("SPARK_MASTER", None)
        t0 = time.monotonic()
        r = subprocess.run([str(RMQCTL), "stats", str(root), "--master", url], capture_output=True, env=env,
                           timeout=180)
        took = time.monotonic() - t0
    finally:
        srv.close()
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == 8, err
    assert len(err) == 1 and url in err[0] and "did not register" in err[0], err
    assert b"Traceback" not in r.stderr
    assert took < 120


# --- rebuild, verify ------------------------------------------------------------------------------------

def test_rebuild_has_no_spark_engine(cli, no_session, tmp_path):
    root = _store(tmp_path)
    for extra in (["--engine", "spark"], ["--master", "local[2]"]):
        code, out, err = cli("rebuild", "cq", str(root), "--dry-run", *extra)
        assert code == 2
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "rebuild -j N" in lines[0], lines
    assert not (root / "consumequeue").exists()
    code, out, err = cli("rebuild", "--help")
    assert "--engine" not in out and "--master" not in out


def test_verify_auto_is_local_without_a_master(cli, no_session, tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    code, out, err = cli("verify", str(_store(tmp_path)), "--json")
    assert code in (0, 4), err          # ran in-process (a session would have failed the fixture)
    json.loads(out)


# --- Dataset outside run() --------------------------------------------------------------------------------

@pytest.mark.spark
def test_dataset_messages_outside_run(spark, tmp_path):
    from rmqctl.spark.dataset import Dataset, local_messages
    from rmqctl.spark.plan import parse_store_args

    root = _store(tmp_path)
    ds = Dataset.open(spark, parse_store_args([f"a={root}"]))
    df = ds.messages(columns=["store", "topic", "physical_offset"])
    got = [(r.store, r.topic, r.physical_offset) for r in df.orderBy("physical_offset").collect()]
    assert got == [(r[0], r[1], r[4]) for r in local_messages(root, name="a")]
