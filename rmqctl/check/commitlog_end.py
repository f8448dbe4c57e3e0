"""How a walk of a commitlog file stopped, as findings (the module doc of rmqctl.check.commitlog has
the table): BLANK, zeros, a zeroed range, a bad record in the middle or at the tail, stale bytes."""
from __future__ import annotations

import os
import struct
import zlib

from rmqctl import scan
from rmqctl.resync import first_nonzero
from rmqctl.check.commitlog_results import FileResult, ScanContext
from rmqctl.check.findings import ERROR, INFO, WARNING, Finding


STOP_CHECKS = {
    scan.BAD_MAGIC: "commitlog.magic", scan.BAD_SIZE: "commitlog.total_size",
    scan.LENGTH_MISMATCH: "commitlog.length", scan.BAD_LENGTH: "commitlog.length",
    scan.BAD_BODY_CRC: "commitlog.body_crc", scan.BAD_PROP_CRC: "commitlog.prop_crc",
    scan.BAD_PHYSICAL_OFFSET: "commitlog.physical_offset", scan.BAD_DELAY: "commitlog.delay",
    scan.SHORT: "commitlog.short_record",
}


def stop_detail(fd: int, file_start: int, stop: scan.Stop) -> tuple:
    """(expected, actual, message) for a bad record, re-reading just that record."""
    kind = stop.kind
    if kind == scan.BAD_BODY_CRC and 0 < stop.size <= scan.MAX_RECORD_SIZE:
        raw = os.pread(fd, stop.size, stop.pos)
        try:
            flag = struct.unpack_from(">i", raw, 36)[0]
            bpos = 48 + (20 if flag & 0x10 else 8) + 8 + (20 if flag & 0x20 else 8) + 16
            blen = struct.unpack_from(">i", raw, bpos - 4)[0]
            crc = zlib.crc32(raw[bpos:bpos + blen]) & 0x7FFFFFFF
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


def classify_end(ctx: ScanContext, res: FileResult, fd: int, stop: scan.Stop, limit: int) -> int | None:
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
        nz = first_nonzero(fd, stop.pos, limit)
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
    expected, actual, msg = stop_detail(fd, start, stop)
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
