"""Consume-queue checks, per queue, after the commitlog pass.

The commitlog workers already compared every dispatchable record with the unit at its QUEUEOFFSET
(rmqctl.check.commitlog); what is left here is the queue's own structure and the units no record
claimed: file names and sizes, pre-blank units, holes, units before the first record (must be
expired, i.e. below the commitlog's min offset) and after the last record (pointing past the
commitlog's end: "CQ ahead", F09), and the per-queue summaries of missing/mismatching units
("CQ behind", F10; "tag/size mismatch", F11). Each queue's files are read in bounded chunks.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from rmqctl.check.findings import ERROR, INFO, WARNING, Finding
from rmqctl.formats.consumequeue import UNIT_SIZE
from rmqctl.store import rules
from rmqctl.store.files import FileQueue, open_read

UNIT = struct.Struct(">qiq")
PRE_BLANK_SIZE = 0x7FFFFFFF
CHUNK = 65536


@dataclass
class QueueResult:
    max_phys_end: int = -1      # offset+size of the last valid unit (the broker's maxPhysicOffset)
    valid_end: int = 0          # logical offset after the last valid unit
    min_valid: int = 0


def unit_location(directory: Path, cq_file_size: int, q: int) -> tuple[str, int]:
    byte = q * UNIT_SIZE
    fstart = byte - byte % cq_file_size
    return str(directory / f"{fstart:020d}"), byte - fstart


FIRST_CHUNK = 1024     # units read first: a queue of a many-queue store holds a few hundred


def _unit_chunks(path: Path, n_units: int):
    """(first unit index, phys, size, tags) arrays of the units of one file, a chunk at a time (1024 units
    first, doubling up to CHUNK while the units go on). A run of zero bytes after a chunk ending with a zero
    unit is skipped without being read as units (rmqctl.store.zeros: holes not read, written zeros compared
    in bulk): the next chunk starts at the unit holding the next non-zero byte. Zero units are invalid (size
    0), and the zero unit before the run already ended the queue, so every rule sees what it would see
    reading the zeros: the consume queues of a many-queue store are mapped at 6 MB and hold a few KB."""
    from rmqctl.formats._derive import numpy_dtype
    from rmqctl.formats.consumequeue import ConsumeQueueUnit
    from rmqctl.store.zeros import next_nonzero

    import numpy as np

    dt = numpy_dtype(ConsumeQueueUnit)
    zero_unit = bytes(UNIT_SIZE)
    fd = open_read(path)
    try:
        i, want = 0, FIRST_CHUNK
        while i < n_units:
            data = os.pread(fd, min(want, n_units - i) * UNIT_SIZE, i * UNIT_SIZE)
            k = len(data) // UNIT_SIZE
            if k == 0:
                return
            u = np.frombuffer(data, dt, k)
            yield (i, u["physical_offset"].astype(np.int64), u["size"].astype(np.int64),
                   u["tags_code"].astype(np.int64))
            i += k
            want = min(2 * want, CHUNK)
            if i < n_units and data[(k - 1) * UNIT_SIZE:k * UNIT_SIZE] == zero_unit:
                nz = next_nonzero(fd, i * UNIT_SIZE, n_units * UNIT_SIZE)
                if nz is None:
                    return
                i, want = nz // UNIT_SIZE, FIRST_CHUNK
    finally:
        os.close(fd)


def check_queue_files(fq: FileQueue, file_size: int, findings: list, kind: str = "cq") -> None:
    """Names are multiples of the file size, contiguous, every file exactly file_size bytes."""
    for p, why in fq.strays:
        findings.append(Finding(WARNING, f"{kind}.stray", str(p), None, None, None,
                                f"{why}: the broker fails to start on a non-numeric name in a queue directory"))
    prev = None
    for i, f in enumerate(fq.files):
        if f.start % file_size:
            findings.append(Finding(ERROR, f"{kind}.file_name", str(f.path), 0, f"a multiple of {file_size}",
                                    f.start, "file name is not a multiple of the file size"))
        if prev is not None and f.start != prev.start + file_size:
            gap = "gap" if f.start > prev.start + file_size else "overlap"
            findings.append(Finding(ERROR, f"{kind}.file_{gap}", str(f.path), 0, prev.start + file_size, f.start,
                                    f"files are not contiguous ({gap} after {prev.path.name})"))
        if f.size != file_size:
            last = i == len(fq.files) - 1
            msg = (f"zero-length last file (created, never sized): {rules.ZERO_LAST}" if f.size == 0 and last
                   else f"file size differs from the configured size: {rules.SIZE_MISMATCH}")
            findings.append(Finding(ERROR, f"{kind}.file_size", str(f.path), 0, file_size, f.size, msg))
        prev = f


def check_queue(root: Path, topic: str, qid: int, cq_file_size: int, track, cl_min: int, cl_end: int,
                findings: list, commitlog_scanned: bool = True, cl_gaps=(), judged: bool = False) -> QueueResult:
    """One consume queue. `track` is the merged QueueTrack of the commitlog pass (None if no record of
    this queue was seen); cl_min/cl_end the commitlog's min offset and end of the last valid record;
    cl_gaps the [start, end) ranges of missing commitlog files (F08). `judged`: the queue's directory is known
    to lie inside the store (FileQueue.scan)."""
    d = root.joinpath("consumequeue", topic, str(qid))
    fq = FileQueue.scan(d, root=root, judged=judged)
    check_queue_files(fq, cq_file_size, findings)
    walk = _UnitWalk(track, cl_min, cl_end, cl_gaps if commitlog_scanned else None, findings)
    for fi, f in enumerate(fq.files):
        base = f.start // UNIT_SIZE
        n_units = min(f.size, cq_file_size) // UNIT_SIZE
        # a chunk at a time as arrays; the rules are those of a walk over the units in order
        for i0, phys, size, tags in _unit_chunks(f.path, n_units):
            walk.chunk(str(f.path), fi == 0, i0, base + i0, phys, size, tags)
    walk.report(topic, qid)
    if track is not None and commitlog_scanned:
        track_findings(root, d, cq_file_size, track, walk.res, topic, qid, findings)
    return walk.res


class _UnitWalk:
    """The walk over one queue's units, a chunk of arrays at a time: where the queue ends (first invalid
    unit) and a valid-looking unit after it (hole), pre-blank units, the queue's extent (QueueResult), and
    -- when the commitlog was scanned -- units pointing past its end, into a missing file, or at no record."""

    def __init__(self, track, cl_min: int, cl_end: int, cl_gaps, findings: list):
        self.res = QueueResult()
        self.findings = findings
        self.cl_min, self.cl_end = cl_min, cl_end
        self.cl_gaps = cl_gaps                  # None: the commitlog was not scanned
        self.first_rec_q = track.first_q if track else None
        self.last_rec_q = track.last_q if track else None
        self.ended_at = None                    # logical offset of the first invalid unit
        self.hole_reported = False
        self.seen_real = False
        self.ahead_first, self.ahead_n = None, 0
        self.orphan_first, self.orphan_n = None, 0
        self.gap_first = None

    def chunk(self, path: str, first_file: bool, i0: int, q0: int, phys, size, tags) -> None:
        import numpy as np

        m = len(phys)
        valid = (phys >= 0) & (size > 0)
        if self.ended_at is None:
            cut = m if valid.all() else int(np.argmin(valid))
            if cut < m:
                self.ended_at = q0 + cut
        else:
            cut = 0
        hole = None
        if cut < m and not self.hole_reported:
            # a valid-looking unit after the queue ended (an invalid unit): the broker stops at the hole
            after = np.flatnonzero(valid[cut:])
            if len(after):
                k = cut + int(after[0])
                self.hole_reported = True
                hole = Finding(ERROR, "cq.hole", path, (i0 + k) * UNIT_SIZE, f"no unit after offset {self.ended_at}",
                               f"unit (phys {int(phys[k])}, size {int(size[k])})",
                               f"valid-looking unit after an invalid one at queue offset {self.ended_at}: "
                               f"the broker's recovery ends the queue at the hole")
        if cut:
            self._valid_units(path, first_file, i0, q0, phys[:cut], size[:cut], tags[:cut])
        if hole is not None:     # after the units before it, in file order
            self.findings.append(hole)

    def _valid_units(self, path, first_file, i0, q0, ph, sz, tg) -> None:
        import numpy as np

        pre = (sz == PRE_BLANK_SIZE) & (ph == 0) & (tg == 0)
        real = np.flatnonzero(~pre)
        first_real = int(real[0]) if len(real) else None
        last_pre = None
        if pre.any():
            pk = np.flatnonzero(pre)
            for k in pk.tolist():
                if self.seen_real or not first_file or (first_real is not None and first_real < k):
                    self.findings.append(Finding(ERROR, "cq.pre_blank", path, (i0 + k) * UNIT_SIZE,
                                                 "a message unit", "pre-blank unit (0, 2147483647, 0)",
                                                 "pre-blank units belong only before the first unit of the "
                                                 "first file"))
            last_pre = int(pk[-1])
        # min_valid is set by each pre-blank unit (q + 1) and by the queue's first real unit (q): the
        # last of those in order wins
        ev_real = first_real if not self.seen_real else None
        if last_pre is not None and (ev_real is None or last_pre > ev_real):
            self.res.min_valid = q0 + last_pre + 1
        elif ev_real is not None:
            self.res.min_valid = q0 + ev_real
        if first_real is None:
            return
        self.seen_real = True
        lr = int(real[-1])
        self.res.max_phys_end = int(ph[lr]) + int(sz[lr])
        self.res.valid_end = q0 + lr + 1
        if self.cl_gaps is not None:
            self._against_commitlog(path, i0, real, ph[real], sz[real], q0 + real)

    def _against_commitlog(self, path, i0, real, rp, rs, rq) -> None:
        """Units into a missing commitlog file; units a record of this queue cannot explain: past the
        commitlog's end (ahead) or inside it (orphan). Units the commitlog pass compared are skipped."""
        import numpy as np

        if self.cl_gaps and self.gap_first is None:
            ing = np.zeros(len(real), bool)
            for g0, g1 in self.cl_gaps:
                ing |= (rp >= g0) & (rp < g1)
            if ing.any():
                k = int(np.argmax(ing))
                pv = int(rp[k])
                g0, g1 = next((g0, g1) for g0, g1 in self.cl_gaps if g0 <= pv < g1)
                self.gap_first = (path, (i0 + int(real[k])) * UNIT_SIZE, int(rq[k]), pv, g0, g1)
        judge = rp + rs > self.cl_min     # else: a message in a deleted (expired) commitlog file
        if self.first_rec_q is not None:
            # else: compared with its record by the commitlog pass
            judge &= (rq < self.first_rec_q) | (rq > self.last_rec_q)
        ahead = judge & (rp >= self.cl_end)
        orphan = judge & (rp < self.cl_end)
        if ahead.any():
            k = int(np.argmax(ahead))
            self.ahead_n += int(ahead.sum())
            if self.ahead_first is None:
                self.ahead_first = (path, (i0 + int(real[k])) * UNIT_SIZE, int(rq[k]), int(rp[k]))
        if orphan.any():
            k = int(np.argmax(orphan))
            self.orphan_n += int(orphan.sum())
            if self.orphan_first is None:
                self.orphan_first = (path, (i0 + int(real[k])) * UNIT_SIZE, int(rq[k]), int(rp[k]))

    def report(self, topic: str, qid: int) -> None:
        findings, cl_end = self.findings, self.cl_end
        if self.ahead_first:
            p, pos, q, phys = self.ahead_first
            findings.append(Finding(ERROR, "cq.ahead", p, pos, f"physical offset < {cl_end} (commitlog end)",
                                    phys, f"{self.ahead_n} unit(s) from queue offset {q} point past the end of the "
                                    f"commitlog (CQ ahead): consumers would read messages that do not exist"))
        if self.gap_first:
            p, pos, q, phys, g0, g1 = self.gap_first
            findings.append(Finding(ERROR, "cq.points_into_gap", p, pos,
                                    "a unit pointing at an existing commitlog file",
                                    f"physical offset {phys} in the missing range [{g0}, {g1})",
                                    f"queue offset {q} and following units reference a missing commitlog file"))
        if self.orphan_first:
            p, pos, q, phys = self.orphan_first
            findings.append(Finding(ERROR, "cq.orphan_unit", p, pos, f"a record of {topic}:{qid} at queue offset {q}",
                                    f"physical offset {phys}",
                                    f"{self.orphan_n} unit(s) point into the commitlog where no record of this "
                                    f"queue has this queue offset"))


def track_findings(root: Path, d: Path, cq_file_size: int, track, res: QueueResult, topic: str, qid: int,
                    findings: list) -> None:
    """What the commitlog pass found for this queue: records with no unit, units that disagree, jumps."""
    if track.first_missing:
        phys, q = track.first_missing
        p, pos = unit_location(d, cq_file_size, q)
        behind = q >= res.valid_end
        findings.append(Finding(
            ERROR, "cq.behind" if behind else "cq.missing_unit", p, pos,
            f"unit for commitlog offset {phys} (queue offset {q})",
            f"queue ends at offset {res.valid_end}" if behind else "no valid unit",
            f"{track.missing} message(s) in the commitlog are not in this consume queue"
            + (" (undispatched tail): the broker re-dispatches them only in abnormal recovery"
               if behind else "")))
    if track.first_mismatch:
        q, exp, act = track.first_mismatch
        p, pos = unit_location(d, cq_file_size, q)
        findings.append(Finding(
            ERROR, "cq.unit_mismatch", p, pos, f"(phys {exp[0]}, size {exp[1]}, tags {exp[2]})",
            f"(phys {act[0]}, size {act[1]}, tags {act[2]})",
            f"{track.mismatches} unit(s) disagree with the commitlog record at their queue offset"))
    if track.first_gap:
        phys, want, got = track.first_gap
        findings.append(Finding(
            ERROR, "commitlog.queue_offset_gap", str(root / "commitlog"), phys, want, got,
            f"{track.gaps} jump(s) in QUEUEOFFSET of {topic}:{qid} ('logic queue order maybe wrong')"))


def note(findings: list, path, msg: str) -> None:
    findings.append(Finding(INFO, "cq.note", str(path), None, None, None, msg))


def check_queue_ext(root: Path, topic: str, qid: int, cq_file_size: int, ext_file_size: int, commitlog,
                    cl_end: int, findings: list, delay_levels=()) -> None:
    """enableConsumeQueueExt: every unit whose tagsCode is an ext address must point at a well-formed ext
    unit (ConsumeQueueExt.get) holding the record's tagsCode and store time; else the broker serves the
    unit without its filter data (SQL92 pre-filtering lost) or with another message's."""
    from rmqctl.dispatch import tags_code
    from rmqctl.formats import consumequeue_ext as extf

    head = struct.Struct(">hqqh")
    d = root / "consumequeue" / topic / str(qid)
    ed = root / "consumequeue_ext" / topic / str(qid)
    cache: dict = {}
    fds: dict = {}
    bad = mism = 0
    first_bad = first_mism = None
    for f in FileQueue.scan(d).files:
        for i0, phys, size, tags in _unit_chunks(f.path, min(f.size, cq_file_size) // UNIT_SIZE):
            for k in ((tags <= extf.MAX_ADDR) & (phys >= 0) & (size > 0) & (phys < cl_end)).nonzero()[0].tolist():
                off = int(tags[k]) - extf.ADDR_BASE
                start = off - off % ext_file_size
                if start not in cache:
                    cache.clear()
                    p = ed / f"{start:020d}"
                    try:
                        with open(p, "rb") as fh:
                            cache[start] = fh.read(ext_file_size)
                    except OSError:
                        cache[start] = b""
                data, pos = cache[start], off - start
                where = (str(f.path), (i0 + k) * UNIT_SIZE)
                u = head.unpack_from(data, pos) if pos + head.size <= len(data) else None
                if u is None or u[0] < extf.MIN_EXT_UNIT_SIZE or u[3] < 0 or u[0] != head.size + u[3] \
                        or pos + u[0] > len(data):
                    bad += 1
                    first_bad = first_bad or (*where, off)
                    continue
                rec = _record_tags_ts(commitlog, fds, int(phys[k]))
                if rec is None:
                    continue        # the unit itself is judged by the commitlog / queue checks
                rtopic, props, rts = rec
                want = (tags_code(rtopic, props, rts, delay_levels), rts)
                if (u[1], u[2]) != want:
                    mism += 1
                    first_mism = first_mism or (*where, off, want, (u[1], u[2]))
    for fd in fds.values():
        os.close(fd)
    if first_bad:
        p, pos, off = first_bad
        findings.append(Finding(ERROR, "cq.ext_unit", p, pos, f"an ext unit at consumequeue_ext offset {off}",
                                "none", f"{bad} unit(s) of {topic}:{qid} point at no valid consume-queue ext "
                                "unit: the broker serves them without their filter data"))
    if first_mism:
        p, pos, off, want, got = first_mism
        findings.append(Finding(ERROR, "cq.ext_mismatch", p, pos, f"(tags {want[0]}, store time {want[1]})",
                                f"(tags {got[0]}, store time {got[1]})",
                                f"{mism} ext unit(s) of {topic}:{qid} (consumequeue_ext offset {off} first) do not "
                                "belong to the message of their consume-queue unit"))


_REC_HEAD = struct.Struct(">iiiiiqqiq")      # totalSize .. bornTimestamp (48 bytes)


def _record_tags_ts(commitlog, fds: dict, phys: int):
    """(topic, properties, store timestamp) of the record at phys, read with two preads (no CRC: only what
    the ext unit is compared with); None when there is no plausible record there."""
    from rmqctl import scan
    from rmqctl.formats.properties import parse_properties

    f = commitlog.queue.file_for(phys, commitlog.file_size)
    if f is None:
        return None
    fd = fds.get(f.start)
    if fd is None:
        try:
            fd = fds[f.start] = os.open(f.path, os.O_RDONLY)
        except OSError:
            return None
    pos = phys - f.start
    h = os.pread(fd, 120, pos)
    if len(h) < _REC_HEAD.size:
        return None
    total, magic, _, _, _, _, _, sysflag, _ = _REC_HEAD.unpack_from(h)
    if magic not in (scan.V1, scan.V2) or total <= 0:
        return None
    at = 48 + (20 if sysflag & 0x10 else 8)
    if at + 8 > len(h):
        return None
    ts = struct.unpack_from(">q", h, at)[0]
    bl_at = at + 8 + (20 if sysflag & 0x20 else 8) + 4 + 8
    if bl_at + 4 > len(h):
        return None
    body_len = struct.unpack_from(">i", h, bl_at)[0]
    t_at = bl_at + 4 + body_len
    tl = 2 if magic == scan.V2 else 1
    rest = os.pread(fd, max(0, total - t_at), pos + t_at)
    if len(rest) < tl or body_len < 0:
        return None
    n = int.from_bytes(rest[:tl], "big")
    topic = rest[tl:tl + n].decode("utf-8", errors="replace")
    p_at = tl + n
    if p_at + 2 > len(rest):
        return None
    plen = struct.unpack_from(">h", rest, p_at)[0]
    return topic, parse_properties(rest[p_at + 2:p_at + 2 + max(0, plen)]), ts
