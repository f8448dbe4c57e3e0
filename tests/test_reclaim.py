"""`rmqctl reclaim`: a multi-file store written by the real broker, consumer offsets set past the first
files; the result must be a store the broker (tests/oracle) loads and serves every remaining message of."""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

import faultlib as F
from oracle_helpers import oracle, read_store

pytestmark = pytest.mark.oracle

CONF = {"mappedFileSizeCommitLog": 4096, "mappedFileSizeConsumeQueue": 60, "maxHashSlotNum": 8,
        "maxIndexNum": 32, "enabledAppendPropCRC": False}
SIZE = CONF["mappedFileSizeCommitLog"]
OLD = 1_500_000_000      # a file mtime long past any fileReservedTime


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reclaim")
    scen = tmp / "s.json"
    scen.write_text(json.dumps({"name": "reclaim", "store_config": CONF, "seed": 3, "put_interval_ms": 1,
                                "messages": [{"repeat": 60, "topic": "T", "queue_id": "cycle:2",
                                              "keys": ["k-{i}"], "body_random": 150}]}))
    store = tmp / "m" / "store"
    oracle("v5", "write", "--scenario", scen, "--store", store)
    conf = tmp / "conf.json"
    conf.write_text(json.dumps(CONF))
    view = read_store("v5", store, conf)
    assert view["load_ok"] and len(list((store / "commitlog").iterdir())) >= 4
    return {"store": store, "conf": conf, "view": view}


def _units(view, topic, qid):
    q = next(q for q in view["queues"] if q["topic"] == topic and q["queue_id"] == qid)
    return q["units"]


def _copy(master, tmp_path, offsets=None, old=True):
    s = tmp_path / "store"
    shutil.copytree(master["store"], s)
    if offsets is not None:
        (s / "config").mkdir(exist_ok=True)
        table = {f"T@{g}": {str(q): o for q, o in qs.items()} for g, qs in offsets.items()}
        (s / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": table}))
    if old:
        for dirpath, _, files in os.walk(s):
            for n in files:
                os.utime(os.path.join(dirpath, n), (OLD, OLD))
    return s


def _hashes(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        if "rmqctl-quarantine" in dirpath:
            continue
        for n in files:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def _offsets_past(master, files: int):
    """Committed offsets of group g1: per queue, the first message stored at or after commitlog file `files`."""
    cut = files * SIZE
    out = {}
    for q in (0, 1):
        us = _units(master["view"], "T", q)
        out[q] = next(u["queue_offset"] for u in us if u["physical_offset"] >= cut)
    return {"g1": out}


def _plan(cli, store, *args):
    code, out, err = cli("reclaim", "--json", store, *args)
    assert out.count("\n") == 1, (out, err)
    return code, json.loads(out), err


def test_plan_keeps_unconsumed(cli, master, tmp_path):
    s = _copy(master, tmp_path, _offsets_past(master, 2))
    code, p, _ = _plan(cli, s)
    assert code == 0 and p["applied"] is False
    cl = [f["path"] for f in p["files"] if f["kind"] == "commitlog"]
    assert cl == [f"commitlog/{0:020d}", f"commitlog/{SIZE:020d}"]       # g1 has consumed exactly these
    assert p["min_offset_after"] == 2 * SIZE and "g1" in p["blocking_groups"]
    assert p["bytes_freed"] == sum(f["bytes"] for f in p["files"])
    assert all(os.path.getsize(s / f["path"]) == f["bytes"] for f in p["files"])
    assert _hashes(s) == _hashes(_copy(master, tmp_path / "again", _offsets_past(master, 2)))  # plan changes nothing
    # consume-queue files reclaimed are exactly those whose every unit is below the new min offset
    for f in p["files"]:
        if f["kind"] == "consumequeue":
            qid = int(f["path"].split("/")[2])
            first = int(f["path"].split("/")[3]) // 20
            us = [u for u in _units(master["view"], "T", qid) if first <= u["queue_offset"] < first + 3]
            assert len(us) == 3 and all(u["physical_offset"] < 2 * SIZE for u in us)


def test_move_then_broker_serves_the_rest_then_undo(cli, master, tmp_path):
    s = _copy(master, tmp_path, _offsets_past(master, 2))
    before = _hashes(s)
    dest = tmp_path / "spare"
    code, p, err = _plan(cli, s, "--move-to", dest)
    assert code == 1 and p["applied"] is True and p["files"]
    assert "no space is freed" in err              # tmp_path: the same file system
    for f in p["files"]:
        assert not (s / f["path"]).exists() and (dest / f["path"]).is_file()
        assert hashlib.sha256((dest / f["path"]).read_bytes()).hexdigest() == before[f["path"]]
    assert p["bytes_freed"] == sum(os.path.getsize(dest / f["path"]) for f in p["files"])
    view = read_store("v5", s, master["conf"])
    assert view["load_ok"], view.get("load_error")
    new_min = p["min_offset_after"]
    assert view["commitlog"]["min_offset"] == new_min
    want = [m["msg_id"] for m in master["view"]["messages"] if m["physical_offset"] >= new_min]
    assert [m["msg_id"] for m in view["messages"]] == want and want
    for q in view["queues"]:           # every remaining message is still served through its queue
        orig = {u["queue_offset"]: u["physical_offset"] for u in _units(master["view"], q["topic"], q["queue_id"])}
        assert q["max_offset"] == max(orig) + 1
        assert all(orig[u["queue_offset"]] == u["physical_offset"] for u in q["units"])
        assert {o for o, ph in orig.items() if ph >= new_min} <= {u["queue_offset"] for u in q["units"]}
    code, out, err = cli("undo", s)
    assert code == 0, err
    assert _hashes(s) == before


def test_within_reserved_time_nothing(cli, master, tmp_path):
    s = _copy(master, tmp_path, _offsets_past(master, 3), old=False)
    code, p, _ = _plan(cli, s)
    assert code == 0 and p["files"] == [] and "fileReservedTime" in p["commitlog_stopped_by"]
    code, p, _ = _plan(cli, s, "--file-reserved-time", "0")
    assert [f["path"] for f in p["files"] if f["kind"] == "commitlog"][:1] == [f"commitlog/{0:020d}"]
    code, p2, _ = _plan(cli, s, "--ignore-reserved-time")
    assert p2["min_offset_after"] == p["min_offset_after"] == 3 * SIZE


def test_force_unconsumed_counts_losses(cli, master, tmp_path):
    s = _copy(master, tmp_path, _offsets_past(master, 1))
    code, p, _ = _plan(cli, s)
    assert p["min_offset_after"] == SIZE
    would = sum(r["lost_if_forced"] for r in p["group_losses"]["g1"])
    assert sum(r["lost"] for r in p["group_losses"]["g1"]) == 0
    code, out, _ = cli("reclaim", s)
    assert f"group g1 would lose if forced (--force-unconsumed g1): {would} unconsumed message(s)" in out
    code, p, _ = _plan(cli, s, "--force-unconsumed", "g1")
    new_min = p["min_offset_after"]
    assert new_min > SIZE
    committed = _offsets_past(master, 1)["g1"]
    want = sum(1 for q in (0, 1) for u in _units(master["view"], "T", q)
               if committed[q] <= u["queue_offset"] and u["physical_offset"] < new_min)
    assert want > 0
    assert sum(r["lost"] for r in p["group_losses"]["g1"]) == want == would


def test_delete_is_loud_and_broker_loads(cli, master, tmp_path):
    s = _copy(master, tmp_path, _offsets_past(master, 2))
    code, p, err = _plan(cli, s, "--delete")
    assert code == 1 and p["deleted_without_copy"] is True
    assert "WITHOUT a copy" in err
    code, out, _ = cli("undo", s, "--list")
    assert code == 0 and "reclaim-deleted-no-copy" in out and "0 action(s)" in out
    view = read_store("v5", s, master["conf"])
    assert view["load_ok"] and view["commitlog"]["min_offset"] == 2 * SIZE


def test_refused_while_locked(cli, master, tmp_path):
    s = _copy(master, tmp_path, _offsets_past(master, 2))
    before = _hashes(s)
    with F.hold_lock(s):
        code, out, err = cli("reclaim", s, "--delete")
    assert code == 8 and "lock" in err and err.count("\n") == 1
    assert _hashes(s) == before


def test_refused_on_unclean_store(cli, master, tmp_path):
    s = _copy(master, tmp_path, _offsets_past(master, 2))
    (s / "abort").write_bytes(b"")
    before = _hashes(s)
    code, out, err = cli("reclaim", s, "--delete")
    assert code == 4 and "rmqctl recover" in err and err.count("\n") == 1
    assert _hashes(s) == before and not (s / "rmqctl-quarantine").exists()


def test_usage(cli, master, tmp_path):
    code, _, err = cli("reclaim", master["store"], "--delete", "--move-to", str(tmp_path))
    assert code == 2 and err.startswith("rmqctl: ")


@pytest.mark.parametrize("version", ["v5", "v4"])
def test_same_files_as_the_brokers_expiry(cli, master, tmp_path, version):
    """No consumer offsets, every file past fileReservedTime: rmqctl reclaims exactly the files the broker's
    own clean services delete (one pass of CleanCommitLogService + CleanConsumeQueueService)."""
    s = _copy(master, tmp_path / "ours")
    theirs = _copy(master, tmp_path / "theirs")
    r = oracle(version, "expire", "--store", theirs, "--conf", master["conf"], "--hours", "72")
    assert r["load_ok"]
    left_by_broker = set(r["files"])
    code, p, _ = _plan(cli, s, "--move-to", tmp_path / "spare")
    assert code == 1
    gone = {f["path"] for f in p["files"]}
    assert any(f.startswith("commitlog/") for f in gone)        # the broker really expired something
    left_by_us = {os.path.relpath(os.path.join(d, n), s) for sub in ("commitlog", "consumequeue", "index")
                  for d, _, ns in os.walk(s / sub) for n in ns}
    assert left_by_us == left_by_broker
    assert r["min_offset"] == p["min_offset_after"]


@pytest.mark.parametrize("kill_after", [1, 3])
def test_killed_run_then_rerun_converges(master, tmp_path, kill_after):
    from conftest import run_cli

    offsets = _offsets_past(master, 2)
    s, ref = _copy(master, tmp_path / "a", offsets), _copy(master, tmp_path / "b", offsets)
    r = run_cli("reclaim", s, "--move-to", tmp_path / "spare", env={"RMQCTL_TEST_KILL_AFTER": str(kill_after)})
    assert r.returncode == 137                                   # really killed part-way
    assert len(list((s / "commitlog").iterdir())) < len(list((ref / "commitlog").iterdir()))
    r = run_cli("reclaim", "--json", s, "--move-to", tmp_path / "spare")
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["rolled_back_first"].endswith("-reclaim")   # the killed run was undone first
    r2 = run_cli("reclaim", ref, "--move-to", tmp_path / "spare2")
    assert r2.returncode == 1
    assert _hashes(s) .keys() == _hashes(ref).keys()
    assert {k: v for k, v in _hashes(s).items() if not k.startswith("config")} == \
           {k: v for k, v in _hashes(ref).items() if not k.startswith("config")}
    view = read_store("v5", s, master["conf"])
    assert view["load_ok"] and view["commitlog"]["min_offset"] == 2 * SIZE


def test_undelivered_scheduled_messages_are_kept(cli, tmp_path_factory, tmp_path):
    """Delay-level messages wait in SCHEDULE_TOPIC_XXXX until delivered (delayOffset.json): unconsumed too."""
    tmp = tmp_path_factory.mktemp("delay")
    scen = tmp / "s.json"
    scen.write_text(json.dumps({"name": "delay", "store_config": CONF, "seed": 5, "put_interval_ms": 1,
                                "messages": [{"repeat": 4, "topic": "D", "queue_id": 0, "delay_level": 3,
                                              "body_random": 150},
                                             {"repeat": 50, "topic": "T", "queue_id": "cycle:2",
                                              "body_random": 150}]}))
    src = tmp / "w" / "store"
    oracle("v5", "write", "--scenario", scen, "--store", src)
    conf = tmp / "conf.json"
    conf.write_text(json.dumps(CONF))
    view = read_store("v5", src, conf)
    sched = [q for q in view["queues"] if q["topic"] == "SCHEDULE_TOPIC_XXXX"]
    assert len(sched) == 1 and sched[0]["queue_id"] == 2 and sched[0]["max_offset"] == 4   # the fault is real
    s = _copy({"store": src}, tmp_path / "a")
    code, p, _ = _plan(cli, s)
    assert p["min_offset_after"] == 0 and "(scheduled messages, delayOffset.json)" in p["blocking_groups"]
    lost = sum(r["lost_if_forced"] for r in p["group_losses"]["(scheduled messages, delayOffset.json)"])
    assert lost == 4
    (s / "config").mkdir(exist_ok=True)
    (s / "config" / "delayOffset.json").write_text(json.dumps({"offsetTable": {"3": 4}}))   # all delivered
    code, p, _ = _plan(cli, s)
    assert p["min_offset_after"] > 0 and not p["blocking_groups"]
    (s / "config" / "delayOffset.json").unlink()
    code, p2, _ = _plan(cli, s, "--force-unconsumed", "delayed")
    assert p2["min_offset_after"] == p["min_offset_after"]


BCONF = {**CONF, "mapperFileSizeBatchConsumeQueue": 184}      # 4 units per batch consume queue file


@pytest.fixture(scope="module")
def bcq_master(tmp_path_factory):
    """A BatchCQ topic B (inner batches of 3: one unit, three queue offsets each) beside a plain topic T."""
    tmp = tmp_path_factory.mktemp("reclaim-bcq")
    scen = tmp / "s.json"
    scen.write_text(json.dumps({"name": "reclaim-bcq", "store_config": BCONF, "seed": 4, "put_interval_ms": 1,
                                "bcq_topics": ["B"], "messages": [
                                    {"repeat": 40, "topic": "B", "queue_id": "cycle:2", "inner_batch": True,
                                     "batch_properties": {"WAIT": "true"},
                                     "batch": [{"body_random": 120}, {"body_random": 120}, {"body": "x"}]},
                                    {"repeat": 20, "topic": "T", "queue_id": 0, "body_random": 150}]}))
    store = tmp / "m" / "store"
    oracle("v5", "write", "--scenario", scen, "--store", store)
    conf = tmp / "conf.json"
    conf.write_text(json.dumps(BCONF))
    view = read_store("v5", store, conf)
    assert view["load_ok"] and len(list((store / "commitlog").iterdir())) >= 5
    assert len(list((store / "batchconsumequeue" / "B" / "0").iterdir())) >= 3
    return {"store": store, "conf": conf, "view": view}


def _bcq_offsets_past(view, files: int):
    """Committed offsets of group gb on B: per queue, the first inner message stored at or after file `files`."""
    out = {}
    for q in view["batch_queues"]:
        units = q["units"]                                       # [phys, size, tags, ts, base, batch, ...]
        out[q["queue_id"]] = next(u[4] for u in units if u[0] >= files * SIZE)
    return out


def _with_offsets(src, dst, table):
    s = _copy({"store": src}, dst)
    (s / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": table}))
    return s


def test_batch_queue_consumers_keep_their_messages(cli, bcq_master, tmp_path):
    """A group's committed offset on a BatchCQ topic counts inner messages: the commitlog files holding what it has
    not consumed stay; what forcing would lose is counted in messages, not batches."""
    offs = _bcq_offsets_past(bcq_master["view"], 2)
    s = _with_offsets(bcq_master["store"], tmp_path / "a", {"B@gb": {str(q): o for q, o in offs.items()}})
    code, p, _ = _plan(cli, s)
    assert code == 0 and p["min_offset_after"] == 2 * SIZE and "gb" in p["blocking_groups"]
    code, p, _ = _plan(cli, s, "--force-unconsumed", "gb")
    new_min = p["min_offset_after"]
    assert new_min > 2 * SIZE
    want = sum(min(u[4] + u[5], 10 ** 9) - max(u[4], offs[q["queue_id"]])
               for q in bcq_master["view"]["batch_queues"] for u in q["units"]
               if u[4] + u[5] > offs[q["queue_id"]] and u[0] < new_min)
    assert want > 0 and sum(r["lost"] for r in p["group_losses"]["gb"]) == want


def test_batch_queue_files_expire_like_the_brokers(cli, bcq_master, tmp_path):
    s = _copy(bcq_master, tmp_path / "ours")
    theirs = _copy(bcq_master, tmp_path / "theirs")
    r = oracle("v5", "expire", "--store", theirs, "--conf", bcq_master["conf"], "--hours", "72")
    assert r["load_ok"]
    code, p, _ = _plan(cli, s, "--move-to", tmp_path / "spare")
    assert code == 1
    gone = {f["path"] for f in p["files"]}
    assert any(f.startswith("batchconsumequeue/") for f in gone)      # the broker's rule really applied
    left_by_us = {os.path.relpath(os.path.join(d, n), s)
                  for sub in ("commitlog", "consumequeue", "batchconsumequeue", "index")
                  for d, _, ns in os.walk(s / sub) for n in ns}
    assert left_by_us == set(r["files"]) and r["min_offset"] == p["min_offset_after"]
    view = read_store("v5", s, bcq_master["conf"])
    assert view["load_ok"] and view["batch_queues"]
    code, _, err = cli("undo", s)
    assert code == 0, err
    assert _hashes(s) == _hashes(_copy(bcq_master, tmp_path / "again"))
