"""Reading journals back and undoing them (``rmqctl undo``), and rolling back an op a killed run left
unfinished (``settle_unfinished``). The rules are in rmqctl.journal.core's module doc."""
from __future__ import annotations

import errno
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from rmqctl.errors import IOFailure, ProblemsFound, UsageError
from rmqctl.journal.files import (
    _ACTIONS,
    JOURNAL,
    QUARANTINE,
    copy_checked,
    file_sha256,
    fsync_dir,
    hash_range,
    kill_point,
    restore_file_durably,
    verify_saved,
)
from rmqctl.store import ownership as OWN


@dataclass
class OpRecord:
    name: str
    dir: Path
    op: str
    state: str                      # committed | aborted | open (no end entry: killed) | undone
    entries: list = field(default_factory=list)   # the action entries, in order
    begun: str = ""


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
