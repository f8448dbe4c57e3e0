"""rmqctl.config.files: ConfigManager.load() semantics (main, .bak fallback, verdicts) and persist."""
from __future__ import annotations

import os
import shutil

import pytest

from rmqctl import fastjson as fj
from rmqctl.config import edit
from rmqctl.config.files import EMPTY, FAIL, KINDS, LOAD_BAK, LOAD_MAIN, load, locate, decode_timercheck
from rmqctl.config.persist import persist, render
from rmqctl.errors import FormatError, UsageError

from conftest import REAL_WORLD, real_world_glob

GOOD = b'{\n\t"offsetTable":{\n\t\t"T@G":{0:5,1:6\n\t\t}\n\t}\n}'
OLDER = b'{\n\t"offsetTable":{\n\t\t"T@G":{0:4,1:5\n\t\t}\n\t}\n}'


@pytest.fixture
def store(tmp_path):
    (tmp_path / "config").mkdir()
    return tmp_path


def _put(store, main=None, bak=None, name="consumerOffset.json"):
    if main is not None:
        (store / "config" / name).write_bytes(main)
    if bak is not None:
        (store / "config" / (name + ".bak")).write_bytes(bak)


@pytest.mark.parametrize("main,bak,verdict,used", [
    (GOOD, OLDER, LOAD_MAIN, "main"),
    (GOOD, None, LOAD_MAIN, "main"),
    (b"", OLDER, LOAD_BAK, ".bak"),                      # R4: main 0 bytes
    (None, OLDER, LOAD_BAK, ".bak"),                     # main missing
    (b" \n\t", OLDER, LOAD_BAK, ".bak"),                 # whitespace only: decode throws
    (GOOD[:30], OLDER, LOAD_BAK, ".bak"),                # R3: truncated
    (GOOD + b'old_garbage}', OLDER, LOAD_BAK, ".bak"),   # R1: stale trailing bytes
    (b"\x00" * 64, OLDER, LOAD_BAK, ".bak"),             # zero-filled after a power loss
    (b"null", OLDER, EMPTY, "main"),                     # null: success with defaults, .bak never read
    (b"", b"", EMPTY, None),                             # F16: both empty
    (None, None, EMPTY, None),                           # both missing
    (b"garbage", None, EMPTY, None),
    (b"garbage", b"{bad", FAIL, None),                   # R5: both corrupt
    (b"", b"  ", FAIL, None),                            # whitespace .bak is non-empty: decode throws
    (b"", b"null", EMPTY, ".bak"),
])
def test_broker_load_decision(store, main, bak, verdict, used):
    _put(store, main, bak)
    ld = load(store, "consumerOffset")
    assert (ld.verdict, ld.used) == (verdict, used), ld.summary()
    if verdict == LOAD_BAK:
        assert ld.doc["offsetTable"]["T@G"] == {0: 4, 1: 5}
        assert "broker would load .bak" in ld.summary()


def test_stale_tail_is_detected_with_position(store):
    _put(store, GOOD + b'\n\t}\n}', OLDER)
    ld = load(store, "consumerOffset")
    assert ld.main.status == "corrupt" and ld.main.stale_tail == (len(GOOD), 5)
    assert "stale trailing" in ld.main.describe()


def test_locate_accepts_store_config_dir_and_file(store):
    _put(store, GOOD)
    a = locate(store, "consumerOffset")
    b = locate(store / "config", "consumerOffset.json")
    c = locate(store / "config" / "consumerOffset.json")
    assert a.path == b.path == c.path and a.store == b.store == c.store == store
    with pytest.raises(UsageError):
        locate(store, "nope")


def test_bak_file_given_is_read_without_fallback(store):
    _put(store, GOOD, b"")
    ld = load(store / "config" / "consumerOffset.json.bak")
    assert ld.verdict == EMPTY


REAL_CONFIG_DIRS = sorted({p.parent for p in real_world_glob("*.json") if p.parent.name == "config"})


@pytest.mark.parametrize("cdir", REAL_CONFIG_DIRS, ids=lambda p: str(p.relative_to(REAL_WORLD)))
def test_real_world_config_dirs_load(cdir):
    for k in KINDS.values():
        p = cdir / k.filename
        if p.exists() or p.with_name(p.name + ".bak").exists():
            ld = load(cdir, k.name)
            assert ld.verdict in (LOAD_MAIN, LOAD_BAK), ld.summary()


def test_timercheck_decoded():
    p = (REAL_WORLD / "_peer_written/mxsm__rocketmq-rust/rocketmq-store/tests/fixtures/upgrade/v0.9.0"
         / "local-file/config/timercheck")
    d = decode_timercheck(p.read_bytes())
    assert d["lastReadTimeMs"] == 0x1A001451620 and d["_size"] == 56
    d = decode_timercheck((REAL_WORLD / "apache__rocketmq/store/null/config/timercheck").read_bytes())
    assert d["_size"] == 4096 and d["dataVersion.timestamp"] > 0
    with pytest.raises(FormatError):
        decode_timercheck(b"\0" * 10)


# --- persist --------------------------------------------------------------------------------------------


def test_persist_copies_main_to_bak_and_journals(store):
    _put(store, GOOD, OLDER)
    ld = load(store, "consumerOffset")
    doc = ld.doc
    edit.set_(doc, "offsetTable.T@G.1", 99)
    res = persist(ld, doc, op="t")
    assert res.written and res.bak_updated
    main = (store / "config/consumerOffset.json").read_bytes()
    assert main == GOOD.replace(b"1:6", b"1:99")
    assert (store / "config/consumerOffset.json.bak").read_bytes() == GOOD
    assert not (store / "config/consumerOffset.json.tmp").exists()
    qdir = next((store / "rmqctl-quarantine").iterdir())
    assert sorted(os.listdir(qdir / "files")) == ["0001-consumerOffset.json.bak", "0002-consumerOffset.json"]


def test_persist_from_bak_keeps_good_bak(store):
    """A corrupt main must never be copied over a good .bak (R5)."""
    _put(store, b"{garbage", OLDER)
    ld = load(store, "consumerOffset")
    doc = ld.doc
    edit.set_(doc, "offsetTable.T@G.0", 7)
    persist(ld, doc, op="t")
    assert (store / "config/consumerOffset.json.bak").read_bytes() == OLDER
    assert b"0:7" in (store / "config/consumerOffset.json").read_bytes()
    qdir = next((store / "rmqctl-quarantine").iterdir())
    assert (qdir / "files/0001-consumerOffset.json").read_bytes() == b"{garbage"  # quarantined copy


def test_dry_run_writes_nothing(store):
    _put(store, GOOD)
    before = sorted(p.name for p in (store / "config").iterdir())
    ld = load(store, "consumerOffset")
    edit.set_(ld.doc, "offsetTable.T@G.0", 1)
    res = persist(ld, ld.doc, op="t", dry_run=True)
    assert not res.written and "-\t\t\"T@G\":{0:5,1:6" in res.diff and "+\t\t\"T@G\":{0:1,1:6" in res.diff
    assert sorted(p.name for p in (store / "config").iterdir()) == before
    assert not (store / "rmqctl-quarantine").exists()


def test_render_refuses_null_and_non_objects():
    with pytest.raises(FormatError):
        render(None)
    with pytest.raises(FormatError):
        render([1])
    assert render({}) == b"{}"


def test_unchanged_file_is_not_rewritten(store):
    _put(store, GOOD)
    ld = load(store, "consumerOffset")
    res = persist(ld, ld.doc, op="t")
    assert not res.changed and not res.written


def test_timermetrics_written_compact(store):
    tm = b'{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":1700000000000},"timingCount":{}}'
    _put(store, tm, name="timermetrics")
    ld = load(store, "timermetrics")
    edit.set_(ld.doc, 'timingCount."T/x"', {"count": 3, "timeStamp": 1})
    persist(ld, ld.doc, op="t")
    assert (store / "config/timermetrics").read_bytes() == (
        b'{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":1700000000000},'
        b'"timingCount":{"T\\/x":{"count":3,"timeStamp":1}}}')


# --- edit paths -----------------------------------------------------------------------------------------


def test_paths_int_and_string_keys():
    doc = fj.loads('{"offsetTable":{"T@G":{0:5},"Q@G":{"0":1}},"a":{"x.y":[1,2]}}')
    assert edit.get(doc, "offsetTable.T@G.0") == 5
    assert edit.get(doc, "offsetTable.Q@G.0") == 1
    assert edit.get(doc, 'a."x.y".1') == 2
    edit.set_(doc, "offsetTable.T@G.3", 9)
    assert doc["offsetTable"]["T@G"] == {0: 5, 3: 9}
    edit.set_(doc, "offsetTable.N@G.0", 1)
    assert doc["offsetTable"]["N@G"] == {0: 1}
    assert edit.delete(doc, "offsetTable.T@G.0") == 5
    with pytest.raises(UsageError):
        edit.get(doc, "offsetTable.T@G.0")
    assert edit.parse_value("12") == 12 and edit.parse_value("abc") == "abc"
    assert edit.parse_value("12", old="x") == "12" and edit.parse_value("{0:1}") == {0: 1}


def test_real_world_edit_keeps_everything_else_identical(tmp_path):
    src = REAL_WORLD / "gxstax__rocketmq/store"
    dst = tmp_path / "store"
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.chmod(dst, 0o755)
    ld = load(dst, "consumerOffset")
    edit.set_(ld.doc, "offsetTable.TopicTest@please_rename_unique_group_name.2", 1000)
    persist(ld, ld.doc, op="t")
    new = (dst / "config/consumerOffset.json").read_bytes()
    old = (src / "config/consumerOffset.json").read_bytes()
    assert new == old.replace(b"0:793,1:793,2:793", b"0:793,1:793,2:1000") or \
        new == old.replace(b"2:1043", b"2:1000")
