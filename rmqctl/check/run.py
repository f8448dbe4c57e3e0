"""Orchestration of `rmqctl verify`: which checks run, in which order, with what they share.

Order: lock (so the commitlog checks know whether the tail may be in progress), commitlog files
(in parallel with `jobs` > 1: files are split into ranges of RANGE_BYTES at record boundaries, the
workers check ranges, the results are joined per file and merged in file order -- the same findings
as one process),
consume queues, index files, checkpoint/abort/recovery prediction, timer, compaction, config.
Everything is opened O_RDONLY; nothing is ever written to the store.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from rmqctl import dispatch
from rmqctl.check import batchcq as bcqc
from rmqctl.check import commitlog as clc
from rmqctl.check import config as cfc
from rmqctl.check import consumequeue as cqc
from rmqctl.check import index as ixc
from rmqctl.check import smallfiles as sfc
from rmqctl.check.findings import ERROR, INFO, WARNING, Finding, Report
from rmqctl.config import topics as config_topics
from rmqctl.store import rules
from rmqctl.store.files import open_read

AREAS = ("commitlog", "cq", "index", "checkpoint", "config")


def _scan_job(args):
    ctx, path, start, size = args
    return clc.scan_file(ctx, path, start, size)


RANGE_BYTES = 128 * 1024 * 1024   # pieces small enough to balance 2+ workers over a few 1 GiB files
MIN_RANGE = 16 * 1024 * 1024
# each range reads the consume-queue piece of every queue it meets and hands back every queue's track (~50 us
# a queue): a range holds at least this many bytes per queue of the store, so that this stays under the walk's
# own cost (8192 queues: 4 GiB, whole files; 1024: 512 MiB; under 256 queues RANGE_BYTES decides)
QUEUE_RANGE_BYTES = 512 * 1024


def _data_estimates(args: list) -> list:
    """About how many bytes of records each file of the commitlog pass holds (clc.data_estimate)."""
    return [clc.data_estimate(path, min(size, ctx.file_size)) for ctx, path, _, size in args]


def _range_size(est: list, jobs: int, queues: int) -> int:
    """The bytes of a commitlog range of verify -j (each file's data `est`): about a quarter of each worker's
    share, within [MIN_RANGE, RANGE_BYTES]; larger with many queues."""
    return max(min(RANGE_BYTES, max(MIN_RANGE, sum(est) // (4 * jobs))), queues * QUEUE_RANGE_BYTES)


def walk_share(est: list, jobs: int, queues: int) -> int:
    """About how many bytes of records one process of verify -j walks: its share of the data, or the largest range
    when ranges are few (a store of many queues walks whole files: each of 16 workers may get a 1 GiB file)."""
    if jobs <= 1:
        return sum(est)
    return max(sum(est) // jobs, min(_range_size(est, jobs, queues), max(est, default=0)))


def _range_job(args):
    ctx, path, start, size, lo, hi = args
    return clc.scan_range(ctx, path, start, size, lo, hi)


_SIDE: dict = {}     # what the side jobs read, set before the workers fork (inherited, never pickled)


def _index_job(piece: tuple):
    """One index file's facts, or a piece's (i, (lo, hi)), or None when its check fails: the parent then runs
    the file again itself (the error reaches the user as it would without -j, never as a worker's pickled
    exception)."""
    paths, slots, items, version, sample, commitlog = _SIDE["index"]
    i, part = piece
    try:
        return ixc.index_file_facts(paths[i], slots, items, commitlog=commitlog, sample=sample,
                                    broker_version=version, part=part)
    except Exception:
        return None


# a large index file's item checks go to several workers (verify -j) in pieces of at least this many items: each
# piece reads the items before it for their slots only (about a tenth of an item's checks), so pieces of a full
# file (20 M items) cost about 1.5x one pass in all, and the file is done in a fraction of the time
INDEX_PIECE_ITEMS = 32 * ixc.BATCH


# one index item's checks cost about as much as walking this many bytes of commitlog (one process: 10.8 M items in
# 0.33 s, 6.4 GB walked in 1.1 s)
ITEM_BYTES = 176


def _index_pieces(paths: list, jobs: int, walk_bytes: int | None = None) -> list:
    """verify -j's index side jobs: (file number, part) each -- part None for a whole file, else (lo, hi) item
    ranges, the last piece (which also checks slots and samples, and reads every item) first. Files are split
    only when there are fewer of them than workers, and (given the bytes the walk covers) only into as many pieces
    as it takes for none to outlast a worker's share of all the work: pieces cost more in all than one pass."""
    out = []
    share = max(1, jobs // max(1, len(paths)))
    counts = []
    for path in paths:
        try:
            counts.append(ixc.item_count(path) if share > 1 else None)
        except OSError:
            counts.append(None)
    work = None if walk_bytes is None else walk_bytes + ITEM_BYTES * sum(c or 0 for c in counts)
    for i, count in enumerate(counts):
        n = min(share, (count - 1) // INDEX_PIECE_ITEMS) if count else 1
        if work:
            n = min(n, -(-ITEM_BYTES * count * jobs // work) if count else 1)
        if n <= 1:
            out.append((i, None))
            continue
        step = -(-(count - 1) // n // ixc.BATCH) * ixc.BATCH     # whole batches, as one pass reads them
        bounds = [b for b in range(1, count, step)] + [count]
        out.extend((i, (a, b)) for a, b in reversed(list(zip(bounds, bounds[1:]))))
    return out


def _joined_index_facts(pieces: list, got: list, files: int) -> list:
    """Each file's facts from its pieces' (ixc.join_parts); None for a file a piece of which failed."""
    parts: list = [[] for _ in range(files)]
    for (i, part), facts in zip(pieces, got):
        parts[i].append((part[0] if part else 0, facts))
    out = []
    for ps in parts:
        ps.sort(key=lambda x: x[0])
        facts = [f for _lo, f in ps]
        out.append(None if not facts or any(f is None for f in facts) else
                   facts[0] if len(facts) == 1 else ixc.join_parts(facts))
    return out


def _scan_parallel(args: list, jobs: int, progress, est: list | None = None, side: list = (), queues: int = 0) -> tuple:
    """Commitlog files split into ranges at record boundaries (clc.scan_range), checked by `jobs`
    processes, joined per file in order (clc.merge_ranges): the same FileResults as one walk per file.
    `side`: (function, argument) jobs that need no walk results, queued ahead of the ranges so that a worker
    runs each while the others walk. `queues`: how many queues the store holds (QUEUE_RANGE_BYTES). Returns
    (FileResults, the side jobs' results in order)."""
    import multiprocessing as mp

    import numpy  # noqa: F401  -- imported once here, inherited by the forked workers
    import rmqctl.scanvec  # noqa: F401
    from rmqctl.check.commitlog_batch import preload

    preload()   # the numba kernel's verify checks too, when it is in use
    if side:    # the index files' checks: compiled beside a compiled walk (kernels.index_kernel)
        from rmqctl.kernels import index_kernel

        index_kernel()
    # ranges of about a quarter of each worker's share of the data (balance), within [MIN_RANGE, RANGE_BYTES];
    # larger with many queues
    if est is None:
        est = _data_estimates(args)
    rb = _range_size(est, jobs, queues)
    tasks, owner = [], []
    for k, (ctx, path, start, size) in enumerate(args):
        pieces = max(1, -(-est[k] // rb))
        pts = clc.split_points(max(est[k], 1), ctx.file_size, pieces)
        for lo, hi in zip(pts, pts[1:]):
            tasks.append((ctx, path, start, size, lo, hi))
            owner.append(k)
    parts: list = [[] for _ in args]
    import gc

    gc.collect()
    frozen = _freeze()
    with mp.get_context("fork").Pool(min(jobs, len(tasks) + len(side))) as pool:
        pending = [pool.apply_async(fn, (arg,)) for fn, arg in side]
        for k, (t, fr) in enumerate(zip(tasks, pool.imap(_range_job, tasks))):
            parts[owner[k]].append(fr)
            if progress:
                progress((t[5] if t[5] is not None else min(t[3], t[0].file_size)) - t[4])
        side_results = [r.get() for r in pending]
    _thaw(frozen)
    return [clc.merge_ranges(a[0], p) for a, p in zip(args, parts)], side_results


def _freeze() -> bool:
    """Move the parent's objects out of the collector's reach before workers fork: their collections then leave
    the parent's pages alone. True when this process had frozen nothing before (then _thaw gives them back)."""
    import gc

    first = gc.get_freeze_count() == 0
    gc.freeze()
    return first


def _thaw(first: bool) -> None:
    """Undo _freeze, unless the process had frozen objects already (numba's, rmqctl.kernels): thawed, they made
    the collections at interpreter exit cost 0.13-0.2 s."""
    import gc

    if first:
        gc.unfreeze()


# after the walk, verify -j checks the consume queues in workers too, in contiguous groups of queues (a fresh pool:
# the walk's results reach it by fork), when that is sooner. Measured (6.4 GB, 32 queues; 1.2 GB, 8192 queues): one
# process spends ~7 ns a unit and ~22 us a queue (QUEUE_UNITS units); a fresh worker spends three times as much a
# unit (its arrays land on pages it has not touched yet) and about the same a queue, and the pool ~15 ms to start
QUEUE_UNITS = 3000
UNIT_NS = 7
POOL_NS = 15_000_000


def _queues_in_workers(units: int, queues: int, jobs: int) -> bool:
    """Whether `jobs` workers check `queues` holding `units` in all sooner than this process alone."""
    alone = (units + QUEUE_UNITS * queues) * UNIT_NS
    return jobs > 1 and queues > 1 and (3 * units + QUEUE_UNITS * queues) * UNIT_NS // jobs + POOL_NS < alone


_AFTER: dict = {}    # what the queue-check jobs read, set before their pool forks


def _queues_job(span: tuple):
    """check_queues over queues[lo:hi]: (results, findings), or None when it fails (the parent then checks those
    queues itself, and an error reaches the user as it would without -j)."""
    from rmqctl.check.queues_many import check_queues

    store, queues, cq_file_size, tracks, cl_min, cl_end, scanned, cl_gaps = _AFTER["queues"]
    found: list = []
    try:
        return check_queues(store, queues[span[0]:span[1]], cq_file_size, tracks, cl_min, cl_end, found, scanned,
                            cl_gaps), found
    except Exception:
        return None


def _queue_spans(queues: list, tracks: dict, parts: int) -> list:
    """`queues` cut into about `parts` contiguous spans of about equal work: each queue's units (by the commitlog
    pass) and QUEUE_UNITS."""
    weight = [tracks[k].count + QUEUE_UNITS if k in tracks else QUEUE_UNITS for k in queues]
    total = sum(weight)
    spans, lo, acc = [], 0, 0
    for i, w in enumerate(weight):
        acc += w
        if acc * parts >= total * (len(spans) + 1) and i + 1 < len(queues):
            spans.append((lo, i + 1))
            lo = i + 1
    spans.append((lo, len(queues)))
    return spans


def _check_queues(store, queues: list, cq_file_size: int, tracks: dict, cl_min: int, cl_end: int, findings: list,
                  scanned: bool, cl_gaps, jobs: int) -> dict:
    """queues_many.check_queues, by `jobs` processes when the queues hold enough units: the same results and the
    same findings in the same order (each span's, in queue order)."""
    from rmqctl.check.queues_many import check_queues

    args = (cq_file_size, tracks, cl_min, cl_end)
    if not _queues_in_workers(sum(t.count for t in tracks.values()), len(queues), jobs):
        return check_queues(store, queues, *args, findings, scanned, cl_gaps)
    import multiprocessing as mp

    spans = _queue_spans(queues, tracks, 4 * jobs)
    _AFTER["queues"] = (store, queues, *args, scanned, cl_gaps)
    frozen = _freeze()
    try:
        with mp.get_context("fork").Pool(min(jobs, len(spans))) as pool:
            got = pool.map(_queues_job, spans)
    finally:
        _AFTER.clear()
        _thaw(frozen)
    out: dict = {}
    for (lo, hi), g in zip(spans, got):
        if g is None:
            g = ({}, [])
            g[0].update(check_queues(store, queues[lo:hi], *args, g[1], scanned, cl_gaps))
        out.update(g[0])
        findings.extend(g[1])
    return out


def _merge_tracks(tracks: dict, fr: clc.FileResult, continuous: bool) -> None:
    """continuous: the previous file ended with its BLANK record and this file follows it directly,
    so queue offsets must continue (otherwise the jump is a consequence of a reported problem)."""
    for key, t in fr.queues.items():
        m = tracks.get(key)
        if m is None:
            tracks[key] = t
            continue
        if continuous:
            m.gap_to(t)
        m.absorb(t)


def _check_commitlog_files(store, report: Report, gaps: list) -> list:
    """Names = start offsets, contiguous, equal sizes, strays. Returns the files worth walking;
    missing ranges go into `gaps` as (start, end)."""
    fq = store.commitlog
    fs = store.config.commitlog_file_size
    findings = report.findings
    if not store.commitlog_dir.is_dir() and (store.queues() or store.index_files()):
        findings.append(Finding(ERROR, "commitlog.missing", str(store.commitlog_dir), None, "a commitlog directory",
                                "none", "consume queues or index files but no commitlog directory here; if the "
                                "broker's storePathCommitLog points elsewhere, give --broker-config"))
    for p, why in fq.strays:
        findings.append(Finding(WARNING, "commitlog.stray", str(p), None, None, None,
                                f"{why}: the broker fails to start on a stray file in commitlog/"))
    walk = []
    prev = None
    for i, f in enumerate(fq.files):
        last = i == len(fq.files) - 1
        if prev is not None:
            want = prev.start + fs
            if f.start > want:
                gaps.append((want, f.start))
                findings.append(Finding(ERROR, "commitlog.file_gap", str(store.commitlog_dir / f"{want:020d}"), want,
                                        f"a file starting at {want}", f"next file starts at {f.start}",
                                        f"missing commitlog file(s): bytes [{want}, {f.start}) are gone"))
            elif f.start < want:
                findings.append(Finding(ERROR, "commitlog.file_overlap", str(f.path), f.start, want, f.start,
                                        f"overlaps {prev.path.name}"))
        if f.start % fs:
            findings.append(Finding(ERROR, "commitlog.file_name", str(f.path), f.start, f"a multiple of {fs}",
                                    f.start, "file name is not a multiple of the commitlog file size"))
        if f.size != fs:
            if f.size == 0 and last:
                msg = f"zero-length last file (created, never sized): {rules.ZERO_LAST}"
            elif f.size == 0:
                msg = f"zero-length file in the middle: {rules.SIZE_MISMATCH}"
            else:
                msg = f"file size differs from mappedFileSizeCommitLog: {rules.SIZE_MISMATCH}"
            findings.append(Finding(ERROR, "commitlog.file_size", str(f.path), f.start, fs, f.size, msg))
        if f.size > 0:
            walk.append(f)
        prev = f
    return walk


_COMMITLOG_OFFSET = re.compile(r"commitlog offset (\d+)")


def _recovered_end(results) -> tuple:
    """(offset, file) where the broker's recovery stops: the first record it cannot read, or the end of the
    last file."""
    for fr in results:
        if fr.first_skip is not None:
            return fr.first_skip, fr.path
        if not fr.full:
            return fr.end, fr.path
    return None, None


def _stale_after_recovered_end(results, findings, index_max_phy: int, confirm: int) -> None:
    """No abort file, the index knows nothing at or past the point E where the broker's recovery stops, and (5.1.1+)
    the checkpoint's confirmPhyOffset, which only recovery sets, lies before E: the broker has already recovered to
    E. It cuts consume queues there in memory only, so units past E stay on disk, as do the bytes; it never serves
    them and overwrites them. Said as notes, once, not as damage. (A store damaged after a clean shutdown has index
    items past E -- every message carries a UNIQ_KEY -- unless indexing is off or messages have no keys.)"""
    end, path = _recovered_end(results)
    if end is None or index_max_phy >= end or confirm >= end:
        return
    stale = []
    for f in findings:
        if f.severity == INFO:
            continue
        if f.check.startswith("commitlog.") and f.offset is not None and f.offset >= end and \
                f.check not in ("commitlog.file_size", "commitlog.file_gap", "commitlog.file_overlap",
                                "commitlog.file_name", "commitlog.stale_record"):   # older brokers read that one
            stale.append(f)
        elif f.check == "cq.behind":
            m = _COMMITLOG_OFFSET.search(f"{f.expected} {f.message}")
            if m and int(m.group(1)) >= end:
                stale.append(f)
    if not stale:
        return
    for f in stale:
        f.severity = INFO
        f.message = f"past the end the broker already recovered to ({end}): {f.message}"
    findings.append(Finding(INFO, "commitlog.stale_after_end", path, end, None, None,
                            f"no abort file and no index item past offset {end}: the broker has already recovered to "
                            f"this end; what lies after it (records, consume-queue units) is stale: the broker never "
                            f"serves it and overwrites it; `rmqctl recover --on-corruption quarantine` can still "
                            f"save the records there"))


def _topic_name_finding(store, topic: str, qid: int, track) -> Finding:
    """Records whose topic no consume-queue directory can have (a NUL byte, a '/', '.' or '..'): only damage to
    their topic bytes, which no CRC covers, gives one (the broker accepts letters, digits and %|_- only)."""
    f = store.commitlog.file_for(track.first_phys, store.config.commitlog_file_size)
    return Finding(ERROR, "commitlog.topic_name", str(f.path if f is not None else store.commitlog_dir),
                   track.first_phys, "a topic name a directory can have", repr(topic),
                   f"{track.count} message(s) of queue {qid} name this topic: damaged topic bytes (no CRC covers "
                   "them); no consumer can read them: the broker's consume-queue write fails (a NUL: 30 tries, "
                   "then the queue is flagged unwritable) or lands where its start-up never looks (a '/')")


class _Named:
    def __init__(self, path):
        self.path = path


def _index_plan(store, areas) -> tuple:
    """(index files, maxHashSlotNum, maxIndexNum they are checked with, the geometry finding or None)."""
    cfg = store.config
    if "index" not in areas:
        return [], 0, 0, None
    slots, items = cfg.hash_slot_num, cfg.index_num
    geo = cfg.index_geometry_files
    finding = None
    if geo and geo != (slots, items):
        finding = Finding(WARNING, "index.geometry", str(store.index_dir), None,
                          f"maxHashSlotNum {slots}, maxIndexNum {items} (broker config)",
                          f"maxHashSlotNum {geo[0]}, maxIndexNum {geo[1]} (index files)",
                          "the index files were written with another geometry than the broker config gives; "
                          "a broker started with this config misreads them (files checked with their own geometry)")
        slots, items = geo
    return store.index_files(), slots, items, finding


def _last_data_file(files) -> int:
    for i in range(len(files) - 1, -1, -1):
        try:
            fd = open_read(files[i].path)
        except OSError:
            return i
        try:
            head = os.pread(fd, 8, 0)
        finally:
            os.close(fd)
        if head.strip(b"\0"):
            return i
    return 0


def verify_store(store, *, jobs: int = 1, areas=AREAS, index_sample: int = 64, progress=None,
                 scan_map=None) -> Report:
    """Check a whole store. `scan_map(args) -> [FileResult]` runs the per-file commitlog scans
    (args: [(ScanContext, path, start, size)], results in the same order); the default runs them here
    (jobs > 1: ranges in worker processes). The Spark engine passes one that runs them as Spark tasks. The queue
    directories are listed once (Store.listed_once); those reached through no link are not judged again."""
    with store.listed_once():
        return _verify_store(store, jobs=jobs, areas=areas, index_sample=index_sample, progress=progress,
                             scan_map=scan_map)


def _verify_store(store, *, jobs: int, areas, index_sample: int, progress, scan_map) -> Report:
    t0 = time.time()
    root = store.root
    cfg = store.config
    report = Report(str(root))
    findings = report.findings
    for u in store.unsupported(rocksdb=True):
        findings.append(Finding(ERROR, "store.unsupported", str(root), None, None, None, u))
    lock_held = sfc.check_lock(store, findings)

    index_plan = _index_plan(store, areas)
    index_facts = None     # computed beside the commitlog walk (-j), else after it

    # --- commitlog --------------------------------------------------------------------------------
    cl_gaps: list = []
    files = _check_commitlog_files(store, report, cl_gaps) if "commitlog" in areas else []
    batch_topics = config_topics.batch_topics(store)
    results: list[clc.FileResult] = []
    scanned = "commitlog" in areas
    if scanned and files:
        base = clc.ScanContext(str(root), cfg.commitlog_file_size, cfg.cq_file_size, tuple(cfg.delay_levels),
                               lock_held=lock_held, check_cq="cq" in areas, batch_topics=batch_topics,
                               multi_dispatch=dispatch.multi_dispatch_on(cfg), enable_lmq=dispatch.lmq_on(cfg))
        # The broker pre-allocates the next file: trailing files that start with zeros hold no data,
        # so the "last file" (where zeros after the last record are normal) is the last one with data.
        last_data = _last_data_file(files)
        if last_data < len(files) - 1:
            findings.append(Finding(INFO, "commitlog.preallocated", str(files[last_data + 1].path),
                                    files[last_data + 1].start, None, None,
                                    f"{len(files) - 1 - last_data} empty pre-allocated file(s) after the last "
                                    f"written one (the broker's recovery deletes them)"))
        args = []
        for i, f in enumerate(files):
            ctx = clc.ScanContext(**{**base.__dict__, "is_last": i >= last_data})
            args.append((ctx, str(f.path), f.start, f.size))
        est = None
        if scan_map is None:     # numba or numpy for the commitlog pass: by each process's share of the data
            from rmqctl import kernels

            est = _data_estimates(args)
            kernels.expect(walk_share(est, jobs, len(store.queues())))
        if scan_map is not None:
            results = list(scan_map(args))
        else:
            from rmqctl.check import commitlog_batch as clb
            from rmqctl.check.cq_units import forget_spare

            clb.PLAIN_QUEUES[base.root] = store.plain_queue_dirs()
            try:
                if jobs > 1:
                    from rmqctl.store.commitlog import CommitLog

                    idx, slots, items, _ = index_plan
                    _SIDE["index"] = (idx, slots, items, cfg.broker_version, index_sample, CommitLog(store))
                    pieces = _index_pieces(idx, jobs, sum(est))
                    results, got = _scan_parallel(args, jobs, progress, est, [(_index_job, pc) for pc in pieces],
                                                  queues=len(store.queues()))
                    index_facts = _joined_index_facts(pieces, got, len(idx))
                else:
                    for a in args:
                        fr = _scan_job(a)
                        results.append(fr)
                        if progress:
                            progress(fr.size)
            finally:
                _SIDE.clear()
                clb.PLAIN_QUEUES.pop(base.root, None)
                forget_spare()
    tracks: dict = {}
    messages = nbytes = 0
    prev = None
    for fr in results:
        findings.extend(fr.findings)
        _merge_tracks(tracks, fr, prev is not None and prev.full
                      and fr.start == prev.start + cfg.commitlog_file_size)
        prev = fr
        messages += fr.messages
        nbytes += fr.bytes
    cl_min = max(0, store.commitlog.min_offset)   # -1 (no file) reads as 0
    # the logical end: where the broker's recovery would stop = after the last valid record
    cl_end = max((fr.end for fr in results), default=cl_min)
    last_ts = None
    if results and results[-1].last_valid is not None:
        from rmqctl.store.commitlog import CommitLog

        last_ts = CommitLog(store).store_timestamp(results[-1].last_valid, 8)
    report.stats.update(messages=messages, bytes=nbytes, commitlog_files=len(store.commitlog.files),
                        commitlog_min_offset=cl_min, commitlog_end=cl_end)

    # --- consume queues ---------------------------------------------------------------------------
    cq_max_phys = -1
    queue_ranges: dict = {}
    if "cq" in areas and store.engine == "rocksdb":     # storeType=defaultRocksDB
        from rmqctl.check import rocksdb_cq as rkc

        queue_ranges, cq_max_phys = rkc.check_store(store, findings, cl_min=cl_min, cl_end=cl_end if scanned else None)
        if "config" in areas:
            rkc.check_metadata(store, findings, queue_ranges)
    elif "cq" in areas:
        queues = store.queues()
        for key, qr in _check_queues(store, queues, cfg.cq_file_size, tracks, cl_min, cl_end, findings, scanned,
                                     cl_gaps, jobs if scan_map is None else 1).items():
            cq_max_phys = max(cq_max_phys, qr.max_phys_end)
            queue_ranges[key] = (qr.min_valid, qr.valid_end)
        if scanned:
            have = set(queues) | {(t, q) for t, q in store.queues("batchconsumequeue")}
            for (topic, qid), t in sorted(tracks.items()):
                if not dispatch.names_a_directory(topic):
                    findings.append(_topic_name_finding(store, topic, qid, t))
                elif (topic, qid) not in have:
                    kind = "batchconsumequeue" if topic in batch_topics else "consumequeue"
                    findings.append(Finding(ERROR, "cq.behind", str(root / kind / topic / str(qid)), 0,
                                            f"a consume queue with {t.count} message(s)", "no queue directory",
                                            f"{t.count} message(s) of {topic}:{qid} from commitlog offset "
                                            f"{t.first_phys} were never dispatched"))
        bcqc.check_queue_types(store, findings)
        for topic, qid in store.queues("batchconsumequeue"):
            bcqc.check_batch_queue(store, topic, qid, tracks.get((topic, qid)), cl_end, findings, scanned)
        if (root / "consumequeue_ext").is_dir() and scanned:
            from rmqctl.store.commitlog import CommitLog

            cl = CommitLog(store)
            for topic, qid in queues:
                cqc.check_queue_ext(root, topic, qid, cfg.cq_file_size, cfg.cq_ext_file_size, cl, cl_end, findings,
                                    tuple(cfg.delay_levels))
    report.stats["queues"] = len(queue_ranges)

    # --- index ------------------------------------------------------------------------------------
    ck = None
    if "checkpoint" in areas:
        ck = sfc.check_checkpoint(store, findings, cl_end if scanned else None, last_ts)
    index_max_phy = -1
    if "index" in areas:
        from rmqctl.store.commitlog import CommitLog

        idx, slots, items, geo_finding = index_plan
        cl = CommitLog(store) if scanned else None
        if geo_finding:
            findings.append(geo_finding)
        for i, p in enumerate(idx):
            facts = index_facts[i] if index_facts and index_facts[i] is not None else ixc.index_file_facts(
                p, slots, items, commitlog=cl if index_sample else None, sample=index_sample,
                broker_version=cfg.broker_version)
            hdr = ixc.finish_index_file(facts, findings, cl_min=cl_min, cl_end=cl_end if scanned else None,
                                        is_last=i == len(idx) - 1, checkpoint=ck)
            if hdr.get("index_count", 0) > 1:
                index_max_phy = max(index_max_phy, hdr["end_phy_offset"])
        legacy = [f for f in findings if f.check == "index.legacy_slot_count"]
        if len(legacy) > 1:   # said once for the store
            findings[:] = [f for f in findings if f.check != "index.legacy_slot_count" or f is legacy[0]]
            legacy[0].message += f" ({len(legacy)} index files)"
        if not idx and cl is not None:
            ixc.check_index_missing(store, cl, findings)
        report.stats["index_files"] = len(idx)

    # --- checkpoint, abort, recovery prediction, timer, compaction --------------------------------
    if "checkpoint" in areas:
        per_file = [(f, fr.first_store_ts, fr.first_magic) for f, fr in zip(files, results)]
        if per_file:
            report.stats["recovery"] = sfc.predict_recovery(store, findings, per_file, ck, cq_max_phys)
        elif store.abort_exists:
            findings.append(Finding(WARNING, "abort.present", str(store.abort_path), None, None, None,
                                    "abort file present: the next start runs abnormal recovery"))

        def qmax(topic, qid):
            r = queue_ranges.get((topic, qid))
            return None if r is None else r[1]

        timer_max = qmax("rmq_sys_wheel_timer", 0)
        sfc.check_timer(store, findings, timer_max)
        from rmqctl.check import timer as tmc

        tmc.check_timer_store(store, findings, cl_min=cl_min if scanned else None, cl_end=cl_end if scanned else None)
        sfc.check_compaction(store, findings, qmax)
        from rmqctl.check import compaction as cmc

        cstats = cmc.check_compaction_store(store, findings)
        if cstats.get("compaction_queues"):
            report.stats.update(cstats)

    if scanned and "cq" in areas and "index" in areas and not store.abort_exists:
        _stale_after_recovered_end(results, findings, index_max_phy, ck.confirm_phy_offset if ck else 0)

    # --- config -----------------------------------------------------------------------------------
    if "config" in areas:
        cfc.check_configs(store, findings,
                          (lambda t, q: queue_ranges.get((t, q))) if "cq" in areas else (lambda t, q: None))
    for p, why in sorted(store.not_followed.items()):
        findings.append(Finding(WARNING, "store.not_followed", str(p), None, None, None,
                                f"{why}; not checked"))
    report.stats["seconds"] = round(time.time() - t0, 3)
    return report


def verify_file(path: Path, store, *, index_sample: int = 64) -> Report:
    """One file: the checks that need only that file (and, where cheap, the store's config)."""
    from rmqctl.formats import kind_for_path

    t0 = time.time()
    path = Path(path)
    report = Report(str(path))
    findings = report.findings
    kind = kind_for_path(path.resolve())
    cfg = store.config if store is not None else None
    if kind == "commitlog":
        size = path.stat().st_size
        start = int(path.name)
        fs = cfg.commitlog_file_size if cfg else size
        if size != fs:
            findings.append(Finding(ERROR, "commitlog.file_size", str(path), start, fs, size,
                                    "file size differs from mappedFileSizeCommitLog"))
        names = sorted(n for n in os.listdir(path.parent) if n.isdigit() and len(n) == 20)
        # the last file with data: later files that are empty (0 bytes, or pre-allocated zeros) hold nothing
        later = [_Named(path.parent / n) for n in names if n > path.name]
        is_last = not later or _last_data_file([_Named(path)] + later) == 0
        ctx = clc.ScanContext(str(path.parent.parent), fs, cfg.cq_file_size if cfg else 6_000_000,
                              tuple(cfg.delay_levels) if cfg else (), is_last=is_last, check_cq=False)
        fr = clc.scan_file(ctx, str(path), start, size)
        findings.extend(fr.findings)
        report.stats.update(messages=fr.messages, bytes=fr.bytes)
    elif kind == "consumequeue":
        qdir = path.parent
        fs = cfg.cq_file_size if cfg else path.stat().st_size
        from rmqctl.store.files import FileQueue, MappedFile

        fq = FileQueue(qdir, [MappedFile(path, int(path.name), path.stat().st_size)])
        cqc.check_queue_files(fq, fs, findings)
        fake_root = qdir.parent.parent.parent
        # structure only: no commitlog comparison for a single file
        cqc.check_queue(fake_root, qdir.parent.name, int(qdir.name), fs, None, 0, 0, findings,
                        commitlog_scanned=False)
        findings[:] = [f for f in findings if f.path == str(path) or f.check not in ("cq.file_gap",)]
    elif kind == "index":
        from rmqctl.store.index import solve_geometry

        hint = (cfg.hash_slot_num, cfg.index_num) if cfg else (5_000_000, 20_000_000)
        slots, items = solve_geometry(path, [hint]) or hint
        ixc.check_index_file(path, slots, items, findings, sample=0,
                             broker_version=cfg.broker_version if cfg else None)
    elif kind == "checkpoint":
        from rmqctl.store.layout import Store

        sfc.check_checkpoint(store or Store(path.parent), findings, None, None)
    elif kind in ("compaction_log", "compaction_cq"):
        from rmqctl.check import compaction as cmc

        report.stats.update(cmc.verify_one(path, findings, cfg))
    elif kind == "config":
        from rmqctl.config import files as cf

        t = cf.locate(path)
        cfc.check_config_file(t, findings)
    else:
        from rmqctl.errors import UsageError

        raise UsageError(f"verify does not know this kind of file ({kind or 'unknown'}); give a store directory "
                         f"or a commitlog, consumequeue, index, checkpoint, compaction or config file", path=path)
    report.stats["seconds"] = round(time.time() - t0, 3)
    return report


__all__ = ["verify_store", "verify_file", "AREAS", "ERROR", "WARNING", "INFO"]
