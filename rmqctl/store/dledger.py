"""DLedger commitlog stores (enableDLegerCommitLog=true): STORE/dledger-<selfId>/{data,index,checkpoint,currterm}.

The walk follows DLedgerMmapFileStore.recover() (DLedger 0.3.1.2, used by RocketMQ 4.9.7 and 5.3.3): entries
from the first data file on, a blank (magic -1) moves to the next file, a size of 0 ends the log, any failed
check (position, size formula, magic, index +1, term not decreasing, size > 44, a header or body past the end of
the file) ends the log there. Each entry body is one message record whose physical offset is entry pos + 48.
"""
from __future__ import annotations

import os
import re
import struct
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from rmqctl.formats import dledger as fmt

# set by the commands that read DLedger stores through the commitlog-record paths (rebuild): Store.open lets them in
READING: ContextVar[bool] = ContextVar("rmqctl_dledger_reading", default=False)

_NAME = re.compile(r"^\d{20}$")
_HDR = struct.Struct(">iiqqqiiii")
_UNIT = struct.Struct(">iqiqq")


def find(root) -> Path | None:
    """The dledger-<selfId>/ folder of a store written by DLedgerCommitLog, or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    for p in sorted(root.iterdir()):
        if p.name.startswith("dledger-") and (p / "data").is_dir():
            return p
    return None


def read_properties(path: Path) -> dict | None:
    """java.util.Properties text as IOUtils.string2Properties reads it (key=value lines, # comments); None if absent."""
    try:
        text = path.read_text(encoding="latin-1")
    except FileNotFoundError:
        return None
    out = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", s)
        if m:
            out[m.group(1)] = m.group(2)
    return out


@dataclass
class DFile:
    path: Path
    start: int
    size: int


def _files(d: Path) -> list[DFile]:
    if not d.is_dir():
        return []
    return [DFile(p, int(p.name), p.stat().st_size) for p in sorted(d.iterdir()) if _NAME.match(p.name) and p.is_file()]


@dataclass
class Entry:
    index: int
    term: int
    pos: int
    size: int
    magic: int
    channel: int
    chain_crc: int
    body_crc: int
    body_length: int
    path: Path

    @property
    def message_offset(self) -> int:
        return self.pos + fmt.BODY_OFFSET


@dataclass
class EntryStop:
    kind: str           # "end" (size 0 / zeros), "files" (after the last file), or a failed check
    offset: int         # absolute data position where the walk ended (DLedger's processOffset)
    detail: str = ""
    path: str = ""
    file_offset: int = 0

    @property
    def normal(self) -> bool:
        return self.kind in ("end", "files")


@dataclass
class DLedgerLog:
    dir: Path
    data: list[DFile] = field(default_factory=list)
    index: list[DFile] = field(default_factory=list)

    @classmethod
    def open(cls, d: Path) -> DLedgerLog:
        return cls(d, _files(d / "data"), _files(d / "index"))

    @property
    def self_id(self) -> str:
        return self.dir.name[len("dledger-"):]

    @property
    def data_file_size(self) -> int:
        return self.data[0].size if self.data else 0

    @property
    def index_file_size(self) -> int:
        return self.index[0].size if self.index else fmt.DEFAULT_INDEX_FILE_SIZE

    def checkpoint(self) -> dict | None:
        return read_properties(self.dir / "checkpoint")

    def currterm(self) -> dict | None:
        return read_properties(self.dir / "currterm")

    def index_unit(self, i: int) -> tuple | None:
        """(magic, pos, size, index, term) of unit i, None when no index file holds it."""
        off = i * fmt.INDEX_UNIT_SIZE
        for f in self.index:
            if f.start <= off and off + fmt.INDEX_UNIT_SIZE <= f.start + f.size:
                with open(f.path, "rb") as fh:
                    fh.seek(off - f.start)
                    b = fh.read(fmt.INDEX_UNIT_SIZE)
                return _UNIT.unpack(b) if len(b) == fmt.INDEX_UNIT_SIZE else None
        return None

    def recovery_start(self) -> int:
        """The data file DLedger's recovery walks from: the third-last, or an earlier one, the first going back
        whose first entry is sound and agrees with its index unit (else the first file)."""
        k = max(0, len(self.data) - 3)
        for i in range(k, -1, -1):
            f = self.data[i]
            with open(f.path, "rb") as fh:
                b = fh.read(fmt.BODY_OFFSET)
            if len(b) < fmt.BODY_OFFSET:
                continue
            magic, size, index, term, pos, _c, _cc, _bc, blen = _HDR.unpack(b)
            if magic != fmt.MAGIC or size <= fmt.HEADER_SIZE or pos != f.start or blen + fmt.BODY_OFFSET != size:
                continue
            if index < 0 or self.index_unit(index) != (magic, pos, size, index, term):
                continue
            return i
        return 0

    def walk(self, stop_box: list, *, bodies: bool = False, start_file: int = 0):
        """Yield (Entry, body bytes or None) in DLedger's recovery order; stop_box gets the EntryStop."""
        last = [-1, -1, self.data[start_file].start if self.data else 0]
        for f in self.data[start_file:]:
            with open(f.path, "rb") as fh:
                yield from self._walk_file(f, fh, stop_box, bodies, last)
            if stop_box:
                return
        stop_box.append(EntryStop("files", last[2]))

    def _walk_file(self, f, fh, stop_box, bodies, last):
        """One data file's entries, read through a bounded window (memory does not grow with the file size);
        last = [last index, last term, process offset] carried from file to file."""
        win = _Window(fh)
        size = win.size
        last_index, last_term = last[0], last[1]
        pos = 0
        last[2] = f.start
        while True:
            absolute = f.start + pos

            def stop(kind, detail="", _at=(absolute, str(f.path), pos)):
                stop_box.append(EntryStop(kind, _at[0], detail, _at[1], _at[2]))

            if pos + 4 > size:
                stop("truncated", "no room for an entry header")
                return
            buf, o = win.view(pos, fmt.BODY_OFFSET)
            magic = struct.unpack_from(">i", buf, o)[0]
            if magic == fmt.BLANK_MAGIC:
                last[2] = f.start + f.size
                return
            if pos + fmt.BODY_OFFSET > size:
                if pos + 8 <= size and struct.unpack_from(">i", buf, o + 4)[0] == 0:
                    stop("end")
                else:
                    stop("truncated", "entry header past the end of the file")
                return
            (magic, esize, index, term, epos, channel, chain, bcrc, blen) = _HDR.unpack_from(buf, o)
            if esize == 0:
                stop("end")
                return
            if epos != absolute:
                stop("bad position", f"pos {epos} != {absolute}")
                return
            if blen + fmt.BODY_OFFSET != esize:
                stop("bad size", f"size {esize} != body length {blen} + 48")
                return
            if esize < 0 or pos + esize > size:
                stop("truncated", f"size {esize} past the end of the file")
                return
            if magic != fmt.MAGIC:
                stop("bad magic", f"magic {magic}")
                return
            if last_index != -1 and index != last_index + 1:
                stop("index not +1", f"index {index} after {last_index}")
                return
            if term < last_term:
                stop("term decreases", f"term {term} after {last_term}")
                return
            if esize <= fmt.HEADER_SIZE:
                stop("bad size", f"size {esize} <= 44")
                return
            e = Entry(index, term, absolute, esize, magic, channel, chain, bcrc, blen, f.path)
            body = None
            if bodies:
                buf, o = win.view(pos, esize)
                body = buf[o + fmt.BODY_OFFSET:o + esize]
            yield e, body
            last_index, last_term = last[0], last[1] = index, term
            pos += esize
            last[2] = f.start + pos


class _Window:
    """Bounded reads of one data file: view(pos, n) gives (bytes, offset of pos in them) holding [pos, pos+n)
    (less at the end of the file), refilled WINDOW bytes at a time."""
    WINDOW = 8 << 20

    def __init__(self, fh):
        self.fh, self.size = fh, os.fstat(fh.fileno()).st_size
        self.base, self.buf = 0, b""

    def view(self, pos: int, n: int):
        if pos < self.base or pos + n > self.base + len(self.buf):
            self.fh.seek(pos)
            self.buf, self.base = self.fh.read(max(n, self.WINDOW)), pos
        return self.buf, pos - self.base


@dataclass
class RecoveryPlan:
    """What DLedgerMmapFileStore.recover() will do to this log at the next broker start."""

    keep_entries: int          # entries kept (index 0 .. keep-1 relative to the first)
    first_index: int
    last_index: int            # -1 when none
    last_term: int
    process_offset: int        # data end after recovery
    stop: EntryStop
    cut_bytes: int             # bytes of data after process_offset up to the last non-zero ... (files' end)
    data_files_deleted: list[str]
    index_rewrite_from: int | None   # first entry whose index unit DLedger rewrites (mismatch), or None
    index_end: int             # index end after recovery ((last+1) * 32)
    committed_index: int | None


def predict_recovery(log: DLedgerLog) -> RecoveryPlan:
    box: list = []
    n = 0
    first = last = -1
    last_term = -1
    rewrite = None
    k = log.recovery_start()
    if k > 0:       # entries before the start file are kept unread; count them from the indexes
        first = _first_index(log.data[0])
        n = _first_index(log.data[k]) - first
    for e, _ in log.walk(box, start_file=k):
        if first == -1:
            first = e.index
        n += 1
        last, last_term = e.index, e.term
        if rewrite is None:
            u = log.index_unit(e.index)
            if u is None or u != (e.magic, e.pos, e.size, e.index, e.term):
                rewrite = e.index
    st = box[0]
    off = st.offset
    deleted = [f.path.name for f in log.data if f.start > off]
    cut = sum(f.size for f in log.data if f.start > off)
    for f in log.data:
        if f.start <= off < f.start + f.size:
            cut += _nonzero_tail(f, off - f.start)
    ck = log.checkpoint() or {}
    try:
        committed = int(str(ck.get("committedIndex", "")).strip())
    except ValueError:
        committed = None
    return RecoveryPlan(n, first, last, last_term, off, st, cut, deleted, rewrite, (last + 1) * fmt.INDEX_UNIT_SIZE,
                        committed)


def _first_index(f: DFile) -> int:
    with open(f.path, "rb") as fh:
        return _HDR.unpack(fh.read(fmt.BODY_OFFSET))[2]


def _nonzero_tail(f: DFile, rel: int) -> int:
    """Bytes from rel to the last non-zero byte of the file (what a cut there drops), read in bounded chunks."""
    from rmqctl.scan import last_nonzero

    fd = os.open(f.path, os.O_RDONLY)
    try:
        return last_nonzero(fd, rel, os.fstat(fd).st_size) - rel
    finally:
        os.close(fd)


def message_walk(log: DLedgerLog, stop_box: list, *, check_crc: bool = True):
    """Yield (Entry, scan.Record or None, record Stop or None): the message each entry wraps, checked as the
    commitlog's records are (body CRC, length formula, PHYSICALOFFSET == entry pos + 48)."""
    from rmqctl.scan import FileWalk

    fds: dict = {}
    try:
        for e, _ in log.walk(stop_box):
            fd = fds.get(e.path)
            if fd is None:
                fd = fds[e.path] = os.open(e.path, os.O_RDONLY)
            fstart = int(e.path.name)
            rel = e.pos - fstart + fmt.BODY_OFFSET
            w = FileWalk(fd, fstart, rel + e.body_length, rel, check_crc=check_crc, path=str(e.path))
            rec = None
            for r in w:
                rec = r
                break
            if rec is not None and rec.total_size != e.body_length:
                yield e, rec, "record size differs from the entry body"
            elif rec is None:
                yield e, None, w.stop
            else:
                yield e, rec, None
    finally:
        for fd in fds.values():
            os.close(fd)


@dataclass
class _End:
    stop: object
    records: int = 0
    last_valid: int | None = None


def records_for_rebuild(log: DLedgerLog):
    """`records(walk)` for repair.rebuild.analyze_rebuild: the wrapped messages in entry order (each checked as a
    commitlog record), walk.ends filled with where the entry log ends (END, or the failed check)."""
    from rmqctl.scan import END, Stop

    def records(walk):
        box: list = []
        n = 0
        last = None
        for _e, rec, bad in message_walk(log, box):
            if bad is not None:
                continue
            n += 1
            last = rec.offset
            yield rec
        st = box[0]
        kind = END if st.normal else "dledger_" + st.kind.replace(" ", "_")
        walk.ends.append(_End(Stop(kind, st.offset, st.file_offset, 0, st.detail), n, last))

    return records
