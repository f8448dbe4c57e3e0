"""Batch consume queues (5.x topics with queue.type=BatchCQ, inner batches: sysflag 0xC0, INNER_NUM/INNER_BASE),
written by the real 5.3.3 broker (fixtures bcq-v5: intact, 460-byte BCQ files = 10 units each; crash-bcq-v5:
abort present, BCQ files behind the commitlog, BcqTwo never on disk) and judged by it: the reader's offsets,
unit lookup and time search equal the broker's getMessage / getOffsetInQueueByTime; verify is clean on the
intact store; rebuild cq is a no-op there and regenerates the files byte for byte from nothing, never under
consumequeue/; recover leaves the files the broker's own recovery leaves; query returns the inner message a
5.x client unwraps; stats and offsets reset count inner messages; a FIFO or link in place of a file hangs
nothing."""
from __future__ import annotations

import base64
import json
import os
import shutil

import pytest

import faultlib as F
from conftest import run_cli
from oracle_helpers import STORES, load_manifest, oracle, read_store

BCQ, CRASH = "bcq-v5", "crash-bcq-v5"


def _copy(tmp_path, name):
    F.copy_store(STORES / name, tmp_path / name)
    for p in [tmp_path / name, *(tmp_path / name).rglob("*")]:
        if not p.is_symlink():
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return tmp_path / name / "store", tmp_path / name / "manifest.json"


def _bqueues(view):
    return {(q["topic"], q["queue_id"]): q for q in view["batch_queues"]}


def _store(path):
    from rmqctl.store.layout import Store

    return Store.open(path)    # sizes (460-byte BCQ files) inferred from the files


def _bcq_bytes(root):
    d = root / "batchconsumequeue"
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_fixtures_really_hold_inner_batches_in_several_bcq_files():
    for name in (BCQ, CRASH):
        m = load_manifest(STORES / name)
        assert m["store_config"]["mapperFileSizeBatchConsumeQueue"] == 460
        bv = m["broker_view"]
        assert bv["load_ok"] and bv["batch_queues"]
        assert any(r["sys_flag"] & 0xC0 == 0xC0 and "INNER_NUM" in r["properties"] for r in bv["messages"])
    bv = load_manifest(STORES / BCQ)["broker_view"]
    q0 = _bqueues(bv)[("BcqTopic", 0)]
    assert [f["name"] for f in q0["files"]] == ["00000000000000000000", "00000000000000000460",
                                                "00000000000000000920"]
    assert {u[5] for u in q0["units"]} == {1, 3, 5}           # singles, 3- and 5-message batches
    assert not (STORES / BCQ / "store" / "consumequeue" / "BcqTopic").exists()
    crash = load_manifest(STORES / CRASH)
    assert crash["broker_view"]["recovery"] == "abnormal"
    assert (STORES / CRASH / "store" / "abort").exists()
    assert not (STORES / CRASH / "store" / "batchconsumequeue" / "BcqTwo").exists()
    assert ("BcqTwo", 0) in _bqueues(crash["broker_view"])


def test_reader_lookups_equal_the_brokers_getmessage_and_time_search():
    from rmqctl.store import batchcq as B

    store = _store(STORES / BCQ / "store")
    assert store.config.bcq_file_size == 460                 # taken from the files, no broker config
    bv = load_manifest(STORES / BCQ)["broker_view"]
    between = 0
    for (t, q), bq_view in _bqueues(bv).items():
        bq = B.BatchQueue(store, t, q)
        assert (bq.min_offset(), bq.max_offset()) == (bq_view["min_offset"], bq_view["max_offset"])
        assert [[u.phys, u.size, u.tags, u.store_ts, u.base, u.batch, u.compacted, u.reserved]
                for u in bq.units()] == bq_view["units"]
        for g in bq_view["get_message"]:
            assert g["status"] == "FOUND"
            u = bq.unit_for(g["offset"])
            assert [u.phys] == g["phys_offsets"] and g["next_begin_offset"] == u.end_offset, g
        for ts, want in bq_view["time_queries"]:
            assert bq.offset_by_time(ts) == want, (t, q, ts)
        # a time between the last unit of one file and the first of the next: the broker answers in the EARLIER
        # file (its last unit), not with the next file's first unit
        files = [bq.file_units(f) for f in bq.files]
        for a, b in zip(files, files[1:]):
            if b and b[0].store_ts - a[-1].store_ts > 1:
                ts = a[-1].store_ts + 1
                assert dict(bq_view["time_queries"])[ts] == a[-1].base == bq.offset_by_time(ts)
                between += 1
    assert between >= 2


def test_verify_is_clean_on_the_intact_store(cli):
    code, out, err = cli("verify", STORES / BCQ / "store")
    assert (code, out) == (0, ""), out + err


def test_verify_reports_the_crashed_store_behind(cli):
    code, out, err = cli("verify", STORES / CRASH / "store")
    assert code == 4, out + err
    # + BcqTwo (no dir) and PlainTopic
    assert out.count("batchconsumequeue/BcqTopic/") == 2 and out.count("cq.behind") == 4
    assert "batchconsumequeue/BcqTwo/0: offset 0: cq.behind" in out
    assert "bcq.file_size" not in out and "bcq.file_name" not in out


def test_rebuild_cq_on_the_intact_store_changes_nothing(cli, tmp_path):
    root, _ = _copy(tmp_path, BCQ)
    before = F.tree_hashes(root)
    code, out, err = cli("rebuild", "cq", root)
    assert code == 0, out + err
    assert F.tree_hashes(root) == before


def test_rebuild_cq_from_nothing_is_byte_identical_and_never_creates_consumequeue(cli, tmp_path):
    root, manifest = _copy(tmp_path, BCQ)
    want = _bcq_bytes(root)
    shutil.rmtree(root / "batchconsumequeue")
    shutil.rmtree(root / "consumequeue")
    code, out, err = cli("rebuild", "cq", "--config", manifest, root)
    assert code == 1, out + err
    assert _bcq_bytes(root) == want
    assert sorted(p.name for p in (root / "consumequeue").iterdir()) == ["PlainTopic"]
    # a damaged (zeroed) middle file: only that file is rewritten
    mid = root / "batchconsumequeue" / "BcqTopic" / "0" / "00000000000000000460"
    mid.write_bytes(bytes(460))
    assert _bcq_bytes(root) != want
    code, out, err = cli("rebuild", "cq", root)
    assert code == 1 and out.count("write_file") == 1, out + err
    assert _bcq_bytes(root) == want


def test_per_record_feed_equals_batch_path(tmp_path):
    """The per-record feed (what --engine spark streams) reads INNER_NUM/INNER_BASE like the batch path."""
    import hashlib

    from rmqctl.repair import recover as R
    from rmqctl.store.commitlog import CommitLog
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    out = []
    for mode in ("records", "batch"):
        root, manifest = _copy(tmp_path / mode, BCQ)
        shutil.rmtree(root / "batchconsumequeue")
        cfg = StoreConfig().with_values(json.loads(manifest.read_text())["store_config"])
        store = Store.open(root, cfg)
        recs = (lambda walk, store=store: CommitLog(store).records(walk=walk)) if mode == "records" else None
        (tmp_path / mode / "stage").mkdir()
        ctx = R.analyze_rebuild(store, "cq", tmp_path / mode / "stage", records=recs)
        out.append({a.path: hashlib.sha256(a.payload[1].read_bytes()).hexdigest()
                    for a in ctx.plan.actions if a.kind in ("write_file", "create_file")})
    assert any("batchconsumequeue/BcqTopic" in p for p in out[1])
    assert out[0] == out[1]


def test_recover_after_a_real_crash_leaves_the_brokers_bcq_files(cli, tmp_path):
    root, _ = _copy(tmp_path, CRASH)
    assert (root / "abort").exists()
    code, out, err = cli("recover", root)
    assert code == 1, out + err
    assert not (root / "consumequeue" / "BcqTopic").exists() and not (root / "consumequeue" / "BcqTwo").exists()
    broker = _bqueues(load_manifest(STORES / CRASH)["broker_view"])
    from rmqctl.store import batchcq as B

    store = _store(root)
    for (t, q), view in broker.items():
        bq = B.BatchQueue(store, t, q)
        assert [f.path.name for f in bq.files] == [f["name"] for f in view["files"]]
        assert [[u.phys, u.size, u.tags, u.store_ts, u.base, u.batch, u.compacted, u.reserved]
                for u in bq.units()] == view["units"]
    code, out, err = cli("verify", root)
    assert (code, out) == (0, ""), out + err
    code, out, err = cli("rebuild", "cq", root)
    assert code == 0, out + err


def test_query_offset_returns_the_inner_message_the_client_unwraps():
    from rmqctl.query import QueryEngine

    store = _store(STORES / BCQ / "store")
    bv = load_manifest(STORES / BCQ)["broker_view"]
    n = 0
    with QueryEngine(store) as q:
        for (t, qid), view in _bqueues(bv).items():
            for g in view["get_message"]:
                got = list(q.by_queue_offset(t, qid, g["offset"]))
                assert len(got) == 1, g
                m, inner = got[0], g["inner"]
                assert m.queue_offset == inner["queue_offset"] == g["offset"]
                assert m.offset == g["phys_offsets"][0]
                assert base64.b64encode(m.body).decode() == inner["body_b64"]
                assert dict(m.properties) == inner["properties"] and m.flag == inner["flag"]
                n += 1
        assert not q.problems
    assert n == sum(q["max_offset"] - q["min_offset"] for q in bv["batch_queues"])


def test_query_time_window_yields_every_inner_message_the_broker_serves(cli):
    """query --topic --begin/--end on a BatchCQ topic reads its batch consume queues (no commitlog scan) and
    yields the inner messages one by one: exactly the broker's getMessage answers for every offset."""
    bv = load_manifest(STORES / BCQ)["broker_view"]
    want = {}
    for (t, qid), view in _bqueues(bv).items():
        units = view["units"]
        lo, hi = units[2][3], units[-3][3]               # store times: a window inside each queue
        for g in view["get_message"]:
            u = next(x for x in units if x[4] <= g["offset"] < x[4] + x[5])
            if lo <= u[3] <= hi:
                want[(qid, g["offset"])] = g["inner"]["body_b64"]
        code, out, err = cli("query", STORES / BCQ / "store", "-t", t, "-q", str(qid), "--begin", str(lo),
                             "--end", str(hi), "--max", "100000", "--json")
        assert code == 0, err
        assert "scanning the commitlog" not in err
        got = {(d["queue_id"], d["queue_offset"]): d["body"] for d in map(json.loads, out.splitlines())}
        assert got == {k: v for k, v in want.items() if k[0] == qid} and got


def test_query_cli_offset_and_time_between_two_files(cli):
    store = STORES / BCQ / "store"
    code, out, err = cli("query", store, "-t", "BcqTopic", "-q", "0", "-o", "4", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert (d["queue_offset"], d["sys_flag"], d["body"]) == (4, 0xC0, base64.b64encode(b"bcq 2 b").decode())
    assert "inner message 2 of 3" in err
    bq = _bqueues(load_manifest(STORES / BCQ)["broker_view"])[("BcqTopic", 0)]
    last0 = bq["units"][9]                       # last unit of the first file
    ts = last0[3] + 1
    assert dict(bq["time_queries"])[ts] == last0[4]
    code, out, err = cli("query", store, "-t", "BcqTopic", "-q", "0", "--time", str(ts), "--json")
    assert code == 0, err
    assert json.loads(out)["queue_offset"] == last0[4]
    code, out, err = cli("query", store, "-t", "BcqTopic", "-q", "0", "-o", "65")
    assert code == 2 and "outside" in err


def test_stats_local_max_offsets_count_inner_messages():
    from rmqctl.spark import stats

    bv = load_manifest(STORES / BCQ)["broker_view"]
    d = stats.compute_local([STORES / BCQ / "store"])
    got = {(q["topic"], q["queue_id"]): q["max_offset"] for q in d["queues"]}
    want = {(q["topic"], q["queue_id"]): q["max_offset"] for q in bv["queues"]}
    assert got == want and got[("BcqTopic", 0)] == 65


def test_offsets_reset_to_time_resolves_as_the_broker(tmp_path):
    from rmqctl.config import offsets as O

    store = _store(STORES / BCQ / "store")
    bv = _bqueues(load_manifest(STORES / BCQ)["broker_view"])
    n = 0
    for (t, q), v in bv.items():
        for ts, want in v["time_queries"][::2]:
            res = O.reset({}, t, "G", "time", store, timestamp=ts)
            assert {qq: new for qq, _, new in res}[q] == want, (t, q, ts)
            n += 1
    assert n > 20
    res = O.reset({}, "BcqTopic", "G", "latest", store)
    assert {q: n for q, _, n in res if q < 2} == {0: 65, 1: 61}


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_fifo_or_link_in_place_of_a_bcq_file_hangs_nothing(tmp_path, kind):
    root, _ = _copy(tmp_path, BCQ)
    f = root / "batchconsumequeue" / "BcqTopic" / "0" / "00000000000000000460"
    f.unlink()
    os.mkfifo(f) if kind == "fifo" else os.symlink("/dev/zero", f)
    assert f.is_fifo() if kind == "fifo" else os.readlink(f) == "/dev/zero"
    others = {p: p.read_bytes() for p in (root / "batchconsumequeue").rglob("0*") if len(p.name) == 20 and p != f}
    cmds = {("verify", root): 4, ("rebuild", "cq", root): 8, ("recover", root): 8,
            ("query", root, "-t", "BcqTopic", "-q", "0", "-o", "12"): 0,
            ("query", root, "-t", "BcqTopic", "-q", "0", "--time", "0"): 0,
            ("config", "offsets", "reset", root, "-g", "G", "-t", "BcqTopic", "--to-earliest", "-n"): 0,
            ("dump", root / "batchconsumequeue" / "BcqTopic" / "0"): 0}
    for args, want in cmds.items():
        r = run_cli(*args, timeout=60)
        err = r.stderr.decode()
        assert r.returncode == want, (args, r.stdout.decode()[-500:], err)
        assert "Traceback" not in err
        if args[0] in ("verify", "rebuild", "recover", "dump"):
            assert "00000000000000000460" in r.stdout.decode() + err, args
    assert os.readlink(f) == "/dev/zero" if kind == "link" else f.is_fifo()
    assert {p: p.read_bytes() for p in others} == others


@pytest.mark.oracle
def test_broker_view_of_the_fixture_is_reproducible_and_rebuilt_store_serves_the_same(cli, tmp_path):
    """The oracle's read of the committed store gives the manifest's batch-queue view; a store whose batch
    consume queues rmqctl regenerated from nothing is served identically by the broker."""
    view = read_store("v5", STORES / BCQ / "store")
    want = load_manifest(STORES / BCQ)["broker_view"]
    assert view["batch_queues"] == want["batch_queues"] and view["queues"] == want["queues"]
    root, manifest = _copy(tmp_path, BCQ)
    shutil.rmtree(root / "batchconsumequeue")
    code, out, err = cli("rebuild", "cq", "--config", manifest, root)
    assert code == 1, out + err
    view = read_store("v5", root)
    assert view["load_ok"] and view["batch_queues"] == want["batch_queues"]


@pytest.mark.oracle
def test_recover_equals_the_brokers_own_restart_byte_for_byte(cli, tmp_path):
    """The broker's own abnormal recovery (oracle restart, in place) and rmqctl recover on two copies of the
    crashed store leave identical batchconsumequeue/ files."""
    broker_root, _ = _copy(tmp_path / "broker", CRASH)
    ours, _ = _copy(tmp_path / "ours", CRASH)
    r = oracle("v5", "restart", "--store", str(broker_root))
    assert r["load_ok"] and r["recovery"] == "abnormal"
    code, out, err = cli("recover", ours)
    assert code == 1, out + err
    theirs = _bcq_bytes(broker_root)
    assert set(theirs) == {"BcqTopic/0/00000000000000000000", "BcqTopic/0/00000000000000000460",
                           "BcqTopic/1/00000000000000000000", "BcqTopic/1/00000000000000000460",
                           "BcqTwo/0/00000000000000000000"}
    assert _bcq_bytes(ours) == theirs
    assert not (broker_root / "consumequeue" / "BcqTopic").exists()


@pytest.mark.oracle
@pytest.mark.parametrize("fault", ["attribute-removed", "consumequeue-dir"])
def test_verify_sees_a_queue_directory_the_broker_refuses(cli, tmp_path, fault):
    """A batchconsumequeue/ directory of a topic topics.json does not call BatchCQ, or a consumequeue/ directory of
    a BatchCQ topic: the broker's load() fails; verify says so (exit 4)."""
    root, _ = _copy(tmp_path, BCQ)
    if fault == "attribute-removed":
        p = root / "config" / "topics.json"
        d = json.loads(p.read_text())
        d["topicConfigTable"]["BcqTopic"]["attributes"] = {}
        p.write_text(json.dumps(d))
        check = "bcq.queue_type"
    else:
        (root / "consumequeue" / "BcqTopic" / "3").mkdir(parents=True)
        check = "cq.queue_type"
    assert read_store("v5", root)["load_ok"] is False
    code, out, err = cli("verify", root)
    assert code == 4 and out.count(check) == 1 and "refuses to start" in out, out + err


def test_verify_sees_a_unit_pointing_at_the_wrong_record_and_rebuild_fixes_it(cli, tmp_path):
    root, _ = _copy(tmp_path, BCQ)
    want = _bcq_bytes(root)
    inj = F.cq_unit_wrong_offset(root, "BcqTopic", 0, delta=7)
    assert "batchconsumequeue" in str(inj.path) and _bcq_bytes(root) != want
    code, out, err = cli("verify", root)
    assert code == 4 and out.count("bcq.unit_mismatch") == 1, out + err
    code, out, err = cli("rebuild", "cq", root)
    assert code == 1, out + err
    assert _bcq_bytes(root) == want
    code, out, err = cli("verify", root)
    assert (code, out) == (0, ""), out + err
