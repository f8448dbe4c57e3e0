"""Guards before expensive work: a topic or queue named nowhere in the store is a one-line usage error with
the closest names (exit 2), not a full commitlog scan; --scan (query) / --include-deleted-topics (rebuild)
go on anyway."""
from __future__ import annotations

import shutil

import pytest

from conftest import run_cli, writable_store


@pytest.fixture
def store(tmp_path):
    return writable_store(tmp_path / "store")


def _queues(store, topic):
    from rmqctl.store.layout import Store

    return sorted(q for t, q in Store.open(store).queues() if t == topic)


def test_typo_topic_is_refused_with_the_closest_name(cli, store):
    assert _queues(store, "TopicA")
    for args in (["--queue", "0", "--offset", "0"], ["--queue", "0", "--time", "now"], ["--begin", "-1d"],
                 ["--key", "k"]):
        code, out, err = cli("query", store, "--topic", "TopicAx", *args)
        assert code == 2 and out == "", (args, err)
        assert "named nowhere" in err and "did you mean TopicA" in err and "scanning" not in err, (args, err)
        assert len([x for x in err.splitlines() if "named nowhere" in x]) == 1, err


def test_unknown_queue_is_refused_with_the_queue_ids(cli, store):
    qs = _queues(store, "TopicA")
    bad = max(qs) + 90
    code, out, err = cli("query", store, "--topic", "TopicA", "--queue", bad, "--offset", "0")
    assert code == 2 and f"queue {bad} of topic 'TopicA'" in err and f"{qs[0]}-{qs[-1]}" in err
    assert "scanning" not in err


def test_scan_goes_on_anyway(cli, store):
    code, out, err = cli("query", store, "--topic", "TopicAx", "--queue", "0", "--offset", "0", "--scan")
    assert code == 0 and "scanning the commitlog" in err and "named nowhere" not in err


def test_names_from_the_commitlog_and_from_topics_json_count(cli, store):
    shutil.rmtree(store / "consumequeue" / "TopicA")
    assert not _queues(store, "TopicA")
    code, out, err = cli("query", store, "--topic", "TopicA", "--queue", "0", "--offset", "0")
    assert code == 0 and "scanning the commitlog" in err and out    # found by the scan
    assert cli("config", "topics", "create", store, "Declared", "-r", "2", "-w", "2")[0] == 0
    code, out, err = cli("query", store, "--topic", "Declared", "--queue", "1", "--offset", "0")
    assert code == 0 and "named nowhere" not in err
    code, out, err = cli("query", store, "--topic", "Declared", "--queue", "2", "--offset", "0")
    assert code == 2 and "its queues: 0, 1" in err


def test_rebuild_cq_unknown_topic(store):
    r = run_cli("rebuild", "cq", store, "--topic", "Unknown", "--dry-run")
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1 and "named nowhere" in err
    r = run_cli("rebuild", "cq", store, "--topic", "topica", "--dry-run")
    assert r.returncode == 2 and b"did you mean TopicA?" in r.stderr
    r = run_cli("rebuild", "cq", store, "--topic", "TopicA", "--dry-run")
    assert r.returncode == 0, r.stderr
    r = run_cli("rebuild", "cq", store, "--topic", "Unknown", "--include-deleted-topics", "--dry-run")
    assert r.returncode == 0 and b"named nowhere" not in r.stderr
