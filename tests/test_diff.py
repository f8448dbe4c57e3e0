"""`rmqctl diff`: replicas written by the real broker (tests/oracle), judged against the broker's view.

A master store is written, copied (a slave that stopped there), then more messages are appended to
the master (the copy is now a prefix) and different messages to another copy (it diverges there)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from oracle_helpers import oracle, read_store

pytestmark = pytest.mark.oracle

CONF = {"mappedFileSizeCommitLog": 4096, "mappedFileSizeConsumeQueue": 200, "maxHashSlotNum": 32,
        "maxIndexNum": 128, "enabledAppendPropCRC": False}


def _scenario(tmp, name, messages, append=False):
    p = tmp / f"{name}.json"
    p.write_text(json.dumps({"name": name, "store_config": CONF, "append": append, "seed": 7,
                             "put_interval_ms": 1, "messages": messages}))
    return p


def _write(tmp, store, name, messages, append=False, version="v5"):
    return oracle(version, "write", "--scenario", _scenario(tmp, name, messages, append), "--store", store)


@pytest.fixture(scope="module", params=["v5", "v4"])
def replicas(tmp_path_factory, request):
    v = request.param
    tmp = tmp_path_factory.mktemp("replicas-" + v)
    a, b, c = tmp / "a" / "store", tmp / "b" / "store", tmp / "c" / "store"
    _write(tmp, a, "base", [{"repeat": 30, "topic": "T", "queue_id": "cycle:3", "keys": ["k-{i}"],
                             "body_random": 120}], version=v)
    shutil.copytree(a, b)       # the slave stopped here
    shutil.copytree(a, c)
    _write(tmp, a, "more", [{"repeat": 12, "topic": "T", "queue_id": "cycle:3", "keys": ["more-{i}"],
                             "body_random": 120}], append=True, version=v)
    _write(tmp, c, "other", [{"repeat": 5, "topic": "Other", "queue_id": 0, "keys": ["x-{i}"],
                              "body_random": 60}], append=True, version=v)
    conf = tmp / "conf.json"
    conf.write_text(json.dumps(CONF))
    views = {k: read_store(v, p, conf) for k, p in (("a", a), ("b", b), ("c", c))}
    return {"a": a, "b": b, "c": c, "conf": conf, "views": views, "version": v}


def _json(cli, *args):
    code, out, err = cli("diff", "--json", *args)
    assert out.count("\n") == 1, (out, err)
    return code, json.loads(out)


def test_prefix_against_broker(cli, replicas):
    va, vb = replicas["views"]["a"], replicas["views"]["b"]
    assert va["load_ok"] and vb["load_ok"]
    assert va["commitlog"]["max_offset"] > vb["commitlog"]["max_offset"]     # really appended
    code, d = _json(cli, replicas["a"], replicas["b"])
    assert code == 0
    assert d["verdict"] == "b_prefix"
    assert d["a"]["max_offset"] == va["commitlog"]["max_offset"]
    assert d["b"]["max_offset"] == vb["commitlog"]["max_offset"]
    assert d["common_prefix_end"] == vb["commitlog"]["max_offset"]
    assert d["ahead"]["messages"] == len(va["messages"]) - len(vb["messages"])
    assert d["ahead"]["bytes"] == va["commitlog"]["max_offset"] - vb["commitlog"]["max_offset"]
    assert d["verdict_line"] == (f"B is a prefix of A (A ahead by {d['ahead']['messages']} messages / "
                                 f"{d['ahead']['bytes']} bytes)")
    # per-queue max offsets side by side, as the broker reports them
    want_a = {(q["topic"], q["queue_id"]): q["max_offset"] for q in va["queues"]}
    want_b = {(q["topic"], q["queue_id"]): q["max_offset"] for q in vb["queues"]}
    got = {(q["topic"], q["queue_id"]): (q["a_max"], q["b_max"]) for q in d["queues"]}
    assert {k: v[0] for k, v in got.items() if v[0] is not None} == want_a
    assert {k: v[1] for k, v in got.items() if v[1] is not None} == want_b
    # the other way round
    code, d2 = _json(cli, replicas["b"], replicas["a"])
    assert code == 0 and d2["verdict"] == "a_prefix" and d2["ahead"]["side"] == "B"
    # the search probes file heads, it does not byte-compare the whole common range
    assert d["stats"]["bytes_compared"] < vb["commitlog"]["max_offset"]


def test_diverged_against_broker(cli, replicas):
    va, vc = replicas["views"]["a"], replicas["views"]["c"]
    p = replicas["views"]["b"]["commitlog"]["max_offset"]     # where both continued differently
    msgs_a = {m["physical_offset"]: m for m in va["messages"]}
    msgs_c = {m["physical_offset"]: m for m in vc["messages"]}
    assert msgs_a[p]["topic"] == "T" and msgs_c[p]["topic"] == "Other"    # the divergence is real
    code, d = _json(cli, replicas["a"], replicas["c"])
    assert code == 4
    assert d["verdict"] == "diverged" and d["common_prefix_end"] == p
    assert d["verdict_line"] == f"diverged at physical offset {p}"
    for side, m in (("a", msgs_a[p]), ("b", msgs_c[p])):
        r = d["first_divergent"][side]
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["size"]) == \
               (m["topic"], m["queue_id"], m["queue_offset"], m["size"])
        assert r["keys"] == m["properties"].get("KEYS")
    code, out, _ = cli("diff", replicas["a"], replicas["c"])
    assert code == 4 and f"verdict: diverged at physical offset {p}" in out
    assert "first divergent record in B: Other queue 0" in out


def test_identical(cli, replicas, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(replicas["a"], copy)
    code, d = _json(cli, replicas["a"], copy)
    assert code == 0 and d["verdict"] == "identical" and d["verdict_line"] == "identical"
    assert d["a"]["confirm_offset"] == d["b"]["confirm_offset"]
    code, out, _ = cli("diff", replicas["a"], copy)
    assert code == 0 and out.rstrip().endswith("verdict: identical")


def test_slave_behind_zero_tail(cli, replicas, tmp_path):
    """A slave that stopped mid-file: the same files, zeros after a record boundary (preallocated)."""
    va = replicas["views"]["a"]
    cut = va["messages"][len(va["messages"]) // 2]
    slave = tmp_path / "store"
    shutil.copytree(replicas["a"], slave)
    size = CONF["mappedFileSizeCommitLog"]
    start = cut["physical_offset"] - cut["physical_offset"] % size
    for f in sorted((slave / "commitlog").iterdir()):
        if int(f.name) > start:
            f.unlink()
    seg = slave / "commitlog" / f"{start:020d}"
    with open(seg, "r+b") as fh:
        fh.seek(cut["physical_offset"] - start)
        fh.write(bytes(size - (cut["physical_offset"] - start)))
    vs = read_store(replicas["version"], slave, replicas["conf"])
    assert vs["commitlog"]["max_offset"] == cut["physical_offset"]        # the fault is what the broker sees
    code, d = _json(cli, replicas["a"], slave)
    assert code == 0 and d["verdict"] == "b_prefix"
    assert d["common_prefix_end"] == cut["physical_offset"]
    assert d["ahead"]["messages"] == len(va["messages"]) - len(vs["messages"])


def test_older_files_gone_on_one_side(cli, replicas, tmp_path):
    """A replica whose first commitlog file expired: compared over the common range, still identical."""
    copy = tmp_path / "store"
    shutil.copytree(replicas["a"], copy)
    first = sorted((copy / "commitlog").iterdir())[0]
    first.unlink()
    vc = read_store(replicas["version"], copy, replicas["conf"])
    assert vc["load_ok"] and vc["commitlog"]["min_offset"] == CONF["mappedFileSizeCommitLog"]
    code, d = _json(cli, replicas["a"], copy)
    assert code == 0 and d["verdict"] == "identical"
    assert d["b"]["min_offset"] == vc["commitlog"]["min_offset"] and d["a"]["min_offset"] == 0
    assert any("min offsets differ" in n for n in d["notes"])


def test_empty_slave(cli, replicas, tmp_path):
    empty = tmp_path / "store"
    (empty / "commitlog").mkdir(parents=True)
    va = replicas["views"]["a"]
    code, d = _json(cli, replicas["a"], empty)
    assert code == 0 and d["verdict"] == "b_prefix" and d["common_prefix_end"] == 0
    assert d["ahead"]["messages"] == len(va["messages"])
    last = va["commitlog"]["max_offset"] - va["commitlog"]["max_offset"] % CONF["mappedFileSizeCommitLog"]
    assert f"from the start of its last commitlog file ({last})" in d["ha"]


def test_usage(cli, tmp_path):
    code, out, err = cli("diff", str(tmp_path / "nope"), str(tmp_path))
    assert code == 2 and err.startswith("rmqctl: ") and err.count("\n") == 1
    code, _, _ = cli("diff", str(tmp_path))
    assert code == 2
    (tmp_path / "x").mkdir()
    code, _, err = cli("diff", str(tmp_path / "x"), str(tmp_path / "x"))
    assert code == 2 and "not a RocketMQ store" in err


@pytest.mark.parametrize("cmd", ["diff", "reclaim"])
def test_no_pyspark_import(cmd):
    import subprocess
    import sys

    code = ("import sys; from rmqctl.cli import run; run(['--help']); run([%r, '--help']); "
            "assert 'numpy' not in sys.modules and 'pyspark' not in sys.modules, 'help'; "
            "import rmqctl.replica, rmqctl.reclaim; assert 'pyspark' not in sys.modules" % cmd)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr


def test_batch_queues_compared_in_inner_messages(cli, tmp_path):
    """5.x BatchCQ queues are compared like the others, their max offsets in inner messages as the broker
    counts them (the fixture's recorded broker view)."""
    from conftest import FIXTURES

    src = FIXTURES / "stores" / "bcq-v5"
    want = {(q["topic"], q["queue_id"]): q["max_offset"]
            for q in json.loads((src / "manifest.json").read_text())["broker_view"]["batch_queues"]}
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(src / "store", a)
    shutil.copytree(src / "store", b)
    last = sorted((b / "batchconsumequeue" / "BcqTopic" / "0").iterdir())[-1]
    last.unlink()                                         # B's queue 0 lost its last batch-queue file
    code, d = _json(cli, a, b)
    rows = {(r["topic"], r["queue_id"]): r for r in d["queues"]}
    assert {k: rows[k]["a_max"] for k in want} == want
    assert rows[("BcqTopic", 0)]["b_max"] < want[("BcqTopic", 0)] and rows[("BcqTopic", 1)]["b_max"] == want[
        ("BcqTopic", 1)]
