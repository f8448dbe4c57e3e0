"""The 5.x timer store (timerlog/, timerwheel, config/timercheck) read as RocketMQ 5.3.3's TimerMessageStore reads it,
and its recover() computed offline (no byte is written here; rmqctl.repair.timer_recover turns the result into
journaled actions, rmqctl.check.timer into findings).

The broker's rules (TimerMessageStore.load/recover/recoverAndRevise, TimerWheel, TimerLog, MappedFileQueue.doLoad):
* load: a 0-byte LAST timerlog file is deleted; any other file whose size is not mappedFileSizeTimerLog makes the
  load fail.
* recover() runs on every start (an abort file plays no part). It scans from the file holding
  (timercheck lastTimerLogFlushPos - file size), in steps of 52 bytes from each file's start:
  a unit whose magic is the BLANK magic ends that file (the scan goes on with the next file); a unit whose size field
  is not 52 or whose magic has bits outside 0xF (0 passes) ends the timerlog there, and so does a unit whose first
  28 bytes run past the file end; every unit before that revises its wheel slot: slot = deliver time / precision,
  where deliver time = the unit's currWriteTime + delayedTime. A slot holding another time is overwritten
  (time, first = last = this unit; its count and magic stay); a slot holding this time gets last = this unit.
  Nothing else of a unit is checked: a unit torn after its first 4 bytes (size 52 intact, the rest zero: magic 0
  passes) is kept, and revises slot 0 (deliver time 0).
* Files after the end are deleted; the bytes after the end in its own file stay (the next append overwrites them).
* The timer queue offset is revised from the last unit's message (its queue offset in rmq_sys_wheel_timer, matched
  against the consume queue), capped by masterTimerQueueOffset and the queue's bounds.
* The read time is max(lastReadTimeMs, now - 7 days + 60 slots); slots from there whose last unit lies past the end
  make a second, non-stopping revision pass from the smallest such first unit.
* The wheel revisions live in memory until the flush service writes the wheel (TimerWheel.shutdown(false) does not);
  the timercheck gets lastTimerLogFlushPos = end, lastReadTimeMs = read time, lastTimerQueueOffset = queue offset.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from rmqctl.formats import timer as TF
from rmqctl.store.files import FileQueue

UNIT = TF.TIMERLOG_UNIT_SIZE
SLOT = TF.SLOT_SIZE
TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_BLANK_SLOTS = 60
DEFAULT_PRECISION_MS = 1000
_HEAD = struct.Struct(">iqi")            # size, prev pos, magic
_UNIT = struct.Struct(">iqiqiqiiq")      # the whole 52-byte unit
_SLOT3 = struct.Struct(">qqq")           # time, first, last
_CK = struct.Struct(">7q")


def magic_ok(magic: int) -> bool:
    """TimerMessageStore.isMagicOK: no bit outside 0xF (0 passes)."""
    return (magic | 0xF) == 0xF


def jdiv(a: int, b: int) -> int:
    """Java long division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def jrem(a: int, b: int) -> int:
    return a - jdiv(a, b) * b


def i64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


@dataclass
class Unit:
    pos: int
    size: int
    prev_pos: int
    magic: int
    curr_write_ms: int
    delayed_ms: int
    offset_py: int
    size_py: int
    topic_hash: int
    reserved: int

    @property
    def deliver_ms(self) -> int:
        return i64(self.curr_write_ms + self.delayed_ms)

    @property
    def torn(self) -> bool:
        """Looks written only in part: what enqueue always sets (write time, the message's size) is zero."""
        return self.curr_write_ms == 0 or self.size_py <= 0


@dataclass
class TimerFile:
    path: Path
    start: int
    size: int


@dataclass
class Recovery:
    """What TimerMessageStore.load() + recover() do to the timer store on the next start."""
    file_size: int
    precision_ms: int
    files: list                                   # TimerFile, as found
    load_error: str | None = None                 # the load fails (the broker does not start)
    delete_empty_last: TimerFile | None = None
    scan_from: int = 0                            # first byte the recovery scan reads
    end: int = 0                                  # processOffset: the end of the timerlog after recovery
    stop: tuple | None = None                     # (pos, why) of the unit that ended the timerlog, None at zeros/end
    deleted_files: list = field(default_factory=list)
    revised: dict = field(default_factory=dict)   # slot index -> (time, first, last) after recovery (changed only)
    checkpoint_old: dict = field(default_factory=dict)
    checkpoint_new: dict = field(default_factory=dict)
    read_time_ms: int = 0
    queue_offset: int = 0
    second_pass_from: int | None = None


def timer_files(root: Path) -> list[TimerFile]:
    d = Path(root) / "timerlog"
    if not d.is_dir():
        return []
    return [TimerFile(f.path, f.start, f.size) for f in FileQueue.scan(d, root=root).files]


def file_size_of(store, files: list[TimerFile]) -> int:
    fs = getattr(store.config, "timerlog_file_size", None)
    if fs:
        return fs
    sizes = [f.size for f in files if f.size > 0]
    return sizes[0] if sizes else TF.TIMERLOG_FILE_SIZE


def precision_of(store) -> int:
    return getattr(store.config, "timer_precision_ms", None) or DEFAULT_PRECISION_MS


def read_checkpoint(root: Path) -> dict | None:
    p = Path(root) / "config" / "timercheck"
    try:
        with open(p, "rb") as f:
            raw = f.read(_CK.size)
    except OSError:
        return None
    if len(raw) < 32:
        return None
    raw = raw.ljust(_CK.size, b"\0")
    names = ("last_read_time_ms", "last_timer_log_flush_pos", "last_timer_queue_offset", "master_timer_queue_offset",
             "data_version_state_version", "data_version_timestamp", "data_version_counter")
    return dict(zip(names, _CK.unpack(raw)))


def pack_checkpoint(ck: dict) -> bytes:
    return _CK.pack(ck["last_read_time_ms"], ck["last_timer_log_flush_pos"], ck["last_timer_queue_offset"],
                    ck["master_timer_queue_offset"], ck["data_version_state_version"], ck["data_version_timestamp"],
                    ck["data_version_counter"])


def units_of(data: bytes, start: int):
    """(pos, Unit | None, head) for every 52-byte step of one file until a BLANK (yields ('blank', pos, size))."""
    for p in range(0, len(data), UNIT):
        if p + 16 > len(data):
            yield ("short", start + p, None)
            return
        size, _prev, magic = _HEAD.unpack_from(data, p)
        if magic == TF.TIMERLOG_BLANK_MAGIC:
            yield ("blank", start + p, size)
            return
        if p + UNIT > len(data):
            yield ("short", start + p, None)
            return
        yield ("unit", start + p, Unit(start + p, *_UNIT.unpack_from(data, p)))


class Wheel:
    """The timerwheel as a (slots, 4) int64 array (time, first, last, num|magic), read once; revisions in memory."""

    def __init__(self, path: Path, slots_total: int = TF.SLOTS_TOTAL):
        import numpy as np

        self.n = slots_total * 2
        self.path = path
        raw = b""
        if path.is_file():
            with open(path, "rb") as f:
                raw = f.read(self.n * SLOT + 1)
        self.size = len(raw)
        self.ok = len(raw) in (0, self.n * SLOT)
        buf = raw[:self.n * SLOT].ljust(self.n * SLOT, b"\0") if self.ok else bytes(self.n * SLOT)
        self.a = np.frombuffer(buf, dtype=">i8").reshape(self.n, 4).astype(np.int64)
        self.orig = self.a[:, :3].copy()

    def index(self, time_ms: int, precision: int) -> int:
        return jrem(jdiv(time_ms, precision), self.n)

    def revise(self, time_ms: int, pos: int, precision: int) -> None:
        """TimerWheel.reviseSlot(timeMs, IGNORE, pos, force=true). A negative index raises (as ByteBuffer does)."""
        idx = self.index(time_ms, precision)
        if idx < 0:
            raise ValueError("negative slot index")
        t = jdiv(time_ms, precision)
        if int(self.a[idx, 0]) != t:
            self.a[idx, 0], self.a[idx, 1], self.a[idx, 2] = t, pos, pos
        else:
            self.a[idx, 2] = pos

    def check_phy_pos(self, time_start: int, max_offset: int, precision: int) -> int:
        """TimerWheel.checkPhyPos: the smallest first position of the slots from time_start (one turn) whose
        last position is past max_offset."""
        import numpy as np

        first_idx = self.index(time_start, precision)
        i = (np.arange(self.n, dtype=np.int64) - first_idx) % self.n
        expect = (time_start + i * precision) // precision
        m = (self.a[:, 0] == expect) & (self.a[:, 2] > max_offset)
        if not m.any():
            return (1 << 63) - 1
        return int(self.a[m, 1].min())

    def changed(self) -> dict:
        import numpy as np

        rows = np.nonzero((self.a[:, :3] != self.orig).any(axis=1))[0]
        return {int(r): tuple(int(v) for v in self.a[r, :3]) for r in rows}

    def nonzero(self):
        import numpy as np

        return np.nonzero(self.a.any(axis=1))[0]


def _read(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def simulate(store, *, now_ms: int, message_at=None, cq=None, wheel: Wheel | None = None) -> Recovery:
    """TimerMessageStore.load() + recover() on the store as it is now.

    message_at(offset, size) -> (queue_id, queue_offset) | None: the commitlog message a unit points at (the broker's
    getMessageByCommitOffset), after the commitlog's own recovery. cq(queue_id) -> (min, max, unit(offset) ->
    (phys, size) | None) | None: the rmq_sys_wheel_timer consume queue after the repair."""
    root = Path(store.root)
    files = timer_files(root)
    fs = file_size_of(store, files)
    prec = precision_of(store)
    rec = Recovery(file_size=fs, precision_ms=prec, files=files)
    live = list(files)
    if live and live[-1].size == 0:
        rec.delete_empty_last = live.pop()
    for f in live:
        if f.size != fs:
            rec.load_error = (f"{f.path.name}: {f.size} bytes, the timerlog's files are {fs} bytes "
                              "(mappedFileSizeTimerLog): the broker's timer store fails to load")
            return rec
    ck = read_checkpoint(root) or {"last_read_time_ms": 0, "last_timer_log_flush_pos": 0,
                                   "last_timer_queue_offset": 0, "master_timer_queue_offset": 0,
                                   "data_version_state_version": 0, "data_version_timestamp": 0,
                                   "data_version_counter": 0}
    rec.checkpoint_old = dict(ck)
    w = wheel if wheel is not None else Wheel(root / "timerwheel")
    if not w.ok:
        rec.load_error = (f"timerwheel: {w.size} bytes, the broker expects {w.n * SLOT}: the broker's timer store "
                          "fails to start")
        return rec
    begin = ck["last_timer_log_flush_pos"] - fs if live else ck["last_timer_log_flush_pos"]
    begin = max(begin, 0)
    cache: dict = {}

    def data(f):
        if f.path not in cache:
            cache[f.path] = _read(f.path)
        return cache[f.path]

    def revise_pass(begin_offset: int, check: bool, read_pos=None) -> int:
        if not live:
            return 0
        idx = len(live) - 1
        while idx >= 0 and begin_offset < live[idx].start:
            idx -= 1
        idx = max(idx, 0)
        check_offset = live[idx].start
        if check:
            rec.scan_from = live[idx].start
        while idx < len(live):
            f = live[idx]
            buf = data(f) if check or read_pos is None else data(f)[:read_pos(f)]
            pos = 0
            stop = False
            while pos < len(buf):
                if pos + 16 > len(buf):
                    stop = True
                    if check:
                        rec.stop = (f.start + pos, "a unit runs past the end of its file")
                    break
                size, _prev, magic = _HEAD.unpack_from(buf, pos)
                if magic == TF.TIMERLOG_BLANK_MAGIC:
                    break
                if check and (not magic_ok(magic) or size != UNIT):
                    stop = True
                    if any(buf[pos:]):
                        rec.stop = (f.start + pos, f"size field {size}" if size != UNIT else f"magic {magic}")
                    break
                if pos + 28 > len(buf):
                    stop = True
                    if check:
                        rec.stop = (f.start + pos, "a unit runs past the end of its file")
                    break
                cw, dt = struct.unpack_from(">qi", buf, pos + 16)
                if size == UNIT and magic_ok(magic):
                    try:
                        w.revise(i64(cw + dt), f.start + pos, prec)
                    except ValueError:
                        stop = True
                        if check:
                            rec.stop = (f.start + pos, "deliver time before 1970 (negative slot)")
                        break
                pos += UNIT
            check_offset = f.start + pos
            if stop:
                break
            idx += 1
        return check_offset

    end = revise_pass(begin, True)
    rec.end = end
    # truncateDirtyFiles(end)
    kept = []
    for f in live:
        if f.start + fs > end and end < f.start:
            rec.deleted_files.append(f)
        else:
            kept.append(f)
    live[:] = kept

    def read_pos(f):
        return end - f.start if f.start <= end < f.start + fs else fs

    # reviseQueueOffset(end)
    qo = -1
    at = end - (UNIT - 28)
    hold = next((f for f in live if f.start <= at < f.start + fs), None) if at >= 0 else None
    if hold is not None and at - hold.start + 12 <= read_pos(hold):
        off_py, size_py = struct.unpack_from(">qi", data(hold), at - hold.start)
        msg = message_at(off_py, size_py) if message_at and size_py > 0 else None
        if msg is not None:
            qid, mq = msg
            q = cq(qid) if cq else None
            if q is None:
                qo = mq
            else:
                qmin, qmax, unit = q
                cqo, tmp = mq, mq
                for _ in range(20000):
                    if tmp < 0:
                        break
                    u = unit(tmp) if qmin <= tmp < qmax else None
                    if u is not None and u[0] == off_py and u[1] == size_py:
                        cqo = tmp
                        break
                    tmp -= 1
                qo = cqo
    cur = ck["last_timer_queue_offset"] if qo == -1 else qo + 1
    cur = min(cur, ck["master_timer_queue_offset"])
    q0 = cq(0) if cq else None
    if q0 is not None:
        if cur < q0[0]:
            cur = q0[0]
        elif cur > q0[1]:
            cur = q0[1]
    rec.queue_offset = cur
    read_time = ck["last_read_time_ms"]
    floor = now_ms // prec * prec - TF.SLOTS_TOTAL * prec + TIMER_BLANK_SLOTS * prec
    read_time = max(read_time, floor)
    rec.read_time_ms = read_time
    min_first = w.check_phy_pos(read_time, end, prec)
    if min_first < end:
        rec.second_pass_from = min_first
        revise_pass(min_first, False, read_pos)
    rec.revised = w.changed()
    new = dict(ck)
    new.update(last_timer_log_flush_pos=end, last_read_time_ms=read_time,
               last_timer_queue_offset=min(cur, ck["master_timer_queue_offset"]))
    rec.checkpoint_new = new
    return rec


def slot_bytes(t: int, first: int, last: int) -> bytes:
    return _SLOT3.pack(t, first, last)


def read_unit(path: Path, rel: int) -> Unit | None:
    with open(path, "rb") as f:
        b = os.pread(f.fileno(), UNIT, rel)
    if len(b) < UNIT:
        return None
    return Unit(0, *_UNIT.unpack(b))


def message_reader(store, cl_end: int | None = None):
    """getMessageByCommitOffset: the record at offset (no CRC check), at most `size` bytes, below the commitlog's
    end -> Record, else None."""
    from rmqctl.errors import RmqError
    from rmqctl.store.commitlog import CommitLog

    cl = CommitLog(store)

    def read(offset: int, size: int):
        if offset < 0 or size <= 0 or (cl_end is not None and offset + size > cl_end):
            return None
        try:
            r = cl.read_record(offset, check_crc=False)
        except (RmqError, OSError, ValueError):
            return None
        return r if r.total_size <= size else None
    return read


def queue_reader(store, max_override: dict | None = None):
    """cq(queue_id) -> (min, max, unit(offset) -> (phys, size) | None) for rmq_sys_wheel_timer, None if absent."""
    from rmqctl.store.consumequeue import ConsumeQueue

    def cq(qid: int):
        q = ConsumeQueue(store, TIMER_TOPIC, qid)
        if not q.directory.is_dir() or not q.queue.files:
            return None
        qmax = (max_override or {}).get(qid)
        if qmax is None:
            qmax = q.max_offset()

        def unit(o):
            u = q.unit(o)
            return None if u is None else (u[0], u[1])
        return (q.min_offset(), qmax, unit)
    return cq


def message_queue_pos(read):
    """message_at for simulate() from a message_reader: (queue_id, queue_offset) of the unit's message, or None."""
    def at(offset: int, size: int):
        r = read(offset, size)
        return None if r is None else (r.queue_id, r.queue_offset)
    return at
