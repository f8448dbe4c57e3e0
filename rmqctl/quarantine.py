"""`rmqctl quarantine list|prune`: what the quarantine journals (STORE/rmqctl-quarantine/, see
rmqctl.repair.journal) hold, and removing old ones.

The quarantine grows inside the store: every repair keeps the bytes it removed or overwrote, often as
hard links to GiB segment files. `list` tells, per journal, its state, its operations, its bytes on disk
and how many of its files are hard links still shared with another path (their blocks are not freed by
removing the journal). `prune` removes committed or undone journals older than a duration or beyond the
N newest, under the store lock like every other writer. It never removes an unfinished journal (open:
a killed run; aborted: a failed one): the next rmqctl write rolls those back from what they saved. A
committed journal that an interrupted `undo` has partly restored is kept too (that undo must finish).

Removal is safe against kill -9 at every step: the journal file is first renamed to ``journal.pruned``
(atomic; from then on the op is not listed and `undo` cannot pick it), then the folder is removed; a
folder left with ``journal.pruned`` or without any journal (a kill in the middle) is finished by the
next `prune`.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from rmqctl.errors import UsageError
from rmqctl.repair import journal as J

PRUNED = "journal.pruned"
UNFINISHED = ("open", "aborted")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> int:
    """'7d', '12h', '30m', '90s', '2w' (optionally with a leading '-') -> seconds."""
    m = re.fullmatch(r"-?\s*(\d+)\s*([smhdw])", (text or "").strip().lower())
    if not m:
        raise UsageError(f"--older-than {text!r}: give a duration such as 7d, 12h, 30m, 2w")
    return int(m.group(1)) * _UNITS[m.group(2)]


@dataclass
class JournalInfo:
    name: str
    op: str
    state: str                  # committed | undone | open | aborted | undo-in-progress
    begun: str                  # ISO time of the begin entry ("" if unknown)
    begun_ms: int | None
    actions: dict = field(default_factory=dict)    # entry kind -> count
    files: int = 0
    bytes: int = 0              # apparent size of every file in the folder
    disk_bytes: int = 0         # allocated blocks
    linked_files: int = 0       # files whose inode has other links (shared with the store or elsewhere)
    linked_bytes: int = 0
    max_links: int = 0
    frees_bytes: int = 0        # allocated bytes only this journal holds (freed by removing it)

    @property
    def prunable(self) -> bool:
        return self.state in ("committed", "undone")

    def to_dict(self) -> dict:
        return {"name": self.name, "op": self.op, "state": self.state, "begun": self.begun,
                "begun_ms": self.begun_ms, "actions": dict(self.actions), "files": self.files,
                "bytes": self.bytes, "disk_bytes": self.disk_bytes, "linked_files": self.linked_files,
                "linked_bytes": self.linked_bytes, "max_links": self.max_links, "frees_bytes": self.frees_bytes}


def _begun_ms(rec: J.OpRecord) -> int | None:
    for text in (rec.begun, rec.name.split("-", 1)[0]):
        try:
            dt = datetime.fromisoformat(text) if "-" in text else \
                datetime.strptime(text, "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=UTC)
            return int(dt.timestamp() * 1000)
        except ValueError:
            continue
    try:
        return int((rec.dir / J.JOURNAL).stat().st_mtime * 1000)
    except OSError:
        return None


def _undo_in_progress(store: Path, rec: J.OpRecord) -> bool:
    """A committed op whose newest entry is already back as before: an undo (which restores newest first)
    was stopped before its "undone" line. Only that one entry is checked (a whole-file hash at most), so
    listing stays cheap with GiB files in the quarantine; when a later op happened to put the file back,
    the journal is kept too, which errs on the safe side."""
    if rec.state != "committed" or len(rec.entries) < 2:
        return False
    newest = next((e for e in reversed(rec.entries) if e.get("kind") != "create_dir"), None)
    if newest is None:
        return False
    try:
        (step,) = J.plan_undo(store, replace(rec, entries=[newest]))
    except (OSError, ValueError, KeyError):
        return False
    return step.action == "skip"


def describe(store, rec: J.OpRecord, *, check_undo: bool = True) -> JournalInfo:
    state = rec.state
    if check_undo and _undo_in_progress(Path(store), rec):
        state = "undo-in-progress"
    info = JournalInfo(rec.name, rec.op, state, rec.begun, _begun_ms(rec))
    for e in rec.entries:
        info.actions[e.get("kind", "?")] = info.actions.get(e.get("kind", "?"), 0) + 1
    for dirpath, _, names in os.walk(rec.dir):
        for n in names:
            try:
                st = os.lstat(os.path.join(dirpath, n))
            except OSError:
                continue
            disk = st.st_blocks * 512
            info.files += 1
            info.bytes += st.st_size
            info.disk_bytes += disk
            info.max_links = max(info.max_links, st.st_nlink)
            if st.st_nlink > 1:
                info.linked_files += 1
                info.linked_bytes += st.st_size
            else:
                info.frees_bytes += disk
    return info


def list_journals(store) -> list[JournalInfo]:
    store = Path(store)
    return [describe(store, rec) for rec in J.list_ops(store)]


_FOLDER = re.compile(r"\d{8}T\d{6}\.\d{6}Z-")


def leftovers(store) -> list[Path]:
    """Journal folders a killed prune (or a Journal.begin killed before its first line) left: a journal
    folder's name and no journal.jsonl (journal.pruned, or nothing left of the journal)."""
    root = Path(store) / J.QUARANTINE
    if not root.is_dir():
        return []
    return [d for d in sorted(root.iterdir())
            if d.is_dir() and _FOLDER.match(d.name) and not (d / J.JOURNAL).exists()]


@dataclass
class PrunePlan:
    remove: list = field(default_factory=list)     # JournalInfo
    keep: list = field(default_factory=list)       # (JournalInfo, why)
    leftovers: list = field(default_factory=list)  # Path

    @property
    def frees_bytes(self) -> int:
        return sum(i.frees_bytes for i in self.remove)


def plan(store, *, older_than_s: int | None = None, keep: int | None = None, now_ms: int | None = None) -> PrunePlan:
    if older_than_s is None and keep is None:
        raise UsageError("give --older-than DURATION or --keep N (or both)")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    infos = list_journals(store)
    p = PrunePlan(leftovers=leftovers(store))
    prunable = [i for i in infos if i.prunable]
    newest = sorted(prunable, key=lambda i: (i.begun_ms or 0, i.name), reverse=True)
    kept_by_count = {i.name for i in newest[:keep]} if keep is not None else set()
    for i in infos:
        if not i.prunable:
            why = ("unfinished: the next rmqctl write rolls it back from what it saved" if i.state in UNFINISHED
                   else "an undo of it was interrupted: run `rmqctl undo` again to finish it")
            p.keep.append((i, why))
        elif i.name in kept_by_count:
            p.keep.append((i, f"one of the {keep} newest"))
        elif older_than_s is not None and (i.begun_ms is None or now_ms - i.begun_ms < older_than_s * 1000):
            p.keep.append((i, "newer than --older-than"))
        else:
            p.remove.append(i)
    return p


def _remove_folder(d: Path) -> None:
    """Rename the journal away (atomic: from here the op is gone for list/undo), then delete the folder."""
    j = d / J.JOURNAL
    if j.exists():
        os.replace(j, d / PRUNED)
        J.fsync_dir(d)
        J.kill_point("prune-rename")
    shutil.rmtree(d)
    J.fsync_dir(d.parent)
    J.kill_point("prune-remove")


def apply(store, p: PrunePlan) -> None:
    """Remove what the plan says; the caller holds the store lock. Leftovers of a killed prune first."""
    for d in p.leftovers:
        _remove_folder(d)
    root = Path(store) / J.QUARANTINE
    for i in p.remove:
        _remove_folder(root / i.name)
