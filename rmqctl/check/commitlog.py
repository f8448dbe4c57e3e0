"""Commitlog checks: every record of every file, file naming/sizes/gaps, and how each file ends.

One worker call (`scan_file`) checks one file completely and returns a picklable FileResult, so
files can be checked in parallel (multiprocessing) and merged in order by the caller. While walking,
each dispatchable record is also compared with its consume-queue unit (positional read of unit
QUEUEOFFSET of queue (topic, QUEUEID), cached per queue in 10 KB chunks: memory is bounded by the
number of queues, never by the number of messages).

How a file's end is classified (the broker's recovery only knows "valid" or "stop"):
  BLANK record                       normal end of a full file
  zeros, rest of the file zero       normal end of the LAST file; in a middle file: no BLANK (error)
  zeros, then valid records          zeroed range inside the file (corruption), scan resumes
  bad record, valid records later    corruption in the middle; the broker would truncate here
  bad record at the tail, last file  torn tail (crash) -- or a write in progress when the lock is held
  valid record with a wrong PHYSICALOFFSET and nothing valid after: stale bytes after the end
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

from rmqctl import scan
from rmqctl.check.findings import ERROR, INFO, WARNING, Finding
from rmqctl.dispatch import SCHEDULE_TOPIC, tags_code
from rmqctl.formats import commitlog as clf
from rmqctl.formats.index import java_string_hash

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
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                data = b""
            else:
                try:
                    data = os.pread(fd, min(CQ_CHUNK_UNITS * 20, self.cq_file_size - pos), pos)
                finally:
                    os.close(fd)
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
    res = FileResult(path, start, size, end=start)
    findings = res.findings
    limit = min(size, ctx.file_size)
    cq = _CqReader(ctx.root, ctx.cq_file_size) if ctx.check_cq else None
    tag_hash: dict = {}
    topic_ok: dict = {}
    queues = res.queues
    delay_levels, batch_topics = ctx.delay_levels, ctx.batch_topics
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        findings.append(Finding(ERROR, "commitlog.unreadable", path, start, None, None, e.strerror or str(e)))
        return res
    try:
        pos = 0
        while True:
            w = scan.FileWalk(fd, start, size, pos, limit, check_crc=True, check_phys=True, check_prop_crc=True,
                              path=path)
            for r in w:
                if res.first_store_ts is None and res.messages == 0:
                    res.first_store_ts, res.first_magic = r.store_timestamp, r.magic_code
                res.messages += 1
                res.bytes += r.total_size
                topic = r.topic
                ok = topic_ok.get(topic)
                if ok is None:
                    ok = topic_ok[topic] = "\ufffd" not in topic or _utf8_ok(topic.encode("utf-8", "surrogatepass"))
                if not ok:
                    findings.append(Finding(ERROR, "commitlog.topic", path, r.offset, "UTF-8 topic",
                                            repr(topic), "topic bytes are not valid UTF-8"))
                praw = r.properties_raw
                if praw:
                    try:
                        praw.decode("utf-8")
                        bad = None if b"\x02\x02" not in praw and praw.endswith(b"\x02") else _props_problem(praw)
                    except UnicodeDecodeError:
                        bad = _props_problem(praw)
                    if bad:
                        findings.append(Finding(ERROR, "commitlog.properties", path, r.offset, None, None,
                                                f"{bad} (body CRC does not cover properties)"))
                if r.sys_flag & 0x4:      # PREPARED / ROLLBACK: in no consume queue (goes_to_consume_queue)
                    continue
                qid, q = r.queue_id, r.queue_offset
                key = (topic, qid)
                t = queues.get(key)
                inner = 1
                if r.sys_flag & clf.INNER_BATCH_FLAG:
                    try:
                        inner = max(1, int(r.properties.get("INNER_NUM", "1")))
                    except ValueError:
                        inner = 1
                if t is None:
                    t = queues[key] = QueueTrack(q, q, q + inner, 0, r.offset)
                elif q != t.next_q and t.next_q >= 0:
                    t.gaps += 1
                    if t.first_gap is None:
                        t.first_gap = (r.offset, t.next_q, q)
                t.count += 1
                t.last_q, t.next_q = q, q + inner
                if cq is None or topic in batch_topics:
                    continue
                if topic == SCHEDULE_TOPIC:
                    tags = tags_code(topic, r.properties, r.store_timestamp, delay_levels)
                else:
                    tg = _tags_fast(praw)
                    if tg is None:
                        tg = r.properties.get("TAGS")
                    if not tg:
                        tags = 0
                    else:
                        tags = tag_hash.get(tg)
                        if tags is None:
                            tags = tag_hash[tg] = java_string_hash(tg)
                u = cq.unit(topic, qid, q)
                if u is None or u[0] < 0 or u[1] <= 0:
                    t.missing += 1
                    if t.first_missing is None:
                        t.first_missing = (r.offset, q)
                elif u[0] != r.offset or u[1] != r.total_size or (u[2] != tags and u[2] > -2147483649):
                    t.mismatches += 1
                    if t.first_mismatch is None:
                        t.first_mismatch = (q, (r.offset, r.total_size, tags), u)
            stop = w.stop
            if w.last_valid is not None:
                res.last_valid = w.last_valid
                res.end = r.offset + r.total_size
            nxt = _classify_end(ctx, res, fd, stop, limit)
            if nxt is None:
                return res
            # records were skipped: queue offsets after the skipped range cannot be judged
            for t in queues.values():
                t.next_q = -1
            pos = nxt
    finally:
        os.close(fd)


_ZEROS = bytes(1 << 20)


def _first_nonzero(fd: int, pos: int, end: int) -> int | None:
    chunk = len(_ZEROS)
    while pos < end:
        data = os.pread(fd, min(chunk, end - pos), pos)
        if not data:
            return None
        if data == _ZEROS[:len(data)]:     # memcmp: ~10x faster than scanning with lstrip
            pos += len(data)
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
                         "(stale bytes left by a truncation, faults R17); the broker before 5.3.3 would "
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
                "truncation, faults R17)"))
            return None
    if ctx.lock_held:
        return None
    res.findings.append(Finding(WARNING, "commitlog.garbage_after_end", path, start + nz, "zero bytes",
                                "non-zero bytes", "non-zero bytes after the last record of the last file"))
    return None
