"""`rmqctl recover` / `rebuild` without the Java oracle: plans, exit codes, safety (lock, symlinks,
EROFS/ENOSPC rolled back), undo, and the byte-level builders against the spec's test vectors."""
from __future__ import annotations

import errno
import json
import os
import struct
from pathlib import Path

import pytest

import faultlib as F
from faultlib import tree_hashes
from conftest import FIXTURES, run_cli

STORES = FIXTURES / "stores"


def copy(name: str, tmp: Path) -> Path:
    F.copy_store(STORES / name, tmp / name)
    return tmp / name / "store"


def conf(root: Path) -> Path:
    return root.parent / "manifest.json"


def cfg(root: Path) -> dict:
    return json.loads(conf(root).read_text())["store_config"]


# -- plans and exit codes ------------------------------------------------------------------------------

def test_dry_run_changes_nothing_and_explains(cli, tmp_path):
    root = copy("crash-multifile-v5", tmp_path)
    before = tree_hashes(root)
    code, out, err = cli("recover", "--dry-run", "--config", conf(root), root)
    assert code == 4, err          # changes needed
    assert "what the broker would do" in out and "remove_abort" in out
    assert tree_hashes(root) == before
    assert not (root / "rmqctl-quarantine").exists()
    code, out, err = cli("recover", "--dry-run", "--json", "--config", conf(root), root)
    plan = json.loads(out)
    assert plan["abort"] is True and plan["broker"]["recovery"] == "abnormal"
    kinds = [a["kind"] for a in plan["actions"]]
    assert kinds[-1] == "remove_abort"            # abort goes last
    assert all({"step", "kind", "path", "why"} <= set(a) for a in plan["actions"])


def test_recover_then_nothing_to_do_then_undo(cli, tmp_path):
    root = copy("crash-behind-v4", tmp_path)
    before = tree_hashes(root)
    code, out, err = cli("recover", "--json", "--config", conf(root), root)
    assert code == 1, err
    res = json.loads(out)
    assert res["applied"] is True and not (root / "abort").exists()
    code, out, err = cli("recover", "--json", "--config", conf(root), root)
    assert code == 0 and json.loads(out)["actions"] == []
    # no quarantine folder is left by a run that changed nothing
    assert len(list((root / "rmqctl-quarantine").iterdir())) == 1
    code, out, err = cli("undo", root)
    assert code in (0, 1), err
    assert tree_hashes(root) == before


def test_clean_store_has_nothing_to_do(cli, tmp_path):
    root = copy("basic-multifile-v5", tmp_path)
    code, out, err = cli("recover", "--config", conf(root), root)
    assert code == 0, err
    assert "nothing to do" in out
    assert not (root / "rmqctl-quarantine").exists()


def test_real_exit_codes_subprocess(tmp_path):
    root = copy("crash-behind-v5", tmp_path)
    r = run_cli("recover", "--dry-run", "--config", conf(root), root)
    assert r.returncode == 4
    r = run_cli("recover", "--config", conf(root), root)
    assert r.returncode == 1, r.stderr
    r = run_cli("recover", "--config", conf(root), root)
    assert r.returncode == 0, r.stderr
    r = run_cli("recover", tmp_path / "nope")
    assert r.returncode == 2 and r.stderr.decode().startswith("rmqctl: ")


def test_stray_file_in_commitlog_is_refused(cli, tmp_path):
    root = copy("crash-behind-v5", tmp_path)
    (root / "commitlog" / "00000000000000000000.bak").write_bytes(b"x")
    before = tree_hashes(root)
    code, out, err = cli("recover", "--config", conf(root), root)
    assert code == 4
    assert "00000000000000000000.bak" in out
    assert tree_hashes(root) == before


def test_symlinked_commitlog_dir_is_refused(cli, tmp_path):
    root = copy("crash-behind-v5", tmp_path)
    outside = tmp_path / "elsewhere"
    (root / "commitlog").rename(outside)
    (root / "commitlog").symlink_to(outside)
    code, out, err = cli("recover", "--config", conf(root), root)
    assert code == 8 and "symlink" in err   # could not run (docs/files-policy.md)


# -- safety ----------------------------------------------------------------------------------------------

def test_refuses_while_broker_holds_the_lock(tmp_path):
    root = copy("crash-behind-v5", tmp_path)
    before = tree_hashes(root)
    with F.hold_lock(root):
        r = run_cli("recover", "--config", conf(root), root)
    assert r.returncode == 8
    assert "lock" in r.stderr.decode()
    assert tree_hashes(root) == before


def _fail_nth(monkeypatch, name, n, err):
    real = getattr(os, name)
    calls = [0]

    def f(*a, **k):
        calls[0] += 1
        if calls[0] == n:
            raise OSError(err, os.strerror(err))
        return real(*a, **k)

    monkeypatch.setattr(os, name, f)
    return calls


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS])
@pytest.mark.parametrize("where,n", [("replace", 1), ("replace", 3), ("link", 2), ("pwrite", 1)])
def test_disk_errors_mid_repair_leave_the_store_unchanged(cli, tmp_path, monkeypatch, err, where, n):
    root = copy("crash-multifile-v5", tmp_path)
    F.torn_tail(root)
    before = tree_hashes(root)
    calls = _fail_nth(monkeypatch, where, n, err)
    code, out, stderr = cli("recover", "--config", conf(root), root)
    monkeypatch.undo()
    if calls[0] < n:
        pytest.skip(f"os.{where} called only {calls[0]} times")   # the plan did not need it that often
    assert code == 8, stderr
    assert ("disk full" if err == errno.ENOSPC else "read-only") in stderr
    assert "unchanged" in stderr and len(stderr.strip().splitlines()) == 1
    assert tree_hashes(root) == before


def test_read_only_store_before_anything(cli, tmp_path, monkeypatch):
    root = copy("crash-behind-v5", tmp_path)
    before = tree_hashes(root)
    real = Path.mkdir

    def ro(self, *a, **k):
        if "rmqctl-quarantine" in str(self):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", ro)
    code, out, err = cli("recover", "--config", conf(root), root)
    assert code == 8 and "Read-only" in err
    assert tree_hashes(root) == before


# -- faults that need no broker to judge ---------------------------------------------------------------

def test_stale_record_after_the_end_is_not_kept(cli, tmp_path):
    """F04: a valid-looking old record after the end (wrong PHYSICALOFFSET) is cut and zero-filled."""
    root = copy("crash-behind-v5", tmp_path)
    hit = F.stale_record_after_end(root)
    code, out, err = cli("recover", "--json", "--config", conf(root), root)
    assert code == 1, err
    plan = json.loads(out)
    assert plan["commitlog"]["valid_end"] == hit.offset
    z = [a for a in plan["actions"] if a["kind"] == "zero_range"]
    assert z and z[0]["offset"] == hit.offset - int(hit.path.name)
    data = hit.path.read_bytes()
    assert data[hit.offset - int(hit.path.name):].count(0) == len(data) - (hit.offset - int(hit.path.name))


def test_crc_zero_record_is_valid(cli, tmp_path):
    """F05: a body whose CRC32 really is 0 is kept (R16)."""
    root = tmp_path / "s"
    F.make_store(root, messages=50)      # includes a message whose body CRC is really 0
    code, out, err = cli("recover", "--json", root)
    assert code in (0, 1), err
    from rmqctl.scan import FileWalk

    ends = []
    for p in sorted((root / "commitlog").iterdir()):
        fd = os.open(p, os.O_RDONLY)
        w = FileWalk(fd, int(p.name), p.stat().st_size)
        ends += [r.end for r in w]
        os.close(fd)
    assert json.loads(out)["commitlog"]["valid_end"] == max(ends)


def test_cq_unit_mismatch_is_fixed_by_rebuild(cli, tmp_path):
    """F11: a unit pointing at the wrong offset: rebuild cq writes the broker's unit back."""
    root = copy("basic-multifile-v5", tmp_path)
    before = tree_hashes(root)
    F.cq_unit_wrong_offset(root)
    assert tree_hashes(root) != before      # the fault is really there
    code, out, err = cli("rebuild", "cq", "--config", conf(root), root)
    assert code == 1, err
    assert tree_hashes(root) == before


def test_rebuild_cq_one_queue_only(cli, tmp_path):
    root = copy("basic-multifile-v5", tmp_path)
    qs = sorted((root / "consumequeue").glob("*/*"))
    a, b = qs[0], qs[-1]
    for q in (a, b):
        for f in q.iterdir():
            f.write_bytes(bytes(f.stat().st_size))
    code, out, err = cli("rebuild", "cq", "--json", "--topic", a.parent.name, "--queue", a.name,
                         "--config", conf(root), root)
    assert code == 1, err
    paths = {x["path"] for x in json.loads(out)["actions"]}
    assert paths and all(p.startswith(f"consumequeue/{a.parent.name}/{a.name}/") for p in paths)
    code, out, err = cli("rebuild", "index", "--topic", "x", root)
    assert code == 2


# -- builders against the spec's vectors ---------------------------------------------------------------

def test_index_builder_matches_spec_vector(tmp_path):
    """docs/store-format.md, Worked example: the two example records give exactly the documented header,
    slots and items."""
    from rmqctl.repair.rebuild_index import IndexRebuilder

    S, N = 5_000_000, 20_000_000
    b = IndexRebuilder(tmp_path, S, N, ["20231114221320123"])
    b.dispatch(0, 1700000000123, 0, "TopicTest", {"TAGS": "TagA", "KEYS": "k1"})
    b.dispatch(123, 1700000005623, 0x10, "TopicTest",
               {"UNIQ_KEY": "C0A8010A30391B6D3586000003E80001", "TAGS": "TagA", "KEYS": "k1 k2"})
    (f,) = b.finish()
    data = (tmp_path / "20231114221320123").read_bytes()
    assert len(data) == 420_000_040
    assert data[:40].hex().upper() == ("0000018BCFE5687B0000018BCFE57DF70000000000000000000000000000007B"
                                       "0000000300000005")
    def slot(s):
        return struct.unpack_from(">i", data, 40 + 4 * s)[0]

    assert slot(2746024) == 3 and slot(4362993) == 2 and slot(2746025) == 4
    def item(n):
        return data[20_000_040 + 20 * n:20_000_060 + 20 * n].hex().upper()

    assert item(0) == "00" * 20
    assert item(1) == "0029E6A8" "0000000000000000" "00000000" "00000000"
    assert item(2) == "7F37CB71" "000000000000007B" "00000005" "00000000"
    assert item(3) == "0029E6A8" "000000000000007B" "00000005" "00000001"
    assert item(4) == "0029E6A9" "000000000000007B" "00000005" "00000000"


def test_index_builder_rolls_files_like_the_broker(tmp_path):
    """A full file: the next begins with the previous end; the first item's timeDiff is measured from
    it; a record's keys may straddle the boundary; new names are strictly increasing."""
    from rmqctl.repair.rebuild_index import IndexRebuilder

    b = IndexRebuilder(tmp_path, 7, 4, [])
    b.dispatch(100, 10_000, 0, "T", {"KEYS": "a b"})           # items 1, 2
    b.dispatch(200, 12_500, 0, "T", {"KEYS": "c d"})           # item 3 (full), then d in file 2
    files = b.finish()
    assert len(files) == 2 and files[0].name < files[1].name
    h1 = struct.unpack(">qqqqii", (tmp_path / files[0].name).read_bytes()[:40])
    h2 = struct.unpack(">qqqqii", (tmp_path / files[1].name).read_bytes()[:40])
    assert h1 == (10_000, 12_500, 100, 200, h1[4], 4)
    assert h2[:4] == (12_500, 12_500, 200, 200) and h2[5] == 2
    item1 = struct.unpack(">iqii", (tmp_path / files[1].name).read_bytes()[40 + 28 + 20:40 + 28 + 40])
    assert item1[1] == 200 and item1[2] == 0


def test_cq_builder_pre_blank_and_append(tmp_path):
    from rmqctl.repair.rebuild_cq import PRE_BLANK, UNIT, QueueState

    st = QueueState("T", 0, tmp_path, 100)
    st.start_from_existing()
    st.put(1000, 50, 7, 7)         # first unit at offset 7: file 0 (5 units of 20 B) -> file 100, 2 pre-blanks
    st.put(1050, 50, 8, 9)         # a jump in queue offsets is appended, not left as a hole
    st.put(1000, 50, 7, 7)         # already built: skipped
    files = dict(st.new_file_contents(lambda p: None))
    assert list(files) == [100]
    assert files[100][:60] == PRE_BLANK * 2 + UNIT.pack(1000, 50, 7)
    assert files[100][60:80] == UNIT.pack(1050, 50, 8)
    assert files[100][80:] == bytes(20)


def test_filler_record_passes_the_kernel():
    from rmqctl.repair.recover import make_filler_record
    from rmqctl.scan import FileWalk
    import tempfile

    data = make_filler_record(4096, 300)
    assert len(data) == 300
    with tempfile.TemporaryFile() as f:
        f.write(bytes(4096) + data + bytes(100))
        f.flush()
        w = FileWalk(f.fileno(), 0, 4496, 4096)
        recs = list(w)
    assert len(recs) == 1 and recs[0].transaction_type == 0xC and recs[0].topic == "rmqctl_quarantine"
    assert make_filler_record(0, 50) is None


# -- more rows of the fault matrix ---------------------------------------------------------------------

def test_prop_crc_mismatch_ends_valid_data(cli, tmp_path):
    """F02 with a __CRC32# tail: the record whose properties were damaged ends the valid data."""
    root = copy("prop-crc-v5", tmp_path)
    hit = F.flip_property_bit(root)
    code, out, err = cli("recover", "--dry-run", "--json", "--config", conf(root), root)
    plan = json.loads(out)
    assert plan["commitlog"]["valid_end"] == hit.offset
    assert plan["commitlog"]["stop"]["kind"] == "bad_prop_crc"


def test_wrong_size_middle_file_is_refused(cli, tmp_path):
    """F06: a short middle commitlog file: the broker refuses to start; recover does not guess."""
    root = copy("crash-multifile-v5", tmp_path)
    mid = sorted((root / "commitlog").iterdir())[3]
    with open(mid, "r+b") as f:
        f.truncate(100)
    before = tree_hashes(root)
    code, out, err = cli("recover", "--config", conf(root), root)
    assert code == 4 and mid.name in out
    assert tree_hashes(root) == before


def test_missing_middle_file_is_reported(cli, tmp_path):
    """F08: a missing middle segment: reported with its byte range; recovery goes on like the broker."""
    root = copy("crash-multifile-v5", tmp_path)
    hit = F.remove_middle_commitlog(root)
    code, out, err = cli("recover", "--dry-run", "--json", "--config", conf(root), root)
    plan = json.loads(out)
    assert any(f"[{hit.offset}," in n for n in plan["notes"])


def test_empty_last_cq_file_is_removed(cli, tmp_path):
    """F10 / R8: an all-zero last CQ file (5.3.3 correctMinOffset IAE) is quarantined, not kept."""
    root = copy("crash-behind-v5", tmp_path)
    q = sorted((root / "consumequeue").glob("*/*"))[0]
    last = sorted(q.iterdir())[-1]
    size = cfg(root)["mappedFileSizeConsumeQueue"]
    empty = q / f"{int(last.name) + size:020d}"
    empty.write_bytes(bytes(size))
    code, out, err = cli("recover", "--json", "--config", conf(root), root)
    assert code == 1, err
    acts = json.loads(out)["actions"]
    assert any(a["kind"] == "delete_file" and a["path"].endswith(empty.name) and str(q.name) in a["path"]
               for a in acts)
    assert not empty.exists()


def test_short_checkpoint_is_rewritten(cli, tmp_path):
    """F13: a short checkpoint: full scan from file 0, a full 4096-byte checkpoint is written."""
    root = copy("crash-behind-v5", tmp_path)
    (root / "checkpoint").write_bytes(b"\x01\x02\x03")
    code, out, err = cli("recover", "--json", "--config", conf(root), root)
    assert code == 1, err
    plan = json.loads(out)
    assert "full scan" in plan["broker"]["start_reason"]
    data = (root / "checkpoint").read_bytes()
    assert len(data) == 4096
    phys, logics = struct.unpack_from(">qq", data, 0)
    assert phys == logics > 1_600_000_000_000


def test_rocksdb_store_is_refused(cli, tmp_path):
    """F26: RocksDB consume queues are detected and refused (could not run), nothing changes."""
    root = copy("crash-behind-v5", tmp_path)
    (root / "consumequeue" / "rocksdb").mkdir()
    code, out, err = cli("recover", "--config", conf(root), root)
    assert code == 8 and "RocksDB" in err
