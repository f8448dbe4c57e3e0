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

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

from rmqctl.errors import IOFailure, ProblemsFound, UsageError
from rmqctl.journal.files import *  # noqa: F403  (re-exported: callers use core.write_file_durably, core.sha256, ...)
from rmqctl.journal.files import (  # noqa: F401  (re-exported for ops)
    _ACTIONS,
    JOURNAL,
    QUARANTINE,
    _chunks,
    _read,
    _read_range,
    _unlink_quietly,
    _write_all,
    fsync_dir,
    kill_point,
    sha256,
)
from rmqctl.journal.undo import *  # noqa: F403  (re-exported: core.undo, core.list_ops, ...)
from rmqctl.journal.undo import settle_unfinished, undo
from rmqctl.store import ownership as OWN


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
