"""`rmqctl config ...` and `rmqctl undo` through the CLI (CliRunner via the `cli` fixture, plus a few
real processes for exit codes and the held lock)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from rmqctl import fastjson as fj

from conftest import FIXTURES, REAL_WORLD, run_cli

GOOD = b'{\n\t"offsetTable":{\n\t\t"TopicTest@GroupA":{0:5,1:6\n\t\t}\n\t}\n}'
OLDER = b'{\n\t"offsetTable":{\n\t\t"TopicTest@GroupA":{0:4,1:5\n\t\t}\n\t}\n}'


def _copy_tree(src, dst):
    shutil.copytree(src, dst)
    for p in [dst, *dst.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return dst


@pytest.fixture
def store(tmp_path):
    s = tmp_path / "store"
    (s / "config").mkdir(parents=True)
    (s / "commitlog").mkdir()
    (s / "config/consumerOffset.json").write_bytes(GOOD)
    (s / "config/consumerOffset.json.bak").write_bytes(OLDER)
    return s


@pytest.fixture
def real_store(tmp_path):
    return _copy_tree(REAL_WORLD / "gxstax__rocketmq/store", tmp_path / "store")


def _snapshot(d):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_status_and_show(cli, real_store):
    code, out, err = cli("config", "status", real_store)
    assert code == 0 and "consumerOffset.json" in out and "load main" in out
    code, out, err = cli("config", "show", real_store, "consumerOffset")
    assert code == 0 and err == ""
    assert out.encode() == (real_store / "config/consumerOffset.json").read_bytes() + b"\n"
    code, out, _ = cli("config", "show", real_store / "config/topics.json", "--json")
    d = json.loads(out)
    assert d["verdict"] == "load main" and d["content"]["topicConfigTable"]["TopicTest"]["readQueueNums"] == 4


def test_main_zero_bytes_reads_bak_and_says_so(cli, store):
    (store / "config/consumerOffset.json").write_bytes(b"")
    code, out, err = cli("config", "show", store, "consumerOffset")
    assert code == 4
    assert "main empty (0 bytes)" in err and "broker would load .bak" in err
    assert "{0:4,1:5" in out
    code, out, _ = cli("config", "show", store, "consumerOffset", "--json")
    assert json.loads(out)["used"] == ".bak"


@pytest.mark.parametrize("args", [
    ("config", "show", "{s}", "consumerOffset"),
    ("config", "offsets", "set", "{s}", "-g", "GroupA", "-t", "TopicTest", "-q", "0", "--offset", "1"),
    ("config", "set", "{s}", "consumerOffset", "offsetTable.TopicTest@GroupA.0", "1"),
    ("config", "offsets", "show", "{s}"),
])
def test_both_broken_is_one_line_exit_4_nothing_written(cli, store, args):
    (store / "config/consumerOffset.json").write_bytes(b'{"offsetTable":{}}old}')
    (store / "config/consumerOffset.json.bak").write_bytes(b'{"offsetTable":')
    before = _snapshot(store)
    code, out, err = cli(*[a.format(s=store) for a in args])
    assert code == 4
    lines = err.strip().splitlines()
    assert "broker would fail to start" in lines[-1] and lines[-1].startswith("rmqctl: ")
    assert "Traceback" not in err
    assert _snapshot(store) == before


def test_both_empty_says_empty_offsets(cli, store):
    (store / "config/consumerOffset.json").write_bytes(b"")
    (store / "config/consumerOffset.json.bak").write_bytes(b"")
    code, _, err = cli("config", "offsets", "show", store)
    assert code == 4 and "broker would start with EMPTY offsets" in err


def test_stale_trailing_bytes_reported(cli, store):
    (store / "config/consumerOffset.json").write_bytes(GOOD + b"\n\t}\n}")
    code, out, err = cli("config", "status", store)
    assert code == 4 and "stale trailing byte" in out


def test_get_set_delete_and_undo(cli, store):
    code, out, _ = cli("config", "get", store, "consumerOffset", "offsetTable.TopicTest@GroupA.1")
    assert (code, out) == (0, "6\n")
    code, out, err = cli("config", "set", store, "consumerOffset", "offsetTable.TopicTest@GroupA.1", "60")
    assert code == 0, err
    assert "offsetTable.TopicTest@GroupA.1: 6 -> 60" in out and "rmqctl undo" in out
    assert (store / "config/consumerOffset.json").read_bytes() == GOOD.replace(b"1:6", b"1:60")
    assert (store / "config/consumerOffset.json.bak").read_bytes() == GOOD
    code, out, _ = cli("config", "delete", store, "consumerOffset", "offsetTable.TopicTest@GroupA.0")
    assert code == 0 and (store / "config/consumerOffset.json").read_bytes() == GOOD.replace(b"0:5,1:6", b"1:60")
    code, out, _ = cli("undo", store, "--list")
    assert out.count("committed") == 2
    assert cli("undo", store)[0] == 0
    assert cli("undo", store)[0] == 0
    assert (store / "config/consumerOffset.json").read_bytes() == GOOD
    assert (store / "config/consumerOffset.json.bak").read_bytes() == OLDER


def test_dry_run_prints_diff_writes_nothing(cli, store):
    before = _snapshot(store)
    code, out, _ = cli("config", "offsets", "set", store, "-g", "GroupA", "-t", "TopicTest", "-q", "0",
                       "--offset", "9", "--dry-run")
    assert code == 0 and "-\t\t\"TopicTest@GroupA\":{0:5,1:6" in out and "+\t\t\"TopicTest@GroupA\":{0:9,1:6" in out
    assert "dry run: nothing written" in out
    assert _snapshot(store) == before


def test_diff_main_vs_bak_and_two_stores(cli, store, tmp_path):
    code, out, _ = cli("config", "diff", store, "consumerOffset")
    assert code == 4 and "-\t\t\"TopicTest@GroupA\":{0:4,1:5" in out
    other = _copy_tree(store, tmp_path / "other")
    code, out, _ = cli("config", "diff", store, other, "consumerOffset")
    assert (code, out) == (0, "")


def test_restore_from_bak(cli, store):
    (store / "config/consumerOffset.json").write_bytes(b"\x00" * 100)
    code, out, err = cli("config", "restore", store, "consumerOffset", "--from-bak")
    assert code == 0, err
    assert (store / "config/consumerOffset.json").read_bytes() == OLDER
    cli("undo", store)
    assert (store / "config/consumerOffset.json").read_bytes() == b"\x00" * 100


def test_offsets_clone_and_groupTopicMap_regenerated(cli, tmp_path):
    s = tmp_path / "s"
    (s / "config").mkdir(parents=True)
    text = ('{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n\t},\n'
            '\t"groupTopicMap":{\n\t\t"GroupA":["TopicTest"]\n\t},\n'
            '\t"offsetTable":{\n\t\t"TopicTest@GroupA":{0:113085,1:113084\n\t\t}\n\t}\n}')
    (s / "config/consumerOffset.json").write_text(text)
    code, out, err = cli("config", "offsets", "clone", s, "--from", "GroupA", "--to", "GroupB")
    assert code == 0, err
    doc = fj.loads((s / "config/consumerOffset.json").read_bytes())
    assert doc["offsetTable"]["TopicTest@GroupB"] == {0: 113085, 1: 113084}
    assert doc["groupTopicMap"] == {"GroupA": ["TopicTest"], "GroupB": ["TopicTest"]}
    assert '"GroupB":["TopicTest"]' in (s / "config/consumerOffset.json").read_text()
    assert doc["dataVersion"]["counter"] == 4


def test_topics_and_groups(cli, real_store):
    code, out, _ = cli("config", "topics", "list", real_store)
    assert code == 0 and "TopicTest" in out
    code, out, err = cli("config", "topics", "create", real_store, "NewTopic", "-r", "2", "-w", "3")
    assert code == 0, err
    doc = fj.loads((real_store / "config/topics.json").read_bytes())
    assert doc["topicConfigTable"]["NewTopic"] == {
        "order": False, "perm": 6, "readQueueNums": 2, "topicFilterType": "SINGLE_TAG", "topicName": "NewTopic",
        "topicSysFlag": 0, "writeQueueNums": 3}
    assert doc["dataVersion"]["counter"] == 5
    code, out, _ = cli("config", "topics", "update", real_store, "NewTopic", "--perm", "4")
    assert "NewTopic.perm: 6 -> 4" in out
    assert cli("config", "topics", "create", real_store, "bad topic")[0] == 2
    assert cli("config", "topics", "delete", real_store, "NewTopic")[0] == 0
    code, out, err = cli("config", "groups", "create", real_store, "GroupX", "--retry-max", "3", "--no-broadcast")
    assert code == 0, err
    g = fj.loads((real_store / "config/subscriptionGroup.json").read_bytes())["subscriptionGroupTable"]["GroupX"]
    assert g["retryMaxTimes"] == 3 and g["consumeBroadcastEnable"] is False and list(g) == sorted(g)
    code, out, _ = cli("config", "groups", "update", real_store, "GroupX", "--set", "retryQueueNums=2")
    assert "GroupX.retryQueueNums: 1 -> 2" in out
    code, out, _ = cli("config", "groups", "list", real_store, "--json")
    assert any(json.loads(x)["group"] == "GroupX" for x in out.splitlines())
    assert cli("config", "groups", "delete", real_store, "GroupX")[0] == 0


def test_delay_show_set(cli, real_store):
    code, out, err = cli("config", "delay", "set", real_store, "--level", "3", "--offset", "12")
    assert code == 0, err
    assert (real_store / "config/delayOffset.json").read_bytes() == b'{\n\t"offsetTable":{3:12\n\t}\n}'
    code, out, _ = cli("config", "delay", "show", real_store, "--json")
    rows = {r["level"]: r for r in map(json.loads, out.splitlines())}
    assert sorted(rows) == list(range(1, 19))           # the broker's 18 default levels
    assert {k: rows[3][k] for k in ("schema", "queue", "offset", "delay", "delay_ms", "max", "pending")} == {
        "schema": "rmqctl.config-delay-show/1", "queue": 2, "offset": 12, "delay": "10s", "delay_ms": 10000,
        "max": None, "pending": 0}
    assert rows[4]["offset"] is None


def test_every_command_has_an_example(cli):
    from rmqctl.cli.config_cmd import config

    def walk(cmd, name):
        yield name, cmd
        for sub, c in getattr(cmd, "commands", {}).items():
            yield from walk(c, f"{name} {sub}")

    for name, cmd in walk(config, "config"):
        assert "Example:" in (cmd.help or ""), name
    from rmqctl.cli.undo_cmd import undo
    assert "Example:" in undo.help


def test_new_file_on_fresh_store(cli, tmp_path):
    s = tmp_path / "s"
    (s / "config").mkdir(parents=True)
    code, out, err = cli("config", "offsets", "set", s, "-g", "G", "-t", "T", "-q", "0", "--offset", "3")
    assert code == 0, err
    assert (s / "config/consumerOffset.json").read_bytes() == b'{\n\t"offsetTable":{\n\t\t"T@G":{0:3\n\t\t}\n\t}\n}'


# --- offsets with the local consume queues (oracle-written fixture stores) ----------------------------

STORES = FIXTURES / "stores"


def _fixture(name):
    d = STORES / name
    if not d.is_dir():
        pytest.fail(f"fixture store {name} missing (fixtures/regenerate.sh)")
    return d


def test_offsets_show_lag_from_consume_queues(cli, tmp_path):
    fx = _fixture("basic-multifile-v5")
    s = _copy_tree(fx / "store", tmp_path / "store")
    man = json.loads((fx / "manifest.json").read_text())
    q = next(q for q in man["broker_view"]["queues"] if q.get("max_offset", 0) > 0) \
        if isinstance(man["broker_view"]["queues"], list) else None
    from rmqctl.store.layout import Store

    st = Store.open(s)
    topic, qid = next((t, i) for t, i in st.queues() if st.consume_queue(t, i).max_offset() > 1)
    mx = st.consume_queue(topic, qid).max_offset()
    assert cli("config", "offsets", "set", s, "-g", "G", "-t", topic, "-q", qid, "--offset", 1)[0] == 0
    code, out, _ = cli("config", "offsets", "show", s, "--group", "G", "--json")
    row = json.loads(out.splitlines()[0])
    assert row["max"] == mx and row["lag"] == mx - 1
    del q


def test_offsets_reset_earliest_latest(cli, tmp_path):
    s = _copy_tree(_fixture("basic-multifile-v5") / "store", tmp_path / "store")
    from rmqctl.store.layout import Store

    st = Store.open(s)
    topic = st.queues()[0][0]
    qs = [q for t, q in st.queues() if t == topic]
    for flag, fn in (("--to-latest", "max_offset"), ("--to-earliest", "min_offset")):
        code, out, err = cli("config", "offsets", "reset", s, "-g", "G", "-t", topic, flag)
        assert code == 0, err
        doc = fj.loads((s / "config/consumerOffset.json").read_bytes())
        got = doc["offsetTable"][f"{topic}@G"]
        assert got == {q: getattr(st.consume_queue(topic, q), fn)() for q in qs}


# --- real processes ---------------------------------------------------------------------------------------

def test_subprocess_exit_codes(store):
    (store / "config/consumerOffset.json").write_bytes(b"")
    r = run_cli("config", "show", store, "consumerOffset")
    assert r.returncode == 4 and b"broker would load .bak" in r.stderr
    (store / "config/consumerOffset.json.bak").write_bytes(b"{")
    r = run_cli("config", "offsets", "show", store)
    assert r.returncode == 4 and r.stderr.decode().count("\n") == 1 and b"fail to start" in r.stderr
    r = run_cli("config", "show", store, "nonsense")
    assert r.returncode == 2


def test_refuses_while_broker_holds_lock(store):
    (store / "lock").write_bytes(b"lock")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl,os,sys,time;fd=os.open(sys.argv[1],os.O_RDWR);fcntl.lockf(fd,fcntl.LOCK_EX,1,0);"
        "print('held',flush=True);time.sleep(60)"), str(store / "lock")], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        before = _snapshot(store)
        r = run_cli("config", "offsets", "set", store, "-g", "GroupA", "-t", "TopicTest", "-q", "0", "--offset", "1")
        assert r.returncode == 8 and b"broker appears to be running" in r.stderr
        assert _snapshot(store) == before
        r = run_cli("config", "offsets", "set", store, "-g", "GroupA", "-t", "TopicTest", "-q", "0", "--offset", "1",
                    "--force")
        assert r.returncode == 0, r.stderr
        r = run_cli("undo", store)
        assert r.returncode == 8
        assert run_cli("undo", store, "--force").returncode == 0
        assert (store / "config/consumerOffset.json").read_bytes() == GOOD
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0)
