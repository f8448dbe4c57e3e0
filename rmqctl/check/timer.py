"""verify for the 5.x timer store: timerlog units and their prev_pos chains, wheel slots, timercheck, units against the
commitlog and the rmq_sys_wheel_timer queue, judged as TimerMessageStore's recovery reads them (rmqctl.store.timer).

The wheel is judged as the broker will hold it after its recovery at the next start (that recovery runs on every
start): slots the recovery re-links are a note, what it leaves wrong is an error. Only slots from the read time on
(what the dequeue side will still read) are followed.
"""
from __future__ import annotations

import time
from pathlib import Path

from rmqctl.check.findings import ERROR, INFO, Finding
from rmqctl.formats.index import java_string_hash
from rmqctl.store import timer as T

MAX_CHAIN = 1_000_000
UNIT_DTYPE = [("size", ">i4"), ("prev_pos", ">i8"), ("magic", ">i4"), ("curr_write_ms", ">i8"),
              ("delayed_ms", ">i4"), ("offset_py", ">i8"), ("size_py", ">i4"), ("topic_hash", ">i4"),
              ("reserved", ">i8")]


class UnitTable:
    """The timerlog's units below the recovered end, by position, over memory-mapped files (flat memory: a Unit is
    made only when asked for). `bad` lists the units that break the broker's rule (size 52, magic within 0xF)."""

    def __init__(self, files, file_size: int, end: int):
        import numpy as np

        self.fs = file_size
        self.files = {}
        self.bad = []
        for f in files:
            if f.start >= end or f.size < T.UNIT:
                continue
            n = f.size // T.UNIT
            arr = np.memmap(f.path, dtype=np.dtype(UNIT_DTYPE), mode="r", shape=(n,))
            stop = n
            blank = np.nonzero(arr["magic"] == T.TF.TIMERLOG_BLANK_MAGIC)[0]
            if len(blank):
                stop = int(blank[0])
            stop = min(stop, max(0, -(-(end - f.start) // T.UNIT)))
            head = arr[:stop]
            ok = (head["size"] == T.UNIT) & ((head["magic"] | 0xF) == 0xF)
            for i in np.nonzero(~ok)[0]:
                self.bad.append((f.start + int(i) * T.UNIT, int(head["size"][i]), int(head["magic"][i])))
            self.files[f.start] = (arr, ok)

    def _at(self, pos: int):
        if self.fs <= 0 or pos < 0:
            return None
        rel = pos % self.fs
        hit = self.files.get(pos - rel)
        if hit is None or rel % T.UNIT:
            return None
        arr, ok = hit
        i = rel // T.UNIT
        return (arr, i) if i < len(ok) and ok[i] else None

    def __contains__(self, pos: int) -> bool:
        return self._at(pos) is not None

    def __getitem__(self, pos: int) -> T.Unit:
        arr, i = self._at(pos)
        return T.Unit(pos, *(int(v) for v in arr[i].tolist()))

    def items(self):
        import numpy as np

        for start, (arr, ok) in sorted(self.files.items()):
            for i in np.nonzero(ok)[0]:
                pos = start + int(i) * T.UNIT
                yield pos, T.Unit(pos, *(int(v) for v in arr[int(i)].tolist()))


def check_timer_store(store, findings: list, *, cl_min: int | None, cl_end: int | None,
                      now_ms: int | None = None) -> None:
    root = Path(store.root)
    tl = root / "timerlog"
    if not tl.is_dir() or tl.is_symlink():
        return
    read = T.message_reader(store, cl_end)
    message_at = T.message_queue_pos(read)

    wheel = T.Wheel(root / "timerwheel")
    rec = T.simulate(store, now_ms=int(time.time() * 1000) if now_ms is None else now_ms, message_at=message_at,
                     cq=T.queue_reader(store), wheel=wheel)
    if rec.load_error:
        findings.append(Finding(ERROR, "timer.load", str(tl), None, None, None, rec.load_error))
        return
    crash_open = store.abort_exists
    prec, end = rec.precision_ms, rec.end
    files = [f for f in rec.files if f.size == rec.file_size]
    by_start = {f.start: f for f in files}

    def where(pos: int):
        f = by_start.get(pos - pos % rec.file_size) if rec.file_size else None
        return (str(f.path), pos - f.start) if f else (str(tl), pos)

    # --- units --------------------------------------------------------------------------------------
    units = UnitTable(files, rec.file_size, end)
    if rec.stop is not None and rec.stop[0] >= end:
        path, rel = where(rec.stop[0])
        later = len(rec.deleted_files)
        findings.append(Finding(
            ERROR, "timer.bad_unit", path, rel, "size 52 and a magic within 0xF", rec.stop[1],
            f"the broker's timer recovery ends the timerlog at {rec.stop[0]}"
            + (f" and deletes {later} later file(s)" if later else "")
            + "; the units after it are lost (`rmqctl recover` does the same)"))
    for pos, size, magic in units.bad:
        path, rel = where(pos)
        findings.append(Finding(ERROR, "timer.bad_unit", path, rel, "size 52 and a magic within 0xF",
                                f"size {size}, magic {magic}",
                                "a unit before the broker's recovery scan start: the broker never checks it and "
                                "reads it as a unit"))
    for pos, u in units.items():
        if not u.torn:
            continue
        path, rel = where(pos)
        slot = wheel.index(u.deliver_ms, prec) if u.deliver_ms >= 0 else None
        findings.append(Finding(
            ERROR if crash_open else INFO, "timer.torn_unit", path, rel, "a whole unit",
            "write time and message size are zero",
            "timerlog unit written only in part by the crash: its message is lost; the broker's recovery keeps the "
            f"unit (size and magic pass its check) and links it to wheel slot {slot}"
            + ("" if crash_open else " (the broker has recovered past it)")))

    # --- units against the commitlog ----------------------------------------------------------------
    for pos, u in units.items():
        if u.torn:
            continue
        path, rel = where(pos)
        if cl_min is not None and u.offset_py < cl_min:
            continue        # the commitlog file has expired; the broker's timerlog cleanup follows
        r = read(u.offset_py, u.size_py)
        if r is None:
            findings.append(Finding(ERROR, "timer.unit_message", path, rel,
                                    f"a message at commitlog offset {u.offset_py} of {u.size_py} bytes",
                                    "none", "the timerlog unit's message is not in the commitlog: the broker "
                                    "cannot deliver it"))
            continue
        props = r.properties
        if r.topic != T.TIMER_TOPIC:
            findings.append(Finding(ERROR, "timer.unit_message", path, rel, T.TIMER_TOPIC, r.topic,
                                    f"the unit's message at commitlog offset {u.offset_py} is not a timer message"))
            continue
        real = props.get("REAL_TOPIC")
        if real is not None and java_string_hash(real) != u.topic_hash:
            findings.append(Finding(ERROR, "timer.unit_topic_hash", path, rel + 40, java_string_hash(real),
                                    u.topic_hash, f"hash of the message's real topic {real!r}"))
        out = props.get("TIMER_OUT_MS")
        if not u.magic & 2 and out is not None and out.lstrip("-").isdigit() and int(out) != u.deliver_ms:
            findings.append(Finding(ERROR, "timer.unit_deliver_time", path, rel + 16, int(out), u.deliver_ms,
                                    "the unit's deliver time (write time + delay) is not the message's TIMER_OUT_MS"))

    # --- wheel slots (as the broker holds them after its recovery) ------------------------------------
    linked: set[int] = set()
    first_start = min((f.start for f in files), default=0)
    # the slots the store holds as pending: from the timercheck read time (the broker may start later than 7 days
    # after it and skip the older ones; that is about its clock, not about the store)
    read_slot = T.jdiv(rec.checkpoint_old.get("last_read_time_ms", 0), prec)
    for idx in wheel.nonzero():
        idx = int(idx)
        t, first, last = (int(v) for v in wheel.a[idx, :3])
        if t < read_slot:
            continue        # already read by the dequeue side (or never will be)
        spath = str(root / "timerwheel")
        if T.jrem(t, wheel.n) != idx:
            findings.append(Finding(ERROR, "timer.slot_index", spath, idx * T.SLOT, T.jrem(t, wheel.n), idx,
                                    f"wheel slot {idx} holds time {t * prec} ms, which belongs to another slot"))
            continue
        first_ok = first in units or 0 <= first < first_start      # or in a file the cleanup deleted
        if not (0 <= first < end and 0 <= last < end and first_ok and last in units):
            findings.append(Finding(ERROR, "timer.slot_position", spath, idx * T.SLOT + 8, f"units below {end}",
                                    f"first {first}, last {last}",
                                    f"wheel slot {idx} (time {t * prec} ms) points past the timerlog or between its "
                                    "units: the broker reads garbage there"))
            continue
        pos, n, ok = last, 0, False
        while pos in units and n < MAX_CHAIN:
            u = units[pos]
            if not u.torn and T.jdiv(u.deliver_ms, prec) != t:
                break
            linked.add(pos)
            n += 1
            if pos == first:
                ok = True
                break
            pos = u.prev_pos
        if not ok and 0 <= pos < first_start:
            ok = True       # the chain continues into timerlog files the broker's cleanup has deleted
        if not ok:
            findings.append(Finding(ERROR, "timer.slot_chain", spath, idx * T.SLOT, f"a prev_pos chain from {last} "
                                    f"to {first}", f"broken at {pos}",
                                    f"wheel slot {idx} (time {t * prec} ms): walking prev_pos from its last unit does "
                                    "not reach its first one; the broker delivers only the units it walks"))
    lost = [p for p, u in units.items() if not u.torn and T.jdiv(u.deliver_ms, prec) >= read_slot
            and p not in linked and u.magic & 4 == 0]
    if lost:
        path, rel = where(min(lost))
        findings.append(Finding(ERROR, "timer.unit_unlinked", path, rel, "every pending unit in its slot's chain",
                                f"{len(lost)} unit(s) in no chain",
                                f"{len(lost)} timerlog unit(s) from {min(lost)} are in no wheel slot's chain and lie "
                                "before the broker's recovery scan: their messages are never delivered"))
    if rec.revised:
        findings.append(Finding(INFO, "timer.wheel_behind", str(root / "timerwheel"), None, None,
                                f"{len(rec.revised)} slot(s)",
                                f"{len(rec.revised)} wheel slot(s) lag the timerlog; the broker's timer recovery "
                                "re-links them at the next start (`rmqctl recover` writes them now)"))

    # --- timercheck ------------------------------------------------------------------------------------
    ck = rec.checkpoint_old
    tc = str(root / "config" / "timercheck")
    if ck.get("last_timer_log_flush_pos", 0) < end:
        findings.append(Finding(INFO, "timer.flush_pos_behind", tc, 8, end, ck["last_timer_log_flush_pos"],
                                f"the broker's timer recovery scans the timerlog from {rec.scan_from}"))
    q = T.queue_reader(store)(0)
    if q is not None and rec.queue_offset < q[1]:
        findings.append(Finding(INFO, "timer.queue_behind", tc, 16, q[1], rec.queue_offset,
                                f"the broker enqueues {q[1] - rec.queue_offset} message(s) of {T.TIMER_TOPIC} again "
                                "at the next start (those already in the timerlog get a second unit)"))
