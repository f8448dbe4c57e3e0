"""LMQ / multi-dispatch stores (5.x enableLmq + enableMultiDispatch, 4.9 INNER_MULTI_DISPATCH to plain
topics), written by the real broker (fixtures lmq-v4, lmq-v5, multidispatch-v4) and judged by it:
verify is clean on them and still sees damage, rebuild cq keeps every LMQ queue and rebuilds them
byte for byte from nothing, recover re-dispatches LMQ units, and the broker then serves the same
units from every queue."""
from __future__ import annotations

import json
import shutil
import struct

import pytest

import faultlib as F
from oracle_helpers import STORES, load_manifest, read_store

LMQ_FIXTURES = ["lmq-v4", "lmq-v5", "multidispatch-v4", "multidispatch-v5"]


def _copy(tmp_path, name):
    F.copy_store(STORES / name, tmp_path / name)
    return tmp_path / name / "store", tmp_path / name / "manifest.json"


def _queues(view):
    return {(q["topic"], q["queue_id"]): q for q in view["queues"]}


def _multi_queues(name):
    """The queues that only multi-dispatch fills (no record of the commitlog names them)."""
    m = load_manifest(STORES / name)
    own = {(r["topic"], r["queue_id"]) for r in m["broker_view"]["messages"]}
    return [k for k in _queues(m["broker_view"]) if k not in own] or \
        [("TopicB", 0)]      # 4.9 plain topic: TopicB:0 gets its own and multi-dispatched units


def test_fixtures_really_have_multi_dispatched_queues():
    for name in LMQ_FIXTURES:
        bv = load_manifest(STORES / name)["broker_view"]
        qs = _queues(bv)
        if name.startswith("lmq"):
            assert {("%LMQ%q1", 0), ("%LMQ%q2", 0), ("%LMQ%q3", 0)} <= set(qs), name
            assert qs[("%LMQ%q2", 0)]["max_offset"] == 36
        elif name.endswith("v5"):
            # 5.x writes multi-dispatch offsets only with enableLmq (off here): nothing dispatched, no TopicC queue
            assert ("TopicC", 0) not in qs
            assert not any("INNER_MULTI_QUEUE_OFFSET" in r["properties"] for r in bv["messages"])
            assert any("INNER_MULTI_DISPATCH" in r["properties"] for r in bv["messages"])
        else:
            # TopicB:0 holds 8 own messages + 15 from TopicA; its records' queue offsets leave gaps
            own = sorted(r["queue_offset"] for r in bv["messages"] if (r["topic"], r["queue_id"]) == ("TopicB", 0))
            assert own != list(range(len(own))), own
            assert qs[("TopicB", 0)]["max_offset"] > len(own)


@pytest.mark.parametrize("name", LMQ_FIXTURES)
def test_verify_clean_without_broker_config(cli, name):
    """No cq.orphan_unit on %LMQ% queues, no commitlog.queue_offset_gap for 4.9 plain-topic multi-dispatch,
    without being told about enableLmq / enableMultiDispatch (the records carry the offsets)."""
    code, out, err = cli("verify", STORES / name / "store")
    assert (code, out) == (0, ""), out + err


@pytest.mark.parametrize("name", LMQ_FIXTURES)
def test_verify_sees_a_damaged_multi_dispatched_unit(cli, tmp_path, name):
    root, _ = _copy(tmp_path, name)
    topic, qid = ("%LMQ%q2", 0) if name.startswith("lmq") else ("TopicC", 1) if name.endswith("v4") else ("TopicB", 1)
    p = root / "consumequeue" / topic / str(qid) / f"{0:020d}"
    b = bytearray(p.read_bytes())
    phys, size, tags = struct.unpack_from(">qiq", b, 40)
    struct.pack_into(">qiq", b, 40, phys, size + 1, tags)
    p.write_bytes(bytes(b))
    assert struct.unpack_from(">qiq", p.read_bytes(), 40)[1] == size + 1     # the fault is there
    code, out, _ = cli("verify", "--json", root)
    assert code == 4
    fs = [f for f in json.loads(out)["findings"] if f["severity"] != "info"]
    assert [(f["check"], f["path"]) for f in fs] == [("cq.unit_mismatch", str(p))], fs


@pytest.mark.parametrize("name", LMQ_FIXTURES)
def test_rebuild_cq_on_intact_store_changes_nothing(cli, tmp_path, name):
    root, _ = _copy(tmp_path, name)
    before = F.tree_hashes(root)
    code, out, err = cli("rebuild", "cq", root)
    assert code == 0, out + err
    assert F.tree_hashes(root) == before


@pytest.mark.oracle
@pytest.mark.parametrize("name", LMQ_FIXTURES)
def test_rebuild_cq_from_scratch_byte_identical_and_served_by_broker(cli, tmp_path, name):
    root, manifest = _copy(tmp_path, name)
    shutil.rmtree(root / "consumequeue")
    assert not (root / "consumequeue").exists()
    code, out, err = cli("rebuild", "cq", "--config", manifest, root)
    assert code == 1, out + err
    shutil.rmtree(root / "rmqctl-quarantine", ignore_errors=True)
    assert F.tree_hashes(root) == F.tree_hashes(STORES / name / "store")
    view = read_store(name.rsplit("-", 1)[1], root)
    expected = load_manifest(STORES / name)["broker_view"]
    assert view["load_ok"] and view["queues"] == expected["queues"]
    for k in _multi_queues(name):
        assert _queues(view)[k]["units"], k


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["lmq-v5", "multidispatch-v4"])
def test_recover_redispatches_multi_dispatched_units(cli, tmp_path, name):
    """A crash that lost the tail of every queue (LMQ ones included): recover appends the units, the broker
    then serves what it served before."""
    root, manifest = _copy(tmp_path, name)
    lost = []
    for d in (root / "consumequeue").iterdir():
        for q in d.iterdir():
            files = sorted(q.iterdir())
            for f in files[1:]:        # keep the first file of each queue
                f.unlink()
                lost.append(f)
    (root / "abort").write_bytes(b"")
    assert lost and all(not p.exists() for p in lost)
    broker = read_store(name.rsplit("-", 1)[1], root)      # the broker's own abnormal recovery of these bytes
    assert broker["recovery"] == "abnormal"
    code, out, err = cli("recover", "--config", manifest, root)
    assert code == 1, out + err
    assert all(p.exists() for p in lost)
    expected = load_manifest(STORES / name)["broker_view"]
    view = read_store(name.rsplit("-", 1)[1], root)
    assert view["recovery"] == "normal" and view["queues"] == broker["queues"] == expected["queues"]


@pytest.mark.parametrize("name", LMQ_FIXTURES)
def test_stats_lists_multi_dispatched_queues_with_broker_max_offsets(name):
    """stats (in-process engine): every queue the broker has, LMQ ones included, with the broker's max
    offset; multi-dispatched units are counted in their queue but not again as messages."""
    from rmqctl.spark import stats

    bv = load_manifest(STORES / name)["broker_view"]
    d = stats.compute_local([STORES / name / "store"])
    got = {(q["topic"], q["queue_id"]): q["max_offset"] for q in d["queues"]}
    assert got == {k: q["max_offset"] for k, q in _queues(bv).items()}
    assert d["totals"]["messages"] == len(bv["messages"])
    multi = {(q["topic"], q["queue_id"]): q.get("multi_dispatched_units", 0) for q in d["queues"]}
    own = {}
    for r in bv["messages"]:
        own[(r["topic"], r["queue_id"])] = own.get((r["topic"], r["queue_id"]), 0) + 1
    assert multi == {k: len(q["units"]) - own.get(k, 0) for k, q in _queues(bv).items()}


def staged_per_record_vs_batch(tmp_path, name, what="cq"):
    """Staged files of rebuild cq from nothing through the per-record feed (what --engine spark streams
    into the builders) and through the default batch path."""
    import hashlib

    from rmqctl.repair import recover as R
    from rmqctl.store.commitlog import CommitLog
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    out = []
    for mode in ("records", "batch"):
        root, manifest = _copy(tmp_path / mode, name)
        shutil.rmtree(root / "consumequeue")
        cfg = StoreConfig().with_values(json.loads(manifest.read_text())["store_config"])
        store = Store.open(root, cfg)
        # the closure is used inside this iteration only: bind this iteration's store
        recs = (lambda walk, store=store: CommitLog(store).records(walk=walk)) if mode == "records" else None
        (tmp_path / mode / "stage").mkdir()
        ctx = R.analyze_rebuild(store, what, tmp_path / mode / "stage", records=recs)
        out.append({a.path: hashlib.sha256(a.payload[1].read_bytes()).hexdigest()
                    for a in ctx.plan.actions if a.kind in ("write_file", "create_file")})
    return out


@pytest.mark.parametrize("name", LMQ_FIXTURES)
def test_per_record_feed_equals_batch_path(tmp_path, name):
    a, b = staged_per_record_vs_batch(tmp_path, name)
    assert any("%LMQ%" in p or "TopicC" in p for p in b) or name.endswith("v5")
    assert a == b


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["crash-lmq-v4", "crash-lmq-v5"])
def test_recover_after_a_real_crash_matches_the_brokers_recovery(cli, tmp_path, name):
    """A broker halted mid-write (LMQ queues behind, %LMQ%q4 never on disk): recover gives every queue, LMQ
    ones included, exactly the units the broker's own abnormal recovery gives (the manifest's view)."""
    root, manifest = _copy(tmp_path, name)
    assert (root / "abort").exists() and not (root / "consumequeue" / "%LMQ%q4").exists()
    code, out, err = cli("recover", "--config", manifest, root)
    assert code == 1, out + err
    assert (root / "consumequeue" / "%LMQ%q4" / "0").is_dir()
    code, out, err = cli("verify", root)
    assert (code, out) == (0, ""), out + err
    view = read_store(name.rsplit("-", 1)[1], root)
    broker = load_manifest(STORES / name)["broker_view"]
    assert broker["recovery"] == "abnormal" and view["recovery"] == "normal"
    assert view["queues"] == broker["queues"]
    assert _queues(view)[("%LMQ%q4", 0)]["max_offset"] == 14


@pytest.mark.parametrize("name", ["lmq-v4", "lmq-v5"])
def test_rebuild_cq_of_one_lmq_queue(cli, tmp_path, name):
    """--topic %LMQ%q2 --queue 0 rebuilds that queue alone from the records of other topics that name it."""
    root, manifest = _copy(tmp_path, name)
    shutil.rmtree(root / "consumequeue" / "%LMQ%q2")
    code, out, err = cli("rebuild", "cq", "--config", manifest, "--topic", "%LMQ%q2", "--queue", "0", root)
    assert code == 1, out + err
    shutil.rmtree(root / "rmqctl-quarantine", ignore_errors=True)
    assert F.tree_hashes(root) == F.tree_hashes(STORES / name / "store")
