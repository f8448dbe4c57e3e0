"""Self-check of the RocketMQ oracle (tests/oracle) and of the committed fixture corpus.

* `read` of committed fixtures (v4 and v5) reproduces the manifest's broker_view -> the corpus is current.
* `write` of a scenario into a temp dir followed by `read` works on both versions.
These tests need Java 17 + Maven; they FAIL (never skip) when those are missing.
"""
from __future__ import annotations

import json
import shutil

import pytest

from oracle_helpers import (SCENARIOS, STORES, fixture_dirs, load_manifest, oracle, read_store)

pytestmark = pytest.mark.oracle

SELF_CHECK = ["basic-multifile-v4", "basic-multifile-v5", "crash-behind-v4", "crash-behind-v5", "prop-crc-v5",
              "lmq-v5", "multidispatch-v4", "cqext-v4", "cqext-v5"]


def test_java_and_maven_present():
    assert shutil.which("java"), "java (17) is required by the oracle tests"
    assert shutil.which("mvn"), "mvn (3.8+) is required by the oracle tests"


def test_corpus_has_fixtures_for_both_versions():
    names = [p.name for p in fixture_dirs()]
    assert len(fixture_dirs("v4")) >= 12, names
    assert len(fixture_dirs("v5")) >= 12, names


@pytest.mark.parametrize("name", SELF_CHECK)
def test_read_reproduces_committed_broker_view(name):
    d = STORES / name
    assert (d / "manifest.json").is_file(), f"missing fixture {d}"
    m = load_manifest(d)
    version = name.rsplit("-", 1)[1]
    view = read_store(version, d / "store")
    assert view["load_ok"] is True
    assert view["rocketmq_version"] == m["rocketmq_version"]
    expected = m["broker_view"]
    for key in expected:
        assert view[key] == expected[key], f"{name}: broker_view[{key!r}] differs from the committed manifest"
    assert view == expected


def test_read_does_not_modify_the_input(tmp_path):
    src = STORES / "crash-behind-v5" / "store"
    before = {p.relative_to(src): p.read_bytes() for p in src.rglob("*") if p.is_file()}
    view = read_store("v5", src)
    assert view["recovery"] == "abnormal"
    after = {p.relative_to(src): p.read_bytes() for p in src.rglob("*") if p.is_file()}
    assert before == after


@pytest.mark.parametrize("version", ["v4", "v5"])
def test_write_then_read(tmp_path, version):
    scen = SCENARIOS / "delay-levels.json"
    store = tmp_path / "store"
    w = oracle(version, "write", "--scenario", scen, "--store", store)
    assert w["end"] == "shutdown" and not w["abort_present"]
    assert all(p["status"] == "PUT_OK" for p in w["puts"])
    r = read_store(version, store, conf=scen)
    assert r["load_ok"] and r["recovery"] == "normal"
    s = json.loads(scen.read_text(encoding="utf-8"))
    assert len(r["messages"]) == len(s["messages"])
    topics = {m["topic"] for m in r["messages"]}
    assert "SCHEDULE_TOPIC_XXXX" in topics
    # every queue unit points at a decoded message of the same size
    by_off = {m["physical_offset"]: m for m in r["messages"]}
    for q in r["queues"]:
        for u in q["units"]:
            assert by_off[u["physical_offset"]]["size"] == u["size"]


@pytest.mark.parametrize("version", ["v4", "v5"])
def test_crash_write_leaves_abort_and_lagging_queues(tmp_path, version):
    scen = SCENARIOS / "crash-behind.json"
    store = tmp_path / "store"
    w = oracle(version, "write", "--scenario", scen, "--store", store)
    assert w["end"] == "crash" and w["crash"]["abort_present"]
    assert (store / "abort").exists()
    r = read_store(version, store, conf=scen)
    assert r["recovery"] == "abnormal" and r["load_ok"]
    # abnormal recovery re-dispatches: all 40 messages are in the queues again
    assert sum(q["max_offset"] for q in r["queues"] if q["topic"] == "CrashTopic") == 40


def _config_dir(tmp_path):
    d = tmp_path / "config"
    d.mkdir()
    (d / "topics.json").write_text(
        '{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"timestamp":1700000000000\n\t},\n\t"topicConfigTable":{\n'
        '\t\t"TopicTest":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n\t\t\t"readQueueNums":4,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n\t\t\t"topicName":"TopicTest",\n\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":4\n\t\t}\n\t}\n}')
    (d / "consumerOffset.json").write_text('{\n\t"offsetTable":{\n\t\t"TopicTest@GroupA":{0:113085,1:7\n\t\t}\n\t}\n}')
    (d / "delayOffset.json").write_text('{"offsetTable":{1:5,18:0,3:12\n\t}}')
    (d / "subscriptionGroup.json").write_text("garbage{")
    (d / "subscriptionGroup.json.bak").write_text(
        '{"subscriptionGroupTable":{"GroupA":{"groupName":"GroupA","consumeEnable":true,"retryMaxTimes":5}}}')
    return d


@pytest.mark.parametrize("version", ["v4", "v5"])
def test_config_loads_through_the_managers(tmp_path, version):
    d = _config_dir(tmp_path)
    r = oracle(version, "config", "--dir", d)
    assert all(r[f]["load_ok"] for f in ("topics.json", "subscriptionGroup.json", "consumerOffset.json",
                                         "delayOffset.json", "consumerFilter.json"))
    assert r["topics.json"]["data"]["topicConfigTable"]["TopicTest"]["readQueueNums"] == 4
    assert r["consumerOffset.json"]["data"]["offsetTable"]["TopicTest@GroupA"] == {"0": 113085, "1": 7}
    assert r["delayOffset.json"]["data"]["offsetTable"] == {"1": 5, "3": 12, "18": 0}
    # corrupt main file -> the .bak is loaded
    assert r["subscriptionGroup.json"]["data"]["subscriptionGroupTable"]["GroupA"]["retryMaxTimes"] == 5
    assert (d / "subscriptionGroup.json").read_text() == "garbage{"  # input untouched


@pytest.mark.parametrize("version", ["v4", "v5"])
def test_config_corrupt_main_and_bak_fails_to_load(tmp_path, version):
    d = _config_dir(tmp_path)
    (d / "topics.json").write_text("{bad")
    (d / "topics.json.bak").write_text("{bad too")
    r = oracle(version, "config", "--dir", d)
    assert r["topics.json"]["load_ok"] is False
    assert r["consumerOffset.json"]["load_ok"] is True


def test_hold_lock_blocks_lockf(tmp_path):
    import fcntl
    import os
    import subprocess

    from oracle_helpers import ORACLE, build

    build()
    p = subprocess.Popen([str(ORACLE), "v5", "hold-lock", "--store", str(tmp_path)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while True:
            line = p.stdout.readline()
            assert line, p.stderr.read()
            lines.append(line)
            if line.startswith("}"):
                break
        assert json.loads("".join(lines))["locked"] is True
        fd = os.open(tmp_path / "lock", os.O_RDWR)
        try:
            with pytest.raises(OSError):
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        finally:
            os.close(fd)
        p.stdin.close()
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("version", ["v4", "v5"])
def test_bench_write_and_recover_small(tmp_path, version):
    store = tmp_path / "bench"
    w = oracle(version, "bench-write", "--store", store, "--count", 2000, "--size", 100, "--file-size", 65536)
    assert w["messages"] == 2000 and not w["abort_present"]
    r = oracle(version, "bench-recover", "--store", store, "--abnormal")
    assert r["load_ok"] and r["recovery"] == "abnormal"
    assert r["max_offset"] == w["max_offset"] and r["messages"] == 2000
