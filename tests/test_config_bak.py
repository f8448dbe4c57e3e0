"""No config edit replaces a .bak that is better than the main it rotates; failed writes leave no *.tmp; edits
happen only inside a store. The broker's config managers (tests/oracle `config`) judge what the edited files
load as."""
from __future__ import annotations

import errno
import os

import pytest

from rmqctl import fastjson as fj

from oracle_helpers import oracle

GOOD_BAK = b'{"offsetTable":{"T@G":{0:4,1:5},"U@G":{0:1}}}'

# (config file, damaged main, good .bak, an edit command on that file)
KINDS = [
    ("consumerOffset.json", b'{"offsetTablX":{"T@G":{0:5}}}', GOOD_BAK,
     ("config", "offsets", "set", "{s}", "-g", "G", "-t", "T", "-q", "0", "--offset", "7")),
    ("topics.json", b'{"topicConfigTablX":{"T":{"topicName":"T","perm":6}}}',
     b'{"topicConfigTable":{"T":{"perm":6,"readQueueNums":4,"topicName":"T","writeQueueNums":4}}}',
     ("config", "topics", "create", "{s}", "NewTopic")),
    ("subscriptionGroup.json", b'{"subscriptionGroups":{"G":{"groupName":"G"}}}',
     b'{"subscriptionGroupTable":{"G":{"groupName":"G","retryMaxTimes":16}}}',
     ("config", "groups", "create", "{s}", "NewGroup")),
    ("delayOffset.json", b'{"offsettablx":{1:5}}', b'{"offsetTable":{1:5,3:9}}',
     ("config", "delay", "set", "{s}", "--level", "2", "--offset", "1")),
    ("consumerOffset.json", b'{"offsetTable":null}', GOOD_BAK,
     ("config", "set", "{s}", "consumerOffset", "offsetTable.T@G.0", "1")),
]


@pytest.fixture
def store(tmp_path):
    s = tmp_path / "store"
    (s / "config").mkdir(parents=True)
    (s / "commitlog").mkdir()
    return s


def _snapshot(d):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name,main,bak,cmd", KINDS, ids=[f"{k[0]}-{i}" for i, k in enumerate(KINDS)])
def test_edit_on_a_main_the_broker_loads_empty_is_refused(cli, store, name, main, bak, cmd):
    (store / "config" / name).write_bytes(main)
    (store / "config" / (name + ".bak")).write_bytes(bak)
    before = _snapshot(store)
    code, out, err = cli(*[a.format(s=store) for a in cmd])
    assert code == 4, (out, err)
    line = err.strip()
    assert "\n" not in line and "EMPTY" in line and "nothing written" in line
    assert f"rmqctl config restore {store} " in line and "--from-bak" in line
    assert _snapshot(store) == before          # .bak untouched, no journal, no tmp
    # and the way out it names works: restore, then the same edit goes through and keeps the old main's
    # content nowhere but the journal
    assert cli("config", "restore", store, name.removesuffix(".json"), "--from-bak")[0] == 0
    code, out, err = cli(*[a.format(s=store) for a in cmd])
    assert code == 0, err
    assert (store / "config" / (name + ".bak")).read_bytes() == bak


@pytest.mark.oracle
def test_offsets_set_on_an_undecodable_main_keeps_the_good_bak(cli, store):
    """`{"offsetTable":5}`: decode throws, the broker loads .bak; the edit starts from .bak, .bak stays."""
    (store / "config/consumerOffset.json").write_bytes(b'{"offsetTable":5}')
    (store / "config/consumerOffset.json.bak").write_bytes(GOOD_BAK)
    code, out, err = cli("config", "offsets", "set", store, "-g", "G", "-t", "T", "-q", "0", "--offset", "7")
    assert code == 0, err
    assert "decode fails: offsetTable is a number" in err
    assert (store / "config/consumerOffset.json.bak").read_bytes() == GOOD_BAK
    for version in ("v4", "v5"):
        got = oracle(version, "config", "--dir", str(store / "config"))["consumerOffset.json"]
        assert got["load_ok"] and got["data"]["offsetTable"] == {"T@G": {"0": 7, "1": 5}, "U@G": {"0": 1}}


def test_bak_with_a_newer_data_version_is_kept(cli, store):
    main = b'{"dataVersion":{"counter":3,"timestamp":1},"topicConfigTable":{"T":{"perm":6,"topicName":"T"}}}'
    bak = b'{"dataVersion":{"counter":9,"timestamp":2},"topicConfigTable":{"T":{"perm":6,"topicName":"T"}}}'
    (store / "config/topics.json").write_bytes(main)
    (store / "config/topics.json.bak").write_bytes(bak)
    code, out, err = cli("config", "topics", "create", store, "NewTopic")
    assert code == 0, err
    assert "kept .bak: its dataVersion counter 9 is newer than main's 3" in out
    assert (store / "config/topics.json.bak").read_bytes() == bak
    assert "NewTopic" in fj.loads((store / "config/topics.json").read_bytes())["topicConfigTable"]
    # a main that is good and not older than .bak rotates as the broker's persist does
    (store / "config/topics.json.bak").write_bytes(bak.replace(b'"counter":9', b'"counter":2'))
    code, out, err = cli("config", "topics", "create", store, "Other")
    assert code == 0 and "previous content copied to .bak" in out
    assert b"NewTopic" in (store / "config/topics.json.bak").read_bytes()


@pytest.mark.parametrize("fail_on", ["consumerOffset.json.bak.tmp", "consumerOffset.json.tmp"])
def test_full_disk_leaves_no_tmp_files(cli, store, monkeypatch, fail_on):
    good = b'{"offsetTable":{"T@G":{0:5}}}'
    (store / "config/consumerOffset.json").write_bytes(good)
    (store / "config/consumerOffset.json.bak").write_bytes(GOOD_BAK)
    real_write = os.write
    hits = []

    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/" + fail_on):
            hits.append(fd)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    code, out, err = cli("config", "set", store, "consumerOffset", "offsetTable.T@G.0", "6")
    monkeypatch.undo()
    assert hits, "the disk-full fault was not injected"
    assert code == 8 and "No space left on device" in err
    assert err.strip().endswith("the edit was not made, main and .bak are as they were")
    assert err.startswith(f"rmqctl: {store}/config/consumerOffset.json: ") and err.count("\n") == 1
    assert not list(store.rglob("*.tmp"))
    assert (store / "config/consumerOffset.json").read_bytes() == good
    assert (store / "config/consumerOffset.json.bak").read_bytes() == GOOD_BAK  # rotated .bak put back


def test_config_edit_outside_a_store_is_refused(cli, tmp_path):
    bare = tmp_path / "bare" / "d"
    bare.mkdir(parents=True)
    (bare / "consumerOffset.json").write_bytes(b'{"offsetTable":{}}')
    for target in (bare, bare / "consumerOffset.json"):
        code, out, err = cli("config", "set", target, "consumerOffset", "offsetTable.T@G.0", "5")
        assert code == 2 and "not the config/ directory of a broker store" in err, err
    assert sorted(p.name for p in (tmp_path / "bare").iterdir()) == ["d"]
    assert sorted(p.name for p in bare.iterdir()) == ["consumerOffset.json"]
    # a dry run writes nothing and is fine anywhere
    assert cli("config", "set", bare, "consumerOffset", "offsetTable.T@G.0", "5", "--dry-run")[0] == 0


@pytest.mark.parametrize("bak", [None, b'{"offsetTable":{}}'])
def test_empty_main_is_edited_as_it_is_when_bak_holds_nothing_better(cli, store, bak):
    main = b'{"offsetTablX":{"T@G":{0:5}}}'
    (store / "config/consumerOffset.json").write_bytes(main)
    if bak is not None:
        (store / "config/consumerOffset.json.bak").write_bytes(bak)
    code, out, err = cli("config", "offsets", "set", store, "-g", "G", "-t", "T", "-q", "0", "--offset", "7")
    assert code == 0, err
    assert "editing main as it is" in err and "EMPTY offsets" in err
    doc = fj.loads((store / "config/consumerOffset.json").read_bytes())
    assert doc["offsetTable"] == {"T@G": {0: 7}} and doc["offsetTablX"] == {"T@G": {0: 5}}  # nothing dropped
    if bak is None:
        assert not (store / "config/consumerOffset.json.bak").exists()
    else:
        assert (store / "config/consumerOffset.json.bak").read_bytes() == bak
        assert "kept .bak: main parses, but has no offsetTable" in out
    code, out, err = cli("config", "status", store)
    assert code == 0 and "load main" in out
