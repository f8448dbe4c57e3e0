"""verify's batch commitlog pass (rmqctl.check.commitlog: scanvec batches, array checks, ranges split at
record boundaries) gives exactly the FileResult of the record-at-a-time implementation it replaced,
kept here as the reference: on every fixture file, under random damage to commitlog and consume-queue
bytes, and for any split of a file into ranges."""
from __future__ import annotations

import os
import shutil
import struct
import tempfile
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import faultlib as F
from oracle_helpers import fixture_dirs, load_manifest
from rmqctl import scan
from rmqctl.check import commitlog as clc
from rmqctl.check.consumequeue import QueueResult
from rmqctl.check import consumequeue as cqc
from rmqctl.check.commitlog import ERROR, FileResult, Finding, QueueTrack
from rmqctl.check.commitlog_batch import props_problem as _props_problem
from rmqctl.check.commitlog_batch import utf8_ok as _utf8_ok
from rmqctl.check.commitlog_end import classify_end as _classify_end
from rmqctl.check.cq_units import CqReader as _CqReader
from rmqctl.dispatch import SCHEDULE_TOPIC, lmq_targets, tags_code
from rmqctl.formats import commitlog as clf
from rmqctl.formats.index import java_string_hash


# -- reference implementations the batch code is checked against (moved here from rmqctl.check) ------------

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


def _iter_units(path: Path, n_units: int):
    fd = os.open(path, os.O_RDONLY)
    try:
        i = 0
        while i < n_units:
            data = os.pread(fd, min(65536, n_units - i) * 20, i * 20)
            k = len(data) // 20
            if k == 0:
                return
            yield from struct.iter_unpack(">qiq", data[:k * 20])
            i += k
    finally:
        os.close(fd)


def reference_scan_file(ctx, path, start, size):
    """The record-at-a-time implementation verify used before the batch kernel (FileWalk per record)."""
    res = FileResult(path, start, size, end=start)
    findings = res.findings
    limit = min(size, ctx.file_size)
    cq = _CqReader(ctx.root, ctx.cq_file_size) if ctx.check_cq else None
    tag_hash: dict = {}
    topic_ok: dict = {}
    queues = res.queues
    # tagsCode <= Integer.MIN_VALUE - 1 is an ext address only in a store with consume-queue ext files
    ext_floor = -2147483649 if os.path.isdir(os.path.join(ctx.root, "consumequeue_ext")) else None
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
                t_at = r.body_rel + r.body_length
                tb = bytes(r.buf[t_at + 1:t_at + 1 + r.buf[t_at]]) if r.magic_code == scan.V1 else \
                    bytes(r.buf[t_at + 2:t_at + 2 + int.from_bytes(r.buf[t_at:t_at + 2], "big")])
                ok = topic_ok.get(tb)
                if ok is None:
                    ok = topic_ok[tb] = _utf8_ok(tb)   # the raw bytes (the decoded name has U+FFFD instead)
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
                inner = 1
                if r.sys_flag & clf.INNER_BATCH_FLAG:
                    try:
                        inner = max(1, int(r.properties.get("INNER_NUM", "1")))
                    except ValueError:
                        inner = 1
                # the record's own queue, then each multi-dispatch (LMQ) target at its own queue offset
                targets = [(topic, r.queue_id, r.queue_offset, inner)]
                if ctx.multi_dispatch and b"INNER_MULTI_QUEUE_OFFSET\x01" in (praw or b""):
                    targets += [(n, tq, to, 1) for n, tq, to in
                                lmq_targets(topic, r.queue_id, r.properties, ctx.enable_lmq)]
                for tname, qid, q, inner in targets:
                    key = (tname, qid)
                    t = queues.get(key)
                    if t is None:
                        t = queues[key] = QueueTrack(q, q, q + inner, 0, r.offset)
                    elif q != t.next_q and t.next_q >= 0:
                        t.gaps += 1
                        if t.first_gap is None:
                            t.first_gap = (r.offset, t.next_q, q)
                    t.count += 1
                    t.last_q, t.next_q = q, q + inner
                    if cq is None or tname in batch_topics:
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
                    u = cq.unit(tname, qid, q)
                    if u is None or u[0] < 0 or u[1] <= 0:
                        t.missing += 1
                        if t.first_missing is None:
                            t.first_missing = (r.offset, q)
                    elif (u[0] != r.offset or u[1] != r.total_size
                          or (u[2] != tags and (ext_floor is None or u[2] > ext_floor))):
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




def _view(fr: FileResult) -> dict:
    d = asdict(fr)
    for k in ("begin", "range_end", "handoff", "first_skip"):
        d.pop(k)
    return d


def _contexts(root: Path, file_size: int, cq_file_size: int, delay_levels=()):
    from rmqctl.check import run

    # git keeps no empty directories: a clone of the "empty" fixtures has no commitlog/ at all
    cdir = root / "commitlog"
    files = sorted(p for p in cdir.iterdir() if p.name.isdigit()) if cdir.is_dir() else []
    batch = frozenset(p.name for p in (root / "batchconsumequeue").iterdir()) \
        if (root / "batchconsumequeue").is_dir() else frozenset()
    last_data = len(files) - 1
    while last_data > 0 and not open(files[last_data], "rb").read(8).strip(b"\0"):
        last_data -= 1
    out = []
    for i, p in enumerate(files):
        ctx = clc.ScanContext(str(root), file_size, cq_file_size, tuple(delay_levels), is_last=i >= last_data,
                              batch_topics=batch)
        out.append((ctx, str(p), int(p.name), p.stat().st_size))
    del run
    return out


def _ranges(ctx, path, start, size, pieces):
    pts = clc.split_points(size, ctx.file_size, pieces)
    return clc.merge_ranges(ctx, [clc.scan_range(ctx, path, start, size, a, b) for a, b in zip(pts, pts[1:])])


def _check_root(root: Path, file_size: int, cq_file_size: int, delay_levels=(), pieces=(2, 3, 7)):
    for ctx, path, start, size in _contexts(root, file_size, cq_file_size, delay_levels):
        want = _view(reference_scan_file(ctx, path, start, size))
        assert _view(clc.scan_file(ctx, path, start, size)) == want, path
        for k in pieces:
            assert _view(_ranges(ctx, path, start, size, k)) == want, (path, k)


FIXTURES = [p for p in fixture_dirs()]


@pytest.mark.parametrize("fx", FIXTURES, ids=[p.name for p in FIXTURES])
def test_equal_on_fixtures(fx):
    sc = load_manifest(fx)["store_config"]
    delay = [int(x[:-1]) * {"s": 1000, "m": 60000, "h": 3600000, "d": 86400000}[x[-1]]
             for x in sc.get("messageDelayLevel", "").split()] if sc.get("messageDelayLevel") else ()
    _check_root(fx / "store", sc["mappedFileSizeCommitLog"], sc["mappedFileSizeConsumeQueue"], delay)


DELAYS = (1000, 5000, 10000, 30000)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    return F.make_store(tmp_path_factory.mktemp("vb") / "store")


def test_equal_on_synthetic(synthetic):
    _check_root(synthetic, 32 * 1024, 64 * 20, DELAYS, pieces=(2, 3, 5, 11, 40))


def damage(root: Path, cl_flips, cq_flips, cut: int, file_size: int = 32 * 1024) -> None:
    """Flip bytes of the commitlog files ((file, position, xor) triples) and of the consume-queue files
    ((position, xor) pairs), and zero the last commitlog file from `cut` on."""
    files = sorted(p for p in (root / "commitlog").iterdir() if p.name.isdigit())
    for fi, pos, x in cl_flips:
        p = files[fi % len(files)]
        data = bytearray(p.read_bytes())
        data[pos % len(data)] ^= x
        p.write_bytes(bytes(data))
    cqs = sorted(p for p in (root / "consumequeue").rglob("0*") if p.is_file())
    for pos, x in cq_flips:
        p = cqs[pos % len(cqs)]
        data = bytearray(p.read_bytes())
        if data:
            data[pos % len(data)] ^= x
            p.write_bytes(bytes(data))
    last = files[-1]
    last.write_bytes(last.read_bytes()[:cut] + bytes(file_size - cut))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 32 * 1024 - 1), st.integers(1, 255)), max_size=6),
       st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=4),
       st.integers(0, 32 * 1024), st.sampled_from([2, 3, 6]))
def test_equal_under_damage(synthetic, cl_flips, cq_flips, cut, pieces):
    with tempfile.TemporaryDirectory() as d:
        root = Path(shutil.copytree(synthetic, Path(d) / "store"))
        damage(root, cl_flips, cq_flips, cut)
        _check_root(root, 32 * 1024, 64 * 20, DELAYS, pieces=(pieces,))


@pytest.mark.parametrize("to", [b"\0", b"/"], ids=["nul", "slash"])
def test_equal_with_a_topic_no_directory_can_have(synthetic, tmp_path, to):
    """A damaged topic byte (found by test_equal_under_damage): the record stays valid, its queue cannot exist."""
    root = Path(shutil.copytree(synthetic, tmp_path / "store"))
    rec = next(r for r in F.commitlog_records(root)[200:]
               if b"__CRC32#" not in r.path.read_bytes()[r.props_pos:r.props_pos + r.props_len])
    F.damage_topic(root, rec, to=to)
    assert {r.offset: r.topic for r in F.commitlog_records(root)}[rec.offset] != rec.topic
    _check_root(root, 32 * 1024, 64 * 20, DELAYS, pieces=(2, 3))


def _edit_props(data: bytearray, r, how: str) -> None:
    """Property edits the body CRC does not see (records with a __CRC32# tail would stop the walk)."""
    a, z = r.props_pos, r.props_pos + r.props_len
    p = bytes(data[a:z])
    if how == "empty_segment":          # \x02\x02
        i = p.find(b"\x02")
        if 0 <= i < len(p) - 1:
            data[a + i + 1] = 2
    elif how == "non_ascii":            # valid UTF-8, not ASCII: must not be reported
        i = p.find(b"\x01")
        if 0 <= i < len(p) - 2:
            data[a + i + 1:a + i + 3] = "é".encode()
    elif how == "invalid_utf8":
        data[a + len(p) // 2] = 0xFF
    elif how == "no_final_separator":
        data[z - 1] = ord("x")
    elif how == "tags_twice":           # KEYS -> TAGS: two TAGS properties, the broker keeps the last
        i = p.find(b"KEYS\x01")
        if i >= 0:
            data[a + i:a + i + 4] = b"TAGS"
    elif how == "tags_mid_segment":     # the byte before TAGS is no separator
        i = p.find(b"TAGS\x01")
        if i > 0:
            data[a + i - 1] = ord("x")
    elif how == "tags_invalid_utf8":
        i = p.find(b"TAGS\x01")
        if i >= 0 and i + 5 < len(p):
            data[a + i + 5] = 0xC3
    elif how == "tags_empty":
        i = p.find(b"TAGS\x01")
        j = p.find(b"\x02", i + 5) if i >= 0 else -1
        if j > i + 5:
            data[a + i + 5:a + j] = bytes(j - i - 5)  # NULs: a different, still valid value
            data[a + i + 5] = 2                       # and now an empty value + an empty segment
    elif how == "topic_invalid_utf8":   # the topic is not covered by the body CRC either
        t = r.body_pos + r.body_len + 1
        data[t] = 0xFF


EDITS = ["empty_segment", "non_ascii", "invalid_utf8", "no_final_separator", "tags_twice", "tags_mid_segment",
         "tags_invalid_utf8", "tags_empty", "topic_invalid_utf8"]


def edited_copy(src: Path, dest: Path, how: str, every: int) -> Path:
    """A copy of the synthetic store with the properties of every `every`-th record edited `how` (_edit_props)."""
    root = F.copy_store(src, dest)
    by_file: dict = {}
    for k, r in enumerate(F.commitlog_records(root, file_size=32 * 1024)):
        if k % every == 0:
            by_file.setdefault(r.path, []).append(r)
    for p, rs in by_file.items():
        data = bytearray(p.read_bytes())
        for r in rs:
            _edit_props(data, r, how)
        p.write_bytes(bytes(data))
    return root


@pytest.mark.parametrize("how", EDITS)
@pytest.mark.parametrize("every", [1, 3])
def test_equal_with_edited_properties(synthetic, tmp_path, how, every):
    root = edited_copy(synthetic, tmp_path / "store", how, every)
    _check_root(root, 32 * 1024, 64 * 20, DELAYS, pieces=(3, 17))


def test_equal_with_each_record_corrupt(synthetic, tmp_path):
    """A bad record at every position in turn, with splits fine enough that ranges start right after it:
    queue-offset continuity across a skipped record must be judged as one scan judges it."""
    recs = [r for r in F.commitlog_records(synthetic, file_size=32 * 1024)
            if r.path == F.commitlog_files(synthetic)[1]]
    for k, r in enumerate(recs[::2]):
        root = F.copy_store(synthetic, tmp_path / f"s{k}")
        data = bytearray(r.path.read_bytes())
        data[r.body_pos] ^= 0x40
        (root / "commitlog" / r.path.name).write_bytes(bytes(data))
        _check_root(root, 32 * 1024, 64 * 20, DELAYS, pieces=(4, 9, 30))
        shutil.rmtree(root)


def _embedded_store(root: Path) -> Path:
    """One commitlog file whose third record's body holds complete, valid records (PHYSICALOFFSET equal
    to where they lie, right CRC): a resync inside that body finds them, one walk never does."""
    (root / "commitlog").mkdir(parents=True)
    data = bytearray(64 * 1024)
    pos, q = 0, 0

    def rec(body: bytes, phys: int) -> bytes:
        return F._record(topic="T", qid=0, qoff=q, phys=phys, body=body, props=b"TAGS\x01a\x02", born_ts=1,
                         store_ts=2)

    for k in range(12):
        if k == 2:
            head = len(rec(b"", 0)) - 1 - 1 - 2 - 7     # header bytes before the body
            inner_at = pos + head + 100
            inner = b""
            for j in range(6):
                inner += rec(b"inner-%d" % j * 50, inner_at + len(inner))
            body = bytes(100) + inner + bytes(100)
            r = rec(body, pos)
        else:
            r = rec(b"m%d-" % k * (40 + 30 * k), pos)
        data[pos:pos + len(r)] = r
        pos += len(r)
        q += 1
    (root / "commitlog" / f"{0:020d}").write_bytes(bytes(data))
    return root


def test_ranges_never_see_records_inside_a_record(tmp_path, monkeypatch):
    root = _embedded_store(tmp_path / "store")
    ctx = clc.ScanContext(str(root), 64 * 1024, 64 * 20, (), is_last=True, check_cq=False)
    path, size = str(root / "commitlog" / f"{0:020d}"), 64 * 1024
    want = _view(reference_scan_file(ctx, path, 0, size))
    assert want["messages"] == 12
    big = [r for r in F.commitlog_records(root, file_size=size)][2]
    redo, dropped = [], 0
    real = clc.scan_range

    def counting(*a, **kw):
        if kw.get("exact"):
            redo.append(a[4])
        return real(*a, **kw)

    for pieces in range(2, 200, 3):
        pts = clc.split_points(size, ctx.file_size, pieces)
        parts = [clc.scan_range(ctx, path, 0, size, a, b) for a, b in zip(pts, pts[1:])]
        dropped += sum(1 for p in parts if p.messages and p.range_end is not None
                       and big.pos < p.begin and p.range_end <= big.pos + big.size)
        monkeypatch.setattr(clc, "scan_range", counting)
        assert _view(clc.merge_ranges(ctx, parts)) == want, pieces
        monkeypatch.setattr(clc, "scan_range", real)
    assert redo and dropped     # both ways a range can disagree with the walk were exercised


@pytest.mark.parametrize("name", ["synthetic", "crash-multifile-v5", "mixed-v4"])
def test_parallel_ranges_report_equals_one_process(synthetic, tmp_path, monkeypatch, name):
    """verify -j 2 (files split into many small ranges over 2 processes) reports exactly what -j 1 does,
    on a clean store and with a corrupt record in a middle file."""
    from rmqctl.check import run
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    if name == "synthetic":
        src, cfg = synthetic, dict(mappedFileSizeCommitLog=32 * 1024, mappedFileSizeConsumeQueue=64 * 20,
                                   maxHashSlotNum=512, maxIndexNum=2048)
    else:
        fx = {p.name: p for p in FIXTURES}[name]
        src, cfg = fx / "store", load_manifest(fx)["store_config"]
    monkeypatch.setattr(run, "RANGE_BYTES", 3000)
    monkeypatch.setattr(run, "QUEUE_RANGE_BYTES", 0)
    pieces: list = []
    real_split = clc.split_points
    monkeypatch.setattr(clc, "split_points", lambda *a: pieces.append(a[2]) or real_split(*a))
    from rmqctl.check import index as ixc

    in_parent = []
    real_facts = ixc.index_file_facts
    monkeypatch.setattr(ixc, "index_file_facts", lambda *a, **k: in_parent.append(a[0]) or real_facts(*a, **k))
    for damaged in ("no", "record", "index"):
        root = F.copy_store(src, tmp_path / f"s{damaged}")
        if damaged == "record":
            F.flip_body_bit(root, F.pick_record(root, body=True, file_size=cfg["mappedFileSizeCommitLog"]))
        if damaged == "index":      # the header's endPhyOffset and the first item's keyHash
            idx = sorted((root / "index").iterdir())[0]
            data = bytearray(idx.read_bytes())
            data[24:32] = (int.from_bytes(data[24:32], "big") + 1).to_bytes(8, "big")
            item1 = 40 + 4 * cfg.get("maxHashSlotNum", 5_000_000) + 20
            data[item1:item1 + 4] = (int.from_bytes(data[item1:item1 + 4], "big") ^ 1).to_bytes(4, "big")
            idx.write_bytes(bytes(data))

        def report(jobs, root=root):  # called within this iteration only: bind this iteration's root
            store = Store.open(root, StoreConfig().with_values(cfg), check_supported=False)
            in_parent.clear()
            rep = run.verify_store(store, jobs=jobs)
            rep.stats.pop("seconds")
            return [asdict(f) for f in rep.findings], rep.stats

        one = report(1)
        assert in_parent        # -j 1: the index files are checked here
        pieces.clear()
        assert report(2) == one
        assert not in_parent    # -j 2: beside the walk, in a worker
        assert max(pieces) > 2
        # a store of many queues gets fewer, larger ranges (here: one per file), with the same report
        monkeypatch.setattr(run, "QUEUE_RANGE_BYTES", 1 << 30)
        pieces.clear()
        assert report(2) == one
        assert pieces and set(pieces) == {1}
        monkeypatch.setattr(run, "QUEUE_RANGE_BYTES", 0)
        checks = {f["check"] for f in one[0]}
        assert (damaged == "record") == ("commitlog.body_crc" in checks)
        assert (damaged == "index") == ({"index.header_end_phy", "index.item_message"} <= checks), checks


def reference_check_queue(root: Path, topic: str, qid: int, cq_file_size: int, track, cl_min: int, cl_end: int,
                findings: list, commitlog_scanned: bool = True, cl_gaps=()) -> QueueResult:
    """One consume queue. `track` is the merged QueueTrack of the commitlog pass (None if no record of
    this queue was seen); cl_min/cl_end the commitlog's min offset and end of the last valid record;
    cl_gaps the [start, end) ranges of missing commitlog files (F08)."""
    d = root / "consumequeue" / topic / str(qid)
    fq = cqc.FileQueue.scan(d)
    cqc.check_queue_files(fq, cq_file_size, findings)
    res = cqc.QueueResult()
    first_rec_q = track.first_q if track else None
    last_rec_q = track.last_q if track else None
    ended_at = None         # logical offset of the first invalid unit
    hole_reported = False
    ahead_first, ahead_n = None, 0
    orphan_first, orphan_n = None, 0
    seen_real = False
    gap_first = None
    for fi, f in enumerate(fq.files):
        base = f.start // 20
        n_units = min(f.size, cq_file_size) // 20
        for i, (phys, size, tags) in enumerate(_iter_units(f.path, n_units)):
            q = base + i
            valid = phys >= 0 and size > 0
            if not valid:
                if ended_at is None:
                    ended_at = q
                continue
            if ended_at is not None:
                if not hole_reported and (phys, size) != (0, 0):
                    hole_reported = True
                    findings.append(Finding(ERROR, "cq.hole", str(f.path), i * 20, f"no unit after offset {ended_at}",
                                            f"unit (phys {phys}, size {size})",
                                            f"valid-looking unit after an invalid one at queue offset {ended_at}: "
                                            f"the broker's recovery ends the queue at the hole"))
                continue
            if size == cqc.PRE_BLANK_SIZE and phys == 0 and tags == 0:
                if seen_real or fi != 0:
                    findings.append(Finding(ERROR, "cq.pre_blank", str(f.path), i * 20, "a message unit",
                                            "pre-blank unit (0, 2147483647, 0)",
                                            "pre-blank units belong only before the first unit of the first file"))
                res.min_valid = q + 1
                continue
            if not seen_real:
                seen_real = True
                res.min_valid = q
            res.max_phys_end = phys + size
            res.valid_end = q + 1
            if not commitlog_scanned:
                continue
            if cl_gaps and gap_first is None:
                for g0, g1 in cl_gaps:
                    if g0 <= phys < g1:
                        gap_first = (str(f.path), i * 20, q, phys, g0, g1)
                        break
            if first_rec_q is not None and first_rec_q <= q <= last_rec_q:
                continue    # compared with its record by the commitlog pass
            if phys + size <= cl_min:
                continue    # message in a deleted (expired) commitlog file
            if phys >= cl_end:
                ahead_n += 1
                if ahead_first is None:
                    ahead_first = (str(f.path), i * 20, q, phys)
            else:
                orphan_n += 1
                if orphan_first is None:
                    orphan_first = (str(f.path), i * 20, q, phys)
    if ahead_first:
        p, pos, q, phys = ahead_first
        findings.append(Finding(ERROR, "cq.ahead", p, pos, f"physical offset < {cl_end} (commitlog end)",
                                phys, f"{ahead_n} unit(s) from queue offset {q} point past the end of the "
                                f"commitlog (CQ ahead): consumers would read messages that do not exist"))
    if gap_first:
        p, pos, q, phys, g0, g1 = gap_first
        findings.append(Finding(ERROR, "cq.points_into_gap", p, pos, "a unit pointing at an existing commitlog file",
                                f"physical offset {phys} in the missing range [{g0}, {g1})",
                                f"queue offset {q} and following units reference a missing commitlog file"))
    if orphan_first:
        p, pos, q, phys = orphan_first
        findings.append(Finding(ERROR, "cq.orphan_unit", p, pos, f"a record of {topic}:{qid} at queue offset {q}",
                                f"physical offset {phys}",
                                f"{orphan_n} unit(s) point into the commitlog where no record of this queue "
                                f"has this queue offset"))
    if track is not None and commitlog_scanned:
        # what the commitlog pass found is rendered by the same code (not what this reference judges)
        cqc.track_findings(root, d, cq_file_size, track, res, topic, qid, findings)
    return res


def _cq_equal(root: Path, cq_file_size: int, file_size: int):
    """check_queue (arrays per chunk) == the per-unit reference, for every queue, with the tracks of a
    real commitlog pass and without (commitlog not scanned), and with a made-up commitlog gap."""
    from rmqctl.check import run

    tracks: dict = {}
    results = [clc.scan_file(*a) for a in _contexts(root, file_size, cq_file_size)]
    prev = None
    for fr in results:
        run._merge_tracks(tracks, fr, prev is not None and prev.full and fr.start == prev.start + file_size)
        prev = fr
    cl_end = max((fr.end for fr in results), default=0)
    qdirs = sorted((p.parent.name, int(p.name)) for p in (root / "consumequeue").glob("*/*") if p.is_dir())
    for topic, qid in qdirs:
        for scanned, gaps, cl_min in ((True, (), 0), (False, (), 0), (True, ((0, cl_end // 2),), cl_end // 3)):
            f1, f2 = [], []
            a = cqc.check_queue(root, topic, qid, cq_file_size, tracks.get((topic, qid)), cl_min, cl_end, f1,
                                commitlog_scanned=scanned, cl_gaps=gaps)
            b = reference_check_queue(root, topic, qid, cq_file_size, tracks.get((topic, qid)), cl_min, cl_end,
                                      f2, commitlog_scanned=scanned, cl_gaps=gaps)
            assert (asdict(a), [asdict(x) for x in f1]) == (asdict(b), [asdict(x) for x in f2]), (topic, qid)
    # and all queues at once (rmqctl.check.queues_many, as verify checks them): check_queue's results and findings
    from rmqctl.check.queues_many import check_queues
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    store = Store(root, StoreConfig().with_values({"mappedFileSizeConsumeQueue": cq_file_size,
                                                   "mappedFileSizeCommitLog": file_size}))
    for scanned, gaps, cl_min in ((True, (), 0), (False, None, 0), (True, (), cl_end // 3)):
        f1, f2, one = [], [], {}
        for topic, qid in qdirs:
            one[(topic, qid)] = asdict(cqc.check_queue(root, topic, qid, cq_file_size, tracks.get((topic, qid)),
                                                       cl_min, cl_end, f1, commitlog_scanned=scanned, cl_gaps=gaps))
        with store.listed_once():
            many = check_queues(store, qdirs, cq_file_size, tracks, cl_min, cl_end, f2, scanned, gaps)
        assert ({k: asdict(v) for k, v in many.items()}, [asdict(x) for x in f2]) == (one, [asdict(x) for x in f1])


@pytest.mark.parametrize("fx", FIXTURES, ids=[p.name for p in FIXTURES])
def test_check_queue_equal_on_fixtures(fx):
    sc = load_manifest(fx)["store_config"]
    _cq_equal(fx / "store", sc["mappedFileSizeConsumeQueue"], sc["mappedFileSizeCommitLog"])


PRE_BLANK = struct.pack(">qiq", 0, 0x7FFFFFFF, 0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["flip", "zero", "pre_blank", "garbage", "cut"]),
                          st.integers(0, 255)), max_size=5))
def test_check_queue_equal_under_damage(synthetic, edits):
    with tempfile.TemporaryDirectory() as d:
        root = Path(shutil.copytree(synthetic, Path(d) / "store"))
        cqs = sorted(p for p in (root / "consumequeue").rglob("0*") if p.is_file())
        for pos, how, x in edits:
            p = cqs[pos % len(cqs)]
            data = bytearray(p.read_bytes())
            if len(data) < 20:
                continue
            u = (pos // len(cqs)) % (len(data) // 20) * 20
            if how == "flip":
                data[u + x % 20] ^= 1 << (x % 8)
            elif how == "zero":
                data[u:u + 20] = bytes(20)
            elif how == "pre_blank":
                data[u:u + 20] = PRE_BLANK
            elif how == "garbage":
                data[u:u + 20] = struct.pack(">qiq", x * 1000, 100 + x, x)
            else:
                data = data[:u + x % 20]
            p.write_bytes(bytes(data))
        _cq_equal(root, 64 * 20, 32 * 1024)


@pytest.mark.parametrize("layout", ["hole_tail", "hole_middle", "hole_then_stale"])
def test_equal_with_sparse_files(synthetic, tmp_path, layout):
    """Holes (read as zeros) are skipped with SEEK_DATA: the verdicts equal those of reading the zeros."""
    root = F.copy_store(synthetic, tmp_path / "store")
    files = F.commitlog_files(root)
    p = files[1]                       # a middle file: records, then a BLANK record
    data = p.read_bytes()
    recs = [r for r in F.commitlog_records(root, file_size=32 * 1024) if r.path == p]
    cut = recs[len(recs) // 3].pos
    resume = recs[2 * len(recs) // 3].pos
    p.unlink()
    with open(p, "wb") as f:
        f.write(data[:cut])
        if layout == "hole_middle":    # a hole over whole records, valid records after it
            f.seek(resume)
            f.write(data[resume:])
        elif layout == "hole_then_stale":   # a record after a hole, at the wrong position
            f.seek(resume + 8)
            f.write(data[resume:resume + recs[2 * len(recs) // 3].size])
        f.truncate(32 * 1024)          # the rest is a hole
    for last in (False, True):
        ctx = clc.ScanContext(str(root), 32 * 1024, 64 * 20, DELAYS, is_last=last)
        want = _view(reference_scan_file(ctx, str(p), int(p.name), 32 * 1024))
        assert _view(clc.scan_file(ctx, str(p), int(p.name), 32 * 1024)) == want
        for k in (3, 8):
            assert _view(_ranges(ctx, str(p), int(p.name), 32 * 1024, k)) == want
        assert want["findings"] or layout == "hole_tail" and last


@pytest.mark.parametrize("sparse", [False, True], ids=["written_zeros", "sparse"])
@pytest.mark.parametrize("tail", ["none", "valid_far", "invalid_far", "size_only_far", "last_unit", "pre_blank_far"])
def test_check_queue_equal_with_zero_tail(tmp_path, sparse, tail):
    """A queue mapped far larger than its units (the zeros after them are skipped, never read as units): the
    findings equal the per-unit reference's, with a unit far into the zeros (a hole), in a file with written
    zeros and in a sparse one (truncate-extended)."""
    cq_size = 90_000 * 20                 # more than the first chunks read before the zeros are skipped
    d = tmp_path / "store" / "consumequeue" / "T" / "0"
    d.mkdir(parents=True)
    units = b"".join(struct.pack(">qiq", 100 * k, 100, k) for k in range(300))
    far = {"none": None, "valid_far": struct.pack(">qiq", 777_700, 100, 5),
           "invalid_far": struct.pack(">qiq", -5, 100, 5), "size_only_far": struct.pack(">qiq", 0, 1 << 24, 0),
           "last_unit": struct.pack(">qiq", 10**9, 100, 0), "pre_blank_far": PRE_BLANK}[tail]
    at = (cq_size - 20) if tail == "last_unit" else 61_234 * 20 + 20 * 3
    for name, with_far in (("00000000000000000000", True), (f"{cq_size:020d}", False)):
        with open(d / name, "wb") as f:
            f.write(units)
            if not sparse:
                f.write(bytes(cq_size - len(units)))
            if with_far and far is not None:
                f.seek(at)
                f.write(far[:11] if tail == "size_only_far" else far)   # the non-zero bytes end mid-unit
            f.truncate(cq_size)
    if sparse:
        assert os.stat(d / name).st_blocks * 512 < cq_size // 2      # the file system made a hole
    for track in (None, QueueTrack(0, 299, 300, 300, 0, 0, None, 0, None, 0, None)):
        for scanned, gaps, cl_min, cl_end in ((True, (), 0, 30_000), (False, (), 0, 30_000),
                                              (True, ((0, 10_000),), 5_000, 2_000_000)):
            f1, f2 = [], []
            a = cqc.check_queue(tmp_path / "store", "T", 0, cq_size, track, cl_min, cl_end, f1,
                                commitlog_scanned=scanned, cl_gaps=gaps)
            b = reference_check_queue(tmp_path / "store", "T", 0, cq_size, track, cl_min, cl_end, f2,
                                      commitlog_scanned=scanned, cl_gaps=gaps)
            assert (asdict(a), [asdict(x) for x in f1]) == (asdict(b), [asdict(x) for x in f2])
            holes = [(Path(x.path).name, x.offset) for x in f1 if x.check == "cq.hole"]
            far_seen = tail in ("valid_far", "last_unit", "size_only_far", "pre_blank_far")
            assert holes == [("00000000000000000000", at) if far_seen else (f"{cq_size:020d}", 0)]


@pytest.mark.parametrize("cache", [None, 512])
def test_equal_with_many_queues(tmp_path, monkeypatch, cache):
    """2 topics x 160 queues of a few records, consume-queue files of 4 units: the batch path (its read-ahead
    pool emptied mid-walk when `cache` is small) and the queue checks equal the references."""
    from rmqctl.check import commitlog_batch as cb

    root = F.make_store(tmp_path / "store", messages=1200, queues=160, cq_units=4)
    assert len(list((root / "consumequeue").glob("*/*"))) >= 300
    monkeypatch.setenv("RMQCTL_KERNEL", "numpy")
    if cache:
        monkeypatch.setattr(cb, "CQ_CACHE_BYTES", cache)
    damage(root, [], [(k * 7919, 1 + k) for k in range(30)], 32 * 1024)
    _check_root(root, 32 * 1024, 4 * 20, DELAYS, pieces=(3,))
    _cq_equal(root, 4 * 20, 32 * 1024)


SYNTHETIC_CONFIG = dict(mappedFileSizeCommitLog=32 * 1024, mappedFileSizeConsumeQueue=64 * 20, maxHashSlotNum=512,
                        maxIndexNum=2048)


def _report(root, cfg: dict, jobs: int):
    """verify's findings (as dicts) and stats, its timing left out."""
    from rmqctl.check import run
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    rep = run.verify_store(Store.open(root, StoreConfig().with_values(cfg), check_supported=False), jobs=jobs)
    rep.stats.pop("seconds")
    return [asdict(f) for f in rep.findings], rep.stats


def test_index_file_in_pieces_reports_as_one_process(synthetic, tmp_path, monkeypatch):
    """verify -j checks a large index file in pieces across workers (INDEX_PIECE_ITEMS made tiny here): the same
    report as -j 1, clean and with items damaged in several pieces (a chain into a newer item, a time outside the
    file's span, items out of commitlog order, a slot whose head is another slot's)."""
    from rmqctl.check import index as ixc
    from rmqctl.check import run

    cfg = SYNTHETIC_CONFIG
    monkeypatch.setattr(ixc, "BATCH", 4)
    monkeypatch.setattr(run, "INDEX_PIECE_ITEMS", 8)
    monkeypatch.setattr(run, "ITEM_BYTES", 1 << 30)     # the index outweighs the walk: one piece per worker
    parts: list = []
    real = ixc.index_file_facts
    monkeypatch.setattr(ixc, "index_file_facts", lambda *a, **k: parts.append(k.get("part")) or real(*a, **k))
    planned: list = []
    real_plan = run._index_pieces
    monkeypatch.setattr(run, "_index_pieces", lambda *a: planned.append(real_plan(*a)) or planned[-1])
    for damaged in (False, True):
        root = F.copy_store(synthetic, tmp_path / f"s{damaged}")
        idx = sorted((root / "index").iterdir())[0]
        data = bytearray(idx.read_bytes())
        count = int.from_bytes(data[36:40], "big")
        items = 40 + 4 * 512
        assert count > 40
        if damaged:
            for n, field, value in ((count - 3, 16, count), (count // 2, 12, -5), (count // 3, 4, 0), (7, 16, -1)):
                at = items + 20 * n + field
                width = 8 if field == 4 else 4
                data[at:at + width] = value.to_bytes(width, "big", signed=True)
            data[40:44] = (count - 1).to_bytes(4, "big")     # slot 0's head: the last item, of another slot
            idx.write_bytes(bytes(data))

        def report(jobs, root=root):
            parts.clear()
            return _report(root, cfg, jobs)

        one = report(1)
        codes = {f["check"] for f in one[0]}
        assert codes >= ({"index.chain_cycle", "index.time_diff", "index.phy_order", "index.slot_hash"}
                         if damaged else set()), codes
        assert parts == [None]      # -j 1: the whole file, here
        for jobs in (2, 3):
            assert report(jobs) == one
            assert not parts        # the pieces ran in the workers, none again in the parent
            assert len(planned[-1]) == jobs and all(p is not None for _i, p in planned[-1])


@pytest.mark.parametrize("cq_flips", [(), ((5, 0x40), (333, 0x01), (1000, 0x80), (77, 0x10)),
                                      ((1, 0x40), (2, 0x40), (4, 0x40), (9, 0x40), (10, 0x40))])   # three queues
def test_queue_checks_in_workers_report_as_one_process(synthetic, tmp_path, monkeypatch, cq_flips):
    """verify -j checks the consume queues after the walk in workers too (when that is sooner; always here),
    in spans of queues: the same report as -j 1, clean and with damaged units; and a span whose worker fails is
    checked again by the parent, with the same report."""
    import os

    from rmqctl.check import queues_many, run

    cfg = SYNTHETIC_CONFIG
    root = F.copy_store(synthetic, tmp_path / "s")
    damage(root, (), cq_flips, 32 * 1024)
    monkeypatch.setattr(run, "POOL_NS", -1 << 40)
    spans: list = []
    real_spans = run._queue_spans
    monkeypatch.setattr(run, "_queue_spans", lambda *a: spans.append(real_spans(*a)) or spans[-1])

    def report(jobs):
        spans.clear()
        return _report(root, cfg, jobs)

    one = report(1)
    assert not spans
    assert bool(cq_flips) == any(f["check"].startswith("cq.") for f in one[0])     # the damage is seen
    for jobs in (2, 3):
        assert report(jobs) == one
        assert len(spans) == 1 and len(spans[0]) > 2
    parent, real = os.getpid(), queues_many.check_queues

    def fails_in_workers(*a, **k):
        if os.getpid() != parent:
            raise OSError("a worker's trouble")
        return real(*a, **k)

    monkeypatch.setattr(queues_many, "check_queues", fails_in_workers)
    assert report(2) == one


def test_queue_checks_go_to_workers_when_sooner():
    """Few large queues stay in the parent on 2 cores (a fresh worker's units cost more) and go to 16 workers;
    thousands of small queues go to workers from 2 on; one job or one queue never does."""
    from rmqctl.check import run

    assert not run._queues_in_workers(5_400_000, 32, 2) and run._queues_in_workers(5_400_000, 32, 16)
    assert run._queues_in_workers(990_000, 8192, 2)
    assert not run._queues_in_workers(990_000, 8192, 1) and not run._queues_in_workers(10**9, 1, 16)
    assert not run._queues_in_workers(1000, 50, 16)


def test_queue_spans_cover_the_queues_in_order():
    from rmqctl.check import run
    from rmqctl.check.commitlog_results import QueueTrack

    queues = [("T", q) for q in range(50)]
    tracks = {}
    for q in range(0, 50, 3):
        tracks[("T", q)] = t = QueueTrack.__new__(QueueTrack)
        t.count = 1000 * (q % 7)
    for parts in (1, 2, 7, 50, 200):
        spans = run._queue_spans(queues, tracks, parts)
        assert spans[0][0] == 0 and spans[-1][1] == 50
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(spans, spans[1:]))
        assert len(spans) <= min(parts, 50) + 1


def test_verify_share_is_the_largest_range_when_ranges_are_few():
    """auto decides by what one worker walks: its share of the data, or a whole range when ranges are few (a store
    of 8192 queues walks whole files, so one of 16 workers gets a 1 GiB file)."""
    from rmqctl.check import run

    gib = 1 << 30
    est = [gib, gib // 8]
    assert run.walk_share(est, 1, 8192) == sum(est)
    assert run.walk_share(est, 16, 8192) == gib                   # ranges of 4 GiB: whole files
    assert run.walk_share(est, 16, 32) == sum(est) // 16           # 32 queues: ranges of about a quarter share
    assert run.walk_share(est, 2, 32) == sum(est) // 2
    assert run.walk_share([], 16, 8192) == 0
