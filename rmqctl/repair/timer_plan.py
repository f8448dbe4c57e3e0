"""config/timercheck after a repair: clamped to the timer queue and timerlog that are left
(docs/recovery.md, "Timer checkpoint")."""
from __future__ import annotations

import os

from rmqctl import writers
from rmqctl.repair import rebuild_cq as RC
from rmqctl.repair.plan import Action
from rmqctl.repair.sparse import last_nonzero
from rmqctl.store.commitlog import open_ro

TIMER_TOPIC = "rmq_sys_wheel_timer"


def timer_plan(store, states, ctx) -> None:
    """F23 (apache/rocketmq#7480): config/timercheck must not point past what the repair leaves. lastTimerQueueOffset
    above the max offset of the rmq_sys_wheel_timer queue 0 is set to that max (TimerMessageStore.recover
    would clamp its in-memory copy the same way, with a warning, and write it back later); a
    lastTimerLogFlushPos beyond the end of the timerlog's data is set to that end. Two in-place 8-byte
    writes, journaled like every other change."""
    from rmqctl.formats import timer as TF
    from rmqctl.formats._derive import field_names

    plan = ctx.plan
    path = store.root / "config" / "timercheck"
    if (store.root / "config").is_symlink() or path.is_symlink():
        if path.exists():
            plan.notes.append("config/timercheck is (under) a symlink: not checked, not changed")
        return
    if not path.is_file():
        return
    codec = writers.TIMER_CHECKPOINT
    with open_ro(path) as fd:
        raw = os.pread(fd, codec.size, 0)
    if len(raw) < codec.size:
        plan.notes.append(f"config/timercheck is {len(raw)} bytes, shorter than its {codec.size} bytes of fields: "
                          "not changed (the broker maps a fresh one)")
        return
    names = field_names(TF.TimerCheckpoint)
    vals = dict(zip(names, codec.unpack(raw)))
    off = writers.TIMER_CHECKPOINT_OFFSETS
    st = states.get((TIMER_TOPIC, 0))
    qmax = st.end // RC.UNIT_SIZE if st is not None else 0
    tl_end = timerlog_end(store)
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
    hi = max(off[k] + writers.I64.size for k in changed)
    what = "; ".join(
        {"last_timer_queue_offset": f"lastTimerQueueOffset {vals[k]} -> {new[k]} (max offset of {TIMER_TOPIC}/0 "
                                    "after the repair)",
         "last_timer_log_flush_pos": f"lastTimerLogFlushPos {vals[k]} -> {new[k]} (end of the timerlog data)"}[k]
        for k in changed)
    plan.add(Action("write_bytes", "config/timercheck", what + " (TimerCheckpoint)", offset=lo,
                    length=hi - lo, group="timer", payload=(path, lo, data[lo:hi])))


def timerlog_end(store) -> int:
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
            lnz = last_nonzero(fd, 0, f.size)
            head = os.pread(fd, writers.TIMERLOG_BLANK.size, (lnz - 1) // u * u) if lnz else b""
        if lnz:
            if len(head) == writers.TIMERLOG_BLANK.size and \
                    writers.TIMERLOG_BLANK.unpack(head)[2] == TF.TIMERLOG_BLANK_MAGIC:
                return f.start + f.size     # TimerLog.append set the wrote position to the file end
            return f.start + min(f.size, -(-lnz // u) * u)
    return 0
