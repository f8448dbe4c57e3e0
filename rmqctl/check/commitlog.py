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

import os

from rmqctl.check.commitlog_results import FileResult, QueueTrack, ScanContext  # noqa: F401  (re-exported)
from rmqctl.check.findings import ERROR, Finding
from rmqctl.resync import first_record as _first_record
from rmqctl.resync import split_points  # noqa: F401  (re-exported: check.run and the tests split with it)
from rmqctl.store.commitlog import data_estimate  # noqa: F401  (re-exported: check.run sizes its work with it)
from rmqctl.store.files import open_read


def scan_file(ctx: ScanContext, path: str, start: int, size: int) -> FileResult:
    """Check every record of one commitlog file (see the module doc)."""
    return scan_range(ctx, path, start, size)


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
        from rmqctl.check.commitlog_batch import RangeScan   # numpy: imported by the scan only

        RangeScan(ctx, res, fd, begin, end, limit).run()
        return res
    finally:
        os.close(fd)


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


