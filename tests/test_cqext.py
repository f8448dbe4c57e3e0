"""Consume-queue ext (enableConsumeQueueExt with SQL92 filter bit maps computed by the broker's own
CommitLogDispatcherCalcBitMap; fixtures cqext-v4, cqext-v5), judged by the real broker: rebuild cq
keeps every ext address and ext file, rebuilds both byte for byte from nothing, recover appends units
with their ext units, and the broker links every unit to its ext unit (bit map included) afterwards."""
from __future__ import annotations

import json
import shutil

import pytest

import faultlib as F
from oracle_helpers import STORES, load_manifest, read_store

EXT_FIXTURES = ["cqext-v4", "cqext-v5"]
MAX_ADDR = -2147483649


def _copy(tmp_path, name):
    F.copy_store(STORES / name, tmp_path / name)
    return tmp_path / name / "store", tmp_path / name / "manifest.json"


@pytest.mark.parametrize("name", EXT_FIXTURES)
def test_fixture_units_link_to_ext_units_with_bit_maps(name):
    bv = load_manifest(STORES / name)["broker_view"]
    units = [u for q in bv["queues"] for u in q["units"]]
    assert len(units) == 36 and all(u["tags_code"] <= MAX_ADDR and u["ext"] for u in units)
    # filtered topic: bit maps set by the broker's filter evaluation; the other topic: empty bit maps
    f = [u["ext"]["bit_map_b64"] for q in bv["queues"] if q["topic"] == "TopicF" for u in q["units"]]
    assert all(f) and len(set(f)) > 1
    assert all(u["ext"]["bit_map_b64"] == "" for q in bv["queues"] if q["topic"] == "TopicG" for u in q["units"])


@pytest.mark.parametrize("name", EXT_FIXTURES)
def test_verify_clean(cli, name):
    code, out, err = cli("verify", STORES / name / "store")
    assert (code, out) == (0, ""), out + err


@pytest.mark.parametrize("name", EXT_FIXTURES)
def test_verify_sees_damaged_ext_units(cli, tmp_path, name):
    """An ext unit that no longer belongs to its message, and a lost ext file: one finding each."""
    import struct

    root, _ = _copy(tmp_path, name)
    d = root / "consumequeue_ext" / "TopicF"
    e0 = sorted((d / "0").iterdir())[0]
    b = bytearray(e0.read_bytes())
    size, tags, ts, bl = struct.unpack_from(">hqqh", b, 0)
    struct.pack_into(">q", b, 10, ts + 1)
    e0.write_bytes(bytes(b))
    assert struct.unpack_from(">q", e0.read_bytes(), 10)[0] == ts + 1
    lost = sorted((d / "1").iterdir())[-1]
    lost.unlink()
    assert not lost.exists()
    code, out, _ = cli("verify", "--json", root)
    assert code == 4
    fs = sorted((f["check"], f["path"]) for f in json.loads(out)["findings"] if f["severity"] != "info")
    cq = root / "consumequeue" / "TopicF"
    assert fs[0] == ("cq.ext_mismatch", str(cq / "0" / f"{0:020d}"))
    assert [f[0] for f in fs] == ["cq.ext_mismatch", "cq.ext_unit"] and fs[1][1].startswith(str(cq / "1")), fs


@pytest.mark.parametrize("name", EXT_FIXTURES)
def test_rebuild_cq_on_intact_store_changes_nothing(cli, tmp_path, name):
    root, _ = _copy(tmp_path, name)
    before = F.tree_hashes(root)
    code, out, err = cli("rebuild", "cq", root)
    assert code == 0, out + err
    assert F.tree_hashes(root) == before


@pytest.mark.oracle
@pytest.mark.parametrize("name", EXT_FIXTURES)
def test_rebuild_cq_from_scratch_byte_identical_and_linked_by_broker(cli, tmp_path, name):
    root, manifest = _copy(tmp_path, name)
    shutil.rmtree(root / "consumequeue")
    code, out, err = cli("rebuild", "cq", "--config", manifest, root)
    assert code == 1, out + err
    shutil.rmtree(root / "rmqctl-quarantine", ignore_errors=True)
    assert F.tree_hashes(root) == F.tree_hashes(STORES / name / "store")
    view = read_store(name.rsplit("-", 1)[1], root)
    assert view["load_ok"] and view["queues"] == load_manifest(STORES / name)["broker_view"]["queues"]


@pytest.mark.oracle
@pytest.mark.parametrize("name", EXT_FIXTURES)
def test_rebuild_cq_without_ext_files_links_every_unit(cli, tmp_path, name):
    """Both consumequeue/ and consumequeue_ext/ gone: the units get new ext units (tagsCode and store time
    right, no bit map: the broker then evaluates the filter on the message instead of skipping it)."""
    root, manifest = _copy(tmp_path, name)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "consumequeue_ext")
    code, out, err = cli("rebuild", "cq", "--config", manifest, root)
    assert code == 1, out + err
    view = read_store(name.rsplit("-", 1)[1], root)
    expected = load_manifest(STORES / name)["broker_view"]["queues"]
    assert view["load_ok"] and len(view["queues"]) == len(expected)
    for q, e in zip(view["queues"], expected):
        assert [(u["queue_offset"], u["physical_offset"], u["size"]) for u in q["units"]] == \
            [(u["queue_offset"], u["physical_offset"], u["size"]) for u in e["units"]]
        for u, eu in zip(q["units"], e["units"]):
            assert u["tags_code"] <= MAX_ADDR and u["ext"] is not None
            assert (u["ext"]["tags_code"], u["ext"]["msg_store_time"]) == \
                (eu["ext"]["tags_code"], eu["ext"]["msg_store_time"])
            assert u["ext"]["bit_map_b64"] == ""


@pytest.mark.oracle
@pytest.mark.parametrize("name", EXT_FIXTURES)
def test_recover_appends_units_with_their_ext_units(cli, tmp_path, name):
    root, manifest = _copy(tmp_path, name)
    lost = []
    for q in (root / "consumequeue" / "TopicF").iterdir():
        for f in sorted(q.iterdir())[1:]:
            f.unlink()
            lost.append(f)
    (root / "abort").write_bytes(b"")
    assert lost and not any(p.exists() for p in lost)
    broker = read_store(name.rsplit("-", 1)[1], root)      # the broker's own abnormal recovery of these bytes
    assert broker["recovery"] == "abnormal"
    code, out, err = cli("recover", "--config", manifest, root)
    assert code == 1, out + err
    shutil.rmtree(root / "rmqctl-quarantine", ignore_errors=True)
    after, before = F.tree_hashes(root), F.tree_hashes(STORES / name / "store")
    # everything but the checkpoint (recover writes its own) is the broker's bytes again
    assert {k: v for k, v in after.items() if k != "checkpoint"} == \
        {k: v for k, v in before.items() if k != "checkpoint"}
    view = read_store(name.rsplit("-", 1)[1], root)
    assert view["queues"] == load_manifest(STORES / name)["broker_view"]["queues"]
    # The broker's own recovery links the same ext content, at other addresses: it re-dispatches from its
    # recovery start file and puts an ext unit for every message before the "already in the queue" check
    # (ConsumeQueue.putMessagePositionInfoWrapper), so it appends duplicates of units 0..9 first.
    assert _linked(view) == _linked(broker)
    assert [u["tags_code"] for q in view["queues"] for u in q["units"]] != \
        [u["tags_code"] for q in broker["queues"] for u in q["units"]]


def _linked(view):
    """Units with their ext unit's content instead of its address."""
    return [[(u["queue_offset"], u["physical_offset"], u["size"], u["ext"]) for u in q["units"]]
            for q in view["queues"]]


def test_json_dump_of_ext_file_ends_cleanly(cli):
    """An ext file whose last unit did not fit ends with a short -1: dump stops there without an error."""
    files = sorted((STORES / "cqext-v5" / "store" / "consumequeue_ext" / "TopicF" / "0").iterdir())
    assert len(files) > 1
    code, out, err = cli("dump", "--json", files[0])
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["kind"] for r in rows].count("cq_ext_unit") >= 5
    assert rows[-1]["kind"] == "trailer" and rows[-1]["trailing"] == "end_filler"
    code, out, err = cli("dump", files[0])
    assert (code, err) == (0, "")
    assert out.splitlines()[-1].endswith("end-of-file filler at offset %d, %d bytes to the end of the file"
                                         % (rows[-1]["valid_bytes"], rows[-1]["trailing_bytes"]))


@pytest.mark.parametrize("name", EXT_FIXTURES)
def test_per_record_feed_equals_batch_path(tmp_path, name):
    from test_lmq import staged_per_record_vs_batch

    a, b = staged_per_record_vs_batch(tmp_path, name)
    assert any(p.startswith("consumequeue_ext/") for p in a) is False     # ext files are unchanged: not staged
    assert a == b and a
