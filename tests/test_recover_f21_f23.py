"""Fault matrix F21 (deleted topic still in the commitlog), F22 (DUP_INFO / controller-mode records) and
F23 (config/timercheck beyond what the repair leaves), without the Java oracle."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import faultlib as F
from faultlib import tree_hashes
from conftest import FIXTURES

from rmqctl import dispatch as D
from rmqctl.config.files import decode_timercheck
from rmqctl.formats._derive import struct_format
from rmqctl.formats.timer import TimerCheckpoint
from rmqctl.repair.topic_filter import is_system_topic
from rmqctl.store.commitlog import CommitLog
from rmqctl.store.config import StoreConfig
from rmqctl.store.layout import Store

STORES = FIXTURES / "stores"


def copy(name: str, tmp: Path) -> Path:
    F.copy_store(STORES / name, tmp / name)
    return tmp / name / "store"


def conf(root: Path) -> Path:
    return root.parent / "manifest.json"


def write_topics(root: Path, names, *, name="topics.json") -> None:
    (root / "config").mkdir(exist_ok=True)
    table = {t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6} for t in names}
    (root / "config" / name).write_text(json.dumps({"topicConfigTable": table, "dataVersion": {"counter": 1}}))


def records_of(root: Path, topic: str):
    m = json.loads(conf(root).read_text())["store_config"]
    store = Store.open(root, StoreConfig().with_values(m))
    return [r for r in CommitLog(store).records() if r.topic == topic]


# -- F21 ----------------------------------------------------------------------------------------------

def test_rebuild_cq_skips_a_topic_missing_from_topics_json(cli, tmp_path):
    root = copy("basic-multifile-v5", tmp_path)
    original = tree_hashes(root)
    c_recs = [r for r in records_of(root, "TopicC") if D.goes_to_consume_queue(r.sys_flag)]
    assert c_recs
    write_topics(root, ["TopicA", "TopicB"])
    code, out, err = cli("rebuild", "cq", "--json", "--config", conf(root), root)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["actions"] == []                        # TopicA/B byte-identical, TopicC's files untouched
    assert plan["topics"]["checked_against"] == "config/topics.json"
    assert plan["topics"]["skipped"] == {"TopicC": len(c_recs)}
    assert any("TopicC" in n and "skipped" in n for n in plan["notes"])
    # text plan lists it too
    code, out, err = cli("rebuild", "cq", "--dry-run", "--config", conf(root), root)
    assert code == 0, err
    assert f"TopicC: {len(c_recs)}" in out
    # the broker deleted the topic's queues: rebuild does not bring them back ...
    import shutil

    shutil.rmtree(root / "consumequeue" / "TopicC")
    code, out, err = cli("rebuild", "cq", "--json", "--config", conf(root), root)
    assert code == 0, err
    assert not (root / "consumequeue" / "TopicC").exists()
    # ... unless asked: then byte-identical to the broker's own files
    code, out, err = cli("rebuild", "cq", "--json", "--include-deleted-topics", "--config", conf(root), root)
    assert code == 1, err
    assert json.loads(out)["topics"]["skipped"] == {}
    after = tree_hashes(root)
    assert {k: v for k, v in after.items() if not k.startswith("config/")} == original


def test_rebuild_index_leaves_out_the_deleted_topics_keys(cli, tmp_path):
    root = copy("basic-multifile-v5", tmp_path)
    c_recs = records_of(root, "TopicC")
    c_keys = sum(len(D.index_keys(r.properties)) for r in c_recs if D.goes_to_index(r.sys_flag))
    code, out, err = cli("rebuild", "index", "--dry-run", "--json", "--config", conf(root), root)
    assert code == 0, err
    full_items = json.loads(out)["summary"]["items"]
    write_topics(root, ["TopicA", "TopicB"])
    code, out, err = cli("rebuild", "index", "--dry-run", "--json", "--config", conf(root), root)
    plan = json.loads(out)
    assert code == 4 and plan["actions"], err
    assert plan["topics"]["skipped"] == {"TopicC": len(c_recs)}
    assert plan["summary"]["items"] == full_items - c_keys
    code, out, err = cli("rebuild", "index", "--dry-run", "--json", "--include-deleted-topics",
                         "--config", conf(root), root)
    assert code == 0 and json.loads(out)["actions"] == [], err


def test_topics_json_bak_missing_or_corrupt(cli, tmp_path):
    root = copy("basic-multifile-v5", tmp_path)
    # no config/ at all: everything kept, the plan says why
    code, out, err = cli("rebuild", "cq", "--json", "--config", conf(root), root)
    plan = json.loads(out)
    assert code == 0 and plan["topics"]["checked_against"] is None and plan["topics"]["skipped"] == {}
    assert "missing" in plan["topics"]["why"] and "every topic is kept" in plan["topics"]["why"]
    # corrupt main, no .bak: the broker would start with no topics; nothing skipped
    (root / "config").mkdir()
    (root / "config" / "topics.json").write_bytes(b'{"topicConfigTable":{"TopicA":{')
    code, out, err = cli("rebuild", "cq", "--json", "--config", conf(root), root)
    plan = json.loads(out)
    assert code == 0 and plan["topics"]["skipped"] == {} and "EMPTY" in plan["topics"]["why"]
    # corrupt main, good .bak: the broker loads .bak -> TopicC skipped
    write_topics(root, ["TopicA", "TopicB"], name="topics.json.bak")
    code, out, err = cli("rebuild", "cq", "--json", "--config", conf(root), root)
    plan = json.loads(out)
    assert code == 0 and plan["topics"]["checked_against"] == "config/topics.json.bak"
    assert list(plan["topics"]["skipped"]) == ["TopicC"]


def test_system_topics_are_always_kept(cli, tmp_path):
    for t in ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer", "%RETRY%g", "%DLQ%g",
              "%LMQ%q", "TBW102", "OFFSET_MOVED_EVENT", "BenchmarkTest", "DefaultCluster_REPLY_TOPIC"):
        assert is_system_topic(t), t
    assert not is_system_topic("OrderTopic")
    root = copy("retry-dlq-v5", tmp_path)
    original = tree_hashes(root)
    write_topics(root, ["OrderTopic"])      # only the user topic: %RETRY%, %DLQ%, SCHEDULE kept
    for what in ("cq", "index"):
        code, out, err = cli("rebuild", what, "--json", "--config", conf(root), root)
        assert code == 0, err
        plan = json.loads(out)
        assert plan["actions"] == [] and plan["topics"]["skipped"] == {}
    assert {k: v for k, v in tree_hashes(root).items() if not k.startswith("config/")} == original


def test_recover_redispatches_deleted_topics_like_the_broker_and_says_so(cli, tmp_path):
    root = copy("crash-behind-v5", tmp_path)
    write_topics(root, ["SomethingElse"])
    code, out, err = cli("recover", "--dry-run", "--json", "--config", conf(root), root)
    plan = json.loads(out)
    assert code == 4, err
    assert any(a["path"].startswith("consumequeue/CrashTopic/") for a in plan["actions"])
    assert any("CrashTopic" in n and "re-dispatched" in n for n in plan["notes"])


# -- F22 ----------------------------------------------------------------------------------------------

def _dup_store(root: Path, dup: list) -> list[int]:
    """A one-file store whose records carry DUP_INFO where dup[i] is a string; returns record ends."""
    fsize = 16384
    (root / "commitlog").mkdir(parents=True)
    buf, pos, ends = bytearray(fsize), 0, []
    for i, d in enumerate(dup):
        props = {"UNIQ_KEY": f"U{i}", "KEYS": f"k{i}"}
        if d is not None:
            props["DUP_INFO"] = d
        rec = F._record(topic="DupTopic", qid=0, qoff=i, phys=pos, body=b"x" * 10, props=F._props(props),
                        born_ts=1_700_000_000_000 + i, store_ts=1_700_000_000_100 + i)
        buf[pos:pos + len(rec)] = rec
        pos += len(rec)
        ends.append(pos)
    (root / "commitlog" / f"{0:020d}").write_bytes(bytes(buf))
    (root / "abort").write_bytes(b"")
    return ends


def test_dup_info_is_reported_and_a_missing_one_truncates_nothing(cli, tmp_path):
    root = tmp_path / "dup"
    ends = _dup_store(root, [None, "0_1", "1_1", None, "bad"])
    code, out, err = cli("recover", "--json", root)
    assert code == 1, err
    plan = json.loads(out)
    assert plan["commitlog"]["valid_end"] == ends[-1]          # not 0, not at the first record lacking it
    d = plan["commitlog"]["dup_info"]
    assert d == {"records_with": 3, "records_without": 2, "malformed": 1, "first_without": 0}
    assert any("DUP_INFO" in n and "duplicationEnable" in n for n in plan["notes"])
    # a store without any DUP_INFO says nothing about it
    root2 = tmp_path / "plain"
    _dup_store(root2, [None, None])
    code, out, err = cli("recover", "--json", root2)
    plan = json.loads(out)
    assert "dup_info" not in plan["commitlog"] and not any("DUP_INFO" in n for n in plan["notes"])


# -- F23 ----------------------------------------------------------------------------------------------

TC = struct.Struct(struct_format(TimerCheckpoint))


def _timer_store(tmp_path: Path, name: str, *, qunits: int, tl_units: int, last_q: int, flush: int,
                 master: int):
    root = copy(name, tmp_path)
    # a timer consume queue of `qunits` units (borrowed from a real queue so they point at valid records)
    src = sorted((root / "consumequeue").glob("*/0/0*"))[0]
    data = bytearray(src.read_bytes())
    data[qunits * 20:] = bytes(len(data) - qunits * 20)
    tq = root / "consumequeue" / "rmq_sys_wheel_timer" / "0"
    tq.mkdir(parents=True)
    (tq / src.name).write_bytes(bytes(data))
    (root / "timerlog").mkdir()
    tl = bytearray(1 << 20)
    for i in range(tl_units):
        struct.pack_into(">iqiqiqiiq", tl, 52 * i, 52, -1, 1, 1_700_000_000_000, 1000, 0, 100, 7, 0)
    (root / "timerlog" / f"{0:020d}").write_bytes(bytes(tl))
    (root / "config").mkdir(exist_ok=True)
    raw = TC.pack(1_700_000_000_000, flush, last_q, master, 0, 1_700_000_000_000, 3).ljust(4096, b"\0")
    raw = raw[:4000] + b"\x01" + raw[4001:]          # padding bytes must survive
    (root / "config" / "timercheck").write_bytes(raw)
    return root, raw


def test_timercheck_is_clamped_journaled_and_undone(cli, tmp_path):
    root, raw = _timer_store(tmp_path, "crash-behind-v5", qunits=5, tl_units=3, last_q=9, flush=10**9, master=9)
    before = tree_hashes(root)
    code, out, err = cli("recover", "--dry-run", "--json", "--config", conf(root), root)
    plan = json.loads(out)
    assert plan["timer"]["timer_queue_max_offset"] == 5 and plan["timer"]["timerlog_end"] == 3 * 52
    assert plan["timer"]["clamped"] == {"last_timer_log_flush_pos": [10**9, 156], "last_timer_queue_offset": [9, 5]}
    acts = [a for a in plan["actions"] if a["group"] == "timer"]
    assert len(acts) == 1 and acts[0]["path"] == "config/timercheck" and acts[0]["kind"] == "write_bytes"
    assert plan["actions"][-1]["kind"] == "remove_abort"
    assert any("masterTimerQueueOffset" in n for n in plan["notes"])
    code, out, err = cli("recover", "--config", conf(root), root)
    assert code == 1, err
    new = (root / "config" / "timercheck").read_bytes()
    v = decode_timercheck(new)
    assert (v["lastTimerQueueOffset"], v["lastTimerLogFlushPos"], v["masterTimerQueueOffset"]) == (5, 156, 9)
    assert v["lastReadTimeMs"] == 1_700_000_000_000 and v["dataVersion.counter"] == 3
    assert len(new) == 4096 and new[TC.size:] == raw[TC.size:]
    code, out, err = cli("recover", "--json", "--config", conf(root), root)
    assert code == 0 and json.loads(out)["timer"]["clamped"] == {}, err
    code, out, err = cli("undo", str(root))
    assert code in (0, 1), err
    assert tree_hashes(root) == before


def test_timercheck_within_range_is_left_alone_and_clean_store_clamp_alone(cli, tmp_path):
    root, raw = _timer_store(tmp_path, "basic-multifile-v5", qunits=4, tl_units=2, last_q=3, flush=52, master=3)
    code, out, err = cli("recover", "--json", "--config", conf(root), root)
    assert code == 0, err
    assert json.loads(out)["timer"]["clamped"] == {}
    assert (root / "config" / "timercheck").read_bytes() == raw
    # no timer queue and no timerlog at all: both clamp to 0, the only change on a clean store
    root2 = copy("basic-multifile-v5", tmp_path / "b")
    (root2 / "config").mkdir()
    (root2 / "config" / "timercheck").write_bytes(TC.pack(1, 500, 7, 7, 0, 0, 0).ljust(4096, b"\0"))
    code, out, err = cli("recover", "--json", "--config", conf(root2), root2)
    assert code == 1, err
    plan = json.loads(out)
    assert [a["group"] for a in plan["actions"]] == ["timer"]
    v = decode_timercheck((root2 / "config" / "timercheck").read_bytes())
    assert (v["lastTimerQueueOffset"], v["lastTimerLogFlushPos"]) == (0, 0)
