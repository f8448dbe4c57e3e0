"""Compaction CQ regeneration (`rebuild cq`) and the broker's re-dispatch into compaction logs (`recover`).

Both reproduce the broker's writers byte for byte (CompactionLog.asyncPutMessage with
CompactionAppendMessageCallback, SparseConsumeQueue.putBatchMessagePositionInfo / putEndPositionInfo, 5.3.3):
  * a record copied from the commitlog keeps its bytes except PHYSICALOFFSET (its position in the compaction log);
  * its CQ unit is (position, size, tagsCode, storeTimestamp, queueOffset, batchSize 1, -1, 0);
  * a log file is closed when its CQ file has no room for one more unit plus the end unit, or the record and an
    8-byte BLANK header do not fit: the log gets a BLANK header (size, 0xCBD43194), the CQ an end unit
    (-1, 0, 0, 0, 0, 0, -1, 0); the next log and CQ files (same name) start at the next log-file offset;
  * a file written by a compaction run ends in zeros (no BLANK: CompactionAppendEndMsgCallback writes its 8 bytes
    into a scratch buffer) and its CQ file has no end unit.
Files are never deleted unless the broker itself deletes them at load (log files past the CQ's end).
"""
from __future__ import annotations

import struct
from pathlib import Path

from rmqctl.repair.plan import Action
from rmqctl.scan import BLANK_RECORD, FileWalk
from rmqctl.config.topics import compaction_topics
from rmqctl.store import compaction as C
from rmqctl.store.commitlog import open_ro

_Q = struct.Struct(">q")
_BLANK = struct.Struct(">ii")
PHYS_POS = 28         # PHYSICALOFFSET in a commitlog-format record
QOFF_POS = 20         # QUEUEOFFSET


def _tags(topic: str, props: dict) -> int:
    from rmqctl import dispatch as D

    tags = props.get("TAGS")
    return D.tags_code(topic, {"TAGS": tags}, 0, ()) if tags else 0


def walk_log(f: C.CFile, log_size: int):
    """(records, stop) of one compaction log file: records are (offset, size, tags, store_ts, queue_offset, keys)."""
    out = []
    with open_ro(f.path) as fd:
        w = FileWalk(fd, f.start, min(f.size, log_size), check_crc=True, check_phys=True, check_prop_crc=False,
                     path=str(f.path))
        for r in w:
            props = r.properties
            out.append((r.offset, r.total_size, _tags(r.topic, props), r.store_timestamp, r.queue_offset,
                        props.get("KEYS"), r.topic, r.queue_id, r.body_length))
    return out, w.stop


def expected_cq(f: C.CFile, sz: C.Sizes) -> tuple[bytes, object, int]:
    """The CQ file the broker wrote for log file f: (bytes, walk stop, units)."""
    recs, stop = walk_log(f, sz.log)
    buf = bytearray(sz.cq)
    n = 0
    for off, size, tags, ts, qo, *_ in recs:
        if (n + 1) * C.UNIT_SIZE > sz.cq:
            break
        C.UNIT.pack_into(buf, n * C.UNIT_SIZE, off, size, tags, ts, qo, 1, -1, 0)
        n += 1
    if stop is not None and stop.kind == BLANK_RECORD and (n + 1) * C.UNIT_SIZE <= sz.cq:
        buf[n * C.UNIT_SIZE:(n + 1) * C.UNIT_SIZE] = C.END_UNIT
    return bytes(buf), stop, n


def _rel(root: Path, p: Path) -> str:
    try:
        return str(Path(p).relative_to(root))
    except ValueError:
        return str(p)


def _stage(staging: Path, rel: str, data: bytes) -> Path:
    from rmqctl.repair.rebuild_cq import write_staged

    p = staging / "compaction" / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    write_staged(p, data)
    return p


def rebuild_plan(store, ctx, *, topic=None, queue=None) -> None:
    """`rebuild cq`: every compaction CQ file regenerated from its log file; only files whose bytes differ (or are
    missing) are replaced. CQ files without a log file and anything not understood are left, with a note."""
    plan, root = ctx.plan, store.root
    qs = [q for q in C.queues(root) if (topic is None or q.topic == topic) and (queue is None or q.queue_id == queue)]
    if not qs:
        return
    sz = C.sizes(root, store.config)
    changed = units = 0
    for q in qs:
        if not q.has_log_dir:
            plan.notes.append(f"compaction CQ {q.topic}/{q.queue_id} has no compaction log: left as it is (the broker "
                              "does not load it)")
            continue
        for p in q.strays:
            plan.notes.append(f"{_rel(root, p)}: not an offset name; left as it is")
        names = {f.name for f in q.log_files}
        for f in q.cq_files:
            if f.name not in names:
                plan.notes.append(f"{_rel(root, f.path)}: no compaction log file of that name; left as it is (the "
                                  "broker fails to load the queue while it is there)")
        for f in q.log_files:
            if f.size != sz.log:
                (plan.problems if not (q.cq_dir / f.name).exists() else plan.notes).append(
                                  f"{_rel(root, f.path)}: {f.size} bytes, not the compaction log size {sz.log} ("
                                  f"{sz.how}); its CQ file is not regenerated: give the broker config "
                                  "(compactionCqMappedFileSize, compactionMappedFileSize)")
                continue
            data, stop, n = expected_cq(f, sz)
            units += n
            target = q.cq_dir / f.name
            if stop is not None and not stop.normal:
                plan.notes.append(f"{_rel(root, f.path)}: {stop.kind} at offset {stop.offset}: its CQ covers the "
                                  "records before it")
            if target.is_file() and target.stat().st_size == len(data) and target.read_bytes() == data:
                continue
            rel = _rel(root, target)
            staged = _stage(ctx.staging, rel, data)
            changed += 1
            plan.add(Action("write_file" if target.exists() else "create_file", rel,
                            f"compaction CQ {q.topic}/{q.queue_id} regenerated from its log file ({n} units)",
                            group="compaction", payload=(target, staged)))
    plan.summary = {**plan.summary, "compaction_queues": len(qs), "compaction_cq_files_changed": changed,
                    "compaction_units": units}


class _Appender:
    """One compaction queue after the broker's load, appended to as CompactionLog.asyncPutMessage does."""

    def __init__(self, q: C.CompactionQueue, sz: C.Sizes, v: C.Verdict, flush=None):
        self.q, self.sz = q, sz
        self.flush = flush            # flush(path, bytes): a finished file leaves memory (staged if it changed)
        self.files: dict = {}         # path -> bytearray (touched files, at most the current log and CQ file)
        self.sources = {q.cq_dir / f.name: f.path for f in q.cq_files}   # CQ files regenerated in staging
        self.created: set = set()
        self.deleted = list(v.deletes)
        logs = [f for f in q.log_files if f.size > 0 and f not in v.deletes]
        cqs = [f for f in q.cq_files if f.size > 0]
        self.log_start = logs[-1].start if logs else None
        self.log_wrote = (v.log_end - self.log_start if v.log_end is not None else sz.log) if logs else 0
        self.cq_start = cqs[-1].start if cqs else None
        self.cq_wrote = v.cq_ends.get(self.cq_start, 0) if cqs else 0
        self.max_offset = C.cq_max_offset(q, sz, v)
        self.max_phy_in_cq = v.max_phy
        self.added = 0

    def _buf(self, path: Path, size: int) -> bytearray:
        b = self.files.get(path)
        if b is None:
            src = self.sources.get(path, path)
            if src.exists() and path not in self.created:
                with open(src, "rb") as fh:
                    b = bytearray(fh.read(size))
                b.extend(bytes(size - len(b)))
            else:
                b = bytearray(size)
                self.created.add(path)
            self.files[path] = b
        return b

    def finish(self) -> None:
        for path in sorted(self.files):
            self.flush(path, bytes(self.files.pop(path)))

    def _roll(self) -> None:
        if self.flush is not None:
            self.finish()
        start = 0 if self.log_start is None else self.log_start + self.sz.log
        self.log_start, self.log_wrote = start, 0
        self.cq_start, self.cq_wrote = start, 0
        name = f"{start:020d}"
        for d, size in ((self.q.log_dir, self.sz.log), (self.q.cq_dir, self.sz.cq)):
            p = d / name
            self.files.pop(p, None)
            self.created.add(p)
            self._buf(p, size)

    def put(self, raw: bytes, queue_offset: int, keys: str | None, tags: int, store_ts: int) -> bool:
        if self.max_offset - 1 >= queue_offset:        # "fix duplicate"
            return False
        if not keys or not keys.strip():               # StringUtils.isBlank(keys): never in the compaction log
            return False
        if self.log_start is None or self.log_wrote >= self.sz.log or self.cq_wrote >= self.sz.cq:
            self._roll()
        for attempt in (0, 1):
            log = self._buf(self.q.log_dir / f"{self.log_start:020d}", self.sz.log)
            cq = self._buf(self.q.cq_dir / f"{self.cq_start:020d}", self.sz.cq)
            n = len(raw)
            max_blank = self.sz.log - self.log_wrote
            if self.cq_wrote + C.UNIT_SIZE >= self.sz.cq or n + C.END_FILE_MIN_BLANK_LENGTH > max_blank:
                if self.cq_wrote < self.sz.cq:
                    cq[self.cq_wrote:self.cq_wrote + C.UNIT_SIZE] = C.END_UNIT
                    self.cq_wrote += C.UNIT_SIZE
                _BLANK.pack_into(log, self.log_wrote, max_blank, C.BLANK_MAGIC)
                self.log_wrote = self.sz.log
                if attempt:
                    return False
                self._roll()
                continue
            pos = self.log_start + self.log_wrote
            log[self.log_wrote:self.log_wrote + n] = raw
            _Q.pack_into(log, self.log_wrote + PHYS_POS, pos)
            C.UNIT.pack_into(cq, self.cq_wrote, pos, n, tags, store_ts, queue_offset, 1, -1, 0)
            self.log_wrote += n
            self.cq_wrote += C.UNIT_SIZE
            self.max_offset = queue_offset + 1
            self.added += 1
            return True
        return False


def _restore_missing_cq(store, ctx, q: C.CompactionQueue, sz: C.Sizes) -> None:
    """A log file without its CQ file: the broker would delete it (the last one) or refuse to start (any other);
    its CQ file is regenerated from it instead, so nothing of the log is lost. The queue is then judged with it."""
    have = {f.name for f in q.cq_files}
    for f in q.log_files:
        if f.name in have or f.size != sz.log:
            continue
        data, _stop, n = expected_cq(f, sz)
        target = q.cq_dir / f.name
        rel = _rel(store.root, target)
        staged = _stage(ctx.staging, rel, data)
        ctx.plan.add(Action("create_file", rel, f"compaction CQ {q.topic}/{q.queue_id}: missing for its log file, "
                            f"regenerated from it ({n} units; the broker would otherwise delete the log file or "
                            "refuse to start)", group="compaction", payload=(target, staged)))
        q.cq_files.append(C.CFile(staged, f.start, len(data)))
    q.cq_files.sort(key=lambda c: c.start)


def recover_plan(store, ctx, scan_start: int | None, cut: int) -> None:
    """`recover`: what the broker's load and re-dispatch leave in the compaction store. Every record of a
    COMPACTION topic (config/topics.json) in [scan_start, cut) goes through CompactionLog.asyncPutMessage's rules
    (queue offsets the CQ already has are skipped, keyless records never enter). scan_start None (no abort: a
    normal recovery re-dispatches nothing old): only the load's own effects. A queue the broker would refuse is left
    as it is, with a problem."""
    plan, root = ctx.plan, store.root
    topics = compaction_topics(root)
    qs = C.queues(root)
    if not topics and not qs:
        return
    sz = C.sizes(root, store.config)
    apps: dict = {}
    changed: dict = {}            # key -> [(path, staged)] of files that differ from the disk

    def flush_for(key):
        def flush(path: Path, data: bytes) -> None:
            if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
                return
            changed.setdefault(key, []).append((path, _stage(ctx.staging, _rel(root, path), data)))
        return flush

    for q in qs:
        if q.has_log_dir and q.has_cq_dir:
            _restore_missing_cq(store, ctx, q, sz)
        v = C.verdict(q, sz)
        if v.fails_broker:
            plan.problems.append(f"compaction {q.topic}/{q.queue_id}: {v.why}; `rmqctl rebuild cq` regenerates "
                                 "missing compaction CQ files from their logs")
            continue
        if not v.loads:
            plan.notes.append(f"compaction {q.topic}/{q.queue_id}: {v.why}; left as it is")
            apps[(q.topic, q.queue_id)] = None
            continue
        apps[(q.topic, q.queue_id)] = _Appender(q, sz, v, flush_for((q.topic, q.queue_id)))
    if topics and scan_start is not None:
        from rmqctl.store.commitlog import open_ro as _open

        base = root / "compaction"
        for f in store.commitlog.files:
            if f.start + f.size <= scan_start or f.start >= cut:
                continue
            with _open(f.path) as fd:
                w = FileWalk(fd, f.start, f.size, max(0, scan_start - f.start), min(f.size, cut - f.start),
                             check_crc=False, check_phys=False, check_prop_crc=False, path=str(f.path))
                for r in w:
                    if r.topic not in topics:
                        continue
                    key = (r.topic, r.queue_id)
                    if key not in apps:
                        q = C.CompactionQueue(root, r.topic, r.queue_id, base / C.LOG_DIR / r.topic / str(r.queue_id),
                                              base / C.CQ_DIR / r.topic / str(r.queue_id))
                        apps[key] = _Appender(q, sz, C.Verdict(True), flush_for(key))
                    a = apps[key]
                    if a is None:
                        continue
                    props = r.properties
                    a.put(r.raw, r.queue_offset, props.get("KEYS"), _tags(r.topic, props), r.store_timestamp)
    added = 0
    for key, a in sorted(apps.items()):
        if a is None:
            continue
        for f in a.deleted:
            plan.add(Action("delete_file", _rel(root, f.path), f"compaction log {key[0]}/{key[1]}: starts after the "
                            "end of its CQ; the broker deletes it at load", group="compaction", payload=f.path))
        a.finish()
        for path, staged in sorted(changed.get(key, [])):
            rel = _rel(root, path)
            if any(x.group == "compaction" and x.path == rel for x in plan.actions):
                continue                  # a CQ file regenerated above: the appended units went into its staged file
            plan.add(Action("write_file" if path.exists() else "create_file", rel,
                            f"compaction {key[0]}/{key[1]}: {a.added} record(s) the broker's recovery re-dispatches",
                            group="compaction", payload=(path, staged)))
        added += a.added
    if added or any(a.group == "compaction" for a in plan.actions):
        plan.summary = {**plan.summary, "compaction_records_added": added}
        if "default" in sz.how and any(x.kind == "create_file" and x.group == "compaction" for x in plan.actions):
            plan.notes.append(f"new compaction files get the broker's default sizes (log {sz.log}, CQ {sz.cq} bytes): "
                              "give --broker-config if it sets compactionMappedFileSize or compactionCqMappedFileSize")


__all__ = ["expected_cq", "rebuild_plan", "recover_plan", "walk_log"]
