"""Offline abnormal recovery (docs/recovery.md), planned, journaled and undoable.

What it does, in the order it is applied (the order makes a re-run after kill -9 converge: each step
is recomputed from the store as it is, and `abort` goes last, so an interrupted repair still looks
unclean to the broker):

1. commitlog: find the end of valid data the way recoverAbnormally does (start file chosen from the
   checkpoint by isMappedFileMatchedRecover, records checked by checkMessageAndReturnSize: size,
   magic, body CRC, DELAY parse, length formula) plus two checks the broker lacks: PHYSICALOFFSET must
   equal the position (stale bytes, apache/rocketmq#10017) and a present __CRC32# property must match
   (apache/rocketmq#7437). Zero-fill the tail of the file holding that end (the broker leaves garbage
   there, docs/recovery.md "Abnormal recovery") and quarantine every
   later file (the broker deletes them). A zero-length last file is removed (5.x does that too).
2. consume queues: ConsumeQueue.recover (last three files, first invalid unit) and
   truncateDirtyLogicFiles(end), with zero-filled tails; then every valid record from the scan start
   that is missing is appended with the broker's dispatch rules (rmqctl.dispatch, rebuild_cq).
3. index: index files are kept while they are full and end before the cut; the rest is regenerated
   from the last kept file's end with IndexService's rules (rebuild_index) -- the broker instead
   deletes every file newer than indexMsgTimestamp and re-indexes only from its recovery start file,
   losing keys (apache/rocketmq#8007).
4. checkpoint (checkpoint_write); 4b. config/timercheck (5.x) clamped to the timer queue and timerlog
   that are left (timer_plan, F23); 5. remove `abort`: the broker then runs a normal recovery.

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

from dataclasses import dataclass, field
from pathlib import Path

from rmqctl.errors import IOFailure
from rmqctl.repair import checkpoint_write as CK
from rmqctl.repair import parallel as P
from rmqctl.repair import rebuild_cq as RC
from rmqctl.repair import speculation
from rmqctl.repair.apply import apply, check_space  # noqa: F401  (re-exported: recover.apply)
from rmqctl.repair.batch_dispatch import dispatch_batch, dispatch_pass2, take_undispatchable  # noqa: F401  (dispatch_batch re-exported)
from rmqctl.repair.dupinfo import DupInfo
from rmqctl.repair.fillers import (  # noqa: F401
    QUARANTINE_PROP,
    QUARANTINE_TOPIC,
    Filler,
    filler_for,
    make_filler_record,  # noqa: F401  (re-exported)
)
from rmqctl.repair.index_plan import index_headers, index_plan
from rmqctl.repair.layout_checks import check_layout, cq_size_plan
from rmqctl.repair.plan import Action, Ctx, Plan, rel_path
from rmqctl.repair.queue_actions import cq_why, ext_actions
from rmqctl.repair.rebuild import analyze_rebuild  # noqa: F401  (re-exported: recover.analyze_rebuild)
from rmqctl.repair.sparse import last_nonzero, same_file
from rmqctl.repair.start_file import broker_start_file, find_resume
from rmqctl.repair import batchcq as BQ
from rmqctl.repair import queue_state as QS
from rmqctl.repair import timer_recover
from rmqctl.repair.timer_plan import timer_plan
from rmqctl.scan import BLANK_RECORD, END, ZEROS
from rmqctl.store import rules
from rmqctl.store.commitlog import CommitLog, Walk, open_ro
from rmqctl.store.files import read_bytes, read_refusal


@dataclass
class Options:
    on_corruption: str = "stop"          # stop | quarantine
    from_start: bool = False             # validate and dispatch from the first commitlog file
    check_prop_crc: bool = True
    jobs: int = 1                        # -j: processes for the commitlog walks (rmqctl.repair.parallel)


@dataclass
class Recovery:
    """What the phases of analyze() share: each phase reads what the earlier ones left here and adds
    its own findings and actions to ``ctx.plan``."""

    store: object
    opts: Options
    ctx: Ctx
    files: list = field(default_factory=list)      # commitlog files taken into account
    ckpt: object = None                            # the checkpoint, as read
    start_index: int = 0                           # the broker's recovery start file (index into files)
    scan_start: int = 0                            # where pass 1 starts validating
    segments: list = field(default_factory=list)   # [start, end) ranges of valid records, in order
    stop: object = None                            # the Stop that ended the last segment
    broker_stop: dict | None = None                # where and why the broker's own walk stops
    speculation: speculation.Speculation | None = None
    dup: DupInfo = field(default_factory=DupInfo)
    states: dict = field(default_factory=dict)     # (topic, queue id) -> rebuild_cq.QueueState
    lower: int = 0                                 # lowest offset a queue needs re-dispatched from
    idx: dict | None = None                        # index_plan(): kept files, where regeneration starts
    dispatch_start: int = 0
    built: list = field(default_factory=list)      # index files the regeneration built
    passes: int = 1                                # commitlog walks done (1 when the speculation held)

    @property
    def plan(self) -> Plan:
        return self.ctx.plan

    @property
    def cfg(self):
        return self.store.config


def analyze(store, opts: Options, staging: Path, *, progress=None) -> Ctx:
    """Plan the offline abnormal recovery of `store` (module doc, docs/recovery.md); replacement files
    are built in `staging`. Nothing in the store changes."""
    rec = Recovery(store, opts, Ctx(Plan(store=str(store.root), abort=store.abort_exists), Path(staging)))
    check_layout(store, rec.plan)
    if not _commitlog_files(rec):
        return rec.ctx
    _choose_start(rec)
    _find_valid_end(rec, progress)
    _commitlog_actions(rec)
    _truncate_queues(rec)
    _keep_index_files(rec)
    _dispatch_missing(rec)
    take_undispatchable(rec.states, rec.plan.notes)
    _queue_actions(rec)
    _index_actions(rec)
    rec.dup.report(rec.plan)
    deleted_topics_note(store, rec.states, rec.plan)
    _checkpoint_action(rec)
    # after the checkpoint: a timer-only change must not rewrite it; a 5.x timer store: TimerMessageStore.recover()
    if not timer_recover.plan_timer(store, rec.states, rec.ctx):
        timer_plan(store, rec.states, rec.ctx)
    _compaction_plan(rec)
    _abort_last(rec)
    return rec.ctx


def _commitlog_files(rec: Recovery) -> bool:
    """The commitlog files as the broker's load() takes them; False when recovery cannot go on."""
    store, plan = rec.store, rec.plan
    fsize = rec.cfg.commitlog_file_size
    files = list(store.commitlog.files)
    # 5.1.3+ deletes a zero-length LAST file by itself; 4.5.1-5.1.2 refuse to start. Other size mismatches: refuse.
    while files and files[-1].size == 0:
        f = files.pop()
        plan.add(Action("delete_file", rel_path(store, f.path), "zero-length last commitlog file (a segment created "
                        f"but never sized when the broker died): {rules.ZERO_LAST}", group="commitlog",
                        payload=f.path))
    for f in files:
        if f.size != fsize:
            plan.problems.append(f"{rel_path(store, f.path)}: size {f.size} != mappedFileSizeCommitLog {fsize}; "
                                 f"{rules.SIZE_MISMATCH}; not repaired automatically")
    for a, b in zip(files, files[1:]):
        if b.start != a.start + fsize:
            plan.notes.append(f"commitlog gap [{a.start + fsize}, {b.start}): files are missing; like the "
                              "broker, recovery goes on with the next file; messages in the gap are lost")
    if plan.problems:
        return False
    cq_size_plan(store, plan)
    if not files:
        plan.problems.append("no commitlog files: nothing to recover from (the broker would destroy every "
                             "consume queue)")
        return False
    rec.files = files
    return True


def _choose_start(rec: Recovery) -> None:
    """recoverAbnormally's start file, and where rmqctl starts validating (--from-start: file 0)."""
    plan, files = rec.plan, rec.files
    rec.ckpt = rec.store.checkpoint()
    rec.start_index, reason = broker_start_file(rec.store, files, rec.ckpt)
    rec.scan_start = files[0].start if rec.opts.from_start else files[rec.start_index].start
    plan.broker = {"recovery": "abnormal" if plan.abort else "normal",
                   "start_file": files[rec.start_index].path.name if plan.abort else None,
                   "start_reason": reason if plan.abort else "normal recovery (no abort file)"}


def _find_valid_end(rec: Recovery, progress) -> None:
    """Pass 1: where does valid data end? Walks the commitlog from scan_start segment by segment; with
    --on-corruption quarantine a bad range is replaced by a filler and the walk goes on after it.

    Dispatch happens during pass 1 as if no consume-queue unit and no index file reached past the end
    of valid data (the usual crash: queues and index behind the commitlog). _dispatch_missing checks
    that guess against the real end; when it holds, pass 2 is not needed (one walk instead of two)."""
    from rmqctl.repair import vecdispatch as VD

    store, opts, plan, ctx = rec.store, rec.opts, rec.plan, rec.ctx
    fsize = rec.cfg.commitlog_file_size
    commitlog = CommitLog(store)
    commitlog.queue.files = rec.files
    if speculation.SPECULATE:
        rec.speculation = speculation.Speculation.start(store, rec.files, rec.scan_start, opts, ctx.staging, rec.cfg)
    seg_start = pos = rec.scan_start
    last = None                 # (offset, store timestamp, store host, port) of the last valid record
    while True:
        walk = Walk()
        seg_last = None
        if rec.speculation is not None and pos != rec.scan_start:
            rec.speculation = rec.speculation.drop()   # a second segment (quarantine mode): pass 2 handles fillers
        if opts.jobs > 1 and P.splittable(store):
            P.walk(store, rec.files, pos, jobs=opts.jobs, walk=walk, progress=progress,
                   check_prop_crc=opts.check_prop_crc, sink=P.recover_sink(rec.dup, rec.speculation))
            seg_last = P.last_record(walk)
        else:
            for b in VD.batches(store, rec.files, pos, walk=walk, check_prop_crc=opts.check_prop_crc,
                                progress=progress):
                seg_last = int(b.offset[-1])
                rec.dup.feed(b)
                if rec.speculation is not None:
                    rec.speculation.feed(b)
        if seg_last is not None:
            r = commitlog.read_record(seg_last, check_crc=False)
            last = (r.offset, r.store_timestamp, r.store_host_raw, r.store_port)
        stop = rec.stop = walk.ends[-1].stop if walk.ends else None
        end = stop.offset if stop is not None else pos
        corrupt = stop is not None and stop.kind not in (END, BLANK_RECORD, ZEROS)
        f = store.commitlog.file_for(end, fsize) if stop is not None else None
        resume = find_resume(store, rec.files, f, stop, fsize) if stop is not None and f is not None else None
        if rec.broker_stop is None:
            rec.broker_stop = {"offset": end, "kind": stop.kind if stop else "end",
                               "detail": stop.detail if stop else ""}
        rec.segments.append((seg_start, end))
        if resume is None or (not corrupt and stop.kind != ZEROS):
            break
        if opts.on_corruption != "quarantine":
            what = f"corrupt record ({stop.kind}: {stop.detail})" if corrupt else "unwritten zeros"
            plan.notes.append(
                f"commitlog offset {end}: {what}, but valid records resume at {resume}; they are dropped "
                "like the broker would drop them (kept in the quarantine; --on-corruption quarantine keeps them)")
            break
        fill = _quarantine_range(rec, stop, end, resume, f, last)
        if fill.kind == "record":
            last = (fill.start, fill.store_ts, b"", 0)
        seg_start = pos = resume
    _record_valid_end(rec, last)


def _quarantine_range(rec: Recovery, stop, end: int, resume: int, f, last) -> Filler:
    """--on-corruption quarantine: the bad range [end, resume) is overwritten by a filler."""
    fill = filler_for(end, resume, f, rec.cfg.commitlog_file_size, last)
    rec.ctx.fillers.append(fill)
    rec.plan.add(Action("write_record", rel_path(rec.store, f.path), (
        f"bad range [{end}, {fill.end}) ({stop.kind}: {stop.detail}) replaced by a "
        + ("BLANK end-of-file record" if fill.kind == "blank" else
           f"synthetic ROLLBACK record in topic {QUARANTINE_TOPIC} (not dispatched)"
           + (" and a BLANK end-of-file record" if len(fill.data) > fill.end - fill.start else ""))
        + f"; valid records resume at {resume}"),
        offset=end - f.start, length=len(fill.data), payload=(f.path, end - f.start, fill.data)))
    return fill


def _record_valid_end(rec: Recovery, last) -> None:
    ctx, plan = rec.ctx, rec.plan
    cut = ctx.cut = rec.segments[-1][1]
    if last is not None:
        ctx.last_valid, ctx.last_store_ts = last[0], last[1]
    plan.commitlog = {"scan_start": rec.scan_start, "valid_end": cut, "last_valid": ctx.last_valid,
                      "stop": rec.broker_stop if not ctx.fillers else {"offset": cut}}
    plan.broker.update({"valid_end": rec.broker_stop["offset"], "stop": rec.broker_stop["kind"],
                        "confirm_offset": ctx.last_valid if ctx.last_valid is not None
                        else rec.files[rec.start_index].start})


def _commitlog_actions(rec: Recovery) -> None:
    """Zero the bytes after the end of valid data in its file; quarantine every later file."""
    store, plan, files, cut = rec.store, rec.plan, rec.files, rec.ctx.cut
    cut_file = store.commitlog.file_for(cut, rec.cfg.commitlog_file_size)
    if cut_file is not None:
        # a BLANK record the broker wrote (8 bytes: size, magic) ends its file: healthy, never zeroed
        keep = cut - cut_file.start + (8 if rec.stop is not None and rec.stop.kind == BLANK_RECORD else 0)
        with open_ro(cut_file.path) as fd:
            lnz = last_nonzero(fd, keep, cut_file.size)
        if lnz > keep:
            plan.add(Action("zero_range", rel_path(store, cut_file.path),
                            f"bytes after the last valid record ({rec.broker_stop['kind']} at {cut}); the broker "
                            "leaves them on disk (stale data that may pass checks later)",
                            offset=keep, length=lnz - keep, payload=(cut_file.path, keep, lnz - keep)))
        later = [f for f in files if f.start > cut_file.start]
    else:
        later = [f for f in files if f.start >= cut]
    for f in later:
        plan.add(Action("delete_file", rel_path(store, f.path), f"commitlog file after the end of valid data {cut}; "
                        "the broker would delete it without a copy", group="commitlog", payload=f.path))
    plan.broker["deletes_commitlog_files"] = [f.path.name for f in later]


def _truncate_queues(rec: Recovery) -> None:
    """ConsumeQueue.recover + truncateDirtyLogicFiles(cut) for every queue; how far back dispatch must go."""
    rec.lower = rec.scan_start
    first = rec.files[0].start
    spec = rec.speculation
    keys = BQ.queues(rec.store)
    known = {k: spec.truncated(k[0], k[1], rec.ctx.cut) for k in keys} if spec is not None else {}
    read = QS.truncate_states(rec.store, [k for k in keys if known.get(k) is None], rec.ctx.cut)
    for topic, qid in keys:
        st = known.get((topic, qid)) or read[(topic, qid)]
        st.stage_dir = rec.ctx.staging.joinpath("cq", topic, str(qid))
        rec.states[(topic, qid)] = st
        if st.dropped_valid_below is not None and not rec.opts.from_start:
            rec.lower = min(rec.lower, max(st.max_phys, first) if st.max_phys >= 0 else first)
    rec.plan.broker["truncates_queues"] = [f"{t}/{q}" for (t, q), st in rec.states.items() if st.dropped_units]


def _keep_index_files(rec: Recovery) -> None:
    """Which index files stay; where dispatch starts (the lowest of what queues and index need)."""
    rec.idx = index_plan(rec.store, rec.ctx.cut) if rec.cfg.message_index_enable else None
    start = min(rec.lower, rec.idx["from"]) if rec.idx is not None else rec.lower
    rec.dispatch_start = max(start, rec.files[0].start)
    if rec.ckpt is not None and rec.plan.abort:
        rec.plan.broker["deletes_index_files"] = [p.name for p, h in index_headers(rec.store)
                                                  if h[1] > rec.ckpt.index_msg_timestamp]


def _dispatch_missing(rec: Recovery) -> None:
    """Pass 2: dispatch every valid record missing from its queue and the index -- unless pass 1's
    speculation holds for the real end, then its builders stand."""
    if rec.dispatch_start < rec.segments[0][0]:
        rec.segments[0] = (rec.dispatch_start, rec.segments[0][1])
    spec, rec.speculation = rec.speculation, None
    if spec is not None and not rec.ctx.fillers and spec.holds(rec.states, rec.lower, rec.idx, rec.dispatch_start):
        rec.states, rebuilder = spec.states, spec.rebuilder
        try:
            rec.built = rebuilder.finish() if rebuilder else []
        except BaseException:
            rebuilder.abort()
            raise
        return
    if spec is not None:
        spec.drop()
    if rec.opts.jobs > 1 and not rec.ctx.fillers and P.splittable(rec.store):
        rec.states, rec.built = P.dispatch_pass2(rec.store, rec.files, rec.segments, rec.scan_start, rec.states,
                                                 rec.idx, rec.ctx, rec.cfg, rec.opts.jobs)
    else:
        rec.states, rec.built = dispatch_pass2(rec.store, rec.files, rec.segments, rec.scan_start, rec.states,
                                               rec.idx, rec.ctx, rec.cfg)
    rec.passes = 2


def _queue_actions(rec: Recovery) -> None:
    store, plan = rec.store, rec.plan
    for (topic, qid), st in sorted(rec.states.items()):
        for start, staged in st.finish_files():
            path = st.path_for(start)
            plan.add(Action("write_file" if path.exists() else "create_file", rel_path(store, path),
                            f"consume queue {topic}/{qid}: " + cq_why(st), group="consumequeue",
                            payload=(path, staged)))
        for f in st.delete_files():
            plan.add(Action("delete_file", rel_path(store, f.path), f"consume queue {topic}/{qid}: file holds only "
                            f"units at or after the end of valid data {rec.ctx.cut}", group="consumequeue",
                            payload=f.path))
        ext_actions(store, plan, st, topic, qid)


def _index_actions(rec: Recovery) -> None:
    idx, store, plan = rec.idx, rec.store, rec.plan
    if idx is None:
        return
    final = [(p.name, h) for p, h in idx["kept"]]
    for b in rec.built:
        path = store.index_dir / b.name
        final.append((b.name, (b.begin_ts, b.end_ts, b.begin_phy, b.end_phy, b.hash_slot_count, b.index_count)))
        staged = Path(b.path)
        if path.exists() and same_file(path, staged):
            staged.unlink()
            continue
        plan.add(Action("write_file" if path.exists() else "create_file", rel_path(store, path),
                        f"index file regenerated from commitlog offset {idx['from']} "
                        f"({b.index_count - 1} items)", group="index", payload=(path, staged)))
    built_names = {b.name for b in rec.built}
    for p in idx["drop"]:
        if p.name not in built_names:
            plan.add(Action("delete_file", rel_path(store, p), "index file not consistent with the commitlog and "
                            "not produced by the regeneration", group="index", payload=p))
    rec.ctx.index_files_final = final


def _checkpoint_action(rec: Recovery) -> None:
    store, ctx, plan = rec.store, rec.ctx, rec.plan
    why = read_refusal(store.checkpoint_path, store.root)
    if why:     # a FIFO would block the read; a link out of the store is not followed, nor written through
        raise IOFailure(f"{why}; recover rewrites the checkpoint", path=store.checkpoint_path)
    try:
        old = read_bytes(store.checkpoint_path, store.root)
    except FileNotFoundError:
        old = None
    full = [h for _, h in ctx.index_files_final if h[5] >= rec.cfg.index_num]
    new = CK.new_checkpoint(old, last_store_ts=ctx.last_store_ts,
                            index_msg_ts=full[-1][1] if full else None,
                            confirm_offset=ctx.last_valid)
    if new != old and (any(a.kind != "truncate_file" for a in plan.actions) or plan.abort):   # cut CQ tails: no
        staged = ctx.staging / "checkpoint"
        RC.write_staged(staged, new)
        plan.add(Action("write_file" if old is not None else "create_file", "checkpoint",
                        f"timestamps/confirm offset for the repaired store: {CK.fields(new)}", group="checkpoint",
                        payload=(store.checkpoint_path, staged)))


def _compaction_plan(rec: Recovery) -> None:
    """5.x compaction store: the broker's load and, in an abnormal recovery, its re-dispatch."""
    from rmqctl.repair import compaction as RCMP

    redispatch_from = rec.plan.commitlog.get("scan_start", 0) if rec.plan.abort or rec.opts.from_start else None
    RCMP.recover_plan(rec.store, rec.ctx, redispatch_from, rec.ctx.cut)


def _abort_last(rec: Recovery) -> None:
    plan = rec.plan
    if plan.abort:
        plan.add(Action("remove_abort", "abort", "commitlog, consume queues, index and checkpoint are consistent: "
                        "the broker will run a normal recovery", group="abort", payload=rec.store.abort_path))
    plan.summary = {"valid_end": rec.ctx.cut,
                    "queues_changed": sum(1 for a in plan.actions if a.group == "consumequeue"),
                    "units_added": sum(st.added for st in rec.states.values()),
                    "index_items": sum(b.index_count - 1 for b in rec.built),
                    "fillers": len(rec.ctx.fillers), "commitlog_passes": rec.passes}


def deleted_topics_note(store, states, plan) -> None:
    """F21 in recover: re-dispatch everything like the broker (apache/rocketmq#1852), but say so."""
    from rmqctl.repair.topic_filter import load_filter

    added = {}
    for (t, _q), st in states.items():
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
