"""rmqctl.journal.core: quarantine copies, journal entries, bit-exact idempotent undo."""
from __future__ import annotations

import json
import os

import pytest

from rmqctl.errors import ProblemsFound, UsageError
from rmqctl.journal import core as jn


@pytest.fixture
def store(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "commitlog").mkdir()
    return tmp_path


def _entries(j):
    return [json.loads(x) for x in (j.dir / jn.JOURNAL).read_text().splitlines()]


def test_every_kind_is_restored_bit_exact(store):
    a = store / "config/a.json"
    a.write_bytes(b"old-a")
    d = store / "config/d.json"
    d.write_bytes(b"to-delete")
    seg = store / "commitlog/00000000000000000000"
    seg.write_bytes(bytes(range(256)) * 4)
    orig_seg = seg.read_bytes()
    new = store / "config/new.json"
    with jn.Journal.begin(store, "test op") as j:
        j.before_write(a, b"new-a")
        jn.write_file_durably(a, b"new-a")
        j.before_write(new, b"created")
        jn.write_file_durably(new, b"created")
        j.before_delete(d)
        os.unlink(d)
        j.before_truncate(seg, 1000)
        os.truncate(seg, 1000)
        j.before_write_range(seg, 10, b"\xff" * 5)
        with open(seg, "r+b") as f:
            f.seek(10)
            f.write(b"\xff" * 5)
    kinds = [e["kind"] for e in _entries(j)]
    assert kinds == ["begin", "replace_file", "create_file", "delete_file", "truncate_file", "write_range",
                     "committed"]
    assert j.dir.parent.name == jn.QUARANTINE and j.dir.name.endswith("-test_op")
    e = _entries(j)[1]
    assert e["path"] == "config/a.json" and e["sha256_before"] == jn.sha256(b"old-a")
    assert e["sha256_after"] == jn.sha256(b"new-a")

    res = jn.undo(store)
    assert [s.action for s in res.steps] == ["restore"] * 5
    assert a.read_bytes() == b"old-a" and d.read_bytes() == b"to-delete" and not new.exists()
    assert seg.read_bytes() == orig_seg
    assert jn.list_ops(store)[0].state == "undone"
    # idempotent: a second undo of the same op does nothing
    again = jn.undo(store, j.name)
    assert again.already


def test_undo_resumes_after_an_interrupted_undo(store):
    a, b = store / "config/a", store / "config/b"
    a.write_bytes(b"A0")
    b.write_bytes(b"B0")
    with jn.Journal.begin(store, "op") as j:
        for p, v in ((a, b"A1"), (b, b"B1")):
            j.before_write(p, v)
            jn.write_file_durably(p, v)
    b.write_bytes(b"B0")  # as if undo was killed after restoring b (entries are undone in reverse)
    res = jn.undo(store)
    assert [s.action for s in res.steps] == ["skip", "restore"]
    assert (a.read_bytes(), b.read_bytes()) == (b"A0", b"B0")


def test_conflict_refuses_and_changes_nothing(store):
    a, b = store / "config/a", store / "config/b"
    a.write_bytes(b"A0")
    b.write_bytes(b"B0")
    with jn.Journal.begin(store, "op") as j:
        for p, v in ((a, b"A1"), (b, b"B1")):
            j.before_write(p, v)
            jn.write_file_durably(p, v)
    a.write_bytes(b"broker persisted again")
    with pytest.raises(ProblemsFound, match="changed since"):
        jn.undo(store)
    assert b.read_bytes() == b"B1"  # nothing restored
    jn.undo(store, force=True)
    assert (a.read_bytes(), b.read_bytes()) == (b"A0", b"B0")


def test_aborted_op_is_recorded_and_rolled_back(store):
    a = store / "config/a"
    a.write_bytes(b"A0")
    with pytest.raises(RuntimeError):
        with jn.Journal.begin(store, "op") as j:
            j.before_write(a, b"A1")
            jn.write_file_durably(a, b"A1")
            raise RuntimeError("boom")
    kinds = [e["kind"] for e in _entries(j)]
    assert kinds[-2:] == ["aborted", "undone"]
    assert a.read_bytes() == b"A0"


def test_latest_not_undone_op_first(store):
    a = store / "config/a"
    a.write_bytes(b"0")
    for v in (b"1", b"2"):
        with jn.Journal.begin(store, "op") as j:
            j.before_write(a, v)
            jn.write_file_durably(a, v)
    jn.undo(store)
    assert a.read_bytes() == b"1"
    jn.undo(store)
    assert a.read_bytes() == b"0"


def test_nothing_to_undo(store):
    with pytest.raises(UsageError):
        jn.undo(store)


def test_undo_of_big_files_streams_with_flat_memory(store):
    """A 48 MiB segment deleted, another replaced, a 40 MiB range zeroed, a tail truncated: undo
    restores every byte while holding only a few MiB (tracemalloc peak), and refuses (changing
    nothing) when a saved copy was damaged."""
    import hashlib
    import tracemalloc

    from rmqctl.journal import ops as JO

    size = 48 << 20
    seg = [store / "commitlog" / f"{i * size:020d}" for i in range(3)]
    for i, p in enumerate(seg):
        with open(p, "wb") as f:
            for k in range(48):
                f.write(hashlib.sha256(b"%d-%d" % (i, k)).digest() * (1 << 15))
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in seg}
    staged = store / "new"
    staged.write_bytes(b"x" * 1000)
    j = jn.Journal.begin(store, "big")
    JO.delete_file(j, seg[0])
    JO.install_file(j, seg[1], staged)
    JO.write_range(j, seg[2], 8 << 20, zeros=40 << 20)
    j.commit()
    assert not seg[0].exists() and seg[1].stat().st_size == 1000
    tracemalloc.start()
    jn.undo(store)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in seg} == before
    assert peak < 8 << 20, peak
    # a damaged saved copy: refused before the target changes
    j = jn.Journal.begin(store, "big2")
    JO.write_range(j, seg[2], 0, zeros=4 << 20)
    j.commit()
    damaged = next((j.dir / "files").iterdir())
    with open(damaged, "r+b") as f:
        f.write(b"\xff")
    zeroed = hashlib.sha256(seg[2].read_bytes()).hexdigest()
    with pytest.raises(ProblemsFound):
        jn.undo(store)
    assert hashlib.sha256(seg[2].read_bytes()).hexdigest() == zeroed


def test_next_op_rolls_back_a_killed_one_first(store):
    """A killed op (no end line) is rolled back by the next begin(), its folder dropped; a torn range
    write (neither old nor new bytes) is restored from its saved copy."""
    a = store / "config/a"
    a.write_bytes(b"A0")
    seg = store / "commitlog/00000000000000000000"
    seg.write_bytes(bytes(64))
    j = jn.Journal.begin(store, "killed")
    j.before_write(a, b"A1")
    jn.write_file_durably(a, b"A1")
    j.before_write_range(seg, 8, b"\xff" * 8)
    with open(seg, "r+b") as f:
        f.seek(8)
        f.write(b"\xff" * 3)          # torn: killed mid-write
    j.close()
    assert jn.list_ops(store)[0].state == "open"
    with jn.Journal.begin(store, "next") as j2:
        pass
    assert j2.rolled_back == [j.name]
    assert a.read_bytes() == b"A0" and seg.read_bytes() == bytes(64)
    assert [r.op for r in jn.list_ops(store)] == ["next"]


def test_a_killed_op_whose_files_changed_since_blocks_the_next_one(store):
    a = store / "config/a"
    a.write_bytes(b"A0")
    j = jn.Journal.begin(store, "killed")
    j.before_write(a, b"A1")
    jn.write_file_durably(a, b"A1")
    j.close()
    a.write_bytes(b"someone else")
    with pytest.raises(ProblemsFound, match="interrupted rmqctl operation"):
        jn.Journal.begin(store, "next")
    assert a.read_bytes() == b"someone else"
    assert [r.op for r in jn.list_ops(store)] == ["killed"]
