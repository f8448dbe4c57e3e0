"""Acceptance of `rmqctl recover` by the real broker (tests/oracle): for each crash fixture and each fault
injected on top, after recover the broker starts with a NORMAL recovery, serves exactly the validly
written messages, finds every key, and its commitlog ends where its own abnormal recovery would have
ended it. `undo` then gives back the original bytes."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

import faultlib as F
from faultlib import tree_hashes
from oracle_helpers import STORES as STORES_DIR, fixture_dirs, load_manifest, read_store

pytestmark = pytest.mark.oracle

# crash-timer-v5's commitlog is an ordinary one (its timer store is judged by the broker in test_timer_store.py):
# left out of the commitlog fault matrix to keep CI time
CRASH = [d for d in fixture_dirs() if d.name.startswith("crash") and d.name != "crash-timer-v5"]


def _zero_checkpoint(root):
    p = Path(root) / "checkpoint"
    p.write_bytes(bytes(4096))


def _index_chain(root):
    F.index_chain_cycle(root, hash_slot_num=_manifest_cfg(root)["maxHashSlotNum"])


def _manifest_cfg(root):
    return json.loads((Path(root).parent / "manifest.json").read_text())["store_config"]


FAULTS = {
    "none": None,
    "torn-tail": lambda r: F.torn_tail(r),
    "bitflip-mid": lambda r: F.flip_body_bit(r),
    "cq-ahead": lambda r: F.cq_ahead(r),
    "cq-behind": lambda r: F.cq_behind(r),
    "index-chain": _index_chain,
    "checkpoint-zero": _zero_checkpoint,
    "checkpoint-garbage": lambda r: F.checkpoint_garbage(r),
    "zero-length-last": lambda r: F.zero_length_last_file(r, file_size=_manifest_cfg(r)["mappedFileSizeCommitLog"]),
}


def _copy(fixture: Path, tmp: Path) -> Path:
    F.copy_store(fixture, tmp / fixture.name)
    return tmp / fixture.name / "store"


def _key_truth(view):
    """For every message: the keys IndexService indexes (UNIQ_KEY, KEYS split on ' '); ROLLBACK is not indexed."""
    truth = {}
    for m in view["messages"]:
        if m.get("transaction_type") == 3:      # (sysFlag & 0xC) >> 2: ROLLBACK
            continue
        props = m["properties"]
        keys = [props["UNIQ_KEY"]] if props.get("UNIQ_KEY") else []
        keys += [k for k in props.get("KEYS", "").split(" ") if k]
        for k in keys:
            truth.setdefault((m["topic"], k), set()).add(m["physical_offset"])
    return truth


def check_served(after, expected_messages, *, exclude_topic=None):
    assert after["load_ok"], after.get("load_error")
    assert after["recovery"] == "normal"
    msgs = [m for m in after["messages"] if m["topic"] != exclude_topic]
    assert len(msgs) == len(expected_messages)
    assert msgs == expected_messages
    # every queue unit the broker serves matches a message, and every dispatched message is served
    by_phys = {m["physical_offset"]: m for m in after["messages"]}
    served = set()
    for q in after["queues"]:
        for u in q["units"]:
            m = by_phys[u["physical_offset"]]
            assert m["size"] == u["size"]
            if m["topic"] == q["topic"]:
                assert m["queue_id"] == q["queue_id"] and m["queue_offset"] == u["queue_offset"]
                served.add(u["physical_offset"])
    for m in msgs:
        if m["transaction_type"] in (0, 2):      # NOT / COMMIT go to a consume queue
            assert m["physical_offset"] in served, m["physical_offset"]
    # key queries over all time return exactly the messages carrying the key
    truth = _key_truth(after)
    for kq in after["key_queries"]:
        if kq["begin"] == 0 and kq["end"] == 2**63 - 1:
            want = truth.get((kq["topic"], kq["key"]), set())
            got = set(kq["messages_phys_offsets"])
            assert got == set(sorted(want)[-kq["max_num"]:]) if len(want) > kq["max_num"] else got == want, kq


def _recover(cli, root, *extra):
    conf = root.parent / "manifest.json"
    code, out, err = cli("recover", "--json", "--config", conf, *extra, root)
    assert code in (0, 1), err
    return code, json.loads(out)


# Every fault on the crash store with the most files (both versions); every crash store of every layout with no
# added fault. Each case starts the broker twice, so the full product (~70 cases) would cost CI a quarter hour.
MATRIX = [(fault, d) for d in CRASH for fault in FAULTS
          if fault == "none" or d.name.startswith("crash-multifile-")]


def test_matrix_covers_every_fault_and_crash_store():
    assert {f for f, _ in MATRIX} == set(FAULTS)
    assert {d.name for _, d in MATRIX} == {d.name for d in CRASH}
    assert {d.name[-2:] for f, d in MATRIX if f == "torn-tail"} == {"v4", "v5"}


@pytest.mark.parametrize("fault,fx", MATRIX, ids=[f"{f}-{d.name}" for f, d in MATRIX])
def test_recover_crash_fixture(cli, tmp_path, fault, fx):
    version = fx.name[-2:]
    root = _copy(fx, tmp_path / fault)
    if FAULTS[fault] is not None:
        FAULTS[fault](root)
    before = tree_hashes(root)
    broker = read_store(version, root)          # the broker's own abnormal recovery of the same bytes
    code, plan = _recover(cli, root)
    assert code == 1
    after = read_store(version, root)
    if broker.get("load_ok"):
        assert after["commitlog"]["max_offset"] == broker["commitlog"]["max_offset"]
        assert plan["commitlog"]["valid_end"] == broker["commitlog"]["max_offset"]
        check_served(after, broker["messages"])
    else:
        # 4.9 refuses a zero-length last file: compare with the fixture's own broker view
        assert fault == "zero-length-last" and version == "v4", broker.get("load_error")
        view = load_manifest(fx)["broker_view"]
        assert after["commitlog"]["max_offset"] == view["commitlog"]["max_offset"]
        check_served(after, view["messages"])
    # a second run has nothing to do
    code2, plan2 = _recover(cli, root)
    assert code2 == 0 and plan2["actions"] == []
    # undo gives the original bytes back
    code, out, err = cli("undo", root)
    assert code in (0, 1), err
    assert tree_hashes(root) == before


@pytest.mark.parametrize("version", ["v4", "v5"])
def test_quarantine_mode_keeps_records_after_a_bad_one(cli, tmp_path, version):
    fx = next(d for d in CRASH if d.name.endswith(version))
    root = _copy(fx, tmp_path)
    clean = read_store(version, root)
    rec = F.pick_record(root, body=True)
    F.flip_body_bit(root, rec)
    code, plan = _recover(cli, root, "--on-corruption", "quarantine")
    assert code == 1
    assert any(a["kind"] == "write_record" for a in plan["actions"])
    after = read_store(version, root)
    assert after["commitlog"]["max_offset"] == clean["commitlog"]["max_offset"]
    expected = [m for m in clean["messages"] if m["physical_offset"] != rec.offset]
    check_served(after, expected, exclude_topic="rmqctl_quarantine")
    fillers = [m for m in after["messages"] if m["topic"] == "rmqctl_quarantine"]
    assert len(fillers) == 1 and fillers[0]["physical_offset"] == rec.offset
    assert fillers[0]["size"] == rec.size and fillers[0]["transaction_type"] == 3
    # the queue keeps its offsets: the slot of the lost message points at the placeholder
    q = next(q for q in after["queues"] if q["topic"] == rec.topic and q["queue_id"] == rec.queue_id)
    slot = next(u for u in q["units"] if u["queue_offset"] == rec.queue_offset)
    assert slot["physical_offset"] == rec.offset
    # stop mode (the default) ends the log where the broker would
    root2 = _copy(fx, tmp_path / "stop")
    rec2 = F.pick_record(root2, body=True)
    F.flip_body_bit(root2, rec2)
    broker = read_store(version, root2)
    code, plan = _recover(cli, root2)
    assert plan["commitlog"]["valid_end"] == broker["commitlog"]["max_offset"] == rec2.offset
    assert any("valid records resume" in n for n in plan["notes"])


@pytest.mark.parametrize("fixture", [d for d in fixture_dirs() if not d.name.startswith("crash")],
                         ids=lambda d: d.name)
def test_rebuild_is_byte_identical_on_clean_fixtures(cli, tmp_path, fixture):
    """Rebuilt CQ and index files equal the broker's own, byte for byte (no file needs replacing);
    after damaging them, a rebuild restores exactly the broker's bytes."""
    root = _copy(fixture, tmp_path)
    conf = root.parent / "manifest.json"
    original = tree_hashes(root)
    for what in ("cq", "index"):
        code, out, err = cli("rebuild", what, "--json", "--config", conf, root)
        assert code == 0, err
        assert json.loads(out)["actions"] == []
    assert tree_hashes(root) == original
    cqs = sorted((root / "consumequeue").rglob("0000*"))
    idx = sorted((root / "index").glob("*"))
    if not cqs:
        return
    # damage: zero a CQ file, delete another, flip bytes in the index -> rebuild gives the broker's bytes back
    cqs[0].write_bytes(bytes(cqs[0].stat().st_size))
    if len(cqs) > 1:
        cqs[-1].unlink()
    if idx:
        with open(idx[0], "r+b") as f:
            f.seek(40)
            f.write(b"\xff" * 64)
            f.seek(0)
            f.write(struct.pack(">q", 0))
    for what in ("cq", "index"):
        code, out, err = cli("rebuild", what, "--json", "--config", conf, root)
        assert code == 1, err
    assert tree_hashes(root) == original


@pytest.mark.parametrize("version", ["v4", "v5"])
def test_quarantine_mode_across_files(cli, tmp_path, version):
    """The rest of a middle file is destroyed (zeros from a record to the end of the file, its BLANK
    included): quarantine mode writes a BLANK record there, so the broker goes on with the next file."""
    fx = STORES_DIR / f"crash-multifile-{version}"
    root = _copy(fx, tmp_path)
    clean = read_store(version, root)
    recs = [r for r in F.commitlog_records(root) if r.path.name == "00000000000000024576"]
    victim = recs[len(recs) // 2]
    with open(victim.path, "r+b") as f:
        f.seek(victim.pos)
        f.write(bytes(victim.path.stat().st_size - victim.pos))
    code, plan = _recover(cli, root, "--on-corruption", "quarantine")
    assert code == 1
    w = [a for a in plan["actions"] if a["kind"] == "write_record"]
    assert len(w) == 1 and "BLANK" in w[0]["why"]
    after = read_store(version, root)
    assert after["commitlog"]["max_offset"] == clean["commitlog"]["max_offset"]
    lost = {r.offset for r in recs if r.offset >= victim.offset}
    expected = [m for m in clean["messages"] if m["physical_offset"] not in lost]
    assert len(expected) < len(clean["messages"])
    check_served(after, expected, exclude_topic="rmqctl_quarantine")
