"""Disk-full relief: plan and apply what the broker's own expiry would delete, keeping unconsumed data.

The broker's rules (RocketMQ store, DefaultMessageStore.CleanCommitLogService / CleanConsumeQueueService):
* commitlog (MappedFileQueue.deleteExpiredFileByTime): files in order, never the last one; a file goes
  when its mtime (File.lastModified) + fileReservedTime hours has passed -- or at once when the disk is
  over diskSpaceCleanForciblyRatio (cleanFileForciblyEnable); the first file that stays ends the run
  (no holes). The broker does not look at consumer offsets at all; rmqctl also keeps every file that
  holds a message some group has not consumed yet, unless that group is named in force_unconsumed.
* consume queues and 5.x batch consume queues (deleteExpiredFileByOffset): files in order, never the last;
  a file goes when the unit in its last slot points below the new commitlog min offset; the first that stays
  ends it. A batch queue's committed offsets count inner messages, so its unit covering the offset is found
  through msgBaseOffset/batchSize (BatchQueue.unit_for).
* index (IndexService.deleteExpiredFile): files in order, never the last; a file goes when its
  endPhyOffset is below the new min offset; the first that stays ends it.
"""
from __future__ import annotations

import json
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from rmqctl.errors import RmqError
from rmqctl.store.batchcq import DIR as BCQ_DIR
from rmqctl.store.batchcq import UNIT_SIZE as BCQ_UNIT
from rmqctl.store.batchcq import BatchQueue
from rmqctl.store.commitlog import open_ro
from rmqctl.store.layout import Store

DEFAULT_RESERVED_HOURS = 72
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DELAY_GROUP = "(scheduled messages, delayOffset.json)"
_INDEX_HEADER = struct.Struct(">qqqqii")


def reserved_hours_from(path) -> int | None:
    """fileReservedTime from a broker.conf (properties) or a JSON map; None when absent."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("{"):
        values = json.loads(text)
        if isinstance(values.get("store_config"), dict):
            values = values["store_config"]
    else:
        values = {}
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, _, v = line.partition("=")
                values[k.strip()] = v.strip()
    v = values.get("fileReservedTime")
    return None if v is None else int(v)


@dataclass
class FileItem:
    kind: str          # commitlog | consumequeue | batchconsumequeue | index
    path: Path
    size: int
    reason: str

    def rel(self, root: Path) -> str:
        return str(self.path.relative_to(root))


@dataclass
class Plan:
    root: Path
    reserved_hours: int
    min_before: int
    min_after: int
    max_offset: int
    expired: int = 0                                   # commitlog files the broker's time rule lets go
    files: list = field(default_factory=list)          # FileItem, in deletion order
    blocked_by: dict = field(default_factory=dict)     # group -> first unconsumed physical offset
    stopped: str = ""                                  # why the commitlog run stopped
    losses: dict = field(default_factory=dict)         # group -> [{topic, queue_id, committed, lost, ...}]
    min_if_forced: int = 0                             # the new min offset if every group were forced
    forced: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    def by_kind(self, kind: str) -> list:
        return [f for f in self.files if f.kind == kind]

    def to_json(self) -> dict:
        return {"store": str(self.root), "file_reserved_hours": self.reserved_hours,
                "min_offset_before": self.min_before, "min_offset_after": self.min_after,
                "max_offset": self.max_offset, "bytes_freed": self.bytes,
                "files": [{"kind": f.kind, "path": f.rel(self.root), "bytes": f.size, "reason": f.reason}
                          for f in self.files],
                "commitlog_stopped_by": self.stopped, "blocking_groups": self.blocked_by,
                "forced_groups": self.forced, "group_losses": self.losses,
                "min_offset_if_forced": self.min_if_forced, "notes": self.notes}


def _index_end_phy(path: Path) -> int | None:
    with open_ro(path) as fd:
        data = os.pread(fd, _INDEX_HEADER.size, 0)
    if len(data) < _INDEX_HEADER.size:
        return None
    return _INDEX_HEADER.unpack(data)[3]


def _last_slot_phys(path: Path, file_size: int) -> int | None:
    """The commitlog offset in a batch consume queue file's last 46-byte slot, read as the broker reads it
    (whatever the slot holds: a file never filled reads 0 there)."""
    with open_ro(path) as fd:
        data = os.pread(fd, 8, file_size - BCQ_UNIT)
    return struct.unpack(">q", data)[0] if len(data) == 8 else None


def _committed(store: Store) -> dict:
    """(group, topic, queue) -> committed offset, from the consumerOffset.json the broker would load."""
    from rmqctl.config import offsets as OF
    from rmqctl.config.files import load

    loaded = load(store.root, "consumerOffset")
    out = {}
    if isinstance(loaded.doc, dict):
        out = {(r.group, r.topic, r.queue): r.offset for r in OF.rows(loaded.doc)}
    # scheduled (delay-level) messages not yet delivered are unconsumed too: ScheduleMessageService reads
    # SCHEDULE_TOPIC_XXXX queue level-1 from delayOffset.json's offset for the level (0 when absent)
    levels = {}
    try:
        d = load(store.root, "delayOffset").doc
        t = d.get("offsetTable") if isinstance(d, dict) else None
        for k, v in (t or {}).items():
            levels[int(k)] = int(v)
    except (ValueError, TypeError, RmqError):
        pass
    for t, q in store.queues():
        if t == SCHEDULE_TOPIC:
            out[(DELAY_GROUP, t, q)] = levels.get(q + 1, 0)
    return out


def plan(store: Store, *, reserved_hours: int = DEFAULT_RESERVED_HOURS, ignore_reserved_time: bool = False,
         force_unconsumed=(), now_ms: int | None = None) -> Plan:
    from rmqctl.replica import commitlog_max_offset

    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    root = store.root
    cl_files = store.commitlog.files
    size = store.config.commitlog_file_size
    max_off = commitlog_max_offset(store)
    p = Plan(root, reserved_hours, store.commitlog.min_offset, store.commitlog.min_offset, max_off,
             forced=sorted(force_unconsumed))
    if store.abort_exists:
        p.notes.append("the store was not shut down cleanly (abort is present): its consume queues may lag the "
                       "commitlog; run `rmqctl recover` first (applying is refused until then)")
    if len(cl_files) < 2:
        p.stopped = "the broker never deletes the last commitlog file"
        return p

    # the first message each group has not consumed yet (its physical offset), per group
    committed = _committed(store)
    queues = set(store.queues())
    cqs: dict = {}

    def cq(t, q):
        if (t, q) not in cqs:
            cqs[(t, q)] = store.consume_queue(t, q)
        return cqs[(t, q)]

    bqueues = set(store.queues(BCQ_DIR))
    bqs: dict = {}

    def bq(t, q):
        if (t, q) not in bqs:
            bqs[(t, q)] = BatchQueue(store, t, q)
        return bqs[(t, q)]

    first_unconsumed: dict = {}
    for (g, t, q), off in committed.items():
        if (t, q) in bqueues:
            u = bq(t, q).unit_for(max(off, bq(t, q).min_offset()))
            if u is not None:
                first_unconsumed[g] = min(first_unconsumed.get(g, u.phys), u.phys)
            continue
        if (t, q) not in queues:
            continue
        c = cq(t, q)
        mx = c.max_offset()
        if off >= mx:
            continue
        start = max(off, c.min_offset())
        for _, phys, _, _ in c.units(start, start + 1):
            if phys >= 0:
                first_unconsumed[g] = min(first_unconsumed.get(g, phys), phys)
    unknown = set(force_unconsumed) - {g for g, _, _ in committed} - {"delayed"}
    if unknown:
        p.notes.append(f"no committed offsets for {', '.join(sorted(unknown))} in consumerOffset.json")
    force_unconsumed = set(force_unconsumed) | ({DELAY_GROUP} if "delayed" in force_unconsumed else set())
    p.forced = sorted(force_unconsumed - {"delayed"})
    guard = min((v for g, v in first_unconsumed.items() if g not in force_unconsumed), default=None)

    new_min = cl_files[0].start
    for i, f in enumerate(cl_files[:-1]):
        mtime_ms = int(os.stat(f.path).st_mtime * 1000)
        if not ignore_reserved_time and now_ms < mtime_ms + reserved_hours * 3600 * 1000:
            left = (mtime_ms + reserved_hours * 3600 * 1000 - now_ms) / 3600000
            p.stopped = f"{f.name} is within fileReservedTime ({reserved_hours} h; expires in {left:.1f} h)"
            break
        p.expired += 1
        end = f.start + size
        if guard is not None and end > guard:
            groups = sorted(g for g, v in first_unconsumed.items() if v < end and g not in force_unconsumed)
            p.stopped = f"{f.name} holds messages not yet consumed by {', '.join(groups)}"
            p.blocked_by = {g: first_unconsumed[g] for g in groups}
            # count the rest of the expired run too, for "what forcing would free"
            for g2 in cl_files[i + 1:-1]:
                m2 = int(os.stat(g2.path).st_mtime * 1000)
                if not ignore_reserved_time and now_ms < m2 + reserved_hours * 3600 * 1000:
                    break
                p.expired += 1
            break
        why = "expired" if not ignore_reserved_time else "forced (reserved time ignored)"
        p.files.append(FileItem("commitlog", f.path, f.size, f"{why}, mtime {mtime_ms}"))
        new_min = cl_files[i + 1].start
    else:
        p.stopped = "the broker never deletes the last commitlog file"
    p.min_after = new_min

    # what each group loses with this plan, and would lose if forced (every expired file reclaimed)
    p.min_if_forced = cl_files[p.expired].start if p.expired else cl_files[0].start
    for (g, t, q), off in sorted(committed.items()):
        if g not in first_unconsumed or (t, q) not in queues | bqueues:
            continue
        lost = if_forced = 0
        if (t, q) in bqueues:
            start = max(off, bq(t, q).min_offset())
            for u in bq(t, q).units():
                if u.end_offset <= start:
                    continue
                if u.phys >= p.min_if_forced:
                    break
                n = u.end_offset - max(u.base, start)       # the inner messages of the batch not yet consumed
                if_forced += n
                lost += n if u.phys < new_min else 0
        else:
            c = cq(t, q)
            for _, phys, _, _ in c.units(max(off, c.min_offset()), c.max_offset()):
                if phys >= p.min_if_forced:
                    break
                if_forced += 1
                lost += phys < new_min
        if if_forced:
            p.losses.setdefault(g, []).append({"topic": t, "queue_id": q, "committed": off, "lost": lost,
                                               "lost_if_forced": if_forced})
    if new_min == p.min_before:
        return p

    for t, q in sorted(queues):
        c = cq(t, q)
        files = c.queue.files
        for f in files[:-1]:
            if f.size < c.file_size:
                break       # a short file: the broker's selectMappedBuffer of the last slot fails too
            last = None
            for u in c.read_units(f, c.file_size // 20 - 1, 1):
                last = u
            if last is None or not last[0] < new_min:
                break
            p.files.append(FileItem("consumequeue", f.path, f.size, f"last unit at {last[0]} < {new_min}"))
    for t, q in sorted(bqueues):
        b = bq(t, q)
        for f in b.files[:-1]:
            if f.size < b.file_size:
                break
            last = _last_slot_phys(f.path, b.file_size)
            if last is None or not last < new_min:
                break
            p.files.append(FileItem(BCQ_DIR, f.path, f.size, f"last unit at {last} < {new_min}"))
    idx = store.index_files()
    for path in idx[:-1]:
        end = _index_end_phy(path)
        if end is None or not end < new_min:
            break
        p.files.append(FileItem("index", path, path.stat().st_size, f"endPhyOffset {end} < {new_min}"))
    return p


def _same_fs(a: Path, b: Path) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


def check_target(root: Path, dest: Path, p: Plan) -> list[str]:
    """Refusals before anything changes: DEST inside the store's data dirs, files already there."""
    problems = []
    rroot, rdest = root.resolve(), dest.resolve()
    for sub in ("commitlog", "consumequeue", BCQ_DIR, "index"):
        if rdest == rroot / sub or (rroot / sub) in rdest.parents:
            problems.append(f"--move-to is inside the store's {sub}/: the broker would refuse the foreign files")
    if rdest == rroot:
        problems.append("--move-to is the store itself")
    from rmqctl.journal.ops import sha256_file

    for f in p.files:
        d = dest / f.rel(root)
        if d.exists():
            # the same bytes: a copy an interrupted run left (it was rolled back); it is overwritten
            if not d.is_file() or d.stat().st_size != f.size or sha256_file(d) != sha256_file(f.path):
                problems.append(f"{d} already exists")
                break
    return problems


def apply(p: Plan, j, *, move_to: Path | None, progress=None) -> None:
    """Move (journaled as delete_file with the moved copy as the saved bytes: `rmqctl undo` brings it
    back) or delete (journaled without a copy) every planned file, in the plan's order."""
    from rmqctl.journal import core as J
    from rmqctl.journal import ops as JO
    from rmqctl.store import ownership as OWN

    for f in p.files:
        st = os.lstat(f.path)
        if move_to is not None:
            dst = move_to / f.rel(p.root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if _same_fs(f.path, dst.parent):      # a hard link: nothing copied (and nothing freed)
                if os.path.lexists(dst):           # identical leftover (check_target), replaced
                    os.unlink(dst)
                os.link(f.path, dst, follow_symlinks=False)
                J.fsync_dir(dst.parent)
                sha = JO.sha256_file(dst)
            else:
                part = dst.with_name(dst.name + ".part")
                try:
                    JO._copy_range(f.path, 0, st.st_size, part)
                    OWN.like_file(part, st)
                    sha = JO.sha256_file(part)
                    if sha != JO.sha256_file(f.path):
                        raise OSError(5, "the copy does not match the original", str(part))
                    os.replace(part, dst)
                except BaseException:
                    J._unlink_quietly(part)     # a full spare disk leaves no half copy behind
                    raise
                J.fsync_dir(dst.parent)
            j.seq += 1
            j._append({"seq": j.seq, "kind": "delete_file", "path": j._rel(f.path), "saved": str(dst.resolve()),
                       "sha256_before": sha, "size_before": st.st_size, **OWN.stat_fields(st)})
        else:
            j._append({"kind": "discarded_file", "path": j._rel(f.path), "size": st.st_size,
                       "mtime": st.st_mtime, "note": "deleted without a copy (--delete): undo cannot restore it"})
        os.unlink(f.path)
        J.fsync_dir(f.path.parent)
        if progress is not None:
            progress.update(1)


class ReclaimJob:
    """`reclaim` as a ``rmqctl.repair.transaction`` job: plan under the lock; with files to free, refuse an
    unclean store or a bad --move-to before anything changes, then move (undoable) or delete the planned files."""

    def __init__(self, *, reserved_hours: int, ignore_reserved_time: bool, force_unconsumed, move_to: Path | None,
                 warn=None):
        self.reserved_hours, self.ignore_reserved_time = reserved_hours, ignore_reserved_time
        self.force_unconsumed, self.move_to, self.warn = force_unconsumed, move_to, warn
        # the op name says it where `rmqctl undo --list` shows it: a --delete run has nothing to restore
        self.op = "reclaim" if move_to is not None else "reclaim-deleted-no-copy"

    def work(self, store) -> int:
        return 0

    def plan(self, store, staging, progress) -> Plan:
        return plan(store, reserved_hours=self.reserved_hours, ignore_reserved_time=self.ignore_reserved_time,
                    force_unconsumed=self.force_unconsumed)

    def problems(self, p: Plan) -> list[str]:
        return []

    def nothing_to_do(self, p: Plan) -> bool:
        return not p.files

    def check(self, store, p: Plan) -> None:
        pass

    def prepare(self, store, p: Plan) -> None:
        from rmqctl.errors import ProblemsFound

        say = self.warn or (lambda text: None)
        if store.abort_exists:
            raise ProblemsFound("the store was not shut down cleanly (abort is present): run `rmqctl recover` "
                                "first; nothing changed", path=store.root / "abort")
        if self.move_to is not None:
            self.move_to.mkdir(parents=True, exist_ok=True)
            problems = check_target(store.root, self.move_to, p)
            if problems:
                raise ProblemsFound("; ".join(problems) + "; nothing changed", path=self.move_to)
            if _same_fs(store.root, self.move_to):
                say(f"{self.move_to}: on the same file system as the store: the files are moved there but no "
                    "space is freed until DIR is emptied")
        else:
            say(f"{store.root}: deleting {len(p.files)} file(s), {p.bytes} bytes, WITHOUT a copy: `rmqctl undo` "
                "cannot bring them back")

    def steps(self, p: Plan) -> int:
        return len(p.files)

    def apply(self, store, p: Plan, journal, progress) -> None:
        apply(p, journal, move_to=self.move_to)
