"""Store rules the broker decides, judged by the real broker (tests/oracle): consume-queue file size taken from
the files, a consume-queue file with bytes appended, and the like."""
from __future__ import annotations

import json
import os
import struct

import pytest

import faultlib as F
from oracle_helpers import fixture_dirs, load_manifest, read_store
from rmqctl.formats.commitlog import BLANK_MAGIC_CODE as BLANK_MAGIC

FIX = {d.name: d for d in fixture_dirs()}


def _copy(name, tmp_path):
    F.copy_store(FIX[name], tmp_path / name)
    return tmp_path / name / "store"


def _non_info(out):
    return [f for f in json.loads(out)["findings"] if f["severity"] != "info"]


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["basic-multifile-v5", "index-geometry-v4"])
def test_cq_file_with_bytes_appended(cli, tmp_path, name):
    """verify without a broker config: one finding (not one per healthy CQ file); the broker refuses to start;
    recover cuts the extra bytes (saved), after which the broker starts and serves what it served before."""
    root = _copy(name, tmp_path)
    conf = tmp_path / name / "manifest.json"
    f = sorted((root / "consumequeue").rglob("0" * 20))[0]
    size = f.stat().st_size
    with open(f, "ab") as fh:
        fh.write(os.urandom(4096))
    assert f.stat().st_size == size + 4096
    code, out, err = cli("verify", "--json", root)
    fs = _non_info(out)
    assert code == 4 and [x["check"] for x in fs] == ["cq.file_size"] and fs[0]["path"] == str(f), fs
    v = name.rsplit("-", 1)[1]
    assert read_store(v, root, conf)["load_ok"] is False
    code, out, err = cli("recover", "--json", root)
    assert code == 1, out + err
    assert f.stat().st_size == size
    code, out, err = cli("verify", root)
    assert (code, out) == (0, ""), out + err
    view = read_store(v, root, conf)
    assert view["load_ok"] is True
    assert view["queues"] == load_manifest(FIX[name])["broker_view"]["queues"]
    code, out, err = cli("undo", root)
    assert code == 0 and f.stat().st_size == size + 4096, out + err


@pytest.mark.oracle
def test_ext_like_tags_code_checked_without_consumequeue_ext(cli, tmp_path):
    """A tagsCode <= Integer.MIN_VALUE - 1 is an ext address only where consumequeue_ext exists; elsewhere it
    is a wrong tag hash that the broker serves as is (its tag filter then drops the message)."""
    import struct

    root = _copy("basic-multifile-v5", tmp_path)
    f = root / "consumequeue" / "TopicA" / "0" / ("0" * 20)
    b = bytearray(f.read_bytes())
    phys, size, tags = struct.unpack_from(">qiq", b, 20)
    struct.pack_into(">q", b, 32, -2**31 - 100)
    f.write_bytes(bytes(b))
    view = read_store("v5", root, tmp_path / "basic-multifile-v5" / "manifest.json")
    q = next(q for q in view["queues"] if (q["topic"], q["queue_id"]) == ("TopicA", 0))
    assert q["units"][1]["tags_code"] == -2**31 - 100 != tags     # the broker serves the damaged tag hash
    code, out, err = cli("verify", "--json", root)
    fs = _non_info(out)
    assert code == 4 and [x["check"] for x in fs] == ["cq.unit_mismatch"] and fs[0]["offset"] == 20, fs
    (root / "consumequeue_ext").mkdir()       # with ext files the same value is an address: not a tag hash,
    code, out, err = cli("verify", "--json", root)   # and one that points at no ext unit
    fs = _non_info(out)
    assert code == 4 and [x["check"] for x in fs] == ["cq.ext_unit"] and fs[0]["offset"] == 20, fs


@pytest.mark.oracle
def test_deleted_index_is_a_finding(cli, tmp_path):
    """With index/ deleted the broker finds no key (it rebuilds nothing on a normal start): verify says so,
    except when the broker indexes nothing anyway; `rebuild index` gives the broker its answers back."""
    import shutil

    name = "basic-multifile-v5"
    root = _copy(name, tmp_path)
    conf = tmp_path / name / "manifest.json"
    want = load_manifest(FIX[name])["broker_view"]["key_queries"]
    assert any(q["phys_offsets"] for q in want)
    shutil.rmtree(root / "index")
    view = read_store("v5", root, conf)
    assert view["load_ok"] and not any(q["phys_offsets"] for q in view["key_queries"])
    code, out, err = cli("verify", "--json", root)
    assert code == 4 and [x["check"] for x in _non_info(out)] == ["index.missing"], out
    off = tmp_path / "broker.conf"
    off.write_text("messageIndexEnable=false\n")
    code, out, err = cli("verify", "--broker-config", off, root)
    assert (code, out) == (0, ""), out + err
    code, out, err = cli("rebuild", "index", "--config", conf, root)
    assert code == 1, out + err
    got = read_store("v5", root, conf)["key_queries"]
    assert [q["phys_offsets"] for q in got] == [q["phys_offsets"] for q in want]
    code, out, err = cli("verify", root)
    assert (code, out) == (0, ""), out + err


def test_no_index_and_no_keys_is_not_a_finding(cli):
    code, out, err = cli("verify", FIX["empty-v5"] / "store")
    assert (code, out) == (0, ""), out + err


@pytest.mark.oracle
@pytest.mark.parametrize("v", ["v4", "v5"])
def test_recover_keeps_the_blank_that_ends_a_full_file(cli, tmp_path, v):
    """No abort; the last commitlog file was lost and a 0-byte file stands in its place, so the file before it
    (full, ending in the broker's BLANK record) is now the last: recover must not zero that BLANK."""
    name = f"basic-multifile-{v}"
    root = _copy(name, tmp_path)
    conf = tmp_path / name / "manifest.json"
    files = sorted((root / "commitlog").iterdir())
    files[-1].write_bytes(b"")
    prev = files[-2]
    bv = load_manifest(FIX[name])["broker_view"]
    blank_at = max(m["physical_offset"] + m["size"] for m in bv["messages"]
                   if m["physical_offset"] < int(files[-1].name)) - int(prev.name)
    data = prev.read_bytes()
    assert struct.unpack_from(">ii", data, blank_at)[1] == BLANK_MAGIC and not (root / "abort").exists()
    code, out, err = cli("recover", "--json", root)
    assert code == 1, out + err
    plan = json.loads(out)
    assert not any(a["kind"] == "zero_range" for a in plan["actions"]), plan["actions"]
    assert prev.read_bytes() == data
    view = read_store(v, root, conf)
    assert view["load_ok"] and view["commitlog"]["max_offset"] == int(prev.name) + blank_at


@pytest.mark.oracle
def test_single_file_verify_before_a_zero_length_file(cli, tmp_path):
    """Only a 0-byte file follows the last written file: 5.3.3 deletes it at load and loses nothing; verify of
    the written file alone must not say that later files are deleted."""
    name = "basic-multifile-v5"
    root = _copy(name, tmp_path)
    files = sorted((root / "commitlog").iterdir())
    empty = root / "commitlog" / f"{int(files[-1].name) + len(files[-1].read_bytes()):020d}"
    empty.write_bytes(b"")
    view = read_store("v5", root, tmp_path / name / "manifest.json")
    want = load_manifest(FIX[name])["broker_view"]["commitlog"]["max_offset"]
    assert view["load_ok"] and view["commitlog"]["max_offset"] == want
    code, out, err = cli("verify", files[-1])
    assert (code, out) == (0, ""), out + err


@pytest.mark.oracle
def test_index_header_counting_every_key_as_4_7_0_did(cli, tmp_path):
    """RocketMQ up to 4.7.0 incremented hashSlotCount for every key (IndexFile.putKey; 4.7.1 counts only newly
    used slots). The broker never reads the field back: key queries are unchanged. verify takes such a header as
    written by an old broker unless --broker-version says otherwise."""
    name = "basic-multifile-v4"
    root = _copy(name, tmp_path)
    conf = tmp_path / name / "manifest.json"
    files = sorted((root / "index").iterdir())
    for f in files:
        b = bytearray(f.read_bytes())
        slot_count, count = struct.unpack_from(">ii", b, 32)
        assert slot_count != count - 1
        struct.pack_into(">i", b, 32, count - 1)
        f.write_bytes(bytes(b))
    want = load_manifest(FIX[name])["broker_view"]["key_queries"]
    assert read_store("v4", root, conf)["key_queries"] == want
    code, out, err = cli("verify", "--json", root)
    fs = json.loads(out)["findings"]
    legacy = [x for x in fs if x["check"] == "index.legacy_slot_count"]
    assert code == 0 and not _non_info(out) and len(legacy) == 1 and "4.7.0" in legacy[0]["message"], fs
    code, out, err = cli("verify", "--json", "--broker-version", "4.9.7", root)
    checks = [x["check"] for x in _non_info(out)]
    assert code == 4 and checks == ["index.hash_slot_count"] * len(files), out
    assert "4.9.7" in _non_info(out)[0]["message"]
    code, out, err = cli("verify", "--broker-version", "4.7.0", root)
    assert (code, out) == (0, ""), out + err
    code, out, err = cli("verify", "--json", "--broker-version", "4.7.0", FIX[name] / "store")
    assert code == 4 and {x["check"] for x in _non_info(out)} == {"index.hash_slot_count"}, out


@pytest.mark.oracle
def test_zero_length_last_file_message_names_the_versions(cli, tmp_path):
    """A zero-length last commitlog file: 5.3.3 deletes it and starts, 4.9.7 refuses to start (4.4 and older
    ignore it): the finding says which versions do what instead of one version's rule for all."""
    views = {}
    for v in ("v4", "v5"):
        name = f"basic-multifile-{v}"
        root = _copy(name, tmp_path)
        files = sorted((root / "commitlog").iterdir())
        (root / "commitlog" / f"{int(files[-1].name) + files[-1].stat().st_size:020d}").write_bytes(b"")
        views[v] = read_store(v, root, tmp_path / name / "manifest.json")["load_ok"]
        code, out, err = cli("verify", "--json", root)
        fs = _non_info(out)
        assert code == 4 and [x["check"] for x in fs] == ["commitlog.file_size"], fs
        msg = fs[0]["message"]
        assert "5.1.3 and later delete it" in msg and "4.5.1 to 5.1.2 refuse" in msg and "4.4 and older" in msg
    assert views == {"v4": False, "v5": True}


def test_checkpoint_label_says_the_layout_in_use_not_a_version(cli, tmp_path):
    """RocketMQ 5.3.3 leaves masterFlushedOffset/confirmPhyOffset zero here: the file cannot tell 4.x from 5.x."""
    p = FIX["basic-multifile-v5"] / "store" / "checkpoint"
    assert load_manifest(FIX["basic-multifile-v5"])["rocketmq_version"].startswith("5.3")
    assert struct.unpack_from(">qq", p.read_bytes(), 24) == (0, 0)
    code, out, err = cli("dump", "--json", p)
    gen = json.loads(out.splitlines()[0])["generation"]
    assert code == 0 and gen.startswith("24-byte layout in use") and "4.x" not in gen
    b = bytearray(p.read_bytes())
    struct.pack_into(">q", b, 32, 12345)
    q = tmp_path / "store" / "checkpoint"
    q.parent.mkdir()
    q.write_bytes(bytes(b))
    code, out, err = cli("dump", "--json", q)
    assert "5.1.1" in json.loads(out.splitlines()[0])["generation"]


@pytest.mark.oracle
@pytest.mark.parametrize("v", ["v4", "v5"])
@pytest.mark.parametrize("fault", ["none", "torn", "flip"])
def test_verify_clean_after_the_broker_recovered_and_shut_down(cli, tmp_path, v, fault):
    """A crash store (abort present), possibly with a torn tail or a corrupt record in the middle, started by the
    real broker (its own abnormal recovery), dispatched and shut down cleanly (oracle `restart`, in place): the
    bytes and consume-queue units past its recovered end stay on disk, and verify must confirm the store."""
    from oracle_helpers import oracle

    name = f"crash-behind-{v}"
    root = _copy(name, tmp_path)
    conf = tmp_path / name / "manifest.json"
    inj = {"none": None, "torn": F.torn_tail, "flip": F.flip_body_bit}[fault]
    injected = inj(root) if inj else None
    code, out, err = cli("verify", root)
    assert code == 4, out          # abort present (and the damage)
    r = oracle(v, "restart", "--store", str(root), "--conf", str(conf))
    assert r["load_ok"] and r["recovery"] == "abnormal" and not r["abort_present"]
    if injected is not None:
        assert r["max_offset"] == injected.offset     # the broker's recovery stopped at the damage
    code, out, err = cli("verify", "--json", root)
    assert code == 0 and not _non_info(out), out
    if injected is not None:
        notes = [x for x in json.loads(out)["findings"] if x["check"] == "commitlog.stale_after_end"]
        assert len(notes) == 1 and notes[0]["offset"] == injected.offset


@pytest.mark.parametrize("v", ["v4", "v5"])
def test_damage_after_a_clean_shutdown_is_still_reported(cli, tmp_path, v):
    root = _copy(f"basic-multifile-{v}", tmp_path)
    inj = F.flip_body_bit(root)
    code, out, err = cli("verify", "--json", root)
    fs = _non_info(out)
    assert code == 4 and any(x["check"] == "commitlog.body_crc" and x["offset"] == inj.offset for x in fs), fs


@pytest.mark.oracle
def test_commitlog_outside_the_root(cli, tmp_path):
    """storePathCommitLog on another disk: with the broker config every command finds the commitlog where the
    broker does (the broker reads this layout with the same setting); without it verify says what is missing."""
    name = "basic-multifile-v5"
    root = _copy(name, tmp_path)
    other = tmp_path / "disk2" / "commitlog"
    other.parent.mkdir()
    (root / "commitlog").rename(other)
    m = load_manifest(FIX[name])
    sc = dict(m["store_config"], storePathCommitLog=str(other))
    (tmp_path / "conf.json").write_text(json.dumps({"store_config": sc}))
    bv = m["broker_view"]
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathCommitLog={other}\n")
    code, out, err = cli("verify", "--broker-config", conf, root)
    assert (code, out) == (0, ""), out + err
    code, out, err = cli("recover", "--dry-run", "--json", "--config", conf, root)
    assert code == 0 and json.loads(out)["actions"] == [], out + err
    # a key the broker found on several messages (the scenario's key common to a whole topic)
    kq = max((q for q in bv["key_queries"] if q["begin"] == 0), key=lambda q: len(q["messages_phys_offsets"]))
    key = kq["key"]
    by_off = {mm["physical_offset"]: mm for mm in bv["messages"]}
    want = [o for o in kq["messages_phys_offsets"] if key in by_off[o]["properties"].get("KEYS", "").split(" ")]
    code, out, err = cli("query", "--broker-config", conf, root, "--topic", kq["topic"], "--key", key, "--json")
    assert code == 0 and want and [json.loads(x)["physical_offset"] for x in out.splitlines()] == want, out + err
    code, out, err = cli("verify", "--json", root)
    assert code == 4 and _non_info(out)[0]["check"] == "commitlog.missing", out
    # the judge: the broker started with this setting finds the same commitlog (restart changes the store: last)
    from oracle_helpers import oracle

    r = oracle("v5", "restart", "--store", str(root), "--conf", str(tmp_path / "conf.json"))
    assert r["load_ok"] and r["max_offset"] == bv["commitlog"]["max_offset"]
