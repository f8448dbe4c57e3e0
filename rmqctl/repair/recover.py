"""Offline abnormal recovery (docs/recovery.md), planned, journaled and undoable.

What it does, in the order it is applied (the order makes a re-run after kill -9 converge: each step
is recomputed from the store as it is, and `abort` goes last, so an interrupted repair still looks
unclean to the broker):

1. commitlog: find the end of valid data the way recoverAbnormally does (start file chosen from the
   checkpoint by isMappedFileMatchedRecover, records checked by checkMessageAndReturnSize: size,
   magic, body CRC, DELAY parse, length formula) plus two checks the broker lacks: PHYSICALOFFSET must
   equal the position (stale bytes, R17) and a present __CRC32# property must match (R15). Zero-fill
   the tail of the file holding that end (the broker leaves garbage there, §7.7) and quarantine every
   later file (the broker deletes them). A zero-length last file is removed (5.x does that too).
2. consume queues: ConsumeQueue.recover (last three files, first invalid unit) and
   truncateDirtyLogicFiles(end), with zero-filled tails; then every valid record from the scan start
   that is missing is appended with the broker's dispatch rules (rmqctl.dispatch, rebuild_cq).
3. index: index files are kept while they are full and end before the cut; the rest is regenerated
   from the last kept file's end with IndexService's rules (rebuild_index) -- the broker instead
   deletes every file newer than indexMsgTimestamp and re-indexes only from its recovery start file,
   losing keys (R13).
4. checkpoint (checkpoint_write); 4b. config/timercheck (5.x) clamped to the timer queue and timerlog
   that are left (_timer_plan, F23); 5. remove `abort`: the broker then runs a normal recovery.

Reported, not acted on: records carrying DUP_INFO (duplication/controller mode, F22: a missing one
never ends valid data here), and topics absent from config/topics.json that get units re-dispatched
(F21: like the broker; `rebuild` is the command that leaves them out).

A corrupt record in the middle (--on-corruption):
* ``stop`` (default): like the broker, the valid data ends there; everything after it is moved to the
  quarantine (nothing is lost: `undo` puts it back). The result is what the broker itself would keep.
* ``quarantine``: keep the valid records after the bad range. Zero-filling the range would not do:
  the broker stops at zeros and truncates. The range is instead overwritten by ONE synthetic record
  that passes checkMessageAndReturnSize: topic ``rmqctl_quarantine``, transaction type ROLLBACK (so
  the broker puts it in no consume queue and no index), QUEUEOFFSET 0, PHYSICALOFFSET = its position,
  property RMQCTL_QUARANTINED=<start>-<end>, body of zero padding with its CRC, timestamps and store
  host of the previous record. When the good data resumes only in the next file, a BLANK record
  (the broker's own end-of-file marker) is written instead. The original bytes are in the quarantine.
  Queue offsets that the lost records held are filled with units pointing at the synthetic record, so
  every later unit keeps the slot its QUEUEOFFSET says (the broker would shift them, "[BUG]logic queue
  order maybe wrong"); a consumer of that queue receives the placeholder once per lost message.

Speed: both passes walk the commitlog with the batch kernel (rmqctl.scanvec) and dispatch a window of
records at a time as numpy arrays (rmqctl.repair.vecdispatch: CQ units grouped by queue, index keys
hashed in bulk); consume-queue files are finished and staged as soon as they are complete and index
items are written in bounded chunks, so memory stays flat. The Spark engine replaces CommitLog with a
record stream; analyze_rebuild then takes the per-record path into the same builders.
"""
from __future__ import annotations

import os
import shutil
import struct
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from rmqctl import dispatch as D
from rmqctl.errors import IOFailure, ProblemsFound
from rmqctl.repair import batchcq as BQ
from rmqctl.repair import checkpoint_write as CK
from rmqctl.repair import rebuild_cq as RC
from rmqctl.repair.plan import Action, Plan
from rmqctl.repair.rebuild_index import IndexRebuilder
from rmqctl.store import rules
from rmqctl.scan import BLANK_RECORD, END, ZEROS, FileWalk, find_next_record
from rmqctl.store.commitlog import CommitLog, Walk, open_ro

V1, V2 = -626843481, -626843477
BLANK_MAGIC = -875286124
QUARANTINE_TOPIC = "rmqctl_quarantine"
QUARANTINE_PROP = "RMQCTL_QUARANTINED"


@dataclass
class Options:
    on_corruption: str = "stop"          # stop | quarantine
    from_start: bool = False             # validate and dispatch from the first commitlog file
    check_prop_crc: bool = True


@dataclass
class Filler:
    start: int
    end: int
    kind: str                    # record | blank
    data: bytes                  # the 8-byte blank header or the whole synthetic record
    store_ts: int = 0


@dataclass
class Ctx:
    """Everything analyze() learned, needed by apply()."""

    plan: Plan
    staging: Path
    cut: int = 0
    last_valid: int | None = None
    last_store_ts: int | None = None
    fillers: list = field(default_factory=list)
    index_files_final: list = field(default_factory=list)   # (name, header) of the index after the repair


# --------------------------------------------------------------------------------------------------
# the broker's choices

def _first_record_ts(path) -> tuple[int, int] | None:
    """(magic, storeTimestamp) of a file's first record, as isMappedFileMatchedRecover reads them."""
    with open_ro(path) as fd:
        head = os.pread(fd, 76, 0)
    if len(head) < 76:
        return None
    magic = struct.unpack_from(">i", head, 4)[0]
    sys_flag = struct.unpack_from(">i", head, 36)[0]
    pos = 48 + (20 if sys_flag & 0x10 else 8)
    return magic, struct.unpack_from(">q", head, pos)[0]


def broker_start_file(store, files, ckpt) -> tuple[int, str]:
    """recoverAbnormally's start file: the last file whose first record has a message magic, a
    non-zero store timestamp <= checkpoint.getMinTimestamp(); else file 0."""
    min_ts = ckpt.min_timestamp if ckpt is not None else 0
    for i in range(len(files) - 1, -1, -1):
        f = files[i]
        if f.size < 76:
            continue
        mt = _first_record_ts(f.path)
        if mt is None:
            continue
        magic, ts = mt
        if magic not in (V1, V2) or ts == 0:
            continue
        if ts <= min_ts:
            return i, (f"first record stored at {ts} <= checkpoint min timestamp {min_ts} "
                       "(min(physic, logics) - 3 s)")
    return 0, f"no file's first record is older than the checkpoint min timestamp {min_ts}: full scan from file 0"


# --------------------------------------------------------------------------------------------------
# synthetic records

def make_filler_record(start: int, length: int, prev=None) -> bytes | None:
    """A valid ROLLBACK-type record of exactly `length` bytes at `start` (None if it cannot fit)."""
    props = f"{QUARANTINE_PROP}\x01{start}-{start + length}\x02".encode()
    topic = QUARANTINE_TOPIC.encode()
    fixed = 91 + len(topic) + len(props)
    body_len = length - fixed
    if body_len < 0 or length > 0x7FFFFFFF:
        return None
    body = bytes(body_len)
    ts = prev.store_timestamp if prev is not None else 0
    store_host = (prev.store_host_raw, prev.store_port) if prev is not None and len(prev.store_host_raw) == 4 \
        else (b"\x7f\x00\x00\x01", 0)
    rec = bytearray()
    rec += struct.pack(">iiiiiqqiq", length, V1, zlib.crc32(body) & 0x7FFFFFFF, 0, 0, 0, start, 0xC, ts)
    rec += store_host[0] + struct.pack(">i", store_host[1])       # born host = store host
    rec += struct.pack(">q", ts)
    rec += store_host[0] + struct.pack(">i", store_host[1])
    rec += struct.pack(">iqi", 0, 0, body_len) + body
    rec += struct.pack(">b", len(topic)) + topic
    rec += struct.pack(">h", len(props)) + props
    assert len(rec) == length
    return bytes(rec)


# --------------------------------------------------------------------------------------------------
# analysis

def _rel(store, p) -> str:
    try:
        return str(Path(p).relative_to(store.root))
    except ValueError:
        return str(p)


def _check_layout(store, plan: Plan) -> None:
    """No symlink followed out of the store; nothing the broker would refuse in commitlog/."""
    for name in ("commitlog", "consumequeue", "index", "checkpoint", "abort"):
        p = store.root / name
        if p.is_symlink():
            raise IOFailure(f"refused: {name} is a symlink; rmqctl never writes through a symlink", path=p)
    for p, why in store.commitlog.strays:
        plan.problems.append(f"{_rel(store, p)}: {why} (the broker refuses to start; move it away by hand)")


def _cq_size_plan(store, plan: Plan) -> None:
    """MappedFileQueue.load refuses a consume-queue file whose size is not mappedFileSizeConsumeQueue (4.5.1+
    except 4.9.2): bytes past the size are cut (kept in the quarantine); a short file is left to the operator."""
    from rmqctl.store.files import FileQueue

    fs = store.config.cq_file_size
    for topic, qid in store.queues():
        for f in FileQueue.scan(store.consumequeue_dir / topic / str(qid)).files:
            if f.size > fs:
                plan.add(Action("truncate_file", _rel(store, f.path),
                                f"{f.size - fs} bytes past mappedFileSizeConsumeQueue {fs}: {rules.SIZE_MISMATCH}; "
                                "the extra bytes are cut (kept in the quarantine)",
                                offset=fs, length=f.size - fs, group="consumequeue", payload=(f.path, fs)))
            elif 0 < f.size < fs:
                plan.problems.append(f"{_rel(store, f.path)}: size {f.size} < mappedFileSizeConsumeQueue {fs}; "
                                     f"{rules.SIZE_MISMATCH}; not repaired automatically")


def analyze(store, opts: Options, staging: Path, *, progress=None) -> Ctx:
    plan = Plan(store=str(store.root), abort=store.abort_exists)
    ctx = Ctx(plan, Path(staging))
    _check_layout(store, plan)
    cfg = store.config
    fsize = cfg.commitlog_file_size
    files = list(store.commitlog.files)
    # 5.1.3+ deletes a zero-length LAST file by itself; 4.5.1-5.1.2 refuse to start. Other size mismatches: refuse.
    while files and files[-1].size == 0:
        f = files.pop()
        plan.add(Action("delete_file", _rel(store, f.path), "zero-length last commitlog file (a segment created "
                        f"but never sized when the broker died): {rules.ZERO_LAST}", group="commitlog",
                        payload=f.path))
    for f in files:
        if f.size != fsize:
            plan.problems.append(f"{_rel(store, f.path)}: size {f.size} != mappedFileSizeCommitLog {fsize}; "
                                 f"{rules.SIZE_MISMATCH}; not repaired automatically")
    for a, b in zip(files, files[1:]):
        if b.start != a.start + fsize:
            plan.notes.append(f"commitlog gap [{a.start + fsize}, {b.start}): files are missing; like the "
                              "broker, recovery goes on with the next file; messages in the gap are lost")
    if plan.problems:
        return ctx
    _cq_size_plan(store, plan)
    if not files:
        plan.problems.append("no commitlog files: nothing to recover from (the broker would destroy every "
                             "consume queue)")
        return ctx

    ckpt = store.checkpoint()
    si, reason = broker_start_file(store, files, ckpt)
    if opts.from_start:
        scan_start = files[0].start
    else:
        scan_start = files[si].start
    plan.broker = {"recovery": "abnormal" if plan.abort else "normal",
                   "start_file": files[si].path.name if plan.abort else None,
                   "start_reason": reason if plan.abort else "normal recovery (no abort file)"}

    # ---- pass 1: where does valid data end? -------------------------------------------------
    cl = CommitLog(store)
    cl.queue.files = files
    # Dispatch during pass 1 as if no consume-queue unit and no index file reached past the end of
    # valid data (the usual crash: queues and index behind the commitlog). After pass 1 that guess is
    # checked against the real end; when it holds, pass 2 is not needed (one walk instead of two),
    # otherwise everything speculated is dropped and pass 2 runs as usual.
    spec = _Speculation.start(store, files, scan_start, opts, ctx.staging, cfg) if _SPECULATE else None
    dup = _DupInfo()
    segments = []               # [start, end) ranges of valid records, in order
    seg_start = scan_start
    pos = scan_start
    last = None
    broker_stop = None
    while True:
        from rmqctl.repair import vecdispatch as VD

        walk = Walk()
        seg_last = None
        if spec is not None and pos != scan_start:
            spec = spec.drop()          # a second segment (quarantine mode): pass 2 handles fillers
        for b in VD.batches(store, files, pos, walk=walk, check_prop_crc=opts.check_prop_crc, progress=progress):
            seg_last = int(b.offset[-1])
            dup.feed(b)
            if spec is not None:
                spec.feed(b)
        if seg_last is not None:
            r = cl.read_record(seg_last, check_crc=False)
            last = (r.offset, r.store_timestamp, r.store_host_raw, r.store_port)
        stop = walk.ends[-1].stop if walk.ends else None
        end = stop.offset if stop is not None else pos
        corrupt = stop is not None and stop.kind not in (END, BLANK_RECORD, ZEROS)
        f = store.commitlog.file_for(end, fsize) if stop is not None else None
        resume = None
        if stop is not None and f is not None:
            resume = _find_resume(store, files, f, stop, fsize)
        if broker_stop is None:
            broker_stop = {"offset": end, "kind": stop.kind if stop else "end",
                           "detail": stop.detail if stop else ""}
        if resume is None or (not corrupt and stop.kind != ZEROS):
            segments.append((seg_start, end))
            break
        if opts.on_corruption != "quarantine":
            segments.append((seg_start, end))
            what = f"corrupt record ({stop.kind}: {stop.detail})" if corrupt else "unwritten zeros"
            plan.notes.append(
                f"commitlog offset {end}: {what}, but valid records resume at {resume}; they are dropped "
                "like the broker would drop them (kept in the quarantine; --on-corruption quarantine keeps them)")
            break
        # quarantine the bad range and continue after it
        segments.append((seg_start, end))
        fill = _filler(end, resume, f, fsize, last)
        ctx.fillers.append(fill)
        plan.add(Action("write_record", _rel(store, f.path), (
            f"bad range [{end}, {fill.end}) ({stop.kind}: {stop.detail}) replaced by a "
            + ("BLANK end-of-file record" if fill.kind == "blank" else
               f"synthetic ROLLBACK record in topic {QUARANTINE_TOPIC} (not dispatched)"
               + (" and a BLANK end-of-file record" if len(fill.data) > fill.end - fill.start else ""))
            + f"; valid records resume at {resume}"),
            offset=end - f.start, length=len(fill.data), payload=(f.path, end - f.start, fill.data)))
        if fill.kind == "record":
            last = (fill.start, fill.store_ts, b"", 0)
        seg_start = pos = resume
    cut = segments[-1][1]
    ctx.cut = cut
    if last is not None:
        ctx.last_valid, ctx.last_store_ts = last[0], last[1]
    plan.commitlog = {"scan_start": scan_start, "valid_end": cut, "last_valid": ctx.last_valid,
                      "stop": broker_stop if not ctx.fillers else {"offset": cut}}
    plan.broker.update({"valid_end": broker_stop["offset"], "stop": broker_stop["kind"],
                        "confirm_offset": ctx.last_valid if ctx.last_valid is not None else files[si].start})

    # ---- commitlog actions ----------------------------------------------------------------
    cut_file = store.commitlog.file_for(cut, fsize)
    if cut_file is None and cut == files[-1].start + fsize:
        cut_file = None
    if cut_file is not None:
        # a BLANK record the broker wrote (8 bytes: size, magic) ends its file: healthy, never zeroed
        keep = cut - cut_file.start + (8 if stop is not None and stop.kind == BLANK_RECORD else 0)
        with open_ro(cut_file.path) as fd:
            lnz = _last_nonzero(fd, keep, cut_file.size)
        if lnz > keep:
            plan.add(Action("zero_range", _rel(store, cut_file.path),
                            f"bytes after the last valid record ({broker_stop['kind']} at {cut}); the broker leaves "
                            "them on disk (stale data that may pass checks later)",
                            offset=keep, length=lnz - keep, payload=(cut_file.path, keep, lnz - keep)))
    later = [f for f in files if f.start > cut or (cut_file is None and f.start >= cut)]
    if cut_file is not None:
        later = [f for f in files if f.start > cut_file.start]
    for f in later:
        plan.add(Action("delete_file", _rel(store, f.path), f"commitlog file after the end of valid data {cut}; the "
                        "broker would delete it without a copy", group="commitlog", payload=f.path))
    plan.broker["deletes_commitlog_files"] = [f.path.name for f in later]

    # ---- consume queues -------------------------------------------------------------------
    states = {}
    lower = scan_start
    for topic, qid in BQ.queues(store):
        st = RC.truncate_state(store, topic, qid, cut)
        st.stage_dir = ctx.staging / "cq" / topic / str(qid)
        states[(topic, qid)] = st
        if st.dropped_valid_below is not None and not opts.from_start:
            lower = min(lower, max(st.max_phys, files[0].start) if st.max_phys >= 0 else files[0].start)
    truncated = [f"{t}/{q}" for (t, q), st in states.items() if st.dropped_units]
    plan.broker["truncates_queues"] = truncated

    # ---- index: which files stay ----------------------------------------------------------
    idx = _index_plan(store, cut) if cfg.message_index_enable else None
    dispatch_start = min(lower, idx["from"]) if idx is not None else lower
    dispatch_start = max(dispatch_start, files[0].start)
    if ckpt is not None and plan.abort:
        plan.broker["deletes_index_files"] = [p.name for p, h in _index_headers(store)
                                              if h[1] > ckpt.index_msg_timestamp]

    # ---- pass 2: dispatch ------------------------------------------------------------------
    if dispatch_start < segments[0][0]:
        segments[0] = (dispatch_start, segments[0][1])
    passes = 1
    if spec is not None and not ctx.fillers and spec.holds(states, lower, idx, dispatch_start):
        states, rebuilder = spec.states, spec.rebuilder
        try:
            built = rebuilder.finish() if rebuilder else []
        except BaseException:
            rebuilder.abort()
            raise
    else:
        if spec is not None:
            spec.drop()
        states, built = _pass2(store, files, segments, scan_start, states, idx, ctx, cfg)
        passes = 2
    spec = None

    # ---- consume-queue actions ------------------------------------------------------------
    n_units = 0
    for (topic, qid), st in sorted(states.items()):
        n_units += st.added
        for start, staged in st.finish_files():
            path = st.path_for(start)
            exists = path.exists()
            plan.add(Action("write_file" if exists else "create_file", _rel(store, path),
                            f"consume queue {topic}/{qid}: " + _cq_why(st), group="consumequeue",
                            payload=(path, staged)))
        for f in st.delete_files():
            plan.add(Action("delete_file", _rel(store, f.path), f"consume queue {topic}/{qid}: file holds only "
                            f"units at or after the end of valid data {cut}", group="consumequeue", payload=f.path))
        _ext_actions(store, plan, st, topic, qid)

    # ---- index actions --------------------------------------------------------------------
    if idx is not None:
        final = [(p.name, h) for p, h in idx["kept"]]
        for b in built:
            path = store.index_dir / b.name
            final.append((b.name, (b.begin_ts, b.end_ts, b.begin_phy, b.end_phy, b.hash_slot_count, b.index_count)))
            staged = Path(b.path)
            if path.exists() and _same_file(path, staged):
                staged.unlink()
                continue
            plan.add(Action("write_file" if path.exists() else "create_file", _rel(store, path),
                            f"index file regenerated from commitlog offset {idx['from']} "
                            f"({b.index_count - 1} items)", group="index", payload=(path, staged)))
        built_names = {b.name for b in built}
        for p in idx["drop"]:
            if p.name not in built_names:
                plan.add(Action("delete_file", _rel(store, p), "index file not consistent with the commitlog and "
                                "not produced by the regeneration", group="index", payload=p))
        ctx.index_files_final = final

    dup.report(plan)
    _deleted_topics_note(store, states, plan)

    # ---- checkpoint ----------------------------------------------------------------------
    old = store.checkpoint_path.read_bytes() if store.checkpoint_path.exists() else None
    full = [h for _, h in ctx.index_files_final if h[5] >= cfg.index_num]
    new = CK.new_checkpoint(old, last_store_ts=ctx.last_store_ts,
                            index_msg_ts=full[-1][1] if full else None,
                            confirm_offset=ctx.last_valid)
    if new != old and (any(a.kind != "truncate_file" for a in plan.actions) or plan.abort):   # cut CQ tails: no
        staged = ctx.staging / "checkpoint"
        RC.write_staged(staged, new)
        plan.add(Action("write_file" if old is not None else "create_file", "checkpoint",
                        f"timestamps/confirm offset for the repaired store: {CK.fields(new)}", group="checkpoint",
                        payload=(store.checkpoint_path, staged)))

    # ---- timer checkpoint (after the checkpoint: a timer-only change must not rewrite it) ------
    _timer_plan(store, states, ctx)

    # ---- abort: last ---------------------------------------------------------------------
    if plan.abort:
        plan.add(Action("remove_abort", "abort", "commitlog, consume queues, index and checkpoint are consistent: "
                        "the broker will run a normal recovery", group="abort", payload=store.abort_path))
    plan.summary = {"valid_end": cut, "queues_changed": sum(1 for a in plan.actions if a.group == "consumequeue"),
                    "units_added": n_units, "index_items": sum(b.index_count - 1 for b in built),
                    "fillers": len(ctx.fillers), "commitlog_passes": passes}
    return ctx


_SPECULATE = True        # tests turn it off to compare both ways


class _DupInfo:
    """F22: records carrying DUP_INFO (duplication / controller mode, R27). With duplicationEnable the
    broker's checkMessageAndReturnSize fails a record WITHOUT a well-formed DUP_INFO, so its recovery
    stops at the first such record -- at file 0 that truncates the whole log. rmqctl never ends valid
    data for a missing DUP_INFO; it only reports what it saw. Cheap: one bytes.find per batch, the
    property parse only for batches that contain the name at all."""

    NAME = b"DUP_INFO"

    def __init__(self):
        self.has = self.missing = self.bad = 0
        self.first_missing = self.first_has = None

    def feed(self, b) -> None:
        import numpy as np

        n = len(b)
        raw = b.raw if hasattr(b.raw, "find") else bytes(b.raw)
        if raw.find(self.NAME + b"\x01") < 0:
            self.missing += n
            if self.first_missing is None and n:
                self.first_missing = int(b.offset[0])
            return
        from rmqctl.repair import vecdispatch as VD

        props = VD.Props(b)
        has, vs, vl = props.value(self.NAME)
        k = int(has.sum())
        self.has += k
        self.missing += n - k
        if k and self.first_has is None:
            self.first_has = int(b.offset[int(np.flatnonzero(has)[0])])
        if k < n and self.first_missing is None:
            self.first_missing = int(b.offset[int(np.flatnonzero(~has)[0])])
        for s0, ln in zip(vs[has].tolist(), vl[has].tolist()):
            if props.buf[s0:s0 + ln].tobytes().count(b"_") != 1:
                self.bad += 1

    def report(self, plan) -> None:
        if not self.has:
            return
        plan.commitlog["dup_info"] = {"records_with": self.has, "records_without": self.missing,
                                      "malformed": self.bad, "first_without": self.first_missing}
        msg = (f"{self.has} record(s) carry DUP_INFO (from {self.first_has}): a duplication/controller-mode "
               "store. Recovery here follows the non-controller rules (confirmOffset = start of the last "
               "valid record); no record is dropped for a missing or malformed DUP_INFO")
        if self.missing or self.bad:
            msg += (f" -- {self.missing} record(s) lack it (first at {self.first_missing}), {self.bad} malformed: a "
                    "broker with duplicationEnable=true would end its recovery at the first of them and truncate "
                    "the log there; run it with duplicationEnable=false after this repair")
        plan.notes.append(msg)


def _deleted_topics_note(store, states, plan) -> None:
    """F21 in recover: re-dispatch everything like the broker (R26), but say so."""
    from rmqctl.repair.topic_filter import load_filter

    added = {}
    for (t, q), st in states.items():
        if st.added:
            added[t] = added.get(t, 0) + st.added
    if not added:
        return
    flt, _ = load_filter(store)
    if flt is None:
        return
    gone = {t: n for t, n in sorted(added.items()) if flt.skips(t)}
    if gone:
        plan.notes.append(
            f"{len(gone)} topic(s) absent from {flt.source} get consume-queue units re-dispatched, as the broker's "
            "own recovery would (deleted topics come back): "
            + ", ".join(f"{t} ({n} units)" for t, n in gone.items())
            + "; `rmqctl rebuild cq` leaves them out (unless --include-deleted-topics)")


TIMER_TOPIC = "rmq_sys_wheel_timer"


def _timer_plan(store, states, ctx) -> None:
    """F23 (R29): config/timercheck must not point past what the repair leaves. lastTimerQueueOffset
    above the max offset of the rmq_sys_wheel_timer queue 0 is set to that max (TimerMessageStore.recover
    would clamp its in-memory copy the same way, with a warning, and write it back later); a
    lastTimerLogFlushPos beyond the end of the timerlog's data is set to that end. Two in-place 8-byte
    writes, journaled like every other change."""
    import struct as _s

    from rmqctl.formats import timer as TF
    from rmqctl.formats._derive import field_names, struct_format

    plan = ctx.plan
    path = store.root / "config" / "timercheck"
    if (store.root / "config").is_symlink() or path.is_symlink():
        if path.exists():
            plan.notes.append("config/timercheck is (under) a symlink: not checked, not changed")
        return
    if not path.is_file():
        return
    codec = _s.Struct(struct_format(TF.TimerCheckpoint))
    with open_ro(path) as fd:
        raw = os.pread(fd, codec.size, 0)
    if len(raw) < codec.size:
        plan.notes.append(f"config/timercheck is {len(raw)} bytes, shorter than its {codec.size} bytes of fields: "
                          "not changed (the broker maps a fresh one)")
        return
    names = field_names(TF.TimerCheckpoint)
    vals = dict(zip(names, codec.unpack(raw)))
    off = dict(zip(names, range(0, codec.size, 8)))        # seven big-endian i64 fields
    st = states.get((TIMER_TOPIC, 0))
    qmax = st.end // RC.UNIT_SIZE if st is not None else 0
    tl_end = _timerlog_end(store)
    info = {"timercheck": {k: vals[k] for k in ("last_read_time_ms", "last_timer_log_flush_pos",
                                                "last_timer_queue_offset", "master_timer_queue_offset")},
            "timer_queue_max_offset": qmax, "timerlog_end": tl_end, "clamped": {}}
    new = dict(vals)
    if vals["last_timer_queue_offset"] > qmax:
        new["last_timer_queue_offset"] = qmax
    if vals["last_timer_log_flush_pos"] > tl_end:
        new["last_timer_log_flush_pos"] = tl_end
    if vals["master_timer_queue_offset"] > qmax:
        plan.notes.append(f"config/timercheck masterTimerQueueOffset {vals['master_timer_queue_offset']} is beyond the "
                          f"timer queue's max offset {qmax}; left as is (the broker takes min(current, master))")
    changed = [k for k in vals if new[k] != vals[k]]
    for k in changed:
        info["clamped"][k] = [vals[k], new[k]]
    plan.timer = info
    if not changed:
        return
    data = codec.pack(*(new[k] for k in names))
    lo = min(off[k] for k in changed)
    hi = max(off[k] + 8 for k in changed)
    what = "; ".join(
        {"last_timer_queue_offset": f"lastTimerQueueOffset {vals[k]} -> {new[k]} (max offset of {TIMER_TOPIC}/0 "
                                    "after the repair)",
         "last_timer_log_flush_pos": f"lastTimerLogFlushPos {vals[k]} -> {new[k]} (end of the timerlog data)"}[k]
        for k in changed)
    plan.add(Action("write_bytes", "config/timercheck", what + " (TimerCheckpoint)", offset=lo,
                    length=hi - lo, group="timer", payload=(path, lo, data[lo:hi])))


def _timerlog_end(store) -> int:
    """End of the timerlog's data: last non-empty file's start + its last non-zero byte, rounded up to a
    whole 52-byte unit (units are laid from the file start), or the file end after a BLANK."""
    from rmqctl.formats import timer as TF
    from rmqctl.store.files import FileQueue

    d = store.root / "timerlog"
    if not d.is_dir() or d.is_symlink():
        return 0
    u = TF.TIMERLOG_UNIT_SIZE
    for f in reversed(FileQueue.scan(d, root=store.root).files):
        with open_ro(f.path) as fd:
            lnz = _last_nonzero(fd, 0, f.size)
            head = os.pread(fd, 16, (lnz - 1) // u * u) if lnz else b""
        if lnz:
            if len(head) == 16 and struct.unpack(">iqi", head)[2] == TF.TIMERLOG_BLANK_MAGIC:
                return f.start + f.size     # TimerLog.append set the wrote position to the file end
            return f.start + min(f.size, -(-lnz // u) * u)
    return 0


def _pass2(store, files, segments, scan_start, states, idx, ctx, cfg):
    rebuilder = None
    if idx is not None:
        (ctx.staging / "index").mkdir(parents=True, exist_ok=True)
        rebuilder = IndexRebuilder(ctx.staging / "index", cfg.hash_slot_num, cfg.index_num, idx["names"],
                                   prev=idx["prev"], prev_name=idx["prev_name"], skip_keys_at=idx["skip"])
    try:
        _dispatch(store, files, segments, scan_start, states, rebuilder, ctx.fillers, idx, ctx.staging)
        built = rebuilder.finish() if rebuilder else []
    except BaseException:
        if rebuilder:
            rebuilder.abort()
        raise
    return states, built


_STATE_FIELDS = ("keep_end", "kept_any", "max_phys", "dropped_units", "dropped_valid_below")


class _Speculation:
    """Pass 2's dispatch done during pass 1, assuming the end of valid data lies beyond every consume-queue
    unit and index file (cut = infinity for truncate_state and _index_plan). holds() compares that
    assumption with what the real end gives; only an exact match lets the speculative builders stand."""

    def __init__(self, store, staging, cfg):
        self.store, self.cfg = store, cfg
        self.dir = Path(staging) / "spec"
        self.states: dict = {}
        self.snap: dict = {}
        self.idx = None
        self.rebuilder = None
        self.topics = None
        self.lower = None
        self.start_at = None

    @classmethod
    def start(cls, store, files, scan_start, opts, staging, cfg):
        from rmqctl.repair import vecdispatch as VD

        sp = cls(store, staging, cfg)
        lower = scan_start
        for topic, qid in BQ.queues(store):
            st = RC.truncate_state(store, topic, qid, None)
            st.stage_dir = sp.dir / "cq" / topic / str(qid)
            sp.states[(topic, qid)] = st
            sp.snap[(topic, qid)] = tuple(getattr(st, k) for k in _STATE_FIELDS)
            if st.dropped_valid_below is not None and not opts.from_start:
                lower = min(lower, max(st.max_phys, files[0].start) if st.max_phys >= 0 else files[0].start)
        sp.lower = lower
        sp.idx = _index_plan(store, 2**62) if cfg.message_index_enable else None
        start = min(lower, sp.idx["from"]) if sp.idx is not None else lower
        sp.start_at = max(start, files[0].start)
        if sp.idx is not None:
            (sp.dir / "index").mkdir(parents=True, exist_ok=True)
            i = sp.idx
            sp.rebuilder = IndexRebuilder(sp.dir / "index", cfg.hash_slot_num, cfg.index_num, i["names"],
                                          prev=i["prev"], prev_name=i["prev_name"], skip_keys_at=i["skip"])
        sp.topics = VD.Topics()
        try:
            if sp.start_at < scan_start:
                # records before the broker's start file: trusted like pass 2 trusts them (no CRC)
                walk = Walk()
                for b in VD.batches(store, files, sp.start_at, scan_start, check_crc=False, walk=walk):
                    sp.feed(b)
                stop = walk.ends[-1].stop if walk.ends else None
                if stop is not None and stop.kind not in (END, BLANK_RECORD):
                    raise ProblemsFound(f"corrupt record before the broker's recovery start file ({stop.kind}: "
                                        f"{stop.detail}); run `rmqctl recover --from-start`", offset=stop.offset)
                if stop is None or stop.kind != BLANK_RECORD or walk.ends[-1].file.start + cfg.commitlog_file_size \
                        != scan_start:
                    return sp.drop()    # the walk would not have reached the start file: let pass 2 decide
        except BaseException:
            sp.drop()
            raise
        return sp

    def feed(self, b) -> None:
        dispatch_batch(self.store, b, self.topics, self.states, self.rebuilder,
                       self.idx["from"] if self.idx is not None else None, self.cfg.delay_levels, self.dir)

    def holds(self, states, lower, idx, dispatch_start) -> bool:
        if lower != self.lower or dispatch_start != self.start_at:
            return False
        if set(states) != set(self.snap):
            return False
        for k, st in states.items():
            if tuple(getattr(st, f) for f in _STATE_FIELDS) != self.snap[k]:
                return False
        if (idx is None) != (self.idx is None):
            return False
        if idx is not None:
            a, b = idx, self.idx
            if [p for p, _ in a["kept"]] != [p for p, _ in b["kept"]] or a["prev"] != b["prev"] or \
                    a["skip"] != b["skip"] or a["from"] != b["from"] or a["names"] != b["names"] or \
                    a["drop"] != b["drop"] or a["prev_name"] != b["prev_name"]:
                return False
        return True

    def drop(self):
        if self.rebuilder is not None:
            self.rebuilder.abort()
            self.rebuilder = None
        shutil.rmtree(self.dir, ignore_errors=True)
        return None


def _cq_why(st) -> str:
    parts = []
    if st.dropped_units:
        parts.append(f"{st.dropped_units} unit(s) at or after the cut / after the first invalid unit removed")
    if st.added:
        parts.append(f"{st.added} missing unit(s) dispatched from the commitlog")
    return "; ".join(parts) or "tail zero-filled"


def _same_file(a: Path, b: Path) -> bool:
    """Byte equality of two files, read into two reused 4 MiB buffers (flat memory: mapping a 400 MB
    index file would count its pages in the RSS). Stretches that are holes in both files (index files
    are sparse: most item pages are never touched) are equal without reading them."""
    size = a.stat().st_size
    if size != b.stat().st_size:
        return False
    step = 4 << 20
    ba, bb = bytearray(step), bytearray(step)
    with open(a, "rb", buffering=0) as fa, open(b, "rb", buffering=0) as fb:
        pos = 0
        while pos < size:
            pos = min(_next_data(fa.fileno(), pos, size), _next_data(fb.fileno(), pos, size))
            if pos >= size:
                return True
            n = min(step, size - pos)
            fa.seek(pos)
            fb.seek(pos)
            na, nb = fa.readinto(memoryview(ba)[:n]), fb.readinto(memoryview(bb)[:n])
            if na != nb or not na:
                return na == nb
            if not (ba == bb if na == step else ba[:na] == bb[:nb]):   # bytearray ==: memcmp
                return False
            pos += na
    return True


def _next_data(fd: int, pos: int, size: int) -> int:
    """The next offset >= pos that is not inside a hole (size when none; pos without SEEK_DATA)."""
    try:
        return os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as e:
        import errno

        return size if e.errno == errno.ENXIO else pos


def _last_nonzero(fd: int, start: int, end: int) -> int:
    """rmqctl.scan.last_nonzero, fast on the usual tail of a commitlog (hundreds of MB of zeros, often
    a hole): holes are skipped with SEEK_DATA/SEEK_HOLE, data extents are checked 8 MiB at a time
    with numpy, backwards, and only the chunk holding the last non-zero byte is stripped."""
    import numpy as np

    extents = []
    pos = start
    try:
        while pos < end:
            d = os.lseek(fd, pos, os.SEEK_DATA)
            if d >= end:
                break
            h = min(os.lseek(fd, d, os.SEEK_HOLE), end)
            extents.append((d, h))
            pos = h
    except OSError as e:    # ENXIO: no data after pos; anything else (no SEEK_DATA support): scan it all
        import errno

        if e.errno != errno.ENXIO:
            extents = [(start, end)]
    step = 8 << 20
    for a, b in reversed(extents):
        hi = b
        while hi > a:
            lo = max(a, hi - step)
            data = os.pread(fd, hi - lo, lo)
            if np.frombuffer(data, np.uint8).any():
                stripped = data.rstrip(b"\0")
                return lo + len(stripped)
            hi = lo
    return start


def _find_resume(store, files, f, stop, fsize) -> int | None:
    """Where valid data resumes after a stop: a resync point in the same file, else the first record of
    a later file (a file whose first record is valid and self-located)."""
    with open_ro(f.path) as fd:
        # nothing but zeros after the stop (the usual unwritten tail): no record can start there
        if _last_nonzero(fd, stop.pos + 1, f.size) <= stop.pos + 1:
            nxt = None
        else:
            nxt = find_next_record(fd, f.start, f.size, stop.pos)
    if nxt is not None and stop.kind not in (BLANK_RECORD,):
        return f.start + nxt
    for g in files:
        if g.start <= f.start:
            continue
        with open_ro(g.path) as fd:
            w = FileWalk(fd, g.start, g.size, 0)
            for _ in w:
                return g.start
        return None
    return None


def _filler(start: int, resume: int, f, fsize: int, last) -> Filler:
    class _Prev:
        pass
    prev = None
    if last is not None:
        prev = _Prev()
        prev.store_timestamp, prev.store_host_raw, prev.store_port = last[1], last[2] or b"\x7f\0\0\x01", last[3]
    if resume < f.start + fsize:
        data = make_filler_record(start, resume - start, prev)
        if data is not None:
            return Filler(start, resume, "record", data, prev.store_timestamp if prev else 0)
    # The good data resumes in a later file: a minimal placeholder record (so the lost queue offsets
    # can point at it) followed by a BLANK record to the end of the file; BLANK alone if even the
    # placeholder does not fit.
    room = f.start + fsize - start
    n = _min_filler_len(start)
    if room >= n + 8:
        rec = make_filler_record(start, n, prev)
        blank = struct.pack(">ii", room - n, BLANK_MAGIC)
        return Filler(start, start + n, "record", rec + blank, prev.store_timestamp if prev else 0)
    return Filler(start, f.start + fsize, "blank", struct.pack(">ii", room, BLANK_MAGIC))


def _min_filler_len(start: int) -> int:
    n = 140
    for _ in range(3):
        props = f"{QUARANTINE_PROP}\x01{start}-{start + n}\x02".encode()
        n = 91 + len(QUARANTINE_TOPIC) + len(props)
    return n


def _index_headers(store):
    from rmqctl.store.index import HEADER

    out = []
    for p in store.index_files():
        with open_ro(p) as fd:
            data = os.pread(fd, 40, 0)
        if len(data) < 40:
            data = data.ljust(40, b"\0")
        out.append((p, HEADER.unpack(data)))
    return out


def _index_plan(store, cut: int) -> dict:
    """Keep full index files that end before the cut; regenerate from there."""
    from rmqctl.store.index import IndexFile

    cfg = store.config
    heads = _index_headers(store)
    kept = []
    for p, h in heads:
        begin_ts, end_ts, begin_phy, end_phy, slots, count = h
        if count >= cfg.index_num and end_phy < cut and p.stat().st_size == cfg.index_file_size:
            kept.append((p, h))
        else:
            break
    rest = heads[len(kept):]
    if kept:
        p, h = kept[-1]
        end_phy = h[3]
        # how many of the record-at-end_phy's keys the kept file already holds
        n = 0
        with IndexFile(p, cfg.hash_slot_num, cfg.index_num) as ixf:
            k = h[5] - 1
            while k >= 1:
                if ixf.item(k)[1] != end_phy:
                    break
                n += 1
                k -= 1
        return {"kept": kept, "prev": (h[3], h[1]), "prev_name": p.name, "skip": (end_phy, n),
                "from": end_phy, "names": [q.name for q, _ in rest], "drop": [q for q, _ in rest]}
    return {"kept": [], "prev": None, "prev_name": None, "skip": None, "from": store.commitlog.min_offset,
            "names": [q.name for q, _ in rest], "drop": [q for q, _ in rest]}


def _dispatch(store, files, segments, validated_from, states, rebuilder, fillers, idx, staging) -> None:
    from rmqctl.repair import vecdispatch as VD

    cfg = store.config
    fill_at = {f.start: f for f in fillers}
    idx_from = idx["from"] if idx is not None else None
    topics = VD.Topics()
    for si, (a, b) in enumerate(segments):
        walk = Walk()
        # Records before the broker's start file are trusted like the broker trusts them (its reput
        # does not check CRCs either); everything from the start file on was validated by pass 1.
        for bt in VD.batches(store, files, a, b, check_crc=False, walk=walk):
            dispatch_batch(store, bt, topics, states, rebuilder, idx_from, cfg.delay_levels, staging, fillers=fillers)
        stop = walk.ends[-1].stop if walk.ends else None
        if a < validated_from and stop is not None and stop.offset < min(b, validated_from) \
                and stop.kind not in (END, BLANK_RECORD):
            raise ProblemsFound(f"corrupt record before the broker's recovery start file ({stop.kind}: "
                                f"{stop.detail}); run `rmqctl recover --from-start`", offset=stop.offset)
        f = fill_at.get(b)
        if f is not None and f.kind == "record" and rebuilder is not None and f.start >= idx_from:
            rebuilder.dispatch(f.start, f.store_ts, 0xC, QUARANTINE_TOPIC, {})


def _new_state(store, staging, topic, qid):
    st = RC.empty_state(store, topic, qid)
    st.stage_dir = Path(staging) / "cq" / topic / str(qid)
    return st


def dispatch_batch(store, bt, topics, states, rebuilder, idx_from, delay, staging, *, fillers=(),
                   topic=None, queue=None, create=True, skip=None) -> None:
    """CommitLogDispatcherBuildConsumeQueue and BuildIndex for one scanvec batch. `states` None: no
    consume queues; `rebuilder` None: no index; idx_from: first commitlog offset the index takes.
    topic/queue restrict the consume queues built (rebuild cq --topic/--queue); skip: a
    topic_filter.TopicFilter whose skipped topics are neither queued nor indexed (rebuild, F21)."""
    import numpy as np

    from rmqctl.repair import vecdispatch as VD

    props = None
    tids = topics.of(bt)
    if states is not None:
        rows = np.flatnonzero(VD.cq_mask(bt))
        if skip is not None:
            rows = skip.drop(rows, tids, topics)
        multi = None
        if len(rows) and VD.has_multi_dispatch(bt) and D.multi_dispatch_on(store.config):
            props = VD.Props(bt)
            multi = VD.multi_targets(bt, props, rows, tids, topics, D.lmq_on(store.config))
        if multi is not None:
            _dispatch_multi(store, bt, topics, tids, states, rows, multi, props, delay, staging, topic, queue, create)
            rows = rows[:0]
        if topic is not None:
            ok = np.asarray([n == topic for n in topics.names], bool)
            rows = rows[ok[tids[rows]]]
        if queue is not None:
            rows = rows[bt.queue_id[rows] == queue]
        if len(rows):
            keys = (tids[rows] << 32) | (bt.queue_id[rows] & 0xFFFFFFFF)
            offs, sizes, qoffs = bt.offset, bt.total_size, bt.queue_offset
            for key, g in VD.groups(keys):
                sel = rows[g]
                t, q = topics.names[key >> 32], int(bt.queue_id[sel[0]])
                st = states.get((t, q))
                if st is None:
                    if not create:
                        continue
                    st = states[(t, q)] = _new_state(store, staging, t, q)
                if st.max_phys >= 0:
                    # units already in the queue (offset + size <= its max physical end) are skipped by
                    # the broker: drop that prefix before computing anything for it
                    sel = sel[int(np.searchsorted(offs[sel] + sizes[sel], st.max_phys, "right")):]
                    if not len(sel):
                        continue
                if props is None:
                    props = VD.Props(bt)
                codes = VD.tags_codes(bt, props, tids, topics, delay, sel)
                if getattr(st, "batch_cq", False):
                    st.put_rows(bt, props, sel, codes, fillers)   # one 46-byte unit per record
                elif fillers:
                    for j, c in zip(sel.tolist(), codes.tolist()):
                        o, sz, qo = int(offs[j]), int(sizes[j]), int(qoffs[j])
                        if st.base is not None and qo * 20 > st.end and o + sz > st.max_phys:
                            _pad_with_filler(st, o, qo, fillers)
                        st.put(o, sz, c, qo, int(bt.store_timestamp[j]))
                else:
                    st.put_many(offs[sel], sizes[sel], codes, qoffs[sel], bt.store_timestamp[sel].astype(np.int64))
    if rebuilder is not None:
        offs = bt.offset
        i0 = int(np.searchsorted(offs, idx_from, "left")) if idx_from is not None else 0
        if i0 < len(offs):
            rows = np.arange(i0, len(offs), dtype=np.int64)
            if skip is not None:
                rows = skip.drop(rows, tids, topics)
        if i0 < len(offs) and len(rows):
            if props is None:
                props = VD.Props(bt)
            item_row, item_hash = VD.index_items(bt, props, tids, topics, rows)
            rebuilder.dispatch_many(offs[rows], bt.store_timestamp[rows], item_row, item_hash)


def _dispatch_multi(store, bt, topics, tids, states, rows, multi, props, delay, staging, topic, queue,
                    create) -> None:
    """dispatch_batch's consume queues for a batch with multi-dispatched records (LMQ, 4.9 plain-topic
    multi-dispatch): every record's own unit plus one unit per target queue at the target's queue offset
    with the record's tagsCode, each queue's units in commitlog order (a queue may get both)."""
    import numpy as np

    from rmqctl.repair import vecdispatch as VD

    codes = VD.tags_codes(bt, props, tids, topics, delay, rows)
    pos, xt, xq, xo = multi
    sel = np.concatenate((np.arange(len(rows)), pos))
    tid = np.concatenate((tids[rows], xt))
    qid = np.concatenate((bt.queue_id[rows].astype(np.int64), xq))
    qoff = np.concatenate((bt.queue_offset[rows].astype(np.int64), xo))
    ts = np.concatenate((bt.store_timestamp[rows].astype(np.int64), np.full(len(pos), -1, np.int64)))
    keep = np.ones(len(sel), bool)
    if topic is not None:
        keep &= np.asarray([n == topic for n in topics.names], bool)[tid]
    if queue is not None:
        keep &= qid == queue
    sel, tid, qid, qoff, ts = sel[keep], tid[keep], qid[keep], qoff[keep], ts[keep]
    phys = bt.offset[rows].astype(np.int64)[sel]
    size = bt.total_size[rows].astype(np.int64)[sel]
    code = codes[sel]
    key = (tid << 32) | (qid & 0xFFFFFFFF)
    order = np.lexsort((phys, key))
    key, phys, size, code, qoff, qid, ts = (key[order], phys[order], size[order], code[order], qoff[order],
                                            qid[order], ts[order])
    for k, g in VD.groups(key):
        t, q = topics.names[k >> 32], int(qid[g[0]])
        st = states.get((t, q))
        if st is None:
            if not create:
                continue
            st = states[(t, q)] = _new_state(store, staging, t, q)
        st.put_many(phys[g], size[g], code[g], qoff[g], ts[g])


def _ext_actions(store, plan, st, topic, qid) -> None:
    """The consumequeue_ext files of a queue's units (enableConsumeQueueExt)."""
    for path, staged in st.ext_files():
        plan.add(Action("write_file" if path.exists() else "create_file", _rel(store, path),
                        f"consume queue ext {topic}/{qid}: ext units of the consume-queue units written",
                        group="consumequeue", payload=(path, staged)))
    for f in st.ext_delete_files():
        plan.add(Action("delete_file", _rel(store, f.path), f"consume queue ext {topic}/{qid}: after the last ext "
                        "unit", group="consumequeue", payload=f.path))


def _pad_with_filler(st, offset, queue_offset, fillers) -> None:
    cands = [f for f in fillers if f.kind == "record" and st.max_phys <= f.start < offset]
    if not cands:
        return
    f = cands[-1]
    while st.end < queue_offset * 20:
        st.out += RC.UNIT.pack(f.start, f.end - f.start, 0)
        st.end += 20
        st.added += 1


# --------------------------------------------------------------------------------------------------
# apply

def apply(store, ctx: Ctx, journal, *, progress=None) -> int:
    """Carry out the plan in order, journaling each step. Returns the number of steps done."""
    from rmqctl.repair import journal_ops as JO

    n = 0
    for a in ctx.plan.actions:
        if a.kind == "delete_file":
            p = Path(a.payload)
            if p.exists():
                JO.delete_file(journal, p)
        elif a.kind == "zero_range":
            path, off, length = a.payload
            JO.write_range(journal, path, off, zeros=length)
        elif a.kind == "truncate_file":
            path, new_len = a.payload
            journal.before_truncate(path, new_len)
            os.truncate(path, new_len)
            JO.fsync_file(path)
        elif a.kind in ("write_record", "write_bytes"):
            path, off, data = a.payload
            JO.write_range(journal, path, off, data)
        elif a.kind in ("write_file", "create_file"):
            path, staged = a.payload
            JO.install_file(journal, path, staged)
        elif a.kind == "remove_abort":
            if Path(a.payload).exists():
                JO.delete_file(journal, a.payload)
        n += 1
        if progress:
            progress.advance(1)
    return n


def make_staging(parent: Path | None) -> Path:
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
        d = parent
        for sub in ("index", "cq"):
            p = d / sub
            if p.exists():
                shutil.rmtree(p)
        return d
    return Path(tempfile.mkdtemp(prefix="rmqctl-plan-"))


def check_space(store, ctx: Ctx) -> None:
    """Refuse before changing anything when the staged files cannot be installed: hard links and
    renames need no space, but journaled ranges are copied into the quarantine."""
    need = sum(a.length or 0 for a in ctx.plan.actions if a.kind in ("zero_range", "write_record", "write_bytes"))
    st = os.statvfs(store.root)
    free = st.f_bavail * st.f_frsize
    if need > free:
        raise IOFailure(f"not enough free space for the quarantine copy: need {need} bytes, {free} free; "
                        "nothing was changed", path=store.root)


# --------------------------------------------------------------------------------------------------
# rebuild cq | index

def analyze_rebuild(store, what: str, staging: Path, *, topic: str | None = None, queue: int | None = None,
                    progress=None, include_deleted_topics: bool = False, records=None) -> Ctx:
    """Regenerate consume queues or index files from every valid commitlog record (from the first file
    to the first record the broker's recovery would stop at), build them in `staging`, and plan to
    swap in the files whose bytes differ. Records of topics absent from config/topics.json are left
    out unless include_deleted_topics (rmqctl.repair.topic_filter).

    records: None walks the commitlog here with the batch kernel; otherwise `records(walk)` yields the
    same records one by one (the Spark engine streams them from its tasks) and fills walk.ends."""
    from rmqctl.repair.topic_filter import load_filter

    plan = Plan(store=str(store.root), abort=store.abort_exists)
    ctx = Ctx(plan, Path(staging))
    _check_layout(store, plan)
    cfg = store.config
    files = store.commitlog.files
    if plan.problems:
        return ctx
    skip, why = (None, "--include-deleted-topics: every topic is kept") if include_deleted_topics \
        else load_filter(store)
    plan.topics = {"checked_against": skip.source if skip else None, "why": why, "skipped": {}}
    walk = Walk()
    states: dict = {}
    untouched = []              # existing queues of skipped topics: left as they are
    if what == "cq":
        for t, q in BQ.queues(store):
            if (topic is None or t == topic) and (queue is None or q == queue):
                if skip is not None and skip.skips(t):
                    untouched.append(f"{t}/{q}")
                    skip.counts.setdefault(t, 0)
                    continue
                states[(t, q)] = _new_state(store, ctx.staging, t, q)
    rebuilder = None
    if what == "index":
        (ctx.staging / "index").mkdir(parents=True, exist_ok=True)
        rebuilder = IndexRebuilder(ctx.staging / "index", cfg.hash_slot_num, cfg.index_num,
                                   [p.name for p in store.index_files()])
        if cfg.index_geometry_files is None and not {"hash_slot_num", "index_num"} & cfg.explicit:
            plan.notes.append(f"no index file tells its geometry: new files get maxHashSlotNum {cfg.hash_slot_num}, "
                              f"maxIndexNum {cfg.index_num}; give the broker's config (--config) if it sets others")
    delay = cfg.delay_levels
    multi, lmq = D.multi_dispatch_on(cfg), D.lmq_on(cfg)
    last = None
    try:
        if records is None:
            from rmqctl.repair import vecdispatch as VD

            topics = VD.Topics()
            for bt in VD.batches(store, files, walk=walk, progress=progress):
                last = int(bt.offset[-1])
                dispatch_batch(store, bt, topics, states if what == "cq" else None, rebuilder, None, delay,
                               ctx.staging, topic=topic, queue=queue, skip=skip)
        for r in (records(walk) if records is not None else ()):
            last = r.offset
            if progress:
                progress.advance(r.total_size)
            if what == "cq":
                if not D.goes_to_consume_queue(r.sys_flag):
                    continue
                if skip is not None and skip.skips(r.topic):
                    skip.count(r.topic)
                    continue
                code = RC.tags_code(r.topic, r.properties, r.store_timestamp, delay)
                # the record's own unit (through the ext), then its multi-dispatch (LMQ) targets' units
                units = [(r.topic, r.queue_id, r.queue_offset, r.store_timestamp)]
                if multi and "INNER_MULTI_QUEUE_OFFSET" in r.properties:
                    units += [(n, q, o, -1) for n, q, o in D.lmq_targets(r.topic, r.queue_id, r.properties, lmq)]
                for t, q, qo, ts in units:
                    if (topic is not None and t != topic) or (queue is not None and q != queue):
                        continue
                    st = states.get((t, q))
                    if st is None:
                        st = states[(t, q)] = _new_state(store, ctx.staging, t, q)
                    st.put(r.offset, r.total_size, code, qo, ts, r.properties)
            elif skip is not None and skip.skips(r.topic):
                skip.count(r.topic)
            else:
                rebuilder.dispatch(r.offset, r.store_timestamp, r.sys_flag, r.topic, r.properties)
    except BaseException:
        if rebuilder:
            rebuilder.abort()
        raise
    stop = walk.ends[-1].stop if walk.ends else None
    end = stop.offset if stop is not None else (files[0].start if files else 0)
    ctx.cut, ctx.last_valid = end, last
    plan.commitlog = {"scan_start": files[0].start if files else 0, "valid_end": end,
                      "stop": {"kind": stop.kind, "detail": stop.detail} if stop else None}
    if stop is not None and stop.kind not in (END, BLANK_RECORD, ZEROS):
        plan.notes.append(f"the commitlog has a corrupt record at {end} ({stop.kind}); the rebuild covers the "
                          "records before it, like the broker's recovery would (run `rmqctl recover`)")
    if skip is not None:
        plan.topics["skipped"] = dict(sorted(skip.counts.items()))
        if skip.counts:
            unit = "consume-queue units" if what == "cq" else "records"
            plan.notes.append(
                f"{len(skip.counts)} topic(s) absent from {skip.source} skipped (deleted topics; "
                "--include-deleted-topics keeps them): "
                + ", ".join(f"{t} ({n} {unit})" for t, n in sorted(skip.counts.items())))
        if untouched:
            plan.notes.append("existing consume queues of skipped topics left as they are: " + ", ".join(untouched))
    else:
        plan.notes.append(why)
    if what == "cq":
        for (t, q), st in sorted(states.items()):
            for start, staged in st.finish_files():
                path = st.path_for(start)
                plan.add(Action("write_file" if path.exists() else "create_file", _rel(store, path),
                                f"consume queue {t}/{q} regenerated ({st.added} units)", group="consumequeue",
                                payload=(path, staged)))
            for f in st.delete_files():
                plan.add(Action("delete_file", _rel(store, f.path), f"consume queue {t}/{q}: no record of the "
                                "commitlog belongs in this file", group="consumequeue", payload=f.path))
            _ext_actions(store, plan, st, t, q)
        plan.summary = {"queues": len(states), "units": sum(s.added for s in states.values())}
    else:
        built = rebuilder.finish()
        names = set()
        for b in built:
            names.add(b.name)
            path = store.index_dir / b.name
            staged = Path(b.path)
            if path.exists() and _same_file(path, staged):
                staged.unlink()
                continue
            plan.add(Action("write_file" if path.exists() else "create_file", _rel(store, path),
                            f"index file regenerated ({b.index_count - 1} items)", group="index",
                            payload=(path, staged)))
        for p in store.index_files():
            if p.name not in names:
                plan.add(Action("delete_file", _rel(store, p), "index file not produced by the regeneration",
                                group="index", payload=p))
        plan.summary = {"index_files": len(built), "items": rebuilder.items}
    return ctx
