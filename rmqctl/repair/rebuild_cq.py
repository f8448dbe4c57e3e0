"""Consume-queue building as ConsumeQueue.putMessagePositionInfo does it, and the broker's CQ
truncation (ConsumeQueue.recover + truncateDirtyLogicFiles), both producing whole replacement files.

Broker behaviour reproduced (ConsumeQueue.java, 4.9.7 and 5.3.3):
* a unit is skipped when `offset + size <= maxPhysicOffset` (already built) or, for cqOffset != 0,
  when `cqOffset*20` is below the current write end (built twice);
* otherwise it is APPENDED at the queue's current write end (MappedFile.appendMessage): a jump in
  queue offsets is only logged, never leaves a hole;
* the first file of an empty queue is created at floor(cqOffset*20 / fileSize)*fileSize and, when
  cqOffset != 0, every unit before it in that file is a pre-blank unit (0, 0x7FFFFFFF, 0);
* a full file is followed by the next one (start + fileSize); files are always fileSize bytes.

Where rmqctl differs on purpose (docs/recovery.md): truncated tails are zero-filled instead of being
left as stale units, a file without any valid unit is removed instead of being kept with a bogus
write position (the 5.3.3 correctMinOffset IAE, apache/rocketmq#9728/apache/rocketmq#10108), and pre-blank
units do not count towards
maxPhysicOffset (the broker would take 0x7FFFFFFF from them).

put_many() appends a whole batch of one queue's units as one numpy record array when the broker's
rules accept all of them (the usual case), else it falls back to put() unit by unit; with stage_dir set
every completed file is compared and staged at once, and the units of a file not yet complete leave memory
past SPILL_BYTES (QueueState.flush_full): a queue holds a bounded piece of its file, whatever the file size.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from rmqctl import dispatch as D
from rmqctl import writers
from rmqctl.formats import consumequeue as cqf
from rmqctl.formats import consumequeue_ext as cqf_ext
from rmqctl.store.files import FileQueue, offset_name, write_all

UNIT = writers.CQ_UNIT                  # derived from formats.consumequeue.ConsumeQueueUnit
UNIT_SIZE = cqf.UNIT_SIZE
PRE_BLANK = UNIT.pack(0, cqf.PRE_BLANK_SIZE, 0)
_UNIT_DT = [("p", ">i8"), ("s", ">i4"), ("t", ">i8")]


_TAG_HASH: dict = {}


def tags_code(topic: str, props: dict, store_ts: int, delay_levels) -> int:
    """rmqctl.dispatch.tags_code with the TAGS hash memoised (tags repeat; the hash is a Python loop)."""
    if topic == D.SCHEDULE_TOPIC and "DELAY" in props:
        return D.tags_code(topic, props, store_ts, delay_levels)
    tags = props.get("TAGS")
    if not tags:
        return 0
    h = _TAG_HASH.get(tags)
    if h is None:
        if len(_TAG_HASH) > 100_000:
            _TAG_HASH.clear()
        h = _TAG_HASH[tags] = D.tags_code(topic, {"TAGS": tags}, store_ts, delay_levels)
    return h


def is_pre_blank(phys: int, size: int) -> bool:
    return phys == 0 and size == cqf.PRE_BLANK_SIZE


@dataclass
class QueueState:
    """One queue: what is kept of its existing files and what the scan appends after it."""

    topic: str
    queue_id: int
    directory: Path
    file_size: int
    files: list = field(default_factory=list)      # existing MappedFile list
    keep_end: int = 0          # logical byte end of the kept prefix (0 and no files kept: empty queue)
    kept_any: bool = False     # at least one existing file keeps data
    max_phys: int = -1         # end (offset+size) of the last kept real unit
    dropped_valid_below: int | None = None   # phys of the first valid unit dropped below the cut
    dropped_units: int = 0     # units removed by the truncation
    # appended by dispatch
    base: int | None = None    # logical byte position where the appended units start
    end: int = 0               # current logical write end
    out: bytearray = field(default_factory=bytearray)   # units from out_base to end
    out_base: int = 0
    added: int = 0
    # streaming: with stage_dir set, every file the appends have completed is finished (compared with
    # the existing file, staged when different) as soon as it is complete, so `out` holds at most one file
    stage_dir: Path | None = None
    staged: list = field(default_factory=list)          # (file start, staged path) of changed files
    done_files: set = field(default_factory=set)        # file starts already finished
    ext: "ExtQueue | None" = None      # enableConsumeQueueExt: units get ext addresses as tagsCode
    # the highest physical offset of a unit truncate_state read (-1: none): a cut above it changes nothing
    seen_phys: int = -1
    # truncate_state found only zeros after keep_end in the file holding it, up to a full file_size: with nothing
    # appended that file stays as it is, and is not read again to be compared (a store may hold tens of thousands)
    tail_zero: bool = False
    # units moved out of memory before their file was complete (flush_full): up to same_end the file's bytes
    # were found equal to the existing file's (so nothing was written); `spilled` is the start of a file whose
    # staged copy is being written piece by piece (its bytes differ), None when none is
    same_end: int = 0
    spilled: int | None = None

    SPILL_BYTES = 1 << 18   # 256 KiB of units held per queue at most, beyond the one append in progress

    @property
    def spill_at(self) -> int:
        """flush_full is due when the held units reach this many bytes."""
        return min(self.file_size, self.SPILL_BYTES)

    def fresh_copy(self) -> "QueueState":
        """A copy of a state as truncate_state left it, before any unit was appended (no ext)."""
        if self.added or self.out or self.staged or self.ext is not None:
            raise ValueError("fresh_copy of a queue state that has appended units")
        c = object.__new__(type(self))      # not dataclasses.replace (all of __init__ again): twice per queue
        c.__dict__.update(self.__dict__)
        c.files, c.out, c.staged, c.done_files = list(self.files), bytearray(), [], set()
        return c

    def start_from_existing(self):
        self.end = self.keep_end
        self.base = self.keep_end if self.kept_any else None
        self.out_base = self.base or 0

    def put(self, phys: int, size: int, tags: int, cq_offset: int, ts: int = -1, props=None) -> None:
        """ts: the record's store time, >= 0 when the unit goes through the ext (putMessagePositionInfoWrapper;
        multi-dispatched LMQ units never do). props: the record's properties (read by batch queues only)."""
        if phys + size <= self.max_phys:
            return
        expect = cq_offset * UNIT_SIZE
        fs = self.file_size
        if self.base is None:
            # first file created in this queue
            start = expect - expect % fs
            self.base = start
            self.end = start
            self.out_base = start
            if cq_offset != 0:
                n = (expect % fs) // UNIT_SIZE
                self.out += PRE_BLANK * n
                self.end += n * UNIT_SIZE
        elif cq_offset != 0 and expect < self.end:
            return
        if self.ext is not None and ts >= 0:
            tags = self.ext.put(tags, ts)
        self.out += UNIT.pack(phys, size, tags)
        self.end += UNIT_SIZE
        self.max_phys = phys + size
        self.added += 1
        if self.stage_dir is not None and self.end - self.out_base >= self.spill_at:
            self.flush_full()

    def put_many(self, phys, size, tags, cq_offset, ts=None) -> None:
        """put() for many units of this queue in commitlog order (numpy int64 arrays). The common case
        -- nothing already built, queue offsets not behind the write end -- is appended in one go;
        anything else takes put()'s path unit by unit."""
        import numpy as np

        n = len(phys)
        if not n:
            return
        ends = phys + size
        i = int(np.searchsorted(ends, self.max_phys, "right")) if self.max_phys >= 0 else 0
        ext = self.ext is not None and ts is not None
        if i < n and self.base is None:
            self.put(int(phys[i]), int(size[i]), int(tags[i]), int(cq_offset[i]), int(ts[i]) if ext else -1)
            i += 1
        if i >= n:
            return
        q = cq_offset[i:]
        k = len(q)
        at = self.end + UNIT_SIZE * np.arange(k, dtype=np.int64)
        if not ((q == 0) | (q * UNIT_SIZE >= at)).all() or (ends[i] <= self.max_phys):
            for j in range(i, n):
                self.put(int(phys[j]), int(size[j]), int(tags[j]), int(cq_offset[j]), int(ts[j]) if ext else -1)
            return
        u = np.empty(k, _UNIT_DT)
        u["p"], u["s"], u["t"] = phys[i:], size[i:], tags[i:]
        if ext:
            u["t"] = [self.ext.put(t, s) if s >= 0 else t for t, s in zip(tags[i:].tolist(), ts[i:].tolist())]
        self.out += u.tobytes()
        self.end += UNIT_SIZE * k
        self.max_phys = int(ends[-1])
        self.added += k
        if self.stage_dir is not None and self.end - self.out_base >= self.spill_at:
            self.flush_full()

    def _file_head(self, s: int, old_prefix) -> bytearray:
        """The bytes of file s up to the end of its data (the rest of its file_size bytes are zeros): the kept
        prefix of the existing file (old_prefix(k): its first k bytes, or None), then the appended units."""
        fs = self.file_size
        k = self._prefix_len(s)
        a = b = 0
        if self.base is not None:
            a, b = max(self.base, s, self.out_base), min(self.end, s + fs)
        buf = bytearray(max(k, b - s if b > a else 0))
        old = old_prefix(k) if k else None
        if old is not None:
            buf[:k] = old[:k].ljust(k, b"\0")
        if b > a:
            buf[a - s:b - s] = self.out[a - self.out_base:b - self.out_base]
        return buf

    def _prefix_len(self, s: int) -> int:
        """How many first bytes of file s are the existing file's: the kept prefix, or what a spill found equal."""
        fs = self.file_size
        k = min(fs, self.keep_end - s) if self.kept_any and s < self.keep_end else 0
        if s < self.same_end <= s + fs:
            k = max(k, self.same_end - s)
        return k

    def _file_bytes(self, s: int, old: bytes | None) -> bytes:
        return bytes(self._file_head(s, lambda k: old).ljust(self.file_size, b"\0"))

    def _stage_if_changed(self, s: int) -> None:
        """Compare file s as the appends leave it with the existing file, and stage it when they differ. A
        queue's file is mostly zeros (6 MB mapped, a few units used): only its head is built, the existing
        file's zeros are checked without decoding (rmqctl.store.zeros), and the staged file is written as its
        head and a size (the zeros a hole, as the broker's own mapped files are)."""
        if self.spilled == s:
            self._finish_spilled(s)
            return
        f = self._existing(s)
        if f is not None and self.tail_zero and not self.added and type(self) is QueueState \
                and s == self.keep_end - self.keep_end % self.file_size:
            return      # the kept prefix of that file, then zeros: what it holds
        if f is None:
            head = self._file_head(s, lambda k: None)
        else:
            # one open per queue file (a store may hold tens of thousands), and no file object: its isatty and tell
            # cost three system calls more
            fd, old = os.open(f.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)), []
            try:
                head = self._file_head(s, lambda k: old.append(os.pread(fd, k, 0)) or old[0])
                if _holds_fd(fd, head, self.file_size, old[0] if old else None):
                    return
            finally:
                os.close(fd)
        self.stage_dir.mkdir(parents=True, exist_ok=True)
        staged = self.stage_dir / offset_name(s)
        write_staged(staged, head, self.file_size)
        self.staged.append((s, staged))

    def _existing(self, s: int):
        for f in self.files:
            if f.start == s:
                return f
        return None

    def flush_full(self) -> None:
        """Finish every file that the appended units have completed; then, when the units held for the next one
        reach SPILL_BYTES, move them out of memory (bounded memory)."""
        fs = self.file_size
        while self.end - (self.out_base - self.out_base % fs) >= fs:
            s = self.out_base - self.out_base % fs
            self._stage_if_changed(s)
            self.done_files.add(s)
            del self.out[:s + fs - self.out_base]
            self.out_base = s + fs
        if len(self.out) >= self.SPILL_BYTES:
            self._spill(self.out_base - self.out_base % fs)

    def _spill(self, s: int) -> None:
        """The held units of file s (all within it) leave memory. While they equal the existing file's bytes at
        their place nothing is written (same_end moves on: _file_head reads them back from that file); from the
        first difference the file is staged: its head written once, each later piece where it belongs."""
        n = self.end - self.out_base
        if self.spilled != s:
            f = self._existing(s)
            pos = self.out_base - s
            if f is not None and pos == self._prefix_len(s):
                fd = os.open(f.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                try:
                    same = os.pread(fd, n, pos) == self.out
                finally:
                    os.close(fd)
                if same:
                    self.same_end = self.end
                    self.out.clear()
                    self.out_base = self.end
                    return
            head = self._file_head(s, lambda k: read_file(f.path, k) if f is not None else None)
            self.stage_dir.mkdir(parents=True, exist_ok=True)
            write_staged(self.stage_dir / offset_name(s), head)
            self.spilled = s
        else:
            self._write_spilled(s, n, None)
        self.out.clear()
        self.out_base = self.end

    def _finish_spilled(self, s: int) -> None:
        """File s, staged piece by piece, is complete (or the dispatch is over): its last units, then its size."""
        n = min(self.end, s + self.file_size) - self.out_base
        self._write_spilled(s, n, self.file_size)
        del self.out[:n]
        self.out_base += n
        self.staged.append((s, self.stage_dir / offset_name(s)))
        self.spilled = None

    def _write_spilled(self, s: int, n: int, size: int | None) -> None:
        fd = os.open(self.stage_dir / offset_name(s), os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            write_all(fd, [memoryview(self.out)[:n]], self.out_base - s)
            if size is not None:
                os.ftruncate(fd, size)
        finally:
            os.close(fd)

    def finish_files(self) -> list:
        """(file start, staged path) of every changed file: those finished while streaming plus the rest."""
        if self.stage_dir is None:
            raise ValueError("finish_files needs stage_dir")
        for s in self._open_starts():
            self._stage_if_changed(s)
        return sorted(self.staged)

    def ext_files(self) -> list:
        """(target path, staged path) of the ext files that change."""
        if self.ext is None or self.stage_dir is None:
            return []
        return self.ext.finish(self.stage_dir / "ext")

    def ext_delete_files(self) -> list:
        return self.ext.delete_files() if self.ext is not None else []

    @property
    def changed(self) -> bool:
        return self.added > 0 or self.dropped_units > 0 or self.delete_files()

    def _survives(self, start: int) -> bool:
        fs = self.file_size
        if self.kept_any and start < self.keep_end:
            return True
        if self.base is not None and self.end > self.base:
            return self.base - self.base % fs <= start < self.end
        return False

    def delete_files(self) -> list:
        """Existing files that hold nothing after the change."""
        return [f for f in self.files if not self._survives(f.start)]

    def _open_starts(self) -> list:
        """Starts of the files the change writes that are not finished yet."""
        fs = self.file_size
        starts = set()
        if self.base is not None and self.end > self.base:
            s = self.base - self.base % fs
            while s < self.end:
                starts.add(s)
                s += fs
        if self.kept_any and self.keep_end % fs:
            starts.add(self.keep_end - self.keep_end % fs)
        return sorted(starts - self.done_files)

    def new_file_contents(self, read_existing):
        """(file_start, bytes) for each file whose bytes change. read_existing(path) -> bytes."""
        existing = {f.start: f for f in self.files}
        for s in self._open_starts():
            old = read_existing(existing[s].path) if s in existing else None
            new = self._file_bytes(s, old)
            if old is None or new != old:
                yield s, new

    def path_for(self, start: int) -> Path:
        return self.directory / offset_name(start)


def load_units(path, size: int):
    """The units of one file up to its last non-zero one, as a numpy structured array (bounded: one CQ file;
    the zero units after them are invalid, and its zeros are not read where they are a hole)."""
    import numpy as np

    data = unit_bytes(path, size)
    n = len(data) // UNIT_SIZE
    return np.frombuffer(data[:n * UNIT_SIZE], dtype=units_dtype())


def units_dtype():
    """The numpy dtype of a consume-queue unit as load_units gives it (built once)."""
    global _UNIT_DTYPE
    if _UNIT_DTYPE is None:
        import numpy as np

        _UNIT_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
    return _UNIT_DTYPE


def unit_bytes(path, size: int) -> bytes:
    """The first `size` bytes of a file up to the end of the unit holding its last non-zero byte."""
    from rmqctl.repair.sparse import last_nonzero

    fd = os.open(path, os.O_RDONLY)
    try:
        got: list = []
        end = last_nonzero(fd, 0, size, got)
        want = min(size, -(-end // UNIT_SIZE) * UNIT_SIZE)
        if got and got[0][0] == 0:
            # the chunk holding the last non-zero byte starts the file (one data extent, as the broker's own
            # files have): no second read; past that chunk there are only zeros
            return got[0][1][:want].ljust(want, b"\0")
        return os.pread(fd, want, 0)
    finally:
        os.close(fd)


_UNIT_DTYPE = None


def truncate_state(store, topic: str, queue_id: int, cut: int | None) -> QueueState:
    """Where the broker's CQ recovery (last three files, first invalid unit) and
    truncateDirtyLogicFiles(cut) leave this queue. cut=None: no commitlog truncation."""
    import numpy as np

    d = store.root.joinpath("consumequeue", topic, str(queue_id))
    fq = FileQueue.scan(d, root=store.root, judged=store.queue_dir_plain(topic, queue_id))
    fs = store.config.cq_file_size
    st = QueueState(topic, queue_id, d, fs, fq.files)
    files = fq.files
    if not files:
        return st
    first = max(0, len(files) - 3)
    keep_end, max_phys = files[first].start, -1
    limit = cut if cut is not None else 2**62
    loaded: dict = {}
    for i in range(first, len(files)):
        f = files[i]
        if i > first and f.start != keep_end:
            break   # a missing file in between: nothing after it is reachable
        u = loaded[f.start] = load_units(f.path, min(f.size, fs))
        # native copies: every comparison on the big-endian fields would convert them again (a store may
        # hold tens of thousands of queues, each read here)
        ph, sz = u["phys"].astype(np.int64), u["size"].astype(np.int64)
        if len(ph):
            st.seen_phys = max(st.seen_phys, int(ph.max()))
        valid = (ph >= 0) & (sz > 0) & (ph < limit)
        n_ok = len(ph) if valid.all() else int(valid.argmin())
        if n_ok and not (ph[n_ok - 1] == 0 and sz[n_ok - 1] == cqf.PRE_BLANK_SIZE):
            max_phys = int(ph[n_ok - 1]) + int(sz[n_ok - 1])
        elif n_ok:
            realmask = ~((ph[:n_ok] == 0) & (sz[:n_ok] == cqf.PRE_BLANK_SIZE))
            if realmask.any():
                j = int(np.flatnonzero(realmask)[-1])
                max_phys = int(ph[j]) + int(sz[j])
        keep_end = f.start + n_ok * UNIT_SIZE
        if n_ok < fs // UNIT_SIZE:
            break
    # everything at or after keep_end is dropped; remember valid units below the cut among them
    for f in files:
        if f.start + fs <= keep_end:
            continue
        u = loaded.get(f.start)
        if u is None:
            u = load_units(f.path, min(f.size, fs))
            st.seen_phys = max(st.seen_phys, _top_phys(u))
        rest = u[max(0, (keep_end - f.start) // UNIT_SIZE):]
        if not len(rest):
            continue
        live = (rest["phys"] != 0) | (rest["size"] != 0) | (rest["tags"] != 0)
        st.dropped_units += int(live.sum())
        below = rest[(rest["phys"] >= 0) & (rest["size"] > 0) & (rest["phys"] < limit)
                     & ~((rest["phys"] == 0) & (rest["size"] == cqf.PRE_BLANK_SIZE))]
        if len(below):
            v = int(below["phys"].min())
            st.dropped_valid_below = v if st.dropped_valid_below is None else min(v, st.dropped_valid_below)
    st.kept_any = keep_end > files[0].start
    st.keep_end, st.max_phys = (keep_end if st.kept_any else 0), max_phys
    # every non-zero byte that file holds up to file_size lies in a unit counted above: none dropped, none there
    tail = next((f for f in files if f.start == keep_end - keep_end % fs), None)
    st.tail_zero = st.dropped_units == 0 and tail is not None and tail.start in loaded and tail.size >= fs
    st.start_from_existing()
    if store.config.enable_cq_ext:
        st.ext = _ext_after_recovery(store, topic, queue_id, files[first:], keep_end, fs)
    return st


def _top_phys(u) -> int:
    """An upper bound of the physical offsets a cut compares (of units with a valid offset and size)."""
    return int(u["phys"].max()) if len(u) else -1


def _ext_after_recovery(store, topic, queue_id, files, keep_end: int, fs: int) -> ExtQueue:
    """The ext write position after ConsumeQueue.recover: the recovered end of the ext files, cut back to
    the end of the unit of the last kept CQ unit holding an ext address (truncateByMaxAddress)."""
    import numpy as np

    ext = ExtQueue.for_queue(store, topic, queue_id, 0)
    pos, last = ext.recovered_end(), None
    for f in files:
        if f.start >= keep_end:
            break
        u = load_units(f.path, min(f.size, fs, keep_end - f.start))
        hit = np.flatnonzero(u["tags"] <= cqf_ext.MAX_ADDR)
        if len(hit):
            last = int(u["tags"][hit[-1]])
    if last is not None:
        e = ext.unit_end(last)
        if e is not None:
            pos = e
    ext.pos = ext.rp = pos
    return ext


def empty_state(store, topic: str, queue_id: int) -> QueueState:
    """A queue rebuilt from nothing (rebuild cq): every existing file is replaced or removed."""
    d = store.root.joinpath("consumequeue", topic, str(queue_id))
    fq = FileQueue.scan(d, root=store.root, judged=store.queue_dir_plain(topic, queue_id))
    st = QueueState(topic, queue_id, d, store.config.cq_file_size, fq.files)
    st.dropped_units = 0
    st.start_from_existing()
    if store.config.enable_cq_ext:
        st.ext = ExtQueue.for_queue(store, topic, queue_id, None)
    return st


def read_file(path: Path, size: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(size)


def _holds_fd(fd: int, head, size: int, prefix: bytes | None) -> bool:
    """Whether the open file's first `size` bytes are `head` followed by zeros; ``prefix``: its first bytes as
    already read (not read again when they are the whole head)."""
    from rmqctl.store.zeros import next_nonzero

    if os.fstat(fd).st_size < size:
        return False
    if not (prefix == head if prefix is not None and len(prefix) == len(head) else os.pread(fd, len(head), 0) == head):
        return False
    return next_nonzero(fd, len(head), size) is None


def write_staged(path: Path, data: bytes, size: int | None = None) -> None:
    """Write data to a new file; `size`: the file is then extended with zeros to that size."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, [data], 0)
        if size is not None and size > len(data):
            os.ftruncate(fd, size)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------------
# consumequeue_ext (enableConsumeQueueExt)

EXT_HEAD = writers.CQ_EXT_HEAD           # derived from formats.consumequeue_ext.CqExtUnitHead
EXT_MIN_ADDR = -(1 << 63)


class ExtQueue:
    """consumequeue_ext/<topic>/<queueId>/ as ConsumeQueueExt.put writes it: units (size, tagsCode,
    storeTime, bitMapSize, bitMap) appended at the write position; a unit that does not fit before the
    file's last 4 bytes ends the file with a short -1 and goes to the next file; the CQ unit's tagsCode is
    the unit's address (real offset + Long.MIN_VALUE).

    The filter bit map is computed by the broker from SQL92 subscriptions at dispatch time; offline it is
    taken from the existing ext unit written for the same message (same tagsCode and store time, read in
    order from the write position, which is where the broker wrote them), else left empty -- a unit
    without a bit map makes the broker evaluate the filter on the message itself, never skip it."""

    def __init__(self, directory: Path, file_size: int, pos: int):
        self.directory, self.file_size = directory, file_size
        fq = FileQueue.scan(directory)
        self.files = {f.start: f for f in fq.files}
        self.pos = pos                # write position (real offset)
        self.rp = pos                 # read position in the existing units (pairing)
        self.cur: int | None = None   # start of the file being written
        self.buf: bytearray | None = None
        self.done: list = []          # (file start, bytes) of finished files
        self.used = 0
        self._old: dict = {}

    @classmethod
    def for_queue(cls, store, topic: str, qid: int, pos: int | None) -> "ExtQueue":
        d = store.root / "consumequeue_ext" / topic / str(qid)
        q = cls(d, store.config.cq_ext_file_size, 0)
        if pos is None:      # rebuilt from nothing: where the existing ext files begin
            pos = min(q.files) if q.files else 0
        q.pos = q.rp = pos
        return q

    def _orig(self, start: int) -> bytes:
        b = self._old.get(start)
        if b is None:
            f = self.files.get(start)
            b = read_file(f.path, self.file_size) if f is not None else b""
            if len(self._old) > 2:
                self._old.clear()
            self._old[start] = b
        return b

    def recovered_end(self) -> int:
        """ConsumeQueueExt.recover: the end of the units of the last file (walked file by file)."""
        if not self.files:
            return 0
        last = max(self.files)
        data, p = self._orig(last), 0
        while p + 2 <= len(data):
            size = struct.unpack_from(">h", data, p)[0]
            if size <= 0:
                break
            p += size
        return last + p

    def unit_end(self, addr: int) -> int | None:
        """End of the unit at an ext address (truncateByMaxAddress), None if there is none."""
        off = addr - EXT_MIN_ADDR
        s = off - off % self.file_size
        data = self._orig(s)
        p = off - s
        if p + 2 > len(data):
            return None
        size = struct.unpack_from(">h", data, p)[0]
        return off + size if size > 0 else None

    def _existing_unit(self, at: int):
        s = at - at % self.file_size
        data = self._orig(s)
        p = at - s
        if p + EXT_HEAD.size > len(data):
            return None
        size, tags, ts, bl = EXT_HEAD.unpack_from(data, p)
        if size <= 0:
            return "next"
        if bl < 0 or size != EXT_HEAD.size + bl or p + size > len(data):
            return None
        return size, tags, ts, bytes(data[p + EXT_HEAD.size:p + size])

    def _bitmap(self, tags: int, ts: int) -> bytes:
        at = self.rp
        for _ in range(64):      # resynchronise over a few foreign units
            u = self._existing_unit(at)
            if u == "next":
                at = at - at % self.file_size + self.file_size
                if at not in self.files:
                    return b""
                continue
            if u is None:
                return b""
            size, t, s, bm = u
            if t == tags and s == ts:
                self.rp = at + size
                return bm
            at += size
        return b""

    def _switch(self, start: int) -> None:
        if self.cur is not None:
            self.done.append((self.cur, bytes(self.buf)))
        self.cur = start
        old = self._orig(start)
        self.buf = bytearray(self.file_size)
        self.buf[:len(old)] = old

    def put(self, tags: int, ts: int) -> int:
        bm = self._bitmap(tags, ts)
        size = EXT_HEAD.size + len(bm)
        fs = self.file_size
        start = self.pos - self.pos % fs
        if self.cur != start:
            self._switch(start)
        wrote = self.pos - start
        if size > fs - wrote - 4:
            struct.pack_into(">h", self.buf, wrote, -1)     # fullFillToEnd
            start += fs
            self.pos = start
            self._switch(start)
            wrote = 0
        EXT_HEAD.pack_into(self.buf, wrote, size, tags, ts, len(bm))
        self.buf[wrote + EXT_HEAD.size:wrote + size] = bm
        addr = self.pos + EXT_MIN_ADDR
        self.pos += size
        self.used += 1
        return addr

    def finish(self, stage_dir: Path) -> list:
        """(target path, staged path) of every ext file whose bytes change."""
        out = []
        if self.cur is not None:
            self.done.append((self.cur, bytes(self.buf)))
            self.cur, self.buf = None, None
        for s, data in self.done:
            f = self.files.get(s)
            if f is not None and read_file(f.path, self.file_size) == data and f.size == self.file_size:
                continue
            stage_dir.mkdir(parents=True, exist_ok=True)
            staged = stage_dir / offset_name(s)
            write_staged(staged, data)
            out.append((self.directory / offset_name(s), staged))
        self.done = []
        return out

    def delete_files(self) -> list:
        """Existing ext files after the last one written (MappedFileQueue.truncateDirtyFiles)."""
        if not self.used:
            return []
        end = self.pos - self.pos % self.file_size
        return [f for s, f in sorted(self.files.items()) if s > end]
