"""rmqctl verify: clean on every oracle fixture, and each injected fault is reported with exit 4 and the
exact file and offset.

Fault-matrix rows (docs/faults.md) covered here, per test:
  F01 torn tail ............................ test_fault[torn_tail], test_torn_tail_matches_broker (oracle)
  F02 properties garbage, body CRC valid ... test_fault[property_bit]
  F03 bit flip in the middle ............... test_fault[body_bit], test_fault[header_bit], test_fault[zero_page]
  F04 stale valid-looking record ........... test_fault[stale_record], test_fault[stale_record_gap]
  F05 CRC really 0 ......................... test_crc_zero_record_is_valid
  F06 zero-length / short segment .......... test_fault[zero_length_last], test_short_middle_file
  F07 stray file in commitlog/ ............. test_stray_file
  F08 missing middle commitlog file ........ test_fault[missing_middle]
  F09 CQ ahead of the commitlog ............ test_fault[cq_ahead]
  F10 CQ behind (undispatched) ............. test_fault[cq_behind], test_fixture_verdicts[crash-*]
  F11 CQ unit disagrees with its message ... test_fault[cq_wrong_offset]
  F12 abort present / stale checkpoint ..... test_fixture_verdicts[crash-*]
  F13 checkpoint garbage ................... test_fault[checkpoint_garbage]
  F14 index prevIndex cycle ................ test_fault[index_cycle]
  F15 config main 0 bytes, .bak intact ..... test_fault[config_empty_with_bak]
  F16 config main 0 bytes, no .bak ......... test_fault[config_empty_no_bak]
  F17 committed offset beyond the queue .... test_offset_beyond_queue_max
  F18 lock held by a live process .......... test_lock_held, test_lock_held_tail_in_progress
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib
from pathlib import Path

import pytest

import faultlib as F
from conftest import run_cli
from oracle_helpers import fixture_dirs, load_manifest

FIXTURES = {p.name: p for p in fixture_dirs()}
FAULT_BASES = ["synthetic"] + [n for n in ("basic-multifile-v5", "basic-multifile-v4", "mixed-v5") if n in FIXTURES]


def _cfg_args(manifest: dict | None) -> list[str]:
    if not manifest:
        return ["--index-slots", "512", "--index-items", "2048"]   # make_store's defaults
    sc = manifest["store_config"]
    return ["--index-slots", str(sc["maxHashSlotNum"]), "--index-items", str(sc["maxIndexNum"])]


@pytest.fixture(scope="session")
def synthetic_base(tmp_path_factory) -> Path:
    return F.make_store(tmp_path_factory.mktemp("synth") / "store")


@pytest.fixture
def base(request, synthetic_base, tmp_path):
    """(copy of the store root, verify args)."""
    name = request.param
    if name == "synthetic":
        return F.copy_store(synthetic_base, tmp_path / "store"), _cfg_args(None)
    d = FIXTURES[name]
    return F.copy_store(d / "store", tmp_path / "store"), _cfg_args(load_manifest(d))


def _verify(cli, root, args, *extra):
    code, out, err = cli("verify", *args, *extra, root)
    assert "Traceback" not in err, err
    return code, out, err


def _findings(cli, root, args):
    code, out, err = _verify(cli, root, args, "--json")
    return code, json.loads(out)["findings"]


# -- clean fixtures ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_verdicts(cli, name):
    """Clean fixtures: exit 0 and silence. Crash fixtures (abort present, CQs behind, F10/F12): exit 4 with
    exactly abort.present and cq.behind findings -- what an operator must know before a restart."""
    d = FIXTURES[name]
    args = _cfg_args(load_manifest(d))
    code, out, err = _verify(cli, d / "store", args)
    if name.startswith("crash"):
        assert code == 4, out
        _, fs = _findings(cli, d / "store", args)
        checks = {f["check"] for f in fs if f["severity"] != "info"}
        # crash-timer: a process kill leaves the consume queues current; its timerlog's last unit is torn
        expect = {"abort.present", "timer.torn_unit"} if name == "crash-timer-v5" else {"abort.present", "cq.behind"}
        assert checks == expect, out
        assert all(f["path"].startswith(str(d / "store")) for f in fs)
    else:
        assert (code, out) == (0, ""), out


def test_synthetic_store_clean(cli, synthetic_base):
    code, out, _ = _verify(cli, synthetic_base, _cfg_args(None))
    assert (code, out) == (0, "")


def test_crc_zero_record_is_valid(cli, synthetic_base):
    """F05 / R16: a message whose body CRC really is 0 is valid (the synthetic store has one)."""
    zero = [r for r in F.commitlog_records(synthetic_base)
            if zlib.crc32(r.path.read_bytes()[r.body_pos:r.body_pos + r.body_len]) & 0x7FFFFFFF == 0]
    assert zero, "the synthetic store must contain a CRC-0 message"
    stored = struct.unpack_from(">i", zero[0].path.read_bytes(), zero[0].pos + 8)[0]
    assert stored == 0
    code, out, _ = _verify(cli, synthetic_base, _cfg_args(None))
    assert (code, out) == (0, "")


# -- injected faults ----------------------------------------------------------------------------------
FAULTS = {
    # name: (injector, acceptable check names)
    "body_bit": (F.flip_body_bit, {"commitlog.body_crc"}),
    "header_bit": (F.flip_header_bit, {"commitlog.length", "commitlog.total_size", "commitlog.short_record"}),
    "property_bit": (F.flip_property_bit, {"commitlog.properties", "commitlog.prop_crc"}),
    "torn_tail": (F.torn_tail, {"commitlog.torn_tail"}),
    "zero_page": (F.zero_page, {"commitlog.zeroed_range", "commitlog.no_blank"}),  # no_blank: zeros reach the end
    "stale_record": (F.stale_record_after_end, {"commitlog.stale_record"}),
    "stale_record_gap": (lambda r: F.stale_record_after_end(r, gap=64), {"commitlog.stale_record"}),
    "physical_offset_bit": (lambda r: F.flip_header_bit(r, field="physical_offset", mask=1),
                            {"commitlog.physical_offset"}),
    "missing_middle": (F.remove_middle_commitlog, {"commitlog.file_gap"}),
    "zero_length_last": (F.zero_length_last_file, {"commitlog.file_size"}),
    "cq_wrong_offset": (F.cq_unit_wrong_offset, {"cq.unit_mismatch"}),
    "cq_ahead": (F.cq_ahead, {"cq.ahead"}),
    "cq_behind": (F.cq_behind, {"cq.behind"}),
    "index_cycle": (F.index_chain_cycle, {"index.chain_cycle"}),
    "checkpoint_garbage": (F.checkpoint_garbage, {"checkpoint.timestamp"}),
    "config_empty_with_bak": (F.truncate_config, {"config.main_unusable"}),
    "config_empty_no_bak": (lambda r: F.truncate_config(r, with_bak=False), {"config.load"}),
}


def _inject(name, root, args):
    fn, _ = FAULTS[name]
    if name == "index_cycle":
        return F.index_chain_cycle(root, hash_slot_num=int(args[1]))
    return fn(root)


def _has_config(name: str) -> bool:
    return name == "synthetic" or (FIXTURES[name] / "store" / "config" / "consumerOffset.json").exists()


# config faults need a config/ dir (the oracle fixtures have none: the store code alone writes no config)
FAULT_CASES = [(b, f) for b in FAULT_BASES for f in sorted(FAULTS) if not f.startswith("config_") or _has_config(b)]


@pytest.mark.parametrize(("base", "fault"), FAULT_CASES, indirect=["base"])
def test_fault(cli, base, fault):
    root, args = base
    if fault == "missing_middle" and len(F.commitlog_files(root)) < 3:
        pytest.fail("fault base needs >= 3 commitlog files")
    hit = _inject(fault, root, args)
    code, out, _ = _verify(cli, root, args)
    assert code == 4, out
    want = f"{hit.path}: offset {hit.offset}: "
    lines = [ln for ln in out.splitlines() if ln.startswith(want)]
    assert lines, f"no finding at {want!r} ({hit.what}); got:\n{out}"
    checks = FAULTS[fault][1]
    assert any(any(f": {c}: " in ln for c in checks) for ln in lines), f"want one of {checks}:\n{out}"


def _tree_digest(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p)] = (st.st_size, st.st_mtime_ns, hashlib.sha1(p.read_bytes()).hexdigest())
    return out


@pytest.mark.parametrize("base", ["synthetic"], indirect=True)
def test_read_only(cli, base):
    """verify never writes to the store, also not on a damaged one."""
    root, args = base
    F.flip_body_bit(root)
    F.torn_tail(root)
    before = _tree_digest(root)
    _verify(cli, root, args)
    _verify(cli, root, args, "--json")
    assert _tree_digest(root) == before


@pytest.mark.parametrize("base", ["synthetic"], indirect=True)
def test_short_middle_file(cli, base):
    """F06/F20: a middle commitlog file shorter than the configured size."""
    root, args = base
    mid = F.commitlog_files(root)[1]
    os.truncate(mid, 1000)
    code, out, _ = _verify(cli, root, args)
    assert code == 4
    assert f"{mid}: offset {int(mid.name)}: commitlog.file_size: expected 32768, actual 1000" in out


@pytest.mark.parametrize("base", ["synthetic"], indirect=True)
def test_stray_file(cli, base):
    """F07: a stray file in commitlog/ is reported (the broker would fail on its name), never silently."""
    root, args = base
    stray = root / "commitlog" / "00000000000000000000.bak"
    stray.write_bytes(b"x")
    code, out, _ = _verify(cli, root, args)
    assert code == 4
    assert f"{stray}: warning: commitlog.stray" in out


@pytest.mark.parametrize("base", ["synthetic"], indirect=True)
def test_offset_beyond_queue_max(cli, base):
    """F17: a committed consumer offset beyond the queue's max offset."""
    root, args = base
    p = root / "config" / "consumerOffset.json"
    p.write_text(p.read_text().replace('"TopicA@GroupA":{0:', '"TopicA@GroupA":{0:99999', 1))
    code, out, _ = _verify(cli, root, args)
    assert code == 4
    assert f"{p}: config.offset_range: expected <= 133 (queue max), actual 99999" in out


@pytest.mark.parametrize("base", ["synthetic"], indirect=True)
def test_lock_held(cli, base):
    """F18: a live process holds the store lock: reported (exit 4), and verify stays read-only."""
    root, args = base
    with F.hold_lock(root) as lock:
        code, out, _ = _verify(cli, root, args)
    assert code == 4
    assert f"{lock}: offset 0: warning: lock.held" in out


@pytest.mark.parametrize("base", ["synthetic"], indirect=True)
def test_lock_held_tail_in_progress(cli, base):
    """On a live broker's store the tail being written is a note, not corruption."""
    root, args = base
    hit = F.torn_tail(root)
    with F.hold_lock(root):
        code, fs = _findings(cli, root, args)
    by_check = {f["check"]: f for f in fs}
    assert "commitlog.torn_tail" not in by_check
    assert by_check["commitlog.write_in_progress"]["severity"] == "info"
    assert by_check["commitlog.write_in_progress"]["offset"] == hit.offset


# -- output forms -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("base", ["synthetic"], indirect=True)
def test_json_summary_prometheus(cli, base, tmp_path):
    root, args = base
    hit = F.flip_body_bit(root)
    code, out, _ = _verify(cli, root, args, "--json")
    doc = json.loads(out)
    assert code == 4 and doc["clean"] is False and doc["counts"]["error"] >= 1
    f = next(x for x in doc["findings"] if x["check"] == "commitlog.body_crc")
    assert (f["path"], f["offset"], f["severity"]) == (str(hit.path), hit.offset, "error")
    assert f["expected"] != f["actual"]
    assert doc["stats"]["messages"] > 300
    code, out, _ = _verify(cli, root, args, "--summary")
    assert code == 4
    assert any(ln.startswith("commitlog.body_crc\terror\t1\t") for ln in out.splitlines()), out
    prom = tmp_path / "verify.prom"
    code, out, _ = _verify(cli, root, args, "--prometheus", prom)
    assert code == 4
    text = prom.read_text()
    assert 'check="commitlog.body_crc",severity="error"} 1' in text
    assert f'rmqctl_verify_clean{{store="{root}"}} 0' in text
    assert f'rmqctl_verify_exit_code{{store="{root}"}} 4' in text
    assert not list(tmp_path.glob(".verify.prom.*"))   # the tmp file was renamed


def test_clean_json_and_verbose(cli, synthetic_base):
    code, out, _ = _verify(cli, synthetic_base, _cfg_args(None), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["clean"] and doc["counts"]["error"] == doc["counts"]["warning"] == 0
    code, out, _ = _verify(cli, synthetic_base, _cfg_args(None), "-v")
    assert code == 0 and "recovery.predicted" in out   # notes only with -v


@pytest.mark.parametrize("base", ["synthetic"], indirect=True)
def test_verify_one_file(cli, base):
    root, args = base
    hit = F.flip_body_bit(root)
    code, out, _ = _verify(cli, root, args)
    code, out, _ = cli("verify", hit.path)
    assert code == 4
    assert f"{hit.path}: offset {hit.offset}: commitlog.body_crc" in out
    other = F.commitlog_files(root)[-1]
    assert cli("verify", other)[:2] == (0, "")
    assert cli("verify", root / "config" / "consumerOffset.json")[:2] == (0, "")


@pytest.mark.parametrize("base", ["synthetic"], indirect=True)
def test_parallel_equals_serial(cli, base):
    root, args = base
    F.flip_body_bit(root)
    F.cq_behind(root)
    a = _verify(cli, root, args, "--jobs", "1", "--json")
    b = _verify(cli, root, args, "--jobs", "2", "--json")
    fa, fb = json.loads(a[1])["findings"], json.loads(b[1])["findings"]
    assert fa == fb and a[0] == b[0] == 4


def test_exit_codes_subprocess(tmp_path, synthetic_base):
    r = run_cli("verify", *_cfg_args(None), synthetic_base)
    assert (r.returncode, r.stdout) == (0, b"")
    root = F.copy_store(synthetic_base, tmp_path / "s")
    F.flip_body_bit(root)
    r = run_cli("verify", *_cfg_args(None), root)
    assert r.returncode == 4 and b"commitlog.body_crc" in r.stdout
    r = run_cli("verify", tmp_path / "nope")
    assert r.returncode == 2 and r.stderr.count(b"\n") == 1
    r = run_cli("verify", tmp_path)     # a directory that is not a store
    assert r.returncode == 2
    r = run_cli("verify", *_cfg_args(None), root, "--prometheus", tmp_path / "nodir" / "x.prom")
    assert r.returncode == 8 and b"Traceback" not in r.stderr


# -- against the real broker ----------------------------------------------------------------------------
@pytest.mark.oracle
def test_torn_tail_matches_broker(cli, tmp_path):
    """F01: the offset verify names for a torn tail is where the broker's own recovery ends the log."""
    from oracle_helpers import read_store

    d = FIXTURES["basic-multifile-v5"]
    root = F.copy_store(d / "store", tmp_path / "store")
    hit = F.torn_tail(root)
    code, fs = _findings(cli, root, _cfg_args(load_manifest(d)))
    torn = next(f for f in fs if f["check"] == "commitlog.torn_tail")
    view = read_store("v5", root, conf=None)
    assert torn["offset"] == hit.offset == view["commitlog"]["max_offset"]
