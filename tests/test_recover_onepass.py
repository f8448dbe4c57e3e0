"""recover's one-pass mode (consume queues and index dispatched during the validating scan, kept only
when the end of valid data confirms the guess) plans exactly what the two-pass mode plans: same
actions, same staged bytes, same notes -- on crash fixtures with every fault the matrix injects."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import faultlib as F
from conftest import FIXTURES

STORES = FIXTURES / "stores"


def _checkpoint_zero(root):
    (root / "checkpoint").write_bytes(bytes(4096))


def _bitflip(root):
    recs = F.commitlog_records(root)
    F.flip_body_bit(root, recs[len(recs) // 3])


FAULTS = {
    "none": lambda r: None,
    "torn-tail": F.torn_tail,
    "cq-ahead": F.cq_ahead,
    "cq-behind": F.cq_behind,
    "index-chain": F.index_chain_cycle,
    "checkpoint-zero": _checkpoint_zero,
    "checkpoint-garbage": F.checkpoint_garbage,
    "bitflip-mid": _bitflip,
    "stale-after-end": F.stale_record_after_end,
}


def _plan(root: Path, conf: Path, tmp: Path, speculate: bool, mode: str) -> dict:
    from rmqctl.repair import recover as R
    from rmqctl.repair import speculation
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    cfg = StoreConfig().with_values(json.loads(conf.read_text())["store_config"])
    store = Store.open(root, cfg)
    staging = tmp / ("spec" if speculate else "two")
    staging.mkdir()
    old, speculation.SPECULATE = speculation.SPECULATE, speculate
    try:
        ctx = R.analyze(store, R.Options(on_corruption=mode), staging)
    finally:
        speculation.SPECULATE = old
    out = ctx.plan.to_json()
    for a, j in zip(ctx.plan.actions, out["actions"]):
        if a.kind in ("write_file", "create_file"):
            j["staged_sha256"] = hashlib.sha256(Path(a.payload[1]).read_bytes()).hexdigest()
    return out


# bcq-v5: batch consume queues (no consumequeue/ files to put behind)
ONE_PASS_CASES = [(x, f) for x in ("crash-multifile-v5", "crash-behind-v4", "basic-multifile-v5", "bcq-v5")
                  for f in FAULTS if not (x == "bcq-v5" and f == "cq-behind")]


@pytest.mark.parametrize("fixture,fault", ONE_PASS_CASES)
@pytest.mark.parametrize("mode", ["stop", "quarantine"])
def test_one_pass_plans_what_two_passes_plan(tmp_path, fixture, fault, mode, monkeypatch):
    from rmqctl.repair.batch_dispatch import HeldWindows

    F.copy_store(STORES / fixture, tmp_path / fixture)
    root = tmp_path / fixture / "store"
    conf = tmp_path / fixture / "manifest.json"
    (root / "abort").touch()
    FAULTS[fault](root)
    two = _plan(root, conf, tmp_path, False, mode)
    monkeypatch.setattr(HeldWindows, "HOLD_ROWS", 3)    # units held a few windows at a time, not all of them
    one = _plan(root, conf, tmp_path, True, mode)
    assert two["summary"].pop("commitlog_passes", 2) == 2
    used = one["summary"].pop("commitlog_passes", None)
    assert one == two
    # the guess holds whenever nothing in the queues or the index reaches past the end of valid data
    if mode == "stop" and (fault in ("none", "cq-behind", "checkpoint-zero")
                           or (fault == "torn-tail" and fixture.startswith("crash"))):
        assert used == 1
    if fault == "cq-ahead" and fixture.startswith("crash"):
        assert used == 2


STATE = ("keep_end", "kept_any", "max_phys", "dropped_units", "dropped_valid_below", "base", "end", "out_base")


def test_a_queue_truncated_at_a_cut_above_its_units_is_not_read_again(tmp_path):
    """Pass 1 keeps each queue as it read it; the real cut reuses that only when every unit lies below it,
    and then equals reading the queue again at that cut (at cuts on and below a unit it reads again)."""
    from rmqctl.repair import queue_state as QS
    from rmqctl.repair import speculation
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    fixture = "crash-multifile-v5"
    F.copy_store(STORES / fixture, tmp_path / fixture)
    root = tmp_path / fixture / "store"
    cfg = StoreConfig().with_values(json.loads((tmp_path / fixture / "manifest.json").read_text())["store_config"])
    store = Store.open(root, cfg)
    files = store.commitlog.files
    sp = speculation.Speculation.start(store, files, files[0].start, type("O", (), {"from_start": False})(),
                                       tmp_path / "staging", cfg)
    assert sp.fresh
    checked = 0
    for (topic, qid), fresh in sp.fresh.items():
        top = fresh.seen_phys
        assert top >= 0
        for cut in (None, top + 1, top + 10**6, top, top - 1, 0):
            got = sp.truncated(topic, qid, cut)
            if cut is not None and cut <= top:
                assert got is None
                continue
            want = QS.truncate_state(store, topic, qid, cut)
            assert [getattr(got, k) for k in STATE] == [getattr(want, k) for k in STATE]
            assert [f.path for f in got.files] == [f.path for f in want.files]
            assert got is not sp.truncated(topic, qid, cut)
            checked += 1
    assert checked >= 3 * len(sp.fresh)
    sp.drop()


def _unit(phys, size, tags=0):
    import struct

    return struct.pack(">qiq", phys, size, tags)


TAIL_SHAPES = {   # consume-queue files of 8 units (160 bytes): name -> [(file start, bytes, size on disk)]
    "clean": [(0, _unit(0, 100) + _unit(100, 50) + _unit(150, 70), 160)],
    "short file": [(0, _unit(0, 100) + _unit(100, 50), 100)],
    "longer file": [(0, _unit(0, 100) + _unit(100, 50), 200)],
    "unit after a zero unit": [(0, _unit(0, 100) + bytes(20) + _unit(300, 10), 160)],
    "tags only": [(0, _unit(0, 100) + _unit(0, 0, 7), 160)],
    "byte at the end": [(0, _unit(0, 100) + bytes(119) + b"\x01", 160)],
    "second file": [(0, b"".join(_unit(i * 10, 10) for i in range(8)), 160), (160, _unit(80, 10), 160)],
    "full file": [(0, b"".join(_unit(i * 10, 10) for i in range(8)), 160)],
}


@pytest.mark.parametrize("shape", TAIL_SHAPES)
@pytest.mark.parametrize("cut", [None, 120, 60])
def test_a_queue_left_as_it_is_is_not_read_again(tmp_path, shape, cut):
    """A queue that truncate_state leaves with only zeros after its end (tail_zero) and that gets no unit is not
    compared with its file again at the end: what the comparison would give on every shape of file (short,
    longer, a unit after a zero one, a lone non-zero byte, two files, a full one) and cut."""
    from rmqctl.repair import rebuild_cq as RC
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    root = tmp_path / "store"
    d = root / "consumequeue" / "T" / "0"
    d.mkdir(parents=True)
    (root / "commitlog").mkdir()
    for start, data, size in TAIL_SHAPES[shape]:
        p = d / f"{start:020d}"
        p.write_bytes(data)
        with open(p, "r+b") as f:
            f.truncate(size)
    store = Store(root, StoreConfig().with_values({"mappedFileSizeConsumeQueue": 160}))

    def staged(force_compare: bool):
        st = RC.truncate_state(store, "T", 0, cut)
        shortcut = st.tail_zero
        if force_compare:
            st.tail_zero = False
        st.stage_dir = tmp_path / ("full" if force_compare else "short") / str(cut)
        return shortcut, [(s, p.read_bytes()) for s, p in st.finish_files()], st.delete_files()

    shortcut, got, got_del = staged(False)
    _, want, want_del = staged(True)
    assert (got, got_del) == (want, want_del)
    expect = {"clean": True, "longer file": True, "second file": True, "short file": False,
              "unit after a zero unit": False, "tags only": False, "byte at the end": False, "full file": False}
    if cut is None:
        assert shortcut is expect[shape]
        assert bool(want) is (shape in ("short file", "unit after a zero unit", "tags only", "byte at the end"))
