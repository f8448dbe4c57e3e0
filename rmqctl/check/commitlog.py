"""Commitlog checks: every record of every file, file naming/sizes/gaps, and how each file ends.

One worker call (`scan_file`) checks one file completely and returns a picklable FileResult; with
several processes a file is also split into ranges at record boundaries (`scan_range`: each range owns
the records that START in it, resynchronised with rmqctl.scan.find_next_record from the split point)
whose results `merge_ranges` joins into exactly the whole-file result. Records are walked with the
batch kernel (rmqctl.scanvec) and every per-record check runs as array operations on a batch: topics
and TAGS are grouped per distinct string, the properties structure check looks only at fields with a
suspicious byte (non-ASCII, an empty segment, no final separator), and each dispatchable record is
compared with its consume-queue unit (unit QUEUEOFFSET of queue (topic, QUEUEID), read as a numpy
array in bounded pieces, one cached piece per queue: memory is bounded by the number of queues, never
by the number of messages). FileWalk only classifies where a walk stops (scanvec hands it the record).

How a file's end is classified (the broker's recovery only knows "valid" or "stop"):
  BLANK record                       normal end of a full file
  zeros, rest of the file zero       normal end of the LAST file; in a middle file: no BLANK (error)
  zeros, then valid records          zeroed range inside the file (corruption), scan resumes
  bad record, valid records later    corruption in the middle; the broker would truncate here
  bad record at the tail, last file  torn tail (crash) -- or a write in progress when the lock is held
  valid record with a wrong PHYSICALOFFSET and nothing valid after: stale bytes after the end
"""
from __future__ import annotations

import errno
import os
import struct
from dataclasses import dataclass, field

from rmqctl import scan
from rmqctl.check.findings import ERROR, INFO, WARNING, Finding
from rmqctl.dispatch import MULTI_OFFSET_PROPERTY as _MULTI_OFFSET, SCHEDULE_TOPIC, lmq_targets, tags_code
from rmqctl.formats import commitlog as clf
from rmqctl.formats.index import java_string_hash
from rmqctl.formats.properties import parse_properties
from rmqctl.errors import IOFailure
from rmqctl.store.files import open_read

CQ_UNIT = struct.Struct(">qiq")
CQ_CHUNK_UNITS = 512
PRE_BLANK = (0, 0x7FFFFFFF, 0)

STOP_CHECKS = {
    scan.BAD_MAGIC: "commitlog.magic", scan.BAD_SIZE: "commitlog.total_size",
    scan.LENGTH_MISMATCH: "commitlog.length", scan.BAD_LENGTH: "commitlog.length",
    scan.BAD_BODY_CRC: "commitlog.body_crc", scan.BAD_PROP_CRC: "commitlog.prop_crc",
    scan.BAD_PHYSICAL_OFFSET: "commitlog.physical_offset", scan.BAD_DELAY: "commitlog.delay",
    scan.SHORT: "commitlog.short_record",
}


@dataclass
class QueueTrack:
    """What one file says about one queue: enough to merge files and check the CQ, nothing per message."""
    first_q: int
    last_q: int            # queue offset of the last record
    next_q: int            # expected next queue offset (last_q + INNER_NUM or 1)
    count: int = 0
    first_phys: int = 0
    gaps: int = 0
    first_gap: tuple | None = None      # (phys, expected q, actual q)
    missing: int = 0                    # records with no valid CQ unit
    first_missing: tuple | None = None  # (phys, q)
    mismatches: int = 0
    first_mismatch: tuple | None = None  # (q, expected (phys,size,tags), actual unit)

    def gap_to(self, t: "QueueTrack") -> None:
        """`t` continues this queue directly: a different first offset than expected is a gap."""
        if self.next_q >= 0 and t.first_q != self.next_q:
            self.gaps += 1
            if self.first_gap is None:
                self.first_gap = (t.first_phys, self.next_q, t.first_q)

    def absorb(self, t: "QueueTrack") -> None:
        """Add what a later file/range says about the same queue (counts, first problems, position)."""
        self.gaps += t.gaps
        if self.first_gap is None and t.first_gap:
            self.first_gap = t.first_gap
        self.count += t.count
        self.last_q, self.next_q = t.last_q, t.next_q
        self.missing += t.missing
        if self.first_missing is None:
            self.first_missing = t.first_missing
        self.mismatches += t.mismatches
        if self.first_mismatch is None:
            self.first_mismatch = t.first_mismatch


def _pread_or_empty(path: str, n: int, pos: int) -> bytes:
    """Up to n bytes of a consume-queue file at pos; b"" when the file is missing (the unit is then missing),
    or not read by policy (a link out of the store, a FIFO: the queue walker reports it)."""
    root = path
    for _ in range(5):   # <root>/consumequeue/<topic>/<qid>/<file>
        root = os.path.dirname(root)
    try:
        fd = open_read(path, root)
    except (OSError, IOFailure):
        return b""
    try:
        return os.pread(fd, n, pos)
    finally:
        os.close(fd)


@dataclass
class FileResult:
    path: str
    start: int
    size: int
    findings: list = field(default_factory=list)
    messages: int = 0
    bytes: int = 0
    end: int = 0                 # absolute offset just after the last valid record (start if none)
    last_valid: int | None = None
    full: bool = False           # ended with a BLANK record
    first_store_ts: int | None = None   # first record, for the broker's recovery start-file rule
    first_magic: int | None = None
    queues: dict = field(default_factory=dict)   # (topic, qid) -> QueueTrack
    # ranges (scan_range): where the range's walk began, where it handed off to the next range (None: the
    # walk of the file ended in this range), the offset of its first stop it resumed after (None: none)
    begin: int | None = 0
    range_end: int | None = None
    handoff: int | None = None
    first_skip: int | None = None


@dataclass
class ScanContext:
    root: str
    file_size: int
    cq_file_size: int
    delay_levels: tuple
    is_last: bool = False
    lock_held: bool = False
    check_cq: bool = True
    batch_topics: frozenset = frozenset()   # topics with a batchconsumequeue/ directory
    multi_dispatch: bool = True     # records carrying multi-dispatch offsets were written with it on
    enable_lmq: bool = True         # %LMQ% targets use queue 0


class _CqReader:
    """Positional consume-queue unit lookup with one cached chunk per queue."""

    def __init__(self, root: str, cq_file_size: int):
        self.base = os.path.join(root, "consumequeue")
        self.cq_file_size = cq_file_size
        self.cache: dict = {}

    def unit(self, topic: str, qid: int, q: int):
        byte = q * 20
        fstart = byte - byte % self.cq_file_size
        pos = byte - fstart
        key = (topic, qid)
        c = self.cache.get(key)
        if c is None or c[0] != fstart or not (c[1] <= pos < c[1] + len(c[2])):
            path = os.path.join(self.base, topic, str(qid), f"{fstart:020d}")
            data = _pread_or_empty(path, min(CQ_CHUNK_UNITS * 20, self.cq_file_size - pos), pos)
            data = data[:len(data) - len(data) % 20]
            c = self.cache[key] = (fstart, pos, data)
            if not data:
                return None
        rel = pos - c[1]
        if rel + 20 > len(c[2]):
            return None
        return CQ_UNIT.unpack_from(c[2], rel)


def _tags_fast(praw: bytes):
    """TAGS without parsing every property: valid only when "TAGS\x01" occurs once, at a segment
    start; otherwise None (the caller falls back to the full parse, which mirrors Java exactly)."""
    i = praw.find(b"TAGS\x01")
    if i < 0:
        return ""
    if (i and praw[i - 1] != 2) or praw.find(b"TAGS\x01", i + 5) >= 0:
        return None
    j = praw.find(b"\x02", i + 5)
    v = praw[i + 5:] if j < 0 else praw[i + 5:j]
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _utf8_ok(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _props_problem(raw: bytes) -> str | None:
    """Structural problems the broker would silently swallow (F02): invalid UTF-8, a segment without
    a name/value separator, an empty name."""
    if not raw:
        return None
    if not _utf8_ok(raw):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return f"invalid UTF-8 at properties byte {e.start}"
    for seg in raw.split(b"\x02")[:-1] if raw.endswith(b"\x02") else raw.split(b"\x02"):
        i = seg.find(b"\x01")
        if i <= 0:
            return f"segment {seg[:40]!r} has no name/value separator" if i < 0 else "empty property name"
    return None


def _stop_detail(fd: int, file_start: int, stop: scan.Stop) -> tuple:
    """(expected, actual, message) for a bad record, re-reading just that record."""
    kind = stop.kind
    if kind == scan.BAD_BODY_CRC and 0 < stop.size <= scan.MAX_RECORD_SIZE:
        raw = os.pread(fd, stop.size, stop.pos)
        try:
            flag = struct.unpack_from(">i", raw, 36)[0]
            bpos = 48 + (20 if flag & 0x10 else 8) + 8 + (20 if flag & 0x20 else 8) + 16
            blen = struct.unpack_from(">i", raw, bpos - 4)[0]
            crc = __import__("zlib").crc32(raw[bpos:bpos + blen]) & 0x7FFFFFFF
            return crc, struct.unpack_from(">i", raw, 8)[0], "body CRC mismatch (bit rot or torn write)"
        except struct.error:
            pass
    if kind == scan.BAD_PHYSICAL_OFFSET:
        stored = struct.unpack_from(">q", os.pread(fd, 8, stop.pos + 28))[0]
        return stop.offset, stored, "PHYSICALOFFSET differs from the record's position"
    if kind == scan.BAD_MAGIC:
        magic = struct.unpack_from(">I", os.pread(fd, 8, stop.pos).ljust(8, b"\0"), 4)[0]
        return "0xDAA320A7|0xDAA320AB|0xCBD43194", f"0x{magic:08X}", "not a record"
    if kind in (scan.LENGTH_MISMATCH, scan.BAD_LENGTH, scan.BAD_SIZE, scan.SHORT):
        return None, f"TOTALSIZE {stop.size}", stop.detail
    return None, None, stop.detail


def scan_file(ctx: ScanContext, path: str, start: int, size: int) -> FileResult:
    """Check every record of one commitlog file (see the module doc)."""
    return scan_range(ctx, path, start, size)


def split_points(size: int, file_size: int, pieces: int) -> list[int]:
    """Nominal split positions of one file into `pieces` ranges (the workers resync at record starts)."""
    limit = min(size, file_size)
    return [limit * k // pieces for k in range(pieces)] + [None]


def scan_range(ctx: ScanContext, path: str, start: int, size: int, lo: int = 0, hi: int | None = None,
               exact: bool = False) -> FileResult:
    """Check the records of one file that START in [lo, hi) (hi None: to the end of the file): the walk
    begins at the first valid record at or after `lo` (lo itself when `exact` or 0) and follows the
    chain until a record starts at or after hi, where it hands off. Consecutive ranges tile a file;
    merge_ranges() joins their results into exactly what one walk of the whole file gives."""
    res = FileResult(path, start, size, end=start, begin=None, range_end=hi)
    limit = min(size, ctx.file_size)
    try:
        fd = open_read(path)
    except OSError as e:
        if lo == 0 or exact:
            res.findings.append(Finding(ERROR, "commitlog.unreadable", path, start, None, None,
                                        e.strerror or str(e)))
            res.begin = lo
        return res
    try:
        end = limit if hi is None else min(hi, limit)
        begin = lo if (exact or lo == 0) else _first_record(fd, start, size, lo, end, limit)
        res.begin = begin
        if begin is None:
            return res
        _RangeScan(ctx, res, fd, begin, end, limit).run()
        return res
    finally:
        os.close(fd)


def _first_record(fd: int, start: int, size: int, lo: int, hi: int, limit: int) -> int | None:
    """The first position in [lo, hi) where a valid record (scan.find_next_record's sense) starts, or
    None. Zero bytes are skipped with memcmp first: a pre-allocated file is mostly zeros, and a record's
    TOTALSIZE has a non-zero byte among its first four."""
    nz = _first_nonzero(fd, lo, min(hi + 3, limit))
    if nz is None:
        return None
    p = scan.find_next_record(fd, start, size, max(lo, nz - 3) - 1, limit,
                              make_walk=lambda c: scan.FileWalk(fd, start, size, c, limit, window=64 * 1024))
    return p if p is not None and p < hi else None


def merge_ranges(ctx: ScanContext, parts: list) -> FileResult:
    """Join the range results of one file (in order) into its FileResult. Each range must begin where
    the walk of the ranges before it handed off; a range lying wholly before the handoff (it holds
    records inside a longer record, which one walk never sees) is dropped. A range that begins
    elsewhere (a valid-looking record inside another record, or a file that changed under the scan)
    is dropped with all later ones and the rest of the file is walked again from the handoff, so the
    result never depends on how the file was split."""
    first = parts[0]
    acc = FileResult(first.path, first.start, first.size, end=first.start, begin=first.begin)
    tracks = acc.queues
    handoff = first.begin
    for r in parts:
        if handoff is None:
            break       # the walk ended (BLANK, end of file, tail): later ranges are not part of it
        if r.range_end is not None and handoff >= r.range_end:
            continue
        if r.begin != handoff:
            r = scan_range(ctx, acc.path, acc.start, acc.size, handoff, None, exact=True)
            _merge_range(acc, tracks, r)
            handoff = r.handoff
            break
        _merge_range(acc, tracks, r)
        handoff = r.handoff
    acc.handoff = handoff
    return acc


def _merge_range(acc: FileResult, tracks: dict, r: FileResult) -> None:
    acc.findings.extend(r.findings)
    if acc.first_store_ts is None and r.first_store_ts is not None:
        acc.first_store_ts, acc.first_magic = r.first_store_ts, r.first_magic
    acc.messages += r.messages
    acc.bytes += r.bytes
    if r.last_valid is not None:
        acc.last_valid, acc.end = r.last_valid, r.end
    acc.full = acc.full or r.full
    skip = r.first_skip
    if acc.first_skip is None:
        acc.first_skip = skip
    for key, t in r.queues.items():
        m = tracks.get(key)
        if m is None:
            tracks[key] = t
            continue
        # the scan continued directly into this range; a skipped range inside it resets the expectation
        if skip is None or t.first_phys < skip:
            m.gap_to(t)
        m.absorb(t)
    if skip is not None:
        for key, m in tracks.items():
            if key not in r.queues:
                m.next_q = -1


_M = 0x9E3779B97F4A7C15
_UNDECODABLE = -(1 << 62)   # never a tagsCode (those are int32)


class _Interner:
    """Short byte strings (at most 64 bytes) -> dense ids, a batch at a time, with no Python work per
    string and no sort once the strings are known: the zero-padded bytes are hashed as 8 uint64 words,
    looked up in a sorted table of known hashes, and every row is compared exactly with its entry's
    bytes. New strings are added (up to `limit` entries; then None, and the caller groups per batch)."""

    def __init__(self, np, limit: int = 1 << 16):
        self.np, self.limit = np, limit
        self.sorted_h = np.empty(0, np.uint64)
        self.sorted_id = np.empty(0, np.int64)
        self.rows = np.zeros((0, 8), np.uint64)
        self.lens = np.empty(0, np.int64)
        self.values: list = []

    def ids(self, b, rel, length):
        np = self.np
        n = len(rel)
        if n == 0:
            return np.empty(0, np.int64)
        L = int(length.max())
        if L > 64 or int(length.min()) < 0:
            return None
        W = max(8, (L + 7) // 8 * 8)
        cols = np.arange(W)
        if len(b) >= W:
            # rows of W bytes starting at each string (one memcpy per row, no index matrix); a string
            # ending less than W bytes before the buffer's end reads from an earlier start and shifts
            rows = np.lib.stride_tricks.as_strided(b, (len(b) - W + 1, W), (1, 1))
            r0 = np.minimum(rel, len(b) - W)
            G = rows[r0]
            sh = rel - r0
            if sh.any():
                k = np.flatnonzero(sh)
                idx = np.minimum(rel[k, None] + cols, len(b) - 1)
                G[k] = b[idx]
        else:
            G = b[np.minimum(rel[:, None] + cols, len(b) - 1)]
        Lmin = int(length.min())
        if Lmin == L:
            G[:, L:] = 0
        else:
            G[cols[None, :] >= length[:, None]] = 0
        V = G.view(np.uint64)
        w = V.shape[1]
        h = length.astype(np.uint64)
        M = np.uint64(_M)
        for k in range(w):
            h = h * M ^ V[:, k]
        if w < 8:
            h = h * np.uint64(pow(_M, 8 - w, 1 << 64))
        for _ in range(2):
            pos = np.searchsorted(self.sorted_h, h)
            np.minimum(pos, max(len(self.sorted_h) - 1, 0), out=pos)
            found = self.sorted_h[pos] == h if len(self.sorted_h) else np.zeros(n, bool)
            if found.all():
                ids = self.sorted_id[pos]
                i0 = int(ids[0])
                if (ids == i0).all():
                    same = Lmin == L == int(self.lens[i0]) and (V == self.rows[i0, :w]).all()
                else:
                    same = (V == self.rows[ids, :w]).all() and (self.lens[ids] == length).all()
                if same:
                    return ids
                return None      # a hash collision: let the caller group exactly
            new = np.flatnonzero(~found)
            uh, first = np.unique(h[new], return_index=True)
            if len(self.values) + len(uh) > self.limit:
                return None
            k0 = len(self.values)
            rows = np.zeros((len(uh), 8), np.uint64)
            rows[:, :w] = V[new[first]]
            self.rows = np.concatenate((self.rows, rows))
            self.lens = np.concatenate((self.lens, length[new[first]]))
            for f in new[first].tolist():
                a = int(rel[f])
                self.values.append(bytes(b[a:a + int(length[f])]))
            hs = np.concatenate((self.sorted_h, uh))
            ids = np.concatenate((self.sorted_id, np.arange(k0, k0 + len(uh))))
            o = np.argsort(hs, kind="stable")
            self.sorted_h, self.sorted_id = hs[o], ids[o]
        return None


class _RangeScan:
    """One range of one file, walked with the batch kernel (rmqctl.scanvec). Per batch everything is
    array work except what is rare (a suspicious properties field, INNER_NUM, SCHEDULE_TOPIC_XXXX) or
    per distinct value (topic, TAGS string, queue). Per-queue state lives in arrays indexed by a queue
    number, so memory is bounded by the number of queues, never by the number of messages."""

    def __init__(self, ctx: ScanContext, res: FileResult, fd: int, begin: int, bound: int, limit: int):
        import numpy as np

        from rmqctl.formats._derive import numpy_dtype
        from rmqctl.formats.consumequeue import ConsumeQueueUnit

        self.np = np
        self.ctx, self.res, self.fd = ctx, res, fd
        self.begin, self.bound, self.limit = begin, bound, limit
        self.path, self.start = res.path, res.start
        self.unit_dtype = numpy_dtype(ConsumeQueueUnit)
        self.cq_base = os.path.join(ctx.root, "consumequeue")
        self.cq_slow = _CqReader(ctx.root, ctx.cq_file_size) if ctx.check_cq else None
        # tagsCode <= Integer.MIN_VALUE - 1 is an ext-file address only where consume-queue ext exists
        self.ext_floor = -2147483649 if os.path.isdir(os.path.join(ctx.root, "consumequeue_ext")) else None
        self.cq_cache: dict = {}          # queue number -> (cq file start, first byte pos, units array)
        self.topic_interner = _Interner(np)
        self.tb_tn: list = []             # topic-bytes id -> topic number
        self.tb_ok: list = []             # topic-bytes id -> valid UTF-8
        self.tag_interner = _Interner(np)
        self.tag_val: list = []           # tag-bytes id -> tagsCode (_UNDECODABLE: parse the record)
        self.topics: list = []            # topic number -> str
        self.topic_cmp: list = []         # topic number -> compared with its consume queue
        self.topic_sched: list = []
        self.topic_num: dict = {}         # str -> topic number
        self.qnum: dict = {}              # (topic number, queue id) -> queue number
        self.qkeys: list = []
        self.qk_sorted = np.empty(0, np.int64)   # known keys, sorted, and their queue numbers
        self.qk_num = np.empty(0, np.int64)
        self.tag_hash: dict = {}
        cap = 64
        self.cap = cap
        z = np.zeros(cap, np.int64)
        self.first_q, self.last_q, self.next_q = z.copy(), z.copy(), z.copy()
        self.count, self.first_phys, self.gaps = z.copy(), z.copy(), z.copy()
        self.missing, self.mismatches = z.copy(), z.copy()
        self.first_gap: dict = {}
        self.first_missing: dict = {}
        self.first_mismatch: dict = {}

    # --- the walk -------------------------------------------------------------------------------------
    def run(self) -> None:
        from rmqctl import scanvec

        res, fd, bound, limit = self.res, self.fd, self.bound, self.limit
        last_range = bound >= limit     # else: stop at the first record starting at or after bound
        pos, widen = self.begin, 0
        buf = bytearray(scanvec.WINDOW)      # reused by every window: each batch is done before the next read
        while True:
            if not last_range and pos >= bound:
                res.handoff = pos
                break
            w = max(min(scanvec.WINDOW, (limit if last_range else bound) - pos), widen)
            batch, nxt, stop = scanvec.walk_window(fd, self.start, res.size, pos, limit, window=w,
                                                   check_crc=True, check_phys=True, check_prop_crc=True,
                                                   path=self.path, buf=buf)
            if len(batch):
                n = len(batch)
                if not last_range and w > bound - pos:
                    n = int(self.np.searchsorted(batch.rel, bound - pos))
                if n:
                    self.batch(batch, n)
                if n < len(batch):
                    res.handoff = pos + int(batch.rel[n])
                    break
            if stop is not None:
                resume = _classify_end(self.ctx, res, fd, stop, limit)
                if resume is None:
                    break
                if res.first_skip is None:
                    res.first_skip = stop.offset
                # records were skipped: queue offsets after the skipped range cannot be judged
                self.next_q[:len(self.qkeys)] = -1
                pos, widen = resume, 0
                continue
            # a valid record larger than the window starts at nxt: widen the next window to hold it
            widen = int.from_bytes(os.pread(fd, 4, nxt), "big", signed=True) if nxt == pos else 0
            pos = nxt
        self.finish()

    def finish(self) -> None:
        res = self.res
        for g, (tn, qid) in enumerate(self.qkeys):
            t = QueueTrack(int(self.first_q[g]), int(self.last_q[g]), int(self.next_q[g]), int(self.count[g]),
                           int(self.first_phys[g]), int(self.gaps[g]), self.first_gap.get(g),
                           int(self.missing[g]), self.first_missing.get(g), int(self.mismatches[g]),
                           self.first_mismatch.get(g))
            res.queues[(self.topics[tn], qid)] = t

    # --- one batch ------------------------------------------------------------------------------------
    def batch(self, bt, n: int) -> None:
        np = self.np
        res = self.res
        raw = bt.raw
        b = np.frombuffer(raw, np.uint8)
        rel = bt.rel[:n]
        tot = bt.total_size[:n]
        off = rel + (self.start + bt.win_pos)
        sysf = bt.sys_flag[:n]
        if res.messages == 0:
            res.first_store_ts, res.first_magic = int(bt.store_timestamp[0]), int(bt.magic_code[0])
        res.messages += n
        res.bytes += int(tot.sum())
        last = n - 1
        res.last_valid = int(off[last])
        res.end = res.last_valid + int(tot[last])
        late: list = []     # (record index, order, Finding): merged in record order like a per-record walk

        # topics: per distinct byte string
        tid, bad_topic = self._topic_ids(b, raw, bt.topic_rel[:n], bt.topic_length[:n])
        if bad_topic is not None:
            for i in np.flatnonzero(bad_topic).tolist():
                late.append((i, 0, Finding(ERROR, "commitlog.topic", self.path, int(off[i]), "UTF-8 topic",
                                           repr(self.topics[int(tid[i])]), "topic bytes are not valid UTF-8")))

        # properties: structure checks on the few suspicious fields, TAGS for the consume-queue check
        prel, plen = bt.props_rel[:n], bt.props_length[:n]
        pend = prel + plen
        slices = list(map(raw.__getitem__, map(slice, prel.tolist(), pend.tolist())))
        J = b"\0".join(slices)           # \0 separates: no pattern below can span two records
        Jn = np.frombuffer(J, np.uint8)
        jstart = np.cumsum(plen + 1) - (plen + 1)
        has = plen > 0
        susp = has & (b[np.where(has, pend - 1, 0)] != 2)
        if not J.isascii():
            susp[np.searchsorted(jstart, np.flatnonzero(Jn >= 0x80), "right") - 1] = True
        twos = np.flatnonzero(Jn == 2)
        pp = np.flatnonzero(twos[1:] - twos[:-1] == 1)      # an empty segment: \x02\x02
        if len(pp):
            susp[np.searchsorted(jstart, twos[pp], "right") - 1] = True
        for i in np.flatnonzero(susp).tolist():
            praw = bytes(slices[i])
            try:
                praw.decode("utf-8")
                bad = None if b"\x02\x02" not in praw and praw.endswith(b"\x02") else _props_problem(praw)
            except UnicodeDecodeError:
                bad = _props_problem(praw)
            if bad:
                late.append((i, 1, Finding(ERROR, "commitlog.properties", self.path, int(off[i]), None, None,
                                           f"{bad} (body CRC does not cover properties)")))
        if late:
            late.sort(key=lambda x: (x[0], x[1]))
            res.findings.extend(f for _, _, f in late)

        # queues: PREPARED / ROLLBACK records are in no consume queue (goes_to_consume_queue)
        disp = (sysf & 0x4) == 0
        if not disp.any():
            return
        di = np.flatnonzero(disp) if not disp.all() else np.arange(n)
        qid = bt.queue_id[:n][di]
        q = bt.queue_offset[:n][di]
        tdi = tid[di]
        inner = np.ones(len(di), np.int64)
        ib = np.flatnonzero(sysf[di] & clf.INNER_BATCH_FLAG)
        for k in ib.tolist():
            try:
                inner[k] = max(1, int(parse_properties(slices[int(di[k])]).get("INNER_NUM", "1")))
            except ValueError:
                inner[k] = 1
        sort_phys = False
        if self.ctx.multi_dispatch and _MULTI_OFFSET in J:
            x = self._multi_rows(slices, di, tdi, qid)
            if x is not None:
                # multi-dispatch (LMQ): each target queue gets a unit for the record at its own offset
                xk, xt, xq, xo = x
                di, tdi, qid, q = (np.concatenate((di, di[xk])), np.concatenate((tdi, xt)),
                                   np.concatenate((qid, xq)), np.concatenate((q, xo)))
                inner = np.concatenate((inner, np.ones(len(xk), np.int64)))
                sort_phys = True
        key = (tdi << 32) | (qid & 0xFFFFFFFF)
        if sort_phys:
            g = self._queue_numbers(key)
        elif (key == key[0]).all():
            k0 = int(key[0])
            g = np.full(len(key), self.qnum[k0] if k0 in self.qnum else self._new_queue(k0), np.int64)
        else:
            g = self._queue_numbers(key)
        offd, totd = off[di], tot[di]
        if sort_phys:
            order = np.lexsort((offd, g))     # a target queue's units in commitlog order
            gs, qs, inn, offs = g[order], q[order], inner[order], offd[order]
        elif (g == g[0]).all():
            order = None
            gs, qs, inn, offs = g, q, inner, offd
        else:
            # stable sort of small ints: numpy radix-sorts 16-bit keys
            order = np.argsort(g.astype(np.uint16) if len(self.qkeys) < 1 << 16 else g, kind="stable")
            gs, qs, inn, offs = g[order], q[order], inner[order], offd[order]
        m = len(gs)
        brk = np.flatnonzero(gs[1:] != gs[:-1]) + 1
        firsts = np.concatenate(([0], brk))
        lasts = np.concatenate((brk - 1, [m - 1]))
        gf = gs[firsts]
        isnew = self.count[gf] == 0
        prev_next = np.empty(m, np.int64)
        prev_next[1:] = qs[:-1] + inn[:-1]
        prev_next[firsts] = np.where(isnew, -1, self.next_q[gf])
        gap = (qs != prev_next) & (prev_next >= 0)
        if gap.any():
            gi = np.flatnonzero(gap)
            np.add.at(self.gaps, gs[gi], 1)
            for k in gi.tolist():
                gg = int(gs[k])
                if gg not in self.first_gap:
                    self.first_gap[gg] = (int(offs[k]), int(prev_next[k]), int(qs[k]))
        nf = gf[isnew]
        self.first_q[nf] = qs[firsts][isnew]
        self.first_phys[nf] = offs[firsts][isnew]
        self.count[gf] += lasts - firsts + 1
        gl = gs[lasts]
        self.last_q[gl] = qs[lasts]
        self.next_q[gl] = qs[lasts] + inn[lasts]

        # consume-queue units of the records, compared as arrays
        if self.cq_slow is None:
            return
        self._compare(np, slices, (J, Jn, jstart, plen, twos), di, order, gs, qs, offs,
                      totd if order is None else totd[order], tdi if order is None else tdi[order], firsts,
                      lasts, bt)

    def _multi_rows(self, slices, di, tdi, qid):
        """(row, topic number, queue id, queue offset) arrays of the multi-dispatch targets of the rows' records
        (INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET, rmqctl.dispatch.lmq_targets), or None."""
        np = self.np
        rows, tns, qids, qos = [], [], [], []
        for k, i in enumerate(di.tolist()):
            if _MULTI_OFFSET not in bytes(slices[i]):
                continue
            t = self.topics[int(tdi[k])]
            for name, tq, qo in lmq_targets(t, int(qid[k]), parse_properties(slices[i]), self.ctx.enable_lmq):
                rows.append(k)
                tns.append(self._topic_bytes(name.encode("utf-8"))[0])
                qids.append(tq)
                qos.append(qo)
        if not rows:
            return None
        a = lambda v: np.array(v, np.int64)     # noqa: E731
        return a(rows), a(tns), a(qids), a(qos)

    def _compare(self, np, slices, joined, di, order, gs, qs, offs, tots, tds, firsts, lasts, bt):
        cmpt = np.array(self.topic_cmp, bool)[tds]
        if not cmpt.any():
            return
        sched = np.array(self.topic_sched, bool)[tds]
        rec = di if order is None else di[order]        # record index (in the batch) of each row
        tags = np.zeros(len(gs), np.int64)
        need = cmpt & ~sched
        if need.any():
            tags[need] = self._tags(np, slices, *joined)[rec[need]]
        for k in np.flatnonzero(cmpt & sched).tolist():
            i = int(rec[k])
            tags[k] = tags_code(SCHEDULE_TOPIC, parse_properties(slices[i]), int(bt.store_timestamp[i]),
                                self.ctx.delay_levels)
        up = np.zeros(len(gs), np.int64)
        us = np.zeros(len(gs), np.int64)
        ut = np.zeros(len(gs), np.int64)
        present = np.zeros(len(gs), bool)
        for a, z in zip(firsts.tolist(), lasts.tolist()):
            z += 1
            sel = cmpt[a:z]
            if not sel.any():
                continue
            g = int(gs[a])
            self._units(np, g, qs[a:z], sel, up[a:z], us[a:z], ut[a:z], present[a:z])
        missing = cmpt & (~present | (up < 0) | (us <= 0))
        tag_bad = ut != tags
        if self.ext_floor is not None:
            tag_bad &= ut > self.ext_floor
        mism = cmpt & ~missing & ((up != offs) | (us != tots) | tag_bad)
        if missing.any():
            mi = np.flatnonzero(missing)
            np.add.at(self.missing, gs[mi], 1)
            for k in mi.tolist():
                gg = int(gs[k])
                if gg not in self.first_missing:
                    self.first_missing[gg] = (int(offs[k]), int(qs[k]))
        if mism.any():
            mi = np.flatnonzero(mism)
            np.add.at(self.mismatches, gs[mi], 1)
            for k in mi.tolist():
                gg = int(gs[k])
                if gg not in self.first_mismatch:
                    self.first_mismatch[gg] = (int(qs[k]), (int(offs[k]), int(tots[k]), int(tags[k])),
                                               (int(up[k]), int(us[k]), int(ut[k])))

    def _units(self, np, g, qs, sel, up, us, ut, present) -> None:
        """Fill the unit (phys, size, tags) at each selected queue offset of queue g, reading its consume
        queue in bounded pieces (one cached piece per queue); `present` False where there is no unit."""
        cqfs = self.ctx.cq_file_size
        qv = qs[sel]
        qmin, qmax = int(qv.min()), int(qv.max())
        b0, b1 = qmin * 20, qmax * 20
        f0, f1 = b0 - b0 % cqfs, b1 - b1 % cqfs
        if qmin < 0 or f0 != f1 or qmax - qmin > 4 * len(qv) + 1024:
            # negative, crossing a consume-queue file, or scattered offsets: one unit at a time
            tn, qid = self.qkeys[g]
            topic = self.topics[tn]
            for k in np.flatnonzero(sel).tolist():
                u = self.cq_slow.unit(topic, qid, int(qs[k]))
                if u is not None:
                    present[k] = True
                    up[k], us[k], ut[k] = u
            return
        p0, p1 = b0 - f0, b1 - f1 + 20
        c = self.cq_cache.get(g)
        if c is None or c[0] != f0 or p0 < c[1] or p1 > c[1] + 20 * len(c[2]):
            tn, qid = self.qkeys[g]
            path = os.path.join(self.cq_base, self.topics[tn], str(qid), f"{f0:020d}")
            # read ahead 4x what this batch needs (at least 512 units): the total cached stays within a few
            # times one batch of records plus 10 KB per queue
            want = min(max(4 * (p1 - p0), CQ_CHUNK_UNITS * 20), cqfs - p0)
            data = _pread_or_empty(path, want, p0)
            arr = np.frombuffer(data, self.unit_dtype, len(data) // 20)
            c = self.cq_cache[g] = (f0, p0, arr)
        arr = c[2]
        j = (qv * 20 - f0 - c[1]) // 20
        ok = j < len(arr)
        jj = np.where(ok, j, 0)
        if len(arr):
            u = arr[jj]
            idx = np.flatnonzero(sel)
            up[idx] = np.where(ok, u["physical_offset"], 0)
            us[idx] = np.where(ok, u["size"], 0)
            ut[idx] = np.where(ok, u["tags_code"], 0)
            present[idx] = ok

    def _tags(self, np, slices, J, Jn, jstart, plen, twos):
        """tagsCode (TAGS hash) of every record of the batch: TAGS located as arrays over the joined
        properties, hashed per distinct string. Ambiguous fields (TAGS twice or not at a segment start,
        invalid UTF-8) are parsed fully, as the broker parses them."""
        m = len(plen)
        jend = jstart + plen
        c = np.flatnonzero(Jn[:-4] == 0x54) if len(Jn) > 4 else np.empty(0, np.int64)
        if len(c):
            c = c[(Jn[c + 1] == 0x41) & (Jn[c + 2] == 0x47) & (Jn[c + 3] == 0x53) & (Jn[c + 4] == 1)]
        r = np.searchsorted(jstart, c, "right") - 1
        cnt = np.bincount(r, minlength=m)
        hit = np.zeros(m, np.int64)
        hit[r] = c
        one = cnt == 1
        segok = one & ((hit == jstart) | (Jn[np.maximum(hit - 1, 0)] == 2))
        slow = (cnt > 1) | (one & ~segok)
        out = np.zeros(m, np.int64)
        fast = np.flatnonzero(segok)
        if len(fast):
            vs = hit[fast] + 5
            if len(twos):
                k = np.searchsorted(twos, vs)
                ve = np.where(k < len(twos), twos[np.minimum(k, len(twos) - 1)], jend[fast])
                ve = np.minimum(ve, jend[fast])
            else:
                ve = jend[fast]
            vl = ve - vs
            ids = self.tag_interner.ids(Jn, vs, vl)
            if ids is not None:
                tv = self.tag_interner.values
                for k2 in range(len(self.tag_val), len(tv)):
                    self.tag_val.append(self._tag_value(tv[k2]))
                vals = np.array(self.tag_val, np.int64)[ids]
            else:
                d: dict = {}
                vals = np.array([d[v] if v in d else d.setdefault(v, self._tag_value(v))
                                 for v in (J[a:z] for a, z in zip(vs.tolist(), ve.tolist()))], np.int64)
            bad = vals == _UNDECODABLE
            out[fast] = np.where(bad, 0, vals)
            if bad.any():
                slow[fast[bad]] = True
        for k2 in np.flatnonzero(slow).tolist():
            out[k2] = self._hash(parse_properties(slices[k2]).get("TAGS"))
        return out

    def _tag_value(self, v: bytes) -> int:
        try:
            return self._hash(v.decode("utf-8"))
        except UnicodeDecodeError:
            return _UNDECODABLE

    def _hash(self, tg) -> int:
        if not tg:
            return 0
        h = self.tag_hash.get(tg)
        if h is None:
            h = java_string_hash(tg)
            if len(self.tag_hash) < 1 << 16:
                self.tag_hash[tg] = h
        return h

    def _topic_ids(self, b, raw, trel, tlen):
        np = self.np
        ids = self.topic_interner.ids(b, trel, tlen)
        if ids is not None:
            tv = self.topic_interner.values
            for k in range(len(self.tb_tn), len(tv)):
                tn, ok = self._topic_bytes(tv[k])
                self.tb_tn.append(tn)
                self.tb_ok.append(ok)
            tid = np.array(self.tb_tn, np.int64)[ids]
            if all(self.tb_ok):
                return tid, None
            return tid, ~np.array(self.tb_ok, bool)[ids]
        d: dict = {}
        inv = np.array([d.setdefault(bytes(raw[a:a + k]), len(d))
                        for a, k in zip(trel.tolist(), tlen.tolist())], np.int64)
        pairs = [self._topic_bytes(tb) for tb in d]
        tid = np.array([p[0] for p in pairs], np.int64)[inv]
        oks = [p[1] for p in pairs]
        if all(oks):
            return tid, None
        return tid, ~np.array(oks, bool)[inv]

    def _topic_bytes(self, tb: bytes) -> tuple:
        """(topic number, bytes are valid UTF-8) of one topic byte string."""
        topic = tb.decode("utf-8", errors="replace")     # as the broker (and FileWalk) decode it
        tn = self.topic_num.get(topic)
        if tn is None:
            tn = self.topic_num[topic] = len(self.topics)
            self.topics.append(topic)
            self.topic_cmp.append(topic not in self.ctx.batch_topics)
            self.topic_sched.append(topic == SCHEDULE_TOPIC)
        # the broker reads invalid bytes as U+FFFD and files the messages under that name
        return tn, _utf8_ok(tb)

    def _queue_numbers(self, key):
        np = self.np
        for _ in range(2):
            ks = self.qk_sorted
            pos = np.searchsorted(ks, key)
            np.minimum(pos, max(len(ks) - 1, 0), out=pos)
            found = ks[pos] == key if len(ks) else np.zeros(len(key), bool)
            if found.all():
                return self.qk_num[pos]
            for k in np.unique(key[~found]).tolist():
                if k not in self.qnum:
                    self._new_queue(k)
            items = sorted(self.qnum.items())
            self.qk_sorted = np.array([k for k, _ in items], np.int64)
            self.qk_num = np.array([v for _, v in items], np.int64)
        raise AssertionError("unreachable")

    def _new_queue(self, key: int) -> int:
        g = len(self.qkeys)
        qid = key & 0xFFFFFFFF
        self.qkeys.append((key >> 32, qid - (1 << 32) if qid >= 1 << 31 else qid))
        self.qnum[key] = g
        if g >= self.cap:
            np = self.np
            self.cap *= 2
            for name in ("first_q", "last_q", "next_q", "count", "first_phys", "gaps", "missing", "mismatches"):
                a = getattr(self, name)
                setattr(self, name, np.concatenate((a, np.zeros(self.cap - len(a), np.int64))))
        return g


_ZEROS = bytes(1 << 20)


def _skip_hole(fd: int, pos: int, end: int) -> int:
    """The next position >= pos that may hold data: holes of a sparse file read as zeros, and the broker
    sizes new commitlog files without writing them, so a file's unwritten tail is usually one hole."""
    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None:
        return pos
    try:
        return os.lseek(fd, pos, seek_data)
    except OSError as e:
        return end if e.errno == errno.ENXIO else pos    # ENXIO: nothing but holes up to the end of file


def _first_nonzero(fd: int, pos: int, end: int) -> int | None:
    chunk = len(_ZEROS)
    pos = _skip_hole(fd, pos, end)
    while pos < end:
        data = os.pread(fd, min(chunk, end - pos), pos)
        if not data:
            return None
        if data == _ZEROS[:len(data)]:     # memcmp: ~10x faster than scanning with lstrip
            pos = _skip_hole(fd, pos + len(data), end)
            continue
        stripped = data.lstrip(b"\0")
        if stripped:
            return pos + len(data) - len(stripped)
        pos += len(data)
    return None


def _classify_end(ctx: ScanContext, res: FileResult, fd: int, stop: scan.Stop, limit: int) -> int | None:
    """Record a finding for how this walk stopped; return the position to resume at, or None."""
    path, start, f = res.path, res.start, res.findings
    kind = stop.kind
    if kind == scan.BLANK_RECORD:
        res.full = True
        want = ctx.file_size - stop.pos
        if stop.size != want:
            f.append(Finding(WARNING, "commitlog.blank_size", path, stop.offset, want, stop.size,
                             "BLANK record's TOTALSIZE is not the distance to the end of the file"))
        return None
    if kind == scan.END:
        if limit < ctx.file_size:
            return None     # short file: reported by the file-level checks
        f.append(Finding(ERROR, "commitlog.no_blank", path, stop.offset, "BLANK record", "end of file",
                         "records run to the very end of the file; a full file always ends with a BLANK record"))
        return None
    if kind == scan.ZEROS:
        nz = _first_nonzero(fd, stop.pos, limit)
        if nz is None:
            if not ctx.is_last:
                f.append(Finding(ERROR, "commitlog.no_blank", path, stop.offset, "BLANK record",
                                 f"{limit - stop.pos} zero bytes to the end of the file",
                                 "a middle file ends without a BLANK record: data after this offset is missing; "
                                 "the broker's recovery stops here and deletes every later commitlog file"))
            return None
        resume = scan.find_next_record(fd, start, res.size, stop.pos, limit)
        if resume is not None:
            f.append(Finding(ERROR, "commitlog.zeroed_range", path, stop.offset, "a record",
                             f"{resume - stop.pos} zero/garbage bytes up to offset {start + resume}",
                             "corruption in the middle: the broker's recovery stops here and truncates the "
                             "commitlog, losing every later message"))
            return resume
        return _after_end(ctx, res, fd, nz, limit)
    # a bad record
    check = STOP_CHECKS.get(kind, "commitlog.record")
    expected, actual, msg = _stop_detail(fd, start, stop)
    resume = scan.find_next_record(fd, start, res.size, stop.pos, limit)
    if resume is not None:
        f.append(Finding(ERROR, check, path, stop.offset, expected, actual,
                         f"{msg}; corrupt record in the middle ({resume - stop.pos} bytes up to offset "
                         f"{start + resume}): the broker's recovery stops here and truncates every later message"))
        return resume
    if not ctx.is_last:
        f.append(Finding(ERROR, check, path, stop.offset, expected, actual,
                         f"{msg}; nothing valid follows in this middle file: the broker's recovery stops here "
                         f"and deletes every later commitlog file"))
        return None
    if kind == scan.BAD_PHYSICAL_OFFSET:
        f.append(Finding(ERROR, "commitlog.stale_record", path, stop.offset, expected, actual,
                         "valid-looking record after the logical end with a wrong PHYSICALOFFSET "
                         "(stale bytes left by a truncation); the broker before 5.3.3 would "
                         "recover it as a message"))
        return None
    if ctx.lock_held:
        f.append(Finding(INFO, "commitlog.write_in_progress", path, stop.offset, None, None,
                         f"incomplete record at the tail while the broker holds the lock ({msg})"))
        return None
    f.append(Finding(ERROR, "commitlog.torn_tail", path, stop.offset, expected, actual,
                     f"half message at the tail (crash during a write; {msg}): the broker's recovery "
                     f"truncates the commitlog here"))
    return None


def _after_end(ctx: ScanContext, res: FileResult, fd: int, nz: int, limit: int) -> None:
    """Zeros after the last record, then non-zero bytes with no valid record: stale or garbage."""
    path, start = res.path, res.start
    # a stale record starts on its TOTALSIZE field: look back to the nearest plausible start
    cand = None
    for p in range(max(res.end - start, nz - 8), nz + 1):
        h = os.pread(fd, 8, p)
        if len(h) == 8 and struct.unpack_from(">i", h, 4)[0] in (scan.V1, scan.V2):
            cand = p
            break
    if cand is not None:
        w = scan.FileWalk(fd, start, res.size, cand, limit, check_phys=False)
        rec = next(iter(w), None)
        if rec is not None:
            res.findings.append(Finding(
                ERROR, "commitlog.stale_record", path, start + cand, start + cand, rec.physical_offset,
                "valid-looking record after the logical end with a wrong PHYSICALOFFSET (stale bytes left by a "
                "truncation)"))
            return None
    if ctx.lock_held:
        return None
    res.findings.append(Finding(WARNING, "commitlog.garbage_after_end", path, start + nz, "zero bytes",
                                "non-zero bytes", "non-zero bytes after the last record of the last file"))
    return None
