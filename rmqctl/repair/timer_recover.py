"""`recover` for the 5.x timer store: what TimerMessageStore.load() + recover() do on the next start (rules in
rmqctl.store.timer), done offline as journaled actions:

* a 0-byte last timerlog file is deleted (MappedFileQueue.doLoad);
* timerlog files after the end the recovery finds are deleted (truncateDirtyFiles); the bytes after the end in
  its own file stay, as the broker leaves them;
* the wheel slots the recovery revises are written (time, first and last position; their count and magic stay), as
  the broker's flush service writes them after the start;
* config/timercheck gets what recover() sets: lastTimerLogFlushPos = the end, lastReadTimeMs, lastTimerQueueOffset.

A store whose timer recovery changes nothing but a lagging lastTimerLogFlushPos (normal after a clean shutdown) is
left alone. Called once from rmqctl.repair.recover.analyze.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from rmqctl.repair.plan import Action
from rmqctl.store import timer as T


def _rel(store, p) -> str:
    try:
        return str(Path(p).relative_to(store.root))
    except ValueError:
        return str(p)


def plan_timer(store, states, ctx, *, now_ms: int | None = None) -> bool:
    """Add the timer store's actions to ctx.plan. True when the timer store was handled (the caller's F23 clamps of
    config/timercheck are then part of this), False when there is no timerlog to recover."""
    root = Path(store.root)
    tl = root / "timerlog"
    if not tl.is_dir() or tl.is_symlink() or (root / "timerwheel").is_symlink() \
            or (root / "config").is_symlink() or (root / "config" / "timercheck").is_symlink():
        return False
    plan = ctx.plan
    qmax = {}
    for (topic, qid), st in states.items():
        if topic == T.TIMER_TOPIC:
            qmax[qid] = st.end // 20
    read = T.message_reader(store, ctx.cut or None)
    message_at = T.message_queue_pos(read)

    rec = T.simulate(store, now_ms=int(time.time() * 1000) if now_ms is None else now_ms,
                     message_at=message_at, cq=T.queue_reader(store, qmax))
    if rec.load_error:
        plan.problems.append(rec.load_error + "; not changed")
        return False
    old, new = rec.checkpoint_old, rec.checkpoint_new
    plan.timer = {"timercheck": {k: old.get(k) for k in ("last_read_time_ms", "last_timer_log_flush_pos",
                                                          "last_timer_queue_offset", "master_timer_queue_offset")},
                  "timer_queue_max_offset": qmax.get(0), "timerlog_end": rec.end,
                  "recovery_scan_from": rec.scan_from, "revised_slots": len(rec.revised),
                  "stop": None if rec.stop is None else {"offset": rec.stop[0], "why": rec.stop[1]},
                  "clamped": {}}
    acted = False
    if rec.delete_empty_last is not None:
        f = rec.delete_empty_last
        plan.add(Action("delete_file", _rel(store, f.path), "zero-length last timerlog file: the broker's load deletes "
                        "it", group="timer", payload=f.path))
        acted = True
    for f in rec.deleted_files:
        why = (f"timerlog file after the end of the timerlog ({rec.end}"
               + (f", where {rec.stop[1]} ends it" if rec.stop else "") + "): the broker's timer recovery deletes it")
        plan.add(Action("delete_file", _rel(store, f.path), why, group="timer", payload=f.path))
        acted = True
    wheel_present = (root / "timerwheel").is_file()
    if rec.revised and wheel_present:
        _wheel_actions(store, plan, rec)
        acted = True
    elif rec.revised:
        plan.notes.append("no timerwheel: the broker creates an empty one at the next start and links the timerlog "
                          "units its recovery scans; config/timercheck is not moved forward")
    if rec.stop is not None:
        plan.notes.append(f"timerlog: the broker's timer recovery ends the timerlog at {rec.stop[0]} ({rec.stop[1]}); "
                          "the bytes after it in that file stay, the next unit overwrites them")
    # timercheck: what recover() leaves when it changed anything; else only what points past the store
    names = list(old)
    if acted and wheel_present:
        target = new
    else:
        target = dict(old)
        if old["last_timer_log_flush_pos"] > rec.end:
            target["last_timer_log_flush_pos"] = rec.end
        if old["last_timer_queue_offset"] > qmax.get(0, 0):
            target["last_timer_queue_offset"] = qmax.get(0, 0)
    if old["master_timer_queue_offset"] > qmax.get(0, 0):
        plan.notes.append(f"config/timercheck masterTimerQueueOffset {old['master_timer_queue_offset']} is beyond the "
                          f"timer queue's max offset {qmax.get(0, 0)}; left as is (the broker takes min(current, "
                          "master))")
    changed = [k for k in names if target[k] != old[k]]
    for k in changed:
        plan.timer["clamped"][k] = [old[k], target[k]]
    path = root / "config" / "timercheck"
    if changed and path.is_file():
        data = T.pack_checkpoint(target)
        offs = {k: i * 8 for i, k in enumerate(names)}
        lo = min(offs[k] for k in changed)
        hi = max(offs[k] + 8 for k in changed)
        what = ", ".join(f"{k} {old[k]} -> {target[k]}" for k in changed)
        plan.add(Action("write_bytes", "config/timercheck", f"what the broker's timer recovery leaves: {what} "
                        "(TimerCheckpoint)", offset=lo, length=hi - lo, group="timer", payload=(path, lo, data[lo:hi])))
    return True


def _wheel_actions(store, plan, rec) -> None:
    """One write per run of adjacent revised slots (each slot's count and magic bytes rewritten unchanged)."""
    path = Path(store.root) / "timerwheel"
    idx = sorted(rec.revised)
    runs = []
    for i in idx:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    with open(path, "rb") as f:
        fd = f.fileno()
        for run in runs:
            off = run[0] * T.SLOT
            buf = bytearray(os.pread(fd, len(run) * T.SLOT, off))
            for j, i in enumerate(run):
                t, first, last = rec.revised[i]
                buf[j * T.SLOT:j * T.SLOT + 24] = T.slot_bytes(t, first, last)
            desc = ", ".join(f"slot {i}: time {rec.revised[i][0]}, first {rec.revised[i][1]}, last "
                             f"{rec.revised[i][2]}" for i in run[:3]) + (" ..." if len(run) > 3 else "")
            plan.add(Action("write_bytes", "timerwheel", f"wheel slot(s) the broker's timer recovery revises from the "
                            f"timerlog ({desc})", offset=off, length=len(buf), group="timer",
                            payload=(path, off, bytes(buf))))
