"""Repairs leave nothing behind and take nothing away: owners kept, undo checks space and names files,
directories and lock files rmqctl created are removed again, a second rmqctl is told who holds the lock."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import faultlib as F
from faultlib import tree_hashes
from conftest import FIXTURES, run_cli
from rmqctl.errors import IOFailure
from rmqctl.journal import core as jn
from rmqctl.journal import ops as JO
from rmqctl.journal import undo as journal_undo
from rmqctl.store import ownership as OWN

NOBODY = 65534


def copy(name: str, tmp: Path) -> Path:
    F.copy_store(FIXTURES / "stores" / name, tmp / name)
    return tmp / name / "store"


def conf(root: Path) -> Path:
    return root.parent / "manifest.json"


def dirs(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_dir() and "rmqctl-quarantine" not in p.relative_to(root).parts)


# -- ownership ---------------------------------------------------------------------------------------

def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for p in [root, *root.rglob("*")]:
        os.lchown(p, uid, gid)


def _owners(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.lstat().st_uid, p.lstat().st_gid) for p in [root, *root.rglob("*")]}


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a store to another user needs root (chown)")
def test_repair_as_root_keeps_the_store_owner(tmp_path):
    root = copy("crash-multifile-v5", tmp_path)
    F.torn_tail(root)
    (root / "consumequeue" / "CrashB").rename(tmp_path / "gone")     # recover re-creates its directories
    _chown_tree(root, NOBODY, NOBODY)
    original = tree_hashes(root)
    assert set(_owners(root).values()) == {(NOBODY, NOBODY)}
    r = run_cli("recover", "--config", conf(root), root)
    assert r.returncode == 1, r.stderr
    assert (root / "consumequeue" / "CrashB" / "0").is_dir()
    r = run_cli("config", "offsets", "set", root, "-g", "G", "-t", "CrashA", "-q", "0", "--offset", "1")
    assert r.returncode == 0, r.stderr
    assert (root / "config" / "consumerOffset.json").exists() and (root / "rmqctl-quarantine").is_dir()
    wrong = {p: o for p, o in _owners(root).items() if o != (NOBODY, NOBODY)}
    assert not wrong, wrong
    for _ in range(2):
        assert run_cli("undo", root).returncode == 0
    wrong = {p: o for p, o in _owners(root).items() if o != (NOBODY, NOBODY)}
    assert not wrong, wrong
    assert tree_hashes(root) == original


def test_new_files_take_the_directory_mode(tmp_path):
    d = tmp_path / "q"
    d.mkdir(mode=0o750)
    os.chmod(d, 0o750)
    f = d / "new"
    f.write_bytes(b"x")
    os.chmod(f, 0o600)
    OWN.like_parent(f)
    assert f.stat().st_mode & 0o7777 == 0o640


def test_not_root_on_a_foreign_store_refuses_before_changing_anything(cli, tmp_path, monkeypatch):
    root = copy("crash-multifile-v5", tmp_path)
    F.torn_tail(root)
    before = tree_hashes(root), dirs(root)
    owner = root.stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1000)
    with pytest.raises(IOFailure, match="owned by uid"):
        OWN.check_can_keep(root)
    code, out, err = cli("recover", "--config", conf(root), root)
    assert code == 8 and "owned by uid" in err, err
    assert (tree_hashes(root), dirs(root)) == before
    assert not (root / "rmqctl-quarantine").exists()


# -- undo: space first, files named ------------------------------------------------------------------

@pytest.fixture
def truncated(tmp_path):
    """An op that truncated 3 MiB off a segment: undo must write them back."""
    store = tmp_path / "s"
    (store / "commitlog").mkdir(parents=True)
    seg = store / "commitlog" / "00000000000000000000"
    seg.write_bytes(os.urandom(4 << 20))
    orig = seg.read_bytes()
    with jn.Journal.begin(store, "cut") as j:
        j.before_truncate(seg, 1 << 20)
        os.truncate(seg, 1 << 20)
    return store, seg, orig


def test_undo_checks_free_space_first(truncated, monkeypatch):
    store, seg, orig = truncated
    cut = seg.read_bytes()
    monkeypatch.setattr(journal_undo, "free_space", lambda p: 1 << 20)
    with pytest.raises(IOFailure) as ei:
        jn.undo(store)
    msg = str(ei.value)
    assert f"needs {3 << 20} bytes" in msg and f"{1 << 20} are free" in msg and "nothing restored" in msg
    assert seg.read_bytes() == cut and jn.list_ops(store)[0].state == "committed"
    monkeypatch.undo()
    jn.undo(store)
    assert seg.read_bytes() == orig


def test_undo_error_names_the_file_and_a_rerun_finishes(tmp_path, monkeypatch):
    store = tmp_path / "s"
    (store / "config").mkdir(parents=True)
    files = [store / "config" / f"f{i}.json" for i in range(3)]
    for p in files:
        p.write_bytes(b"old " + p.name.encode())
    with jn.Journal.begin(store, "edit") as j:
        for p in files:
            j.before_write(p, b"new")
            jn.write_file_durably(p, b"new")
    real, calls = os.replace, [0]

    def full(src, dst, *a, **k):
        calls[0] += 1
        if calls[0] == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(IOFailure) as ei:
        jn.undo(store)
    assert str(ei.value).startswith(str(files[1])) and "disk full" in str(ei.value)
    assert "1 of 3 restored" in str(ei.value)
    monkeypatch.undo()
    jn.undo(store)
    assert [p.read_bytes() for p in files] == [b"old " + p.name.encode() for p in files]


def test_undo_puts_hard_linked_segments_back_without_copying(tmp_path, monkeypatch):
    """recover saved a deleted segment as a hard link; undo renames it back (no space needed) instead
    of writing a full copy."""
    store = tmp_path / "s"
    (store / "commitlog").mkdir(parents=True)
    seg = store / "commitlog" / "00000000000000000000"
    seg.write_bytes(os.urandom(1 << 20))
    ino, data = seg.stat().st_ino, seg.read_bytes()
    j = jn.Journal.begin(store, "recover")
    JO.delete_file(j, seg)
    j.commit()
    monkeypatch.setattr(journal_undo, "free_space", lambda p: 0)
    jn.undo(store)
    assert seg.read_bytes() == data and seg.stat().st_ino == ino


# -- leftovers ---------------------------------------------------------------------------------------

def test_undo_removes_the_directories_the_op_created(tmp_path):
    root = copy("basic-multifile-v4", tmp_path)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    before = tree_hashes(root), dirs(root)
    for what in ("cq", "index"):
        r = run_cli("rebuild", what, "--config", conf(root), root)
        assert r.returncode == 1, r.stderr
    assert (root / "consumequeue").is_dir() and (root / "index").is_dir()
    for _ in range(2):
        assert run_cli("undo", root).returncode == 0
    assert (tree_hashes(root), dirs(root)) == before


def test_recover_on_a_store_without_lock_file_leaves_none(tmp_path):
    root = copy("crash-multifile-v5", tmp_path)
    F.torn_tail(root)
    (root / "lock").unlink()
    assert run_cli("recover", "--config", conf(root), root).returncode == 1
    assert not (root / "lock").exists()
    assert run_cli("undo", root).returncode == 0
    assert not (root / "lock").exists()


@pytest.mark.parametrize("argv", [["recover"], ["rebuild", "cq"], ["rebuild", "index"]])
def test_recover_on_a_directory_that_is_no_store(tmp_path, argv):
    d = tmp_path / "notastore"
    d.mkdir()
    (d / "notes.txt").write_text("hello")
    r = run_cli(*argv, d)
    assert r.returncode == 2, r.stderr
    assert b"not a store directory" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sorted(os.listdir(d)) == ["notes.txt"]


def test_second_rmqctl_is_told_another_rmqctl_holds_the_lock(tmp_path):
    root = copy("crash-multifile-v5", tmp_path)
    F.torn_tail(root)
    code = ("import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n")
    bindir = Path(sys.executable).parent       # argv[0] beside the interpreter: it still finds its venv
    for argv0, expect in (("rmqctl", b"another rmqctl"), ("java", b"a broker appears to be running")):
        p = subprocess.Popen([str(bindir / argv0), "-c", code, str(root / "lock")], executable=sys.executable,
                             stdout=subprocess.PIPE)
        try:
            assert p.stdout.readline() == b"held\n"
            r = run_cli("recover", "--config", conf(root), root)
            assert r.returncode == 8
            assert expect in r.stderr, r.stderr
            assert f"pid {p.pid}".encode() in r.stderr
        finally:
            p.kill()
            p.wait()


@pytest.mark.parametrize("call", ["pwrite", "write"])   # applying (journal kept) / staging (nothing journaled)
def test_disk_full_rollback_names_only_what_exists(cli, tmp_path, monkeypatch, call):
    root = copy("crash-multifile-v5", tmp_path)
    F.torn_tail(root)
    before = tree_hashes(root)
    real = getattr(os, call)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, call, full)
    code, out, stderr = cli("recover", "--config", str(conf(root)), str(root))
    monkeypatch.setattr(os, call, real)
    assert code == 8 and "disk full" in stderr and "unchanged" in stderr, stderr
    assert tree_hashes(root) == before
    named = [w.strip("()") for w in stderr.split() if "rmqctl-quarantine" in w]
    assert all(Path(w).exists() for w in named), stderr
    assert bool(named) == (root / "rmqctl-quarantine").exists(), stderr


def test_a_failed_config_edit_is_rolled_back_at_once(cli, tmp_path, monkeypatch):
    root = copy("basic-multifile-v4", tmp_path)
    before = tree_hashes(root), dirs(root)
    real, calls = os.replace, [0]

    def full(src, dst, *a, **k):
        calls[0] += 1
        if calls[0] == 2:        # .bak written, main not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", full)
    code, out, err = cli("config", "set", root, "delayOffset", "offsetTable.1", "5")
    monkeypatch.undo()
    assert calls[0] >= 2 and code == 8, err
    assert (tree_hashes(root), dirs(root)) == before
    assert [r.state for r in jn.list_ops(root)] == ["undone"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_undo_on_a_really_full_tmpfs_refuses_and_changes_nothing(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    try:
        store = mnt / "store"
        (store / "commitlog").mkdir(parents=True)
        seg = store / "commitlog" / "00000000000000000000"
        seg.write_bytes(os.urandom(1536 << 10))
        orig = seg.read_bytes()
        with jn.Journal.begin(store, "cut") as j:      # the tail is saved (a copy), then cut
            j.before_truncate(seg, 0)
            os.truncate(seg, 0)
        fill = mnt / "fill"
        fd = os.open(fill, os.O_WRONLY | os.O_CREAT)   # what was written since: the disk is full
        try:
            while True:
                os.write(fd, bytes(4096))
        except OSError as e:
            assert e.errno == errno.ENOSPC
        finally:
            os.close(fd)
        r = run_cli("undo", store)
        assert r.returncode == 8, r.stderr
        assert f"needs {len(orig)} bytes".encode() in r.stderr and b"nothing restored" in r.stderr
        assert seg.stat().st_size == 0 and jn.list_ops(store)[0].state == "committed"
        fill.unlink()
        assert run_cli("undo", store).returncode == 0
        assert seg.read_bytes() == orig
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
