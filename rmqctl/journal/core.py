"""Quarantine journal: every byte rmqctl removes or overwrites in a store is kept, so `rmqctl undo`
can put it back bit-exact.

Layout (outside ``commitlog/`` and ``consumequeue/``: the broker refuses to start with foreign files
there)::

    <store>/rmqctl-quarantine/<UTC timestamp>-<op>/
        journal.jsonl        one JSON object per line, fsynced before the action it describes
        files/0001-<name>    the saved bytes of entry 1 (whole file, tail, or range)

Use::

    with Journal.begin(store, op="config-set") as j:
        j.before_write(path, new_bytes)        # replace_file, or create_file if path is absent
        ...write path (atomically)...
        j.before_delete(other); os.unlink(other)
        j.before_truncate(seg, new_len); os.truncate(seg, new_len)
        j.before_write_range(seg, offset, new_bytes); ...pwrite...

Each ``before_*`` call copies what is about to go into ``files/``, appends an entry and fsyncs both
*before* returning, so the action that follows is always covered. Leaving the ``with`` block appends
``{"kind": "committed"}``; when an exception escapes it appends ``"aborted"`` and rolls the op back at
once. An op left open by a kill (or aborted and not rolled back) is rolled back by the next
``Journal.begin`` (settle_unfinished) before anything else changes. Directories an op creates are
journaled (``create_dir``) and removed by undo when empty. Every file written keeps the owner, group
and mode of what it replaces, or takes its directory's (rmqctl.store.ownership).

Entry kinds and fields: ``replace_file`` / ``create_file`` / ``delete_file`` (path, saved,
sha256_before/sha256_after of the whole content, size_before/size_after), ``truncate_file`` (path,
old_len, new_len, saved tail) and ``write_range`` (path, offset, saved bytes); for the two range kinds
the hashes cover the affected range only, since segment files can be GiB. Paths are relative to the
store when inside it.

``undo(store, op=None)`` restores the entries of one op in reverse order. It first checks every entry
against the file's current state: already restored -> skipped (so undo is idempotent and resumes after
a crash), still as the op left it -> restored, anything else (changed since) -> refused as a conflict
unless ``force``. It then appends ``{"kind": "undone"}``. Without ``op`` it takes the latest op not yet
undone, so repeated ``undo`` walks back through history.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from rmqctl.errors import IOFailure, ProblemsFound, UsageError
from rmqctl.store import ownership as OWN

QUARANTINE = "rmqctl-quarantine"
JOURNAL = "journal.jsonl"


_KILL_STEP = [0]


def kill_point(label: str = "") -> None:
    """Test hook: RMQCTL_TEST_KILL_AFTER=N makes the process die (like kill -9) after the N-th
    journaled action of this run. Costs one dict lookup when unset."""
    n = os.environ.get("RMQCTL_TEST_KILL_AFTER")
    if not n:
        return
    _KILL_STEP[0] += 1
    if _KILL_STEP[0] >= int(n):
        os._exit(137)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file_durably(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """tmp beside the target, fsync, os.replace, fsync the directory. Never leaves a partial target."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
    try:
        try:
            OWN.keep(tmp, path)
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(path.parent)


def _unlink_quietly(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _read(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _read_range(path: Path, offset: int, length: int) -> bytes | None:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(length)
    except FileNotFoundError:
        return None


# Undo works on GiB segment files: everything below reads and copies in CHUNK pieces (flat memory).
CHUNK = 1 << 20


def _chunks(fd: int, offset: int, length: int | None):
    """pread the range [offset, offset+length) (to EOF when length is None) in CHUNK pieces."""
    pos = offset
    while length is None or pos < offset + length:
        want = CHUNK if length is None else min(CHUNK, offset + length - pos)
        data = os.pread(fd, want, pos)
        if not data:
            return
        yield data
        pos += len(data)


def hash_range(path: Path, offset: int = 0, length: int | None = None, prefix: int | None = None):
    """Streamed sha256 of a file range: (hex of what is there, hex of its first `prefix` bytes, bytes
    read); (None, None, 0) when the file does not exist."""
    from rmqctl.store.files import open_read

    try:
        fd = open_read(path)   # a FIFO put in a file's place must not block undo
    except FileNotFoundError:
        return None, None, 0
    try:
        h, hp, n = hashlib.sha256(), None, 0
        for data in _chunks(fd, offset, length):
            if prefix is not None and hp is None and n + len(data) >= prefix:
                h.update(data[:prefix - n])
                hp = h.copy()
                h.update(data[prefix - n:])
            else:
                h.update(data)
            n += len(data)
        if prefix is not None and hp is None:
            hp = h.copy()
        return h.hexdigest(), (hp.hexdigest() if hp is not None else None), n
    finally:
        os.close(fd)


def file_sha256(path: Path) -> str | None:
    return hash_range(path)[0]


def _write_all(fd: int, data, pos: int | None = None) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view) if pos is None else os.pwrite(fd, view, pos)
        view = view[n:]
        if pos is not None:
            pos += n


def copy_checked(src: Path, dst_fd: int, dst_pos: int | None, expect_sha: str | None) -> int:
    """Copy the whole of `src` into dst_fd (at dst_pos, or the current position) in CHUNK pieces,
    hashing as it goes; ProblemsFound when the hash is not `expect_sha` (checked before the caller
    makes the copy visible). Returns the bytes copied."""
    fd = os.open(src, os.O_RDONLY)
    try:
        h, n = hashlib.sha256(), 0
        for data in _chunks(fd, 0, None):
            h.update(data)
            _write_all(dst_fd, data, None if dst_pos is None else dst_pos + n)
            n += len(data)
    finally:
        os.close(fd)
    if expect_sha is not None and h.hexdigest() != expect_sha:
        raise ProblemsFound("saved copy does not match its recorded sha256", path=src)
    return n


def verify_saved(src: Path, expect_sha: str | None) -> None:
    if expect_sha is not None and hash_range(src)[0] != expect_sha:
        raise ProblemsFound("saved copy does not match its recorded sha256", path=src)


def restore_file_durably(path: Path, saved: Path, expect_sha: str, *, mode: int | None = None) -> None:
    """Put a saved copy back at `path`, checked against its sha256 first. On the same file system the
    saved file itself is renamed back (no copy, no space needed: recover saves hard links); else it is
    streamed into a tmp beside the target, fsynced and renamed."""
    path = Path(path)
    verify_saved(saved, expect_sha)
    try:
        same_fs = os.stat(saved).st_dev == os.stat(path.parent).st_dev
    except FileNotFoundError:
        same_fs = False
    if same_fs:
        fsync_file(saved)
        os.replace(saved, path)
        fsync_dir(path.parent)
        return
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
    try:
        try:
            copy_checked(saved, fd, None, expect_sha)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_file(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """One operation's quarantine folder and journal. Create with ``Journal.begin``."""

    def __init__(self, store: Path, folder: Path, op: str):
        self.store = Path(store)
        self.dir = folder
        self.op = op
        self.seq = 0
        self._fh = None
        self._acted = False          # an action was journaled: the next entry (or commit) follows it
        self.rolled_back: list[str] = []   # interrupted ops settled by begin()

    # -- lifecycle ------------------------------------------------------------------------------
    @classmethod
    def begin(cls, store, op: str) -> "Journal":
        """Start a new op. Ops a killed run left unfinished are rolled back first (settle_unfinished),
        so every op starts from a store some complete op left. The caller holds the store lock."""
        store = Path(store)
        settled = settle_unfinished(store)
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", op) or "op"
        root = store / QUARANTINE
        from rmqctl.store.files import check_write

        check_write(store, root)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        try:
            OWN.check_can_keep(store)
            if not root.exists():
                root.mkdir()
                OWN.like_parent(root, directory=True)
            folder = root / f"{stamp}-{safe}"
            n = 1
            while folder.exists():
                n += 1
                folder = root / f"{stamp}-{safe}.{n}"
            for d in (folder, folder / "files"):
                d.mkdir()
                OWN.like_parent(d, directory=True)
        except OSError as e:
            raise IOFailure(f"cannot create the quarantine folder: {e.strerror or e}", path=root) from e
        fsync_dir(root)
        j = cls(store, folder, op)
        j.rolled_back = settled
        j._append({"kind": "begin", "op": op, "store": str(store.resolve()), "pid": os.getpid()})
        return j

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, et, ev, tb):
        if et is None:
            self.commit()
            return False
        try:
            self._append({"kind": "aborted", "error": f"{et.__name__}: {ev}"})
        except OSError:
            pass
        self.close()
        # a failed op is rolled back at once; if that fails too, the next op's begin() finishes it
        try:
            undo(self.store, self.dir.name, force=True, _unfinished=True)
        except (OSError, ProblemsFound, UsageError):
            pass
        return False

    def commit(self) -> None:
        self.step_done()
        self._append({"kind": "committed"})
        self.close()

    def step_done(self) -> None:
        """Called before each new entry: the previous action is complete (the kill test's hook)."""
        if self._acted:
            kill_point()
            self._acted = False

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    @property
    def name(self) -> str:
        return self.dir.name

    # -- recording ------------------------------------------------------------------------------
    def _append(self, entry: dict) -> None:
        entry = {"at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"), **entry}
        if self._fh is None:
            self._fh = open(self.dir / JOURNAL, "a", encoding="utf-8")
            OWN.like_parent(self.dir / JOURNAL, fd=self._fh.fileno())
            first = True
        else:
            first = False
        if entry.get("kind") in _ACTIONS:
            self.step_done()
            self._acted = True
        self._fh.write(json.dumps(entry, sort_keys=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        if first:
            fsync_dir(self.dir)

    def _rel(self, path: Path) -> str:
        """Every journaled change names its file here first: refuse a path through a symlink now."""
        from rmqctl.store.files import check_write

        check_write(self.store, path)
        path = Path(os.path.abspath(path))
        try:
            return str(path.relative_to(Path(os.path.abspath(self.store))))
        except ValueError:
            return str(path)

    def _save(self, path: Path, data: bytes) -> str:
        self.seq += 1
        rel = f"files/{self.seq:04d}-{Path(path).name}"
        fd = os.open(self.dir / rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            OWN.like_parent(self.dir / rel, fd=fd)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.dir / "files")
        return rel

    def before_write(self, path, new: bytes) -> dict:
        """Record that ``path`` is about to hold exactly ``new`` (replace_file or create_file)."""
        path = Path(path)
        old = _read(path)
        if old is None:
            self.make_dirs(path.parent)
            entry = {"kind": "create_file", "path": self._rel(path), "sha256_after": sha256(new),
                     "size_after": len(new)}
            self.seq += 1
        else:
            entry = {"kind": "replace_file", "path": self._rel(path), "saved": self._save(path, old),
                     "sha256_before": sha256(old), "size_before": len(old),
                     "sha256_after": sha256(new), "size_after": len(new), **OWN.stat_fields(os.stat(path))}
        self._append({"seq": self.seq, **entry})
        return entry

    def before_delete(self, path) -> dict:
        path = Path(path)
        old = _read(path)
        if old is None:
            raise IOFailure("cannot quarantine a file that does not exist", path=path)
        entry = {"kind": "delete_file", "path": self._rel(path), "saved": self._save(path, old),
                 "sha256_before": sha256(old), "size_before": len(old), **OWN.stat_fields(os.stat(path))}
        self._append({"seq": self.seq, **entry})
        return entry

    def make_dirs(self, directory) -> None:
        """Create the missing directories down to `directory`, each journaled first (undo removes
        them again when empty) and owned like its parent."""
        directory = Path(directory)
        missing = []
        while not directory.exists():
            missing.append(directory)
            directory = directory.parent
        for d in reversed(missing):
            self.seq += 1
            self._append({"seq": self.seq, "kind": "create_dir", "path": self._rel(d)})
            d.mkdir()
            OWN.like_parent(d, directory=True)
            fsync_dir(d.parent)

    def before_truncate(self, path, new_len: int) -> dict:
        path = Path(path)
        old_len = os.path.getsize(path)
        if new_len > old_len:
            raise UsageError(f"truncate to {new_len} would grow a {old_len}-byte file", path=path)
        tail = _read_range(path, new_len, old_len - new_len) or b""
        entry = {"kind": "truncate_file", "path": self._rel(path), "old_len": old_len, "new_len": new_len,
                 "saved": self._save(path, tail), "sha256_before": sha256(tail), "sha256_after": sha256(b"")}
        self._append({"seq": self.seq, **entry})
        return entry

    def before_write_range(self, path, offset: int, new: bytes) -> dict:
        path = Path(path)
        old = _read_range(path, offset, len(new)) or b""
        entry = {"kind": "write_range", "path": self._rel(path), "offset": offset, "length": len(new),
                 "old_length": len(old), "saved": self._save(path, old), "sha256_before": sha256(old),
                 "sha256_after": sha256(new)}
        self._append({"seq": self.seq, **entry})
        return entry


# ------------------------------------------------------------------------------------------------
# reading journals back, undo


@dataclass
class OpRecord:
    name: str
    dir: Path
    op: str
    state: str                      # committed | aborted | open (no end entry: killed) | undone
    entries: list = field(default_factory=list)   # the action entries, in order
    begun: str = ""


_ACTIONS = {"replace_file", "create_file", "delete_file", "truncate_file", "write_range", "create_dir"}


def read_op(folder: Path) -> OpRecord:
    entries, state, op, begun = [], "open", "?", ""
    try:
        lines = (folder / JOURNAL).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a torn last line (killed while appending): the action after it never ran
        k = e.get("kind")
        if k == "begin":
            op, begun = e.get("op", "?"), e.get("at", "")
        elif k in _ACTIONS:
            entries.append(e)
        elif k in ("committed", "aborted"):
            state = k
        elif k == "undone":
            state = "undone"
    return OpRecord(folder.name, folder, op, state, entries, begun)


def list_ops(store) -> list[OpRecord]:
    root = Path(store) / QUARANTINE
    if not root.is_dir():
        return []
    return [read_op(d) for d in sorted(root.iterdir()) if d.is_dir() and (d / JOURNAL).exists()]


@dataclass
class UndoStep:
    entry: dict
    action: str          # restore | skip | conflict
    reason: str = ""


def _abs(store: Path, rel: str) -> Path:
    p = Path(rel)
    return p if p.is_absolute() else Path(store) / p


def plan_undo(store, rec: OpRecord) -> list[UndoStep]:
    steps = []
    from rmqctl.store.files import write_refusal

    for e in reversed(rec.entries):
        path = _abs(store, e["path"])
        kind = e["kind"]
        why = write_refusal(store, path)
        if why:
            steps.append(UndoStep(e, "conflict", why))
            continue
        if kind in ("replace_file", "create_file", "delete_file"):
            h = file_sha256(path)
            before = e.get("sha256_before")  # None for create_file: "absent"
            after = e.get("sha256_after")     # None for delete_file: "absent"
            if h == before:
                steps.append(UndoStep(e, "skip", "already as before"))
            elif h == after:
                steps.append(UndoStep(e, "restore"))
            else:
                what = "missing" if h is None else f"sha256 {h[:12]}"
                steps.append(UndoStep(e, "conflict", f"changed since the op ({what})"))
        elif kind == "truncate_file":
            size = os.path.getsize(path) if path.exists() else None
            if size == e["old_len"] and hash_range(path, e["new_len"], e["old_len"] - e["new_len"])[0] \
                    == e["sha256_before"]:
                steps.append(UndoStep(e, "skip", "already as before"))
            elif size == e["new_len"]:
                steps.append(UndoStep(e, "restore"))
            else:
                steps.append(UndoStep(e, "conflict", f"size is {size}, expected {e['new_len']}"))
        elif kind == "create_dir":
            # removed at its turn if empty by then (the op's files in it go first)
            steps.append(UndoStep(e, "restore") if path.is_dir() else UndoStep(e, "skip", "already as before"))
        elif kind == "write_range":
            h, h_old, n = hash_range(path, e["offset"], e["length"], prefix=e["old_length"])
            if h is not None and h_old == e["sha256_before"] and \
                    (e["old_length"] == e["length"] or n == e["old_length"]):
                steps.append(UndoStep(e, "skip", "already as before"))
            elif h == e["sha256_after"]:
                steps.append(UndoStep(e, "restore"))
            else:
                steps.append(UndoStep(e, "conflict", "range changed since the op"))
    return steps


def _apply(store: Path, rec: OpRecord, step: UndoStep) -> None:
    """Restore one entry. Saved copies are streamed (CHUNK at a time) and checked against their
    recorded sha256 before the target changes; every write is fsynced."""
    from rmqctl.store.files import check_write

    e = step.entry
    path = _abs(store, e["path"])
    check_write(store, path)   # undo restores links by never writing through one
    kind = e["kind"]
    saved = rec.dir / e["saved"] if e.get("saved") else None
    if kind in ("replace_file", "delete_file"):
        restore_file_durably(path, saved, e["sha256_before"], mode=e.get("mode"))
        OWN.restore_fields(path, e)
    elif kind == "create_dir":
        try:
            os.rmdir(path)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                raise
            return      # something else lives there now: kept
        fsync_dir(path.parent)
    elif kind == "create_file":
        if path.exists():
            os.unlink(path)
            fsync_dir(path.parent)
    elif kind == "truncate_file":
        verify_saved(saved, e.get("sha256_before"))
        fd = os.open(path, os.O_RDWR)
        try:
            os.ftruncate(fd, e["new_len"])
            copy_checked(saved, fd, e["new_len"], e.get("sha256_before"))
            os.fsync(fd)
        finally:
            os.close(fd)
    elif kind == "write_range":
        verify_saved(saved, e.get("sha256_before"))
        fd = os.open(path, os.O_RDWR)
        try:
            copy_checked(saved, fd, e["offset"], e.get("sha256_before"))
            if e["old_length"] < e["length"]:  # the op extended the file
                os.ftruncate(fd, e["offset"] + e["old_length"])
            os.fsync(fd)
        finally:
            os.close(fd)


def find_op(store, op: str | None) -> OpRecord:
    ops = list_ops(store)
    if not ops:
        raise UsageError("nothing to undo: no rmqctl-quarantine journal in this store", path=store)
    if op is None:
        for rec in reversed(ops):
            if rec.state != "undone":
                return rec
        return ops[-1]
    for rec in ops:
        if rec.name == op or rec.dir.name.startswith(op):
            return rec
    matches = [r for r in ops if r.op == op]
    if matches:
        for rec in reversed(matches):
            if rec.state != "undone":
                return rec
        return matches[-1]
    raise UsageError(f"no operation named {op!r} (see `rmqctl undo --list`)", path=Path(store) / QUARANTINE)


@dataclass
class UndoResult:
    op: OpRecord
    steps: list
    already: bool = False


def space_needed(store, rec: OpRecord, steps) -> int:
    """Bytes undo must allocate: truncated tails grow back, and saved copies that cannot be renamed
    back (another file system) are copied."""
    need = 0
    for s in steps:
        if s.action == "skip":
            continue
        e = s.entry
        if e["kind"] == "truncate_file":
            need += e["old_len"] - e["new_len"]
        elif e["kind"] in ("replace_file", "delete_file"):
            saved = rec.dir / e["saved"]
            path = _abs(store, e["path"])
            try:
                if os.stat(saved).st_dev == os.stat(path.parent).st_dev:
                    continue
            except OSError:
                pass
            need += e.get("size_before", 0)
    return need


def free_space(path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _torn(rec: OpRecord, s: UndoStep) -> bool:
    """A range write a kill interrupted half-way: neither the old nor the new bytes, but its saved copy
    is there, so restoring it is safe."""
    e = s.entry
    return e["kind"] == "write_range" and (rec.dir / e["saved"]).exists()


def undo(store, op: str | None = None, *, force: bool = False, dry_run: bool = False,
         _unfinished: bool = False) -> UndoResult:
    """Restore what one op changed. The caller holds the store lock.

    Checks first (nothing changes when one fails): conflicts, and free space for what must be copied.
    Entries are restored newest first: `abort`, removed last by recover, comes back first, so the
    store looks unclean to the broker until undo is complete. Any error names the file."""
    store = Path(store)
    rec = find_op(store, op)
    if rec.state == "undone":
        return UndoResult(rec, [], already=True)
    steps = plan_undo(store, rec)
    conflicts = [s for s in steps if s.action == "conflict"
                 and not ((_unfinished or rec.state in ("open", "aborted")) and _torn(rec, s))]
    if conflicts and not force:
        s = conflicts[0]
        raise ProblemsFound(f"cannot undo {rec.name}: {s.reason} ({len(conflicts)} conflict(s)); "
                            "nothing restored (--force restores anyway)", path=_abs(store, s.entry["path"]))
    if dry_run:
        return UndoResult(rec, steps)
    need = space_needed(store, rec, steps)
    if need:
        free = free_space(store)
        if need > free:
            raise IOFailure(f"not enough free space to undo {rec.name}: it needs {need} bytes, {free} are free; "
                            "nothing restored", path=store)
    todo = [s for s in steps if s.action == "restore" or s.action == "conflict"]
    j_fh = open(rec.dir / JOURNAL, "a", encoding="utf-8")
    try:
        for i, s in enumerate(todo):
            path = _abs(store, s.entry["path"])
            try:
                _apply(store, rec, s)
            except OSError as e:
                what = {errno.ENOSPC: "disk full", errno.EROFS: "read-only file system",
                        errno.EDQUOT: "disk quota exceeded"}.get(e.errno, e.strerror or str(e))
                raise IOFailure(f"undo of {rec.name} stopped: {what}; {i} of {len(todo)} restored, the rest "
                                "untouched; free space and run `rmqctl undo` again to finish",
                                path=e.filename or path) from e
            kill_point("undo")
        stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        j_fh.write(json.dumps({"at": stamp, "kind": "undone", "epoch_ms": int(time.time() * 1000)}) + "\n")
        j_fh.flush()
        os.fsync(j_fh.fileno())
    finally:
        j_fh.close()
    rec.state = "undone"
    return UndoResult(rec, steps)


def settle_unfinished(store) -> list[str]:
    """Roll back every op that a killed run left unfinished (open, or aborted and not yet rolled back),
    oldest last, and remove its quarantine folder: all it saved is back in the store, checked by sha256.
    A re-run then starts from the store as it was, and produces what an uninterrupted run would.
    Refuses (ProblemsFound, nothing changed) when a file changed since the op, e.g. a broker ran."""
    done = []
    for rec in reversed(list_ops(store)):
        if rec.state not in ("open", "aborted"):
            continue
        try:
            undo(store, rec.name, _unfinished=True)
        except ProblemsFound as e:
            raise ProblemsFound(f"an interrupted rmqctl operation ({rec.name}) cannot be rolled back: {e.message}; "
                                f"nothing changed; `rmqctl undo {store} --op {rec.name} --force` restores "
                                "what it saved", path=e.path) from e
        shutil.rmtree(rec.dir, ignore_errors=True)
        fsync_dir(rec.dir.parent)
        done.append(rec.name)
    return done
