"""Links and special files (docs/files-policy.md), through the console script with a timeout: a FIFO,
a socket or a link to /dev/zero never hangs a command; no link is followed out of the store; nothing
is written through a link; links survive config edits, recover and undo."""
from __future__ import annotations

import hashlib
import os
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import faultlib as F
from conftest import FIXTURES

STORES = FIXTURES / "stores"
RMQCTL = Path(sys.executable).parent / "rmqctl"
EXITS = {0, 1, 2, 4, 8}


def rmq(*args, timeout=60):
    """The installed console script as a real process; a hang fails the test (TimeoutExpired)."""
    assert RMQCTL.exists(), f"console script not installed at {RMQCTL}"
    r = subprocess.run([str(RMQCTL), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, NO_COLOR="1", COLUMNS="200"))
    assert r.returncode in EXITS, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return r.returncode, r.stdout, r.stderr


def copy(name: str, tmp: Path) -> Path:
    F.copy_store(STORES / name, tmp / name)
    return tmp / name / "store"


def hashes(d: Path) -> dict:
    """Like faultlib.tree_hashes, but records links and special files instead of reading them."""
    out = {}
    for dp, dns, fns in os.walk(d):
        dns[:] = [x for x in dns if x != "rmqctl-quarantine"]
        for fn in fns + [x for x in dns if os.path.islink(os.path.join(dp, x))]:
            p = Path(dp) / fn
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(d))] = "link->" + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                out[str(p.relative_to(d))] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[str(p.relative_to(d))] = f"mode {stat.S_IFMT(st.st_mode):o}"
    return out


def move_out(root: Path, rel: str, outside: Path) -> Path:
    """Move store path `rel` to `outside` and leave a symlink to it in its place."""
    src = root / rel
    outside.parent.mkdir(parents=True, exist_ok=True)
    os.rename(src, outside)
    os.symlink(outside, src)
    assert os.path.islink(src) and os.path.exists(src)
    return outside


def index_file(root: Path) -> Path:
    return sorted((root / "index").iterdir())[-1]


# -- special files: never opened, never a hang -------------------------------------------------------

@pytest.mark.parametrize("what", ["fifo", "dev_zero", "dev_urandom", "socket"])
@pytest.mark.parametrize("where", ["index", "checkpoint", "commitlog", "cq"])
def test_special_file_in_place_of_a_store_file_never_hangs(tmp_path, what, where):
    root = copy("basic-multifile-v5", tmp_path)
    target = {"index": lambda: index_file(root), "checkpoint": lambda: root / "checkpoint",
              "commitlog": lambda: F.commitlog_files(root)[-1],
              "cq": lambda: root / "consumequeue" / "TopicA" / "0" / ("0" * 20)}[where]()
    os.unlink(target)
    if what == "fifo":
        os.mkfifo(target)
    elif what == "socket":
        short = Path(tempfile.mkdtemp(dir="/tmp")) / "s"   # AF_UNIX paths are short; bind, then move
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(short))
        s.close()
        os.rename(short, target)
        short.parent.rmdir()
    else:
        os.symlink("/dev/" + what[4:], target)
    assert not stat.S_ISREG(os.stat(target).st_mode)   # the fault is really there
    code, out, err = rmq("verify", root, timeout=60)
    assert code == 4, err
    assert str(target) in out and ("not followed" in out or "not a regular file" in out), out
    code, _, err = rmq("dump", target, timeout=30)
    assert code == 8 and len(err.strip().splitlines()) == 1 and str(target) in err, err
    if where != "checkpoint":   # its parent is the store root: a summary
        code, _, err = rmq("dump", target.parent, timeout=60)
        assert code in (0, 4) and str(target) in err, err
    code, _, err = rmq("dump", root, timeout=60)
    assert code in (0, 4), err
    code, _, err = rmq("verify", target, timeout=30)
    assert code == 8 and str(target) in err, err
    # the repairs' planning reads more files than verify does; a dry run changes nothing
    before = hashes(root)
    for cmd in (("recover", "--dry-run"), ("rebuild", "cq", "--dry-run"), ("rebuild", "index", "--dry-run")):
        rmq(*cmd, root, timeout=60)
    assert hashes(root) == before


def test_fifo_config_file_and_lock(tmp_path):
    root = copy("basic-multifile-v4", tmp_path)
    os.mkfifo(root / "config" / "topics.json")
    code, out, err = rmq("config", "status", root, timeout=30)
    assert code == 4 and "not a regular file" in out + err
    code, out, err = rmq("config", "set", root, "topics", "dataVersion.counter", "1", timeout=30)
    assert code in (4, 8), err
    assert stat.S_ISFIFO(os.lstat(root / "config" / "topics.json").st_mode)
    os.unlink(root / "lock")
    os.mkfifo(root / "lock")
    before = hashes(root)
    code, _, err = rmq("recover", root, timeout=60)
    assert code == 8 and "lock" in err, err
    assert hashes(root) == before


# -- links out of the store: reads say so, writes refuse before changing anything ---------------------

def test_symlinked_index_file_outside_is_reported_not_skipped_silently(tmp_path):
    root = copy("basic-multifile-v5", tmp_path)
    p = index_file(root)
    move_out(root, f"index/{p.name}", tmp_path / "elsewhere" / p.name)
    code, out, err = rmq("verify", root)
    assert code == 4 and f"{p}: warning: store.not_followed" in out, out
    code, out, err = rmq("dump", root / "index")
    assert f"{p}: symlink to" in err and "outside the store" in err, err
    code, _, err = rmq("dump", p)
    assert code == 8 and "outside the store" in err


def test_symlinked_index_file_inside_the_store_is_read(tmp_path):
    root = copy("basic-multifile-v5", tmp_path)
    p = index_file(root)
    (root / "moved").mkdir()
    move_out(root, f"index/{p.name}", root / "moved" / p.name)
    code, out, err = rmq("verify", root)
    assert "not_followed" not in out and code == 0, out
    code, out, err = rmq("dump", p, "--json")
    assert code == 0 and '"index_header"' in out, err


@pytest.mark.parametrize("rel", ["consumequeue/CrashA", "consumequeue/CrashA/0"])
def test_recover_refuses_to_write_through_a_symlinked_queue_directory(tmp_path, rel):
    root = copy("crash-multifile-v5", tmp_path)
    code, out, _ = rmq("recover", "--dry-run", root)
    assert code == 4 and "consumequeue/CrashA/0/" in out      # the plan does write into this queue
    outside = move_out(root, rel, tmp_path / "outside" / Path(rel).name)
    before, before_out = hashes(root), hashes(outside)
    code, out, err = rmq("recover", root)
    assert code == 8 and "symlink" in err and len(err.strip().splitlines()) == 1, err
    assert hashes(root) == before and hashes(outside) == before_out
    assert not (root / "rmqctl-quarantine").exists()
    code, out, err = rmq("recover", "--dry-run", root)
    assert code == 8 and "symlink" in err


def test_verify_reports_a_symlinked_topic_directory_outside(tmp_path):
    root = copy("basic-multifile-v5", tmp_path)
    move_out(root, "consumequeue/TopicB", tmp_path / "outside" / "TopicB")
    code, out, _ = rmq("verify", root)
    assert code == 4 and "consumequeue/TopicB: warning: store.not_followed" in out, out
    code, _, err = rmq("dump", root / "consumequeue" / "TopicB" / "0")
    assert code == 8 and "outside the store" in err
    code, out, _ = rmq("dump", root)          # the store summary says what it did not read
    assert code == 0 and "not read:" in out and "consumequeue/TopicB" in out, out


def test_config_edit_refuses_symlinked_config_dir_and_file(tmp_path):
    root = copy("basic-multifile-v4", tmp_path)
    outside = move_out(root, "config", tmp_path / "outside-config")
    before = hashes(outside)
    code, out, err = rmq("config", "set", root, "delayOffset", "offsetTable.1", "5")
    assert code in (4, 8) and "symlink" in err, err
    assert hashes(outside) == before and not (root / "rmqctl-quarantine").exists()
    # a config file linked inside the store: read, but never replaced by a regular file
    os.unlink(root / "config")
    (root / "config").mkdir()
    (root / "keep").mkdir()
    (root / "keep" / "delayOffset.json").write_bytes((outside / "delayOffset.json").read_bytes())
    os.symlink("../keep/delayOffset.json", root / "config" / "delayOffset.json")
    code, out, err = rmq("config", "status", root)
    assert "delayOffset.json" in out and "load main" in out, out + err
    code, out, err = rmq("config", "set", root, "delayOffset", "offsetTable.1", "5")
    assert code == 8 and "never writes through a symlink" in err, err
    assert os.path.islink(root / "config" / "delayOffset.json")
    assert not (root / "config" / "delayOffset.json.bak").exists()


def test_undo_never_writes_through_a_link_made_after_the_repair(tmp_path):
    root = copy("crash-multifile-v5", tmp_path)
    code, _, err = rmq("recover", root)
    assert code == 1, err
    outside = move_out(root, "consumequeue/CrashA", tmp_path / "outside" / "CrashA")
    before, before_out = hashes(root), hashes(outside)
    code, out, err = rmq("undo", root)
    assert code in (4, 8) and "symlink" in out + err, out + err
    assert hashes(root) == before and hashes(outside) == before_out
    assert os.path.islink(root / "consumequeue" / "CrashA")


def test_recover_keeps_a_symlinked_queue_file_inside_the_store(tmp_path):
    """Before: recover replaced the link by a regular file and undo did not bring the link back."""
    root = copy("crash-multifile-v5", tmp_path)
    rel = "consumequeue/CrashA/0/00000000000000000400"
    code, out, _ = rmq("recover", "--dry-run", root)
    assert f"write_file {rel}" in out                         # the plan rewrites this very file
    (root / "moved").mkdir()
    move_out(root, rel, root / "moved" / "cq-file")
    before = hashes(root)
    code, out, err = rmq("verify", root)
    assert "not_followed" not in out                          # inside the store: read like the file
    code, out, err = rmq("recover", root)
    assert code == 8 and "never writes through a symlink" in err and rel in err, err
    assert hashes(root) == before and os.path.islink(root / rel)
    code, out, err = rmq("rebuild", "cq", root)
    assert code == 8 and "symlink" in err, err
    assert hashes(root) == before


def test_a_symlinked_quarantine_folder_is_refused(tmp_path):
    root = copy("crash-multifile-v5", tmp_path)
    outside = tmp_path / "outside-quarantine"
    outside.mkdir()
    os.symlink(outside, root / "rmqctl-quarantine")
    before = hashes(root)
    code, out, err = rmq("recover", root)
    assert code == 8 and "rmqctl-quarantine" in err and "symlink" in err, err
    assert hashes(root) == before and list(outside.iterdir()) == []


def test_inside_answers_as_resolving_both_paths(tmp_path):
    """inside() answers without resolving a path spelled as the root plus plain names; every spelling, link
    and '..' gives what comparing both resolved paths gives."""
    from rmqctl.store.files import inside

    root, out = tmp_path / "store", tmp_path / "elsewhere"
    (root / "consumequeue" / "T" / "0").mkdir(parents=True)
    (out / "q").mkdir(parents=True)
    (root / "consumequeue" / "Out").symlink_to(out)
    (root / "consumequeue" / "In").symlink_to(root / "consumequeue" / "T")
    (tmp_path / "rootlink").symlink_to(root)

    def resolved(p, r):
        r, p = os.path.realpath(r), os.path.realpath(p)
        return p == r or p.startswith(r + os.sep)

    cq = root / "consumequeue"
    cases = [cq / "T" / "0", cq / "Out" / "q", cq / "In" / "0", cq / "T" / ".." / ".." / ".." / "elsewhere",
             cq / "Out" / ".." / "store", cq / "missing" / "0", cq / "Out" / "missing", tmp_path, root,
             f"{cq}/T//0", f"{cq}/./T/0", out / "q"]
    for r in (root, tmp_path / "rootlink", f"{root}/"):
        for p in cases:
            assert inside(p, r) == resolved(p, r), (p, r)
    assert not inside(cq / "Out" / "q", root) and inside(cq / "In" / "0", root)


def _queues_by_resolving(root: Path) -> list:
    """The queue listing as resolving every path would give it: numeric directories (through links that resolve
    inside the store) of topic directories (the same)."""
    real_root = os.path.realpath(root)

    def ok(p):
        r = os.path.realpath(p)
        return os.path.isdir(p) and (r == real_root or r.startswith(real_root + os.sep))

    base = root / "consumequeue"
    return sorted((t, int(q)) for t in os.listdir(base) if ok(base / t)
                  for q in os.listdir(base / t) if q.lstrip("-").isdigit() and ok(base / t / q))


def test_queue_listing_judges_links_as_resolving_does(tmp_path):
    """Store.queues reads the directory entries' types and resolves only links: links to topic and queue
    directories inside the store are listed, links out of the store, files and non-numeric names are not; the
    listing a repair plans with (listed_once) is the same, copied, and gone afterwards."""
    from rmqctl.store.layout import Store

    root = tmp_path / "store"
    cq = root / "consumequeue"
    for d in ("TopicA/0", "TopicA/1", "TopicA/x", "TopicB"):
        (cq / d).mkdir(parents=True)
    (root / "commitlog").mkdir()
    (cq / "TopicA" / "7").write_bytes(b"")                     # a file named like a queue
    (cq / "afile").write_bytes(b"")
    out = tmp_path / "outside"
    (out / "0").mkdir(parents=True)
    os.symlink(cq / "TopicA", cq / "TopicL")                   # a topic linked inside the store
    os.symlink(out, cq / "TopicOut")                           # a topic linked out of it
    os.symlink(cq / "TopicA" / "0", cq / "TopicB" / "3")       # a queue linked inside
    os.symlink(out / "0", cq / "TopicB" / "4")                 # a queue linked out
    os.symlink(cq / "TopicA" / "nothing", cq / "TopicB" / "5")  # a dangling queue link
    want = [("TopicA", 0), ("TopicA", 1), ("TopicB", 3), ("TopicL", 0), ("TopicL", 1)]
    assert _queues_by_resolving(root) == want
    store = Store.open(root)
    assert store.queues() == want
    assert {p.name for p in store.not_followed} == {"TopicOut", "4"}
    with store.listed_once():
        first = store.queues()
        first.append(("mutated", 9))
        assert store.queues() == want
        # reached through no link: exactly the queues whose path resolves to itself
        plain = [k for k in want if store.queue_dir_plain(*k)]
        assert plain == [k for k in want if os.path.realpath(cq.joinpath(k[0], str(k[1])))
                         == os.path.join(os.path.realpath(cq), k[0], str(k[1]))] == [("TopicA", 0), ("TopicA", 1)]
        assert not store.queue_dir_plain("TopicOut", 0) and not store.queue_dir_plain("TopicA", 7)
        with store.listed_once():       # nested: the outer listing holds
            assert store.queue_dir_plain("TopicA", 0)
        assert store.queue_dir_plain("TopicA", 0)
    assert store._queues_memo is None
    assert not store.queue_dir_plain("TopicA", 0)       # unknown outside a listing
    linked = tmp_path / "linked-cq"
    os.rename(cq, linked)
    os.symlink(linked, cq)      # consumequeue itself a link inside... out of the store now: nothing is plain
    with store.listed_once():
        assert not any(store.queue_dir_plain(*k) for k in want)
    os.unlink(cq)
    os.rename(linked, cq)
    (cq / "TopicB" / "6").mkdir()
    assert ("TopicB", 6) in store.queues()


def test_a_queue_file_in_a_judged_directory_is_read_as_the_policy_reads_it(tmp_path):
    """verify judges a queue's directory once per range and then opens a regular file in it after one lstat:
    a link (in or out of the store), a FIFO, a missing file give what the full check gives. The link out leads
    to a file beside the store: the full check once judged against the store's parent and read it."""
    from rmqctl.check.cq_units import pread_or_empty

    root = tmp_path / "store"
    d = root / "consumequeue" / "T" / "0"
    d.mkdir(parents=True)
    out = tmp_path / "outside"
    out.write_bytes(b"O" * 40)
    (d / f"{0:020d}").write_bytes(b"A" * 40)
    (root / "inside").write_bytes(b"I" * 40)
    os.symlink(root / "inside", d / f"{40:020d}")
    os.symlink(out, d / f"{80:020d}")
    os.mkfifo(d / f"{120:020d}")
    want = {0: b"A" * 20, 40: b"I" * 20, 80: b"", 120: b"", 160: b""}
    for start, data in want.items():
        p = str(d / f"{start:020d}")
        assert pread_or_empty(p, 20, 10) == data, start
        assert pread_or_empty(p, 20, 10, True) == data, start
