"""The 5.x timer store (timerlog/, timerwheel, config/timercheck): the broker's recovery computed offline, verify,
recover (journaled, undoable, kill -9 safe), rebuild leaving it alone. Fixtures timer-v5 (clean shutdown) and
crash-timer-v5 (killed between two flushes of the wheel, last timerlog unit torn after its first 16 bytes), both
written by RocketMQ 5.3.3's TimerMessageStore (tests/oracle timer-write); their manifests hold the broker's view
after its own recovery (timer_view)."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli
from faultlib import tree_hashes

STORES = FIXTURES / "stores"
UNIT, SLOT = 52, 32
KILL = "RMQCTL_TEST_KILL_AFTER"
TORN_FILE, TORN_REL = "00000000000000001620", 104      # the crash fixture's torn unit (timerlog offset 1724)


def copy(tmp: Path, name: str) -> Path:
    dst = tmp / name
    shutil.copytree(STORES / name, dst)
    for p in [dst, *dst.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return dst / "store"


def manifest(name: str) -> dict:
    return json.loads((STORES / name / "manifest.json").read_text(encoding="utf-8"))


def wheel_slots(path: Path) -> dict:
    """index -> (time_ms, first, last) of every non-zero slot of a timerwheel file."""
    import numpy as np

    a = np.fromfile(path, dtype=">i8").reshape(-1, 4)
    return {int(i): (int(a[i, 0]) * 1000, int(a[i, 1]), int(a[i, 2])) for i in np.nonzero(a.any(axis=1))[0]}


def view_slots(view_wheel: list) -> dict:
    return {s["index"]: (s["time_ms"], s["first_pos"], s["last_pos"]) for s in view_wheel}


def timercheck(store: Path) -> dict:
    v = struct.unpack(">4q", (store / "config" / "timercheck").read_bytes()[:32])
    return dict(zip(("last_read_time_ms", "last_timer_log_flush_pos", "last_timer_queue_offset",
                     "master_timer_queue_offset"), v))


def verify(store: Path, *extra):
    return run_cli("verify", "--broker-config", store.parent / "manifest.json", *extra, store)


def recover(store: Path, *extra, env=None):
    return run_cli("recover", "--config", store.parent / "manifest.json", *extra, store, env=env)


# --- fixtures and the sparse timerwheel ------------------------------------------------------------

def test_sparse_timerwheel_is_written_back_and_round_trips(tmp_path):
    for name in ("timer-v5", "crash-timer-v5"):
        doc = json.loads((STORES / name / "timerwheel.sparse.json").read_text())
        wheel = STORES / name / "store" / "timerwheel"
        assert wheel.stat().st_size == doc["size"] == 2 * 7 * 86400 * SLOT
        assert (STORES / name / "timerwheel.sparse.json").stat().st_size < 64 * 1024
    f = tmp_path / "w"
    data = bytearray(3000)
    data[700:705] = b"abcde"
    f.write_bytes(bytes(data))
    tool = [sys.executable, str(FIXTURES / "sparsefile.py")]
    subprocess.run([*tool, "pack", str(f), str(tmp_path / "w.sparse.json")], check=True, capture_output=True)
    f.unlink()
    subprocess.run([*tool, "unpack", str(tmp_path)], check=True, capture_output=True)
    assert f.read_bytes() == bytes(data)


def test_recovery_model_matches_the_broker_view_in_the_manifests():
    """rmqctl.store.timer.simulate on each fixture gives the wheel, end, timercheck and queue offset the real broker
    held after its own recovery (manifest timer_view, read by TimerMessageStore.load())."""
    from rmqctl.store import timer as T
    from rmqctl.store.layout import Store

    for name in ("timer-v5", "crash-timer-v5"):
        view = manifest(name)["timer_view"]
        store = Store.open(STORES / name / "store")
        read = T.message_reader(store)
        wheel = T.Wheel(store.root / "timerwheel")
        rec = T.simulate(store, now_ms=view["timercheck"]["last_read_time_ms"], wheel=wheel,
                         message_at=T.message_queue_pos(read),
                         cq=T.queue_reader(store))
        ours = {int(i): (int(wheel.a[i, 0]) * 1000, int(wheel.a[i, 1]), int(wheel.a[i, 2])) for i in wheel.nonzero()}
        assert ours == view_slots(view["wheel"]), name
        assert rec.end == view["process_offset"]
        assert rec.queue_offset == view["curr_queue_offset"]
        assert {k: rec.checkpoint_new[k] for k in view["timercheck"]} == view["timercheck"]
        assert [f.path.name for f in rec.files if f not in rec.deleted_files] == \
            [f["name"] for f in view["timerlog_files"]]
    # the crash fixture: on disk the wheel lags (flush stopped), the broker re-links 4 slots and puts the torn unit
    # (deliver time 0) into slot 0
    crash = manifest("crash-timer-v5")["timer_view"]
    assert view_slots(crash["wheel_on_disk"]) != view_slots(crash["wheel"])
    assert view_slots(crash["wheel"])[0] == (0, 0, 1724)


# --- verify ----------------------------------------------------------------------------------------

def test_verify_intact_timer_store_is_clean():
    r = verify(STORES / "timer-v5" / "store")
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_verify_crash_names_the_torn_unit():
    store = STORES / "crash-timer-v5" / "store"
    data = (store / "timerlog" / TORN_FILE).read_bytes()
    unit = data[TORN_REL:TORN_REL + UNIT]
    assert struct.unpack(">i", unit[:4])[0] == UNIT and unit[16:] == bytes(36), "the fixture's tear is not there"
    assert (store / "abort").exists()
    r = verify(store)
    out = r.stdout.decode()
    assert r.returncode == 4, out
    line = next(x for x in out.splitlines() if "timer.torn_unit" in x)
    assert f"timerlog/{TORN_FILE}: offset {TORN_REL}: timer.torn_unit" in line and ": info:" not in line


def _put(path: Path, off: int, fmt: str, *v):
    b = bytearray(path.read_bytes())
    struct.pack_into(fmt, b, off, *v)
    path.write_bytes(bytes(b))


def _slot_of(store: Path, pos: int) -> int:
    return next(i for i, s in wheel_slots(store / "timerwheel").items() if s[2] == pos)


FAULTS = {
    # name: (inject(store) -> None, expected check)
    "slot_past_end": (lambda s: _put(s / "timerwheel", _slot_of(s, 1392) * SLOT + 8, ">qq", 5000, 5000),
                      "timer.slot_position"),
    "unit_message": (lambda s: _put(s / "timerlog" / "00000000000000000000", 2 * UNIT + 28, ">q", 3),
                     "timer.unit_message"),
    "broken_chain": (lambda s: _put(s / "timerlog" / "00000000000000000000", 3 * UNIT + 4, ">q", -1),
                     "timer.slot_chain"),
    "bad_unit": (lambda s: _put(s / "timerlog" / "00000000000000000540", 3 * UNIT, ">i", 7), "timer.bad_unit"),
    "topic_hash": (lambda s: _put(s / "timerlog" / "00000000000000000540", UNIT + 40, ">i", 12345),
                   "timer.unit_topic_hash"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_verify_finds_each_timer_fault(tmp_path, fault):
    store = copy(tmp_path, "timer-v5")
    before = tree_hashes(store)
    inject, check = FAULTS[fault]
    inject(store)
    assert tree_hashes(store) != before, "fault not injected"
    r = verify(store)
    out = r.stdout.decode()
    assert r.returncode == 4 and check in out, out
    for line in out.splitlines():
        if check in line:
            assert " F2" not in line and " R2" not in line and "Traceback" not in line


def test_bad_unit_ends_the_timerlog_and_recover_deletes_later_files(tmp_path):
    store = copy(tmp_path, "timer-v5")
    FAULTS["bad_unit"][0](store)
    r = verify(store)
    line = next(x for x in r.stdout.decode().splitlines() if "timer.bad_unit" in x)
    assert "timerlog/00000000000000000540: offset 156" in line and "deletes 1 later file" in line
    r = recover(store)
    assert r.returncode == 1, r.stdout.decode() + r.stderr.decode()
    assert sorted(p.name for p in (store / "timerlog").iterdir()) == ["00000000000000000000", "00000000000000000540"]
    assert timercheck(store)["last_timer_log_flush_pos"] == 540 + 3 * UNIT


# --- recover -----------------------------------------------------------------------------------------

def test_recover_crash_does_what_the_broker_recovery_does_and_undo_is_exact(tmp_path):
    store = copy(tmp_path, "crash-timer-v5")
    view = manifest("crash-timer-v5")["timer_view"]
    original = tree_hashes(store)
    assert wheel_slots(store / "timerwheel") != view_slots(view["wheel"])
    r = recover(store)
    assert r.returncode == 1, r.stdout.decode() + r.stderr.decode()
    # the wheel on disk is now the one the broker held in memory after its own recovery of the same store
    assert wheel_slots(store / "timerwheel") == view_slots(view["wheel"])
    ck = timercheck(store)
    assert ck["last_timer_log_flush_pos"] == view["timercheck"]["last_timer_log_flush_pos"] == 1776
    assert ck["last_timer_queue_offset"] == view["timercheck"]["last_timer_queue_offset"]
    # the torn unit stays (the broker keeps it)
    assert (store / "timerlog" / TORN_FILE).read_bytes() == (STORES / "crash-timer-v5" / "store" / "timerlog" /
                                                               TORN_FILE).read_bytes()
    after = tree_hashes(store)
    r = verify(store)
    assert r.returncode == 0, r.stdout.decode()
    r = recover(store)
    assert r.returncode == 0 and b"nothing to do" in r.stdout
    assert tree_hashes(store) == after
    r = run_cli("undo", store)
    assert r.returncode == 0, r.stderr.decode()
    assert tree_hashes(store) == original


def test_recover_deletes_an_empty_last_timerlog_file(tmp_path):
    store = copy(tmp_path, "timer-v5")
    (store / "timerlog" / "00000000000000001620").write_bytes(b"")
    original = tree_hashes(store)
    r = recover(store, "--dry-run")
    assert b"zero-length last timerlog file" in r.stdout
    r = recover(store)
    assert r.returncode == 1
    assert not (store / "timerlog" / "00000000000000001620").exists()
    assert run_cli("undo", store).returncode == 0 and tree_hashes(store) == original


def test_recover_and_rebuild_leave_an_intact_timer_store_alone(tmp_path):
    store = copy(tmp_path, "timer-v5")
    original = tree_hashes(store)
    for argv in (["recover", "--config"], ["rebuild", "cq", "--config"], ["rebuild", "index", "--config"]):
        r = run_cli(*argv, store.parent / "manifest.json", store)
        assert r.returncode == 0, (argv, r.stdout.decode(), r.stderr.decode())
        assert tree_hashes(store) == original, argv


def test_kill_at_every_step_then_rerun_converges(tmp_path):
    ref = copy(tmp_path / "ref", "crash-timer-v5")
    original = tree_hashes(ref)
    assert recover(ref).returncode == 1
    expected = tree_hashes(ref)
    ops = sorted((ref / "rmqctl-quarantine").iterdir())
    steps = sum(1 for x in (ops[0] / "journal.jsonl").read_text().splitlines() if '"seq"' in x)
    assert steps >= 6
    for n in range(1, steps + 1):
        root = copy(tmp_path / str(n), "crash-timer-v5")
        r = recover(root, env={KILL: str(n)})
        assert r.returncode == 137, (n, r.stderr)
        r = recover(root)
        assert r.returncode in (0, 1), (n, r.stderr)
        assert tree_hashes(root) == expected, f"killed after step {n} of {steps}"
        if n == steps // 2:     # the killed op was rolled back and dropped: one undo gives back the original
            assert run_cli("undo", root).returncode == 0
            assert tree_hashes(root) == original, f"undo after a kill at step {n}"
        shutil.rmtree(root.parent)


# --- judged by the real broker ---------------------------------------------------------------------

def _tear(frm: int):
    def f(store):
        _put(store / "timerlog" / TORN_FILE, TORN_REL + frm, f">{UNIT - frm}s", bytes(UNIT - frm))
    return f


BROKER_CASES = {
    "as-is": None,                                   # torn after 16 bytes: kept, revises slot 0
    "torn-size": _tear(2),                           # size field gone: the timerlog ends before it
    "high-magic": lambda s: _put(s / "timerlog" / "00000000000000001080", UNIT + 12, ">i", 0x100),   # ends it,
    # the later file is deleted (a unit torn after its first 4 bytes is kept like "as-is": magic 0 passes)
}


@pytest.mark.oracle
@pytest.mark.parametrize("case", sorted(BROKER_CASES))
def test_recover_equals_the_broker_recovery(tmp_path, case):
    """After rmqctl recover, the broker's view equals its view after its own recovery of the same crash store; the
    wheel rmqctl wrote is the one the broker holds after recovering."""
    from oracle_helpers import oracle

    store = copy(tmp_path / "a", "crash-timer-v5")
    if BROKER_CASES[case]:
        BROKER_CASES[case](store)
    crash = tmp_path / "crash"
    shutil.copytree(store.parent, crash)
    theirs = oracle("v5", "timer-read", "--store", crash / "store")
    r = recover(store)
    assert r.returncode == 1, r.stdout.decode() + r.stderr.decode()
    ours = oracle("v5", "timer-read", "--store", store)
    assert ours["load_ok"] and ours["timer_load_ok"]
    for k in theirs:
        if k not in ("recovery", "wheel_on_disk"):
            assert ours[k] == theirs[k], (case, k)
    assert ours["wheel_on_disk"] == theirs["wheel"], case
    assert recover(store).returncode == 0


@pytest.mark.oracle
def test_verify_is_clean_after_the_broker_itself_recovered(tmp_path):
    from oracle_helpers import oracle

    store = copy(tmp_path, "crash-timer-v5")
    out = oracle("v5", "timer-restart", "--store", store)
    assert out["load_ok"] and out["abort_present"] is False
    r = verify(store, "-v")
    text = r.stdout.decode()
    assert r.returncode == 0, text
    assert f"offset {TORN_REL}: info: timer.torn_unit" in text
