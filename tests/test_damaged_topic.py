"""A record whose topic bytes were damaged (no CRC covers them) names a topic no directory can have: a NUL
byte, a '/'. verify reads past it and names the record, recover and rebuild dispatch everything else and say
what they left out; nothing is created under such a name, nothing outside consumequeue/ is written, and undo
restores all."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import faultlib as F
from conftest import run_cli


def _store(tmp_path: Path, to: bytes, *, abort: bool = False) -> tuple[Path, F.RecordRef, F.Injected]:
    root = F.make_store(tmp_path / "store", abort=abort)
    recs = [r for r in F.commitlog_records(root)
            if b"__CRC32#" not in r.path.read_bytes()[r.props_pos:r.props_pos + r.props_len]]
    rec = recs[len(recs) // 2]
    inj = F.damage_topic(root, rec, to=to)
    # the fault is there: the same record, still valid, now names the damaged topic
    after = {r.offset: r for r in F.commitlog_records(root)}
    assert rec.offset in after and to.decode() in after[rec.offset].topic, inj
    return root, after[rec.offset], inj


def _queue_dirs(root: Path) -> set:
    return {p.relative_to(root) for p in (root / "consumequeue").rglob("*") if p.is_dir()}


DAMAGE = [pytest.param(b"\0", id="nul"), pytest.param(b"/", id="slash")]


@pytest.mark.parametrize("to", DAMAGE)
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_verify_reports_the_undispatched_record(tmp_path, to, jobs):
    root, rec, _ = _store(tmp_path, to)
    p = run_cli("verify", "-j", jobs, "--json", root)
    assert p.returncode == 4, p.stderr
    assert b"Traceback" not in p.stderr and b"internal error" not in p.stderr, p.stderr
    found = json.loads(p.stdout)["findings"]
    named = [f for f in found if f["check"] == "commitlog.topic_name"]
    assert len(named) == 1 and named[0]["offset"] == rec.offset and named[0]["actual"] == repr(rec.topic), found
    assert named[0]["path"].startswith(str(root / "commitlog")), named
    assert not [f for f in found if f["check"] == "cq.behind" and rec.topic in f["path"]], found
    # text mode: the name is shown escaped, one line per finding, no raw control byte
    t = run_cli("verify", "-j", jobs, root)
    assert t.returncode == 4 and b"\0" not in t.stdout and b"Traceback" not in t.stderr, t.stderr


@pytest.mark.parametrize("to", DAMAGE)
@pytest.mark.parametrize("cmd", [("recover",), ("recover", "-j", "2"), ("rebuild", "cq", "--include-deleted-topics"),
                                 ("rebuild", "cq", "-j", "2", "--include-deleted-topics")], ids=" ".join)
def test_repairs_dispatch_the_rest_and_undo_restores(tmp_path, to, cmd):
    root, rec, _ = _store(tmp_path, to, abort=cmd[0] == "recover")
    (tmp_path / "beside").write_bytes(b"not the store's")
    # one intact queue is emptied, so the repair has something to rebuild
    qdir = root / "consumequeue" / "TopicA" / "0"
    for f in qdir.iterdir():
        f.unlink()
    before, dirs = F.tree_hashes(root), _queue_dirs(root)
    p = run_cli(*cmd, root, "--json")
    assert p.returncode in (0, 1), p.stderr
    assert b"Traceback" not in p.stderr and b"internal error" not in p.stderr, p.stderr
    plan = json.loads(p.stdout)
    notes = " ".join(plan["notes"])
    assert "not dispatched" in notes and repr(rec.topic) in notes, notes
    # no directory for the damaged name (nor, for a '/', the nested ones it would spell)
    assert _queue_dirs(root) == dirs
    assert any(qdir.iterdir()), "the intact queues were not rebuilt"
    v = run_cli("verify", "--json", root)
    # the record is still reported; the units after it in its old queue moved up one place (the broker appends
    # a unit at the queue's write position whatever its queue offset says)
    assert v.returncode == 4 and any(f["check"] == "commitlog.topic_name" and f["offset"] == rec.offset
                                     for f in json.loads(v.stdout)["findings"]), v.stdout
    u = run_cli("undo", root)
    assert u.returncode == 0, u.stderr
    assert F.tree_hashes(root) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beside", "store"]


def test_the_file_policy_refuses_a_nul_name(tmp_path):
    from rmqctl.store.files import inside, open_plain, read_refusal, write_refusal

    bad = tmp_path / "consumequeue" / "a\0b" / "0" / "00000000000000000000"
    assert not inside(bad, tmp_path)
    assert "NUL" in read_refusal(bad, tmp_path)
    assert open_plain(bad) == -1
    assert "NUL" in write_refusal(tmp_path, bad)
    assert "'..'" in write_refusal(tmp_path, tmp_path / "consumequeue" / ".." / ".." / "x")


@pytest.mark.parametrize("to", DAMAGE)
def test_export_escapes_the_name_in_its_partition_folder(tmp_path, to):
    root, rec, _ = _store(tmp_path, to)
    p = run_cli("export", root, "--engine", "local", "--out", tmp_path / "out")
    assert p.returncode == 0, p.stderr
    want = "topic=" + rec.topic.replace(to.decode(), f"%{to[0]:02X}")
    assert want in {d.name for d in (tmp_path / "out").glob("store=*/*")}


@pytest.mark.parametrize("cmd", [("rebuild", "cq", "--dry-run"), ("rebuild", "cq", "--include-deleted-topics",
                                                                   "--dry-run"), ("recover", "--dry-run")],
                         ids=" ".join)
def test_plans_in_text_show_the_name_escaped(tmp_path, cmd):
    """On a pipe too, a plan's notes name the damaged topic escaped (as verify's findings do): no raw NUL."""
    root, rec, _ = _store(tmp_path, b"\0", abort=cmd[0] == "recover")
    p = run_cli(*cmd, root)
    assert p.returncode == 4, p.stderr      # a dry run with something to do
    assert b"\0" not in p.stdout, p.stdout
    assert rec.topic.replace("\0", "\\x00").encode() in p.stdout, p.stdout
