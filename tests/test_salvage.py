"""export --unconsumed (salvage): rows judged against the broker's own getMessage from the offsets it loads."""
from __future__ import annotations

import base64
import json
import struct
from collections import Counter
from pathlib import Path

import pytest
from conftest import writable_store
from oracle_helpers import STORES, load_manifest, oracle, store_config_file
from spark_fixtures import spark  # noqa: F401 - session fixture

UNIT = struct.Struct(">qiq")


def _configs(store: Path, offsets: dict, groups: list[str], v5: bool) -> None:
    from rmqctl.config.groups import template

    cfg = store / "config"
    cfg.mkdir(exist_ok=True)
    table = ",".join(f'{json.dumps(k)}:{{{",".join(f"{q}:{o}" for q, o in v.items())}}}' for k, v in offsets.items())
    (cfg / "consumerOffset.json").write_text('{"offsetTable":{' + table + '}}', encoding="utf-8")
    doc = {"subscriptionGroupTable": {g: template(g, v5) for g in groups},
           "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 1}}
    (cfg / "subscriptionGroup.json").write_text(json.dumps(doc), encoding="utf-8")


CASES = {
    "basic-multifile": ({"TopicA@G1": {0: 3, 1: 15, 2: 0}, "TopicC@G1": {0: 40}, "TopicB@G2": {0: 10, 1: 20}},
                        ["G1", "G2"]),
    "retry-dlq": ({"OrderTopic@GroupA": {0: 1, 1: 0}, "%DLQ%GroupA@GroupC": {0: 0}}, ["GroupA", "GroupB"]),
    "crash-behind": ({"CrashTopic@G1": {0: 5, 1: 12, 2: 0}}, ["G1"]),
    "lmq": ({"%LMQ%q1@G1": {0: 10}, "TopicL@G1": {0: 5, 1: 20}}, ["G1"]),
}


def _store(tmp_path, name, v):
    offsets, groups = CASES[name]
    s = writable_store(tmp_path / f"{name}-{v}" / "store", f"{name}-{v}")
    _configs(s, offsets, groups, v == "v5")
    return s


def _export(cli, store, out, *extra, fmt="jsonl"):
    code, o, e = cli("export", store, "--unconsumed", "--format", fmt, "--out", out, "--json", *extra)
    assert code in (0, 4), e
    res = json.loads(o)
    return code, res


def _rows(out: Path) -> list[dict]:
    rows = []
    for f in sorted(out.glob("*.json")):
        rows.extend(json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line)
    return rows


_FIELDS = ("group", "topic", "queue_id", "queue_offset", "physical_offset", "size", "sys_flag", "flag", "body_crc",
           "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
           "prepared_transaction_offset", "msg_id")


def _ours(rows):
    """Every row as a hashable tuple, counted (a message salvaged twice for a group would show)."""
    return Counter(tuple(r[f] for f in _FIELDS) + (r["body"], tuple(sorted(r["properties"].items()))) for r in rows)


def _broker(rows):
    return Counter(tuple(r[f] for f in _FIELDS) + (r["body_b64"], tuple(sorted(r["properties"].items())))
                   for r in rows)


def _cq_file(store: Path, topic: str, qid: int, offset: int, fs: int) -> tuple[Path, int]:
    return store / "consumequeue" / topic / str(qid) / f"{offset * 20 // fs * fs:020d}", offset * 20 % fs


def _damage_cq(store: Path, fs: int) -> None:
    """Swap two units of TopicC/0 (both look valid, each points at the other's message) and zero unit 5 of
    TopicA/3 (the broker's recovery truncates the queue there)."""
    (pa, a), (pb, b) = _cq_file(store, "TopicC", 0, 42, fs), _cq_file(store, "TopicC", 0, 43, fs)
    ua, ub = pa.read_bytes()[a:a + 20], pb.read_bytes()[b:b + 20]
    for p, at, data in ((pa, a, ub), (pb, b, ua)):
        buf = bytearray(p.read_bytes())
        buf[at:at + 20] = data
        p.write_bytes(bytes(buf))
    pz, z = _cq_file(store, "TopicA", 3, 5, fs)
    buf = bytearray(pz.read_bytes())
    assert buf[z:z + 20] != bytes(20)
    buf[z:z + 20] = bytes(20)
    pz.write_bytes(bytes(buf))
    # the faults are there
    assert UNIT.unpack(pa.read_bytes()[a:a + 20]) == UNIT.unpack(ub) != UNIT.unpack(ua)
    assert pz.read_bytes()[z:z + 20] == bytes(20)


def test_salvage_rows_and_summary(cli, tmp_path):
    s = _store(tmp_path, "retry-dlq", "v5")
    code, res = _export(cli, s, tmp_path / "out")
    assert code == 0
    rows = _rows(tmp_path / "out")
    keys = sorted((r["group"], r["topic"], r["queue_id"], r["queue_offset"]) for r in rows)
    assert keys == [("GroupA", "%RETRY%GroupA", 0, i) for i in range(4)] + [
        ("GroupA", "OrderTopic", 0, 1), ("GroupA", "OrderTopic", 1, 0), ("GroupC", "%DLQ%GroupA", 0, 0)]
    assert list(rows[0])[:3] == ["store", "group", "topic"] and rows[0]["body"]
    q = {(x["group"], x["topic"], x["queue_id"]): x for x in res["queues"]}
    assert q[("GroupA", "%RETRY%GroupA", 0)]["committed"] is None and q[("GroupA", "%RETRY%GroupA", 0)]["rows"] == 4
    assert q[("GroupA", "OrderTopic", 0)]["from_consume_queue"] == 1
    # --no-offset skip leaves the retry topic out; --group narrows
    code, res = _export(cli, s, tmp_path / "o2", "--no-offset", "skip", "--group", "GroupA")
    assert sorted((r["topic"], r["queue_offset"]) for r in _rows(tmp_path / "o2")) == [
        ("OrderTopic", 0), ("OrderTopic", 1)]
    assert any("skipped" in r for x in res["queues"] for r in x["reasons"])
    # text summary
    code, o, e = cli("export", s, "--unconsumed", "--format", "jsonl", "--out", tmp_path / "o3", "--group", "GroupC")
    assert code == 0 and "GroupC %DLQ%GroupA queue 0: committed 0, max 1: 1 placed" in o


def test_salvage_parquet_equals_jsonl(cli, tmp_path):
    import pyarrow.parquet as pq

    s = _store(tmp_path, "basic-multifile", "v5")
    _, res = _export(cli, s, tmp_path / "j")
    _export(cli, s, tmp_path / "p", fmt="parquet")
    q = {(x["group"], x["topic"], x["queue_id"]): x for x in res["queues"]}
    assert q[("G2", "TopicB", 1)]["rows"] == 0 and "above the queue's max 15" in q[("G2", "TopicB", 1)]["reasons"][0]
    assert q[("G1", "TopicA", 3)]["committed"] is None and q[("G1", "TopicA", 3)]["rows"] == 16
    t = pq.read_table(tmp_path / "p" / "part-00000.parquet").to_pylist()
    j = _rows(tmp_path / "j")
    assert len(t) == len(j) > 0
    for a, b in zip(t, j):
        a["body"] = base64.b64encode(a["body"]).decode()
        a["properties"] = dict(a["properties"])
        assert a == b


def test_salvage_usage(cli, tmp_path):
    s = _store(tmp_path, "retry-dlq", "v5")
    code, o, e = cli("export", s, "--unconsumed", "--out", tmp_path / "x", "--topic", "T")
    assert code == 2 and "--unconsumed does not combine with --topic" in e
    code, o, e = cli("export", s, "--out", tmp_path / "x", "--group", "G")
    assert code == 2 and "--unconsumed" in e


def test_salvage_unplaceable_exit_4(cli, tmp_path):
    """A damaged unit whose message is also unreadable in the commitlog cannot be placed: exit 4, said per queue."""
    s = _store(tmp_path, "basic-multifile", "v5")
    fs = load_manifest(STORES / "basic-multifile-v5")["store_config"]["mappedFileSizeConsumeQueue"]
    p, at = _cq_file(s, "TopicC", 0, 45, fs)
    phys, size, _ = UNIT.unpack(p.read_bytes()[at:at + 20])
    buf = bytearray(p.read_bytes())
    buf[at:at + 20] = UNIT.pack(phys + 1, size, 0)      # points into the middle of its message
    p.write_bytes(bytes(buf))
    cl_size = load_manifest(STORES / "basic-multifile-v5")["store_config"]["mappedFileSizeCommitLog"]
    cf = s / "commitlog" / f"{phys // cl_size * cl_size:020d}"
    data = bytearray(cf.read_bytes())
    data[phys % cl_size + 4:phys % cl_size + 8] = b"\0\0\0\0"   # MAGICCODE of that message
    cf.write_bytes(bytes(data))
    assert UNIT.unpack(p.read_bytes()[at:at + 20])[0] == phys + 1
    code, res = _export(cli, s, tmp_path / "out")
    assert code == 4
    q = next(x for x in res["queues"] if x["topic"] == "TopicC")
    assert q["not_placed"] >= 1 and any("offset 45" in r for r in q["reasons"])
    assert q["not_placed"] == 1 and q["rows"] == 50 - 40 - 1


@pytest.mark.oracle
@pytest.mark.parametrize("v", ["v4", "v5"])
@pytest.mark.parametrize("name", ["basic-multifile", "retry-dlq", "crash-behind"])
def test_salvage_equals_broker_getmessage(cli, tmp_path, name, v):
    s = _store(tmp_path, name, v)
    conf = store_config_file(STORES / f"{name}-{v}", tmp_path)
    broker = oracle(v, "salvage", "--store", s, "--conf", conf)
    assert broker["load_ok"] and broker["rows"]
    code, res = _export(cli, s, tmp_path / "out")
    assert code == 0
    assert _ours(_rows(tmp_path / "out")) == _broker(broker["rows"])
    if name == "crash-behind":   # the consume queues stop after 25 puts: the rest came from the commitlog
        assert sum(q["from_commitlog"] for q in res["queues"]) > 0
    if name == "basic-multifile" and v == "v5":
        # damaged consume queues give the same rows (judged against the broker on the intact store)
        fs = load_manifest(STORES / f"{name}-{v}")["store_config"]["mappedFileSizeConsumeQueue"]
        _damage_cq(s, fs)
        code, res = _export(cli, s, tmp_path / "out2")
        assert code == 0
        assert _ours(_rows(tmp_path / "out2")) == _broker(broker["rows"])
        assert sum(q["from_commitlog"] for q in res["queues"]) >= 3


@pytest.mark.oracle
def test_salvage_lmq_queue_equals_broker(cli, tmp_path):
    """A multi-dispatch (LMQ) queue: from its consume queue, and from the commitlog's INNER_MULTI_QUEUE_OFFSET when
    that consume queue is gone; both equal the broker's getMessage on the LMQ queue."""
    import shutil

    s = _store(tmp_path, "lmq", "v5")
    conf = store_config_file(STORES / "lmq-v5", tmp_path)
    broker = oracle("v5", "salvage", "--store", s, "--conf", conf)
    assert any(r["topic"] == "TopicL" for r in broker["rows"]) and broker["queues"][0]["topic"] == "%LMQ%q1"
    assert broker["queues"][0]["rows"] == 24 - 10
    want = _broker(broker["rows"])
    code, res = _export(cli, s, tmp_path / "a", "--broker-config", conf)
    assert code == 0 and _ours(_rows(tmp_path / "a")) == want
    shutil.rmtree(s / "consumequeue" / "%LMQ%q1")
    assert not (s / "consumequeue" / "%LMQ%q1").exists()
    code, res = _export(cli, s, tmp_path / "b", "--broker-config", conf)
    q = next(x for x in res["queues"] if x["topic"] == "%LMQ%q1")
    assert code == 0 and q["from_commitlog"] == 14 and _ours(_rows(tmp_path / "b")) == want


@pytest.mark.spark
def test_salvage_local_equals_spark(cli, tmp_path, spark):  # noqa: F811 - the session fixture
    """The Spark engine (the run's shared session, which the command reuses) gives the local engine's rows."""
    s = _store(tmp_path, "basic-multifile", "v5")
    _export(cli, s, tmp_path / "local")
    code, res = _export(cli, s, tmp_path / "spark", "--engine", "spark")
    assert code == 0
    a, b = _ours(_rows(tmp_path / "local")), _ours(_rows(tmp_path / "spark"))
    assert a == b and len(a) > 0
