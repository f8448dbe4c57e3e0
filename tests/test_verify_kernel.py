"""verify's compiled per-record checks (rmqctl.kernels.verify_nb through rmqctl.check.commitlog_nb, used with the
numba kernel) give exactly the FileResult of the numpy path (rmqctl.check.commitlog_batch, itself proven equal
to the record-at-a-time reference in tests/test_verify_batch.py): on every fixture store and real-world store,
under random damage to commitlog and consume-queue bytes, with edited properties, with the two paths
alternating batch by batch (RMQCTL_KERNEL=auto switches mid-walk), and field by field on random properties."""
from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import faultlib as F
from conftest import REAL_WORLD
from oracle_helpers import fixture_dirs, load_manifest
from rmqctl import kernels
from rmqctl.check import commitlog as clc
from rmqctl.check import commitlog_batch as cb
from test_verify_batch import DELAYS, EDITS, _contexts, _ranges, _view, damage, edited_copy


def _results(root: Path, file_size: int, cq_file_size: int, delay_levels=(), pieces=(3,)):
    out = []
    for ctx, path, start, size in _contexts(root, file_size, cq_file_size, delay_levels):
        out.append(_view(clc.scan_file(ctx, path, start, size)))
        out.extend(_view(_ranges(ctx, path, start, size, k)) for k in pieces)
    return out


def _both(monkeypatch, root, *a, window=None, **kw):
    """The results with the numpy kernel and with the numba one (which must take the compiled path); `window`:
    the numba run walks windows of that many bytes (records cross window ends: scanvec's defer_cross)."""
    monkeypatch.setenv("RMQCTL_KERNEL", "numpy")
    want = _results(root, *a, **kw)
    monkeypatch.setenv("RMQCTL_KERNEL", "numba")
    assert kernels.name() == "numba" and cb._nb_batch() is not None
    with monkeypatch.context() as m:
        if window:
            m.setattr(cb, "NB_WINDOW", window)
        return _results(root, *a, **kw), want


def _delays(sc: dict):
    v = sc.get("messageDelayLevel")
    return [int(x[:-1]) * {"s": 1000, "m": 60000, "h": 3600000, "d": 86400000}[x[-1]] for x in v.split()] if v else ()


FIXTURES = list(fixture_dirs())


@pytest.mark.parametrize("fx", FIXTURES, ids=[p.name for p in FIXTURES])
def test_equal_on_fixtures(fx, monkeypatch):
    sc = load_manifest(fx)["store_config"]
    got, want = _both(monkeypatch, fx / "store", sc["mappedFileSizeCommitLog"], sc["mappedFileSizeConsumeQueue"],
                      _delays(sc), pieces=(2, 7))
    assert got == want


REAL_STORES = sorted(p.parent for p in REAL_WORLD.rglob("commitlog") if p.is_dir())


def test_equal_on_real_world_stores(monkeypatch):
    assert len(REAL_STORES) >= 3
    for root in REAL_STORES:
        files = sorted(p for p in (root / "commitlog").iterdir() if p.name.isdigit())
        if not files:
            continue
        size = files[0].stat().st_size
        got, want = _both(monkeypatch, root, size, 300000 * 20, (), pieces=(3,))
        assert got == want, root


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    return F.make_store(tmp_path_factory.mktemp("vk") / "store")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 32 * 1024 - 1), st.integers(1, 255)), max_size=6),
       st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=4),
       st.integers(0, 32 * 1024), st.sampled_from([2, 3, 6]), st.sampled_from([None, 600, 1500, 4000]))
def test_equal_under_damage(synthetic, monkeypatch, cl_flips, cq_flips, cut, pieces, window):
    with tempfile.TemporaryDirectory() as d:
        root = Path(shutil.copytree(synthetic, Path(d) / "store"))
        damage(root, cl_flips, cq_flips, cut)
        got, want = _both(monkeypatch, root, 32 * 1024, 64 * 20, DELAYS, pieces=(pieces,), window=window)
        assert got == want


@pytest.mark.parametrize("window", [300, 700, 2000])
def test_equal_with_small_windows(synthetic, tmp_path, monkeypatch, window):
    """Windows smaller than records and than files: every window ends inside a record (deferred to the next
    window), records larger than a window (widened), on a clean store and with a corrupt record."""
    got, want = _both(monkeypatch, synthetic, 32 * 1024, 64 * 20, DELAYS, pieces=(3,), window=window)
    assert got == want
    root = F.copy_store(synthetic, tmp_path / "store")
    F.flip_body_bit(root, F.pick_record(root, body=True, file_size=32 * 1024))
    got, want = _both(monkeypatch, root, 32 * 1024, 64 * 20, DELAYS, pieces=(3,), window=window)
    assert got == want
    assert any(v["findings"] for v in want)


@pytest.mark.parametrize("how", EDITS)
def test_equal_with_edited_properties(synthetic, tmp_path, monkeypatch, how):
    root = edited_copy(synthetic, tmp_path / "store", how, 2)
    got, want = _both(monkeypatch, root, 32 * 1024, 64 * 20, DELAYS, pieces=(3, 17))
    assert got == want
    monkeypatch.setenv("RMQCTL_KERNEL", "numpy")
    clean = _results(synthetic, 32 * 1024, 64 * 20, DELAYS, pieces=(3, 17))
    # the edits were made: the verdicts differ from the clean store's (a valid non-ASCII value, and a last
    # segment without its separator, are no problem to the broker)
    assert (repr(want).replace(str(root), "") != repr(clean).replace(str(synthetic), "")
            or how in ("non_ascii", "no_final_separator"))


def test_paths_alternating_batch_by_batch(synthetic, monkeypatch):
    """Both paths keep the same per-queue state: a walk switching between them every batch (as auto does when
    it loads numba mid-walk) gives the same result, also with damage that leaves gaps and mismatches."""
    root = synthetic
    monkeypatch.setenv("RMQCTL_KERNEL", "numpy")
    want = _results(root, 32 * 1024, 64 * 20, DELAYS, pieces=(2,))
    monkeypatch.setenv("RMQCTL_KERNEL", "numba")
    from rmqctl.check import commitlog_nb

    calls = [0]

    def alternate():
        calls[0] += 1
        return commitlog_nb.batch if calls[0] % 2 else None

    monkeypatch.setattr(cb, "NB_WINDOW", 2048)      # many batches per file
    monkeypatch.setattr(cb, "_nb_batch", alternate)
    assert _results(root, 32 * 1024, 64 * 20, DELAYS, pieces=(2,)) == want
    assert calls[0] > 40


# --- the properties kernel field by field -----------------------------------------------------------------

_PIECES = [b"TAGS\x01", b"TAGS", b"\x01", b"\x02", b"\x02\x02", b"KEYS\x01", b"a", b"Tag1", b"x y", "é".encode(),
           b"\xff", b"\xc3", b"INNER_MULTI_QUEUE_OFFSET\x01", b"INNER_MULTI_QUEUE_OFFSET", b"0", b"\x00", b"T",
           b"AGS\x01", b"UNIQ_KEY\x01", "主题".encode()]


def _scan(tmp_path):
    ctx = clc.ScanContext(str(tmp_path), 1 << 20, 6000, (1000, 5000))
    res = clc.FileResult(str(tmp_path / "f"), 0, 1 << 20, end=0)
    return cb.RangeScan(ctx, res, -1, 0, 1 << 20, 1 << 20)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=12), min_size=1, max_size=30), st.integers(0, 7))
def test_properties_kernel_equals_numpy(tmp_path, fields, pad):
    """TAGS hash (with the rare cases decided in Python), the structure findings and the multi-dispatch marker
    of random properties fields equal the numpy path's."""
    from rmqctl.check import commitlog_nb
    from rmqctl.dispatch import MULTI_OFFSET_PROPERTY
    from rmqctl.kernels import verify_nb as vk

    raw = bytearray(b"\x02" * pad)
    rel, lens = [], []
    for f in fields:
        v = b"".join(f)
        raw += b"\x07" * random.Random(len(raw)).randint(0, 3)
        rel.append(len(raw))
        lens.append(len(v))
        raw += v
    raw += b"\x02" * pad
    b = np.frombuffer(raw, np.uint8)
    rel, lens = np.array(rel, np.int64), np.array(lens, np.int64)
    n = len(rel)
    off = np.arange(n, dtype=np.int64) * 1000
    numpy_scan, nb_scan = _scan(tmp_path), _scan(tmp_path)
    props = cb.JoinedProps.of(raw, rel, lens)
    late_np: list = []
    numpy_scan._check_properties(props, b, off, late_np)
    want_tags = numpy_scan._tags(props)
    flags, rtags = np.empty(n, np.int8), np.empty(n, np.int64)
    vk.props_scan(b, b[:len(b) // 8 * 8].view(np.uint64), rel, lens, flags, rtags)
    late_nb: list = []
    for i in np.flatnonzero(flags & vk.SUSPICIOUS).tolist():
        nb_scan._props_finding(i, bytes(raw[rel[i]:rel[i] + lens[i]]), int(off[i]), late_nb)
    assert [(i, f.message) for i, _, f in late_nb] == [(i, f.message) for i, _, f in late_np]
    bt = SimpleNamespace(raw=raw, props_rel=rel, props_length=lens, store_timestamp=off)
    got_tags = commitlog_nb._tags(nb_scan, bt, np.arange(n), flags, rtags, np.zeros(n, np.int64),
                                  np.ones(n, bool))
    assert got_tags.tolist() == want_tags.tolist()
    multi = [MULTI_OFFSET_PROPERTY in bytes(raw[a:a + k]) for a, k in zip(rel.tolist(), lens.tolist())]
    assert ((flags & vk.MULTI) != 0).tolist() == multi


def test_unusable_verify_kernels_fall_back_to_numpy_silently(synthetic, monkeypatch):
    """numba loads but cannot build verify's kernels (another numba, a broken cache): every batch takes the
    numpy path, with the same results and nothing said."""
    from rmqctl.kernels import verify_nb

    monkeypatch.setenv("RMQCTL_KERNEL", "numpy")
    want = _results(synthetic, 32 * 1024, 64 * 20, DELAYS)

    def broken():
        raise RuntimeError("cannot compile")

    monkeypatch.setenv("RMQCTL_KERNEL", "numba")
    monkeypatch.setattr(verify_nb, "warm", broken)
    monkeypatch.setattr(cb, "_NB", {})
    assert cb._nb_batch() is None and kernels.name() == "numba"
    assert _results(synthetic, 32 * 1024, 64 * 20, DELAYS) == want


def test_auto_decides_up_front_by_the_share_of_each_process(monkeypatch):
    """auto: numba from the start when a process's share of the store is >= AUTO_UPFRONT, numpy below it."""
    monkeypatch.setenv("RMQCTL_KERNEL", "auto")
    monkeypatch.setattr(kernels, "_walked", [0])
    kernels.expect(kernels.AUTO_UPFRONT - 1)
    assert kernels.name() == "numpy"
    kernels.expect(kernels.AUTO_UPFRONT)
    assert kernels.name() == "numba"
    monkeypatch.setenv("RMQCTL_KERNEL", "numpy")
    monkeypatch.setattr(kernels, "_walked", [0])
    kernels.expect(1 << 40)
    assert kernels.name() == "numpy"


def test_data_estimate(tmp_path):
    """The bisection finds where a front-filled file's non-zero bytes end (to the block), 0 when all zero."""
    p = tmp_path / "f"
    for end in (0, 1, 4095, 4096, 4097, 100_000, 1 << 20):
        p.write_bytes(b"\x01" * end + bytes((1 << 20) - end))
        got = clc.data_estimate(str(p), 1 << 20)
        assert got >= end and got - end < 4096 and (end or got == 0)
    assert clc.data_estimate(str(tmp_path / "missing"), 1 << 20) == 0      # the walk reports these
    assert clc.data_estimate(str(tmp_path), 1 << 20) == 0


@pytest.mark.parametrize("kernel_name", ["numpy", "numba"])
def test_one_record_without_properties(tmp_path, monkeypatch, kernel_name):
    """A window holding one record with an empty properties field (its consume-queue unit present): checked
    by both paths alike (the numpy path used to raise on the empty joined properties)."""
    import struct

    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    r = F._record(topic="T", qid=0, qoff=0, phys=0, body=b"x" * 10, props=b"", born_ts=1, store_ts=2)
    (root / "commitlog" / f"{0:020d}").write_bytes(r + bytes(4096 - len(r)))
    (root / "consumequeue" / "T" / "0").mkdir(parents=True)
    (root / "consumequeue" / "T" / "0" / f"{0:020d}").write_bytes(struct.pack(">qiq", 0, len(r), 0) + bytes(20))
    monkeypatch.setenv("RMQCTL_KERNEL", kernel_name)
    assert kernels.name() == kernel_name
    (v,) = _results(root, 4096, 40, (), pieces=())
    assert v["messages"] == 1 and v["queues"][("T", 0)]["mismatches"] == 0 and not v["findings"], v


BROKER = {p.name: p for p in FIXTURES}["basic-multifile-v5"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(1, 255)), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(1, 255)), max_size=4),
       st.sampled_from([None, 900, 5000]))
def test_equal_under_damage_of_a_broker_written_store(monkeypatch, cl_flips, cq_flips, window):
    """Random flips of commitlog and consume-queue bytes the real broker wrote (RocketMQ 5, several files)."""
    sc = load_manifest(BROKER)["store_config"]
    with tempfile.TemporaryDirectory() as d:
        root = Path(shutil.copytree(BROKER / "store", Path(d) / "store"))
        for flips, files in ((cl_flips, sorted((root / "commitlog").glob("0*"))),
                             (cq_flips, sorted(p for p in (root / "consumequeue").rglob("0*") if p.is_file()))):
            for pos, x in flips:
                p = files[pos % len(files)]
                data = bytearray(p.read_bytes())
                if data:
                    used = len(data.rstrip(b"\0")) or len(data)      # flip where the records are
                    data[(pos // len(files)) % used] ^= x
                    p.write_bytes(bytes(data))
        got, want = _both(monkeypatch, root, sc["mappedFileSizeCommitLog"], sc["mappedFileSizeConsumeQueue"],
                          _delays(sc), pieces=(3,), window=window)
        assert got == want


def test_a_queue_offset_damaged_past_int64_bytes(synthetic, monkeypatch):
    """A flipped high byte of a QUEUEOFFSET (offset x 20 past 2^63) goes the unit-at-a-time way on the numba path
    too (found by the test above: it raised OverflowError there)."""
    test_equal_under_damage.hypothesis.inner_test(synthetic, monkeypatch, [(1, 20, 7)], [], 0, 2, 600)


@pytest.fixture(scope="module")
def many_queues(tmp_path_factory) -> Path:
    """2 topics x 160 queues, a few records each (1200 records): every batch meets a hundred queues or more."""
    return F.make_store(tmp_path_factory.mktemp("vkm") / "store", messages=1200, queues=160, cq_units=4)


@pytest.mark.parametrize("cache", [None, 256, 4096])
def test_equal_with_many_queues(many_queues, tmp_path, monkeypatch, cache):
    """Hundreds of queues per batch, consume-queue files of 4 units (queues cross files), clean and with units
    damaged; `cache`: a read-ahead pool of that many bytes, emptied and grown again and again mid-walk."""
    root = many_queues
    assert len(list((root / "consumequeue").glob("*/*"))) >= 300
    if cache:
        monkeypatch.setattr(cb, "CQ_CACHE_BYTES", cache)
    got, want = _both(monkeypatch, root, 32 * 1024, 4 * 20, DELAYS, pieces=(3,), window=8192)
    assert got == want
    damaged = F.copy_store(root, tmp_path / "store")
    rng = random.Random(cache)
    damage(damaged, [], [(rng.randrange(100_000), rng.randrange(1, 256)) for _ in range(40)], 32 * 1024)
    got, want = _both(monkeypatch, damaged, 32 * 1024, 4 * 20, DELAYS, pieces=(3,), window=8192)
    assert got == want
    # the damage was seen: units that disagree with their record, or missing, in many queues
    bad = {q for v in want for q, t in v["queues"].items() if t["missing"] or t["mismatches"]}
    assert len(bad) >= 10, bad


def test_read_ahead_fits_its_pool(tmp_path, monkeypatch):
    """Each queue's consume-queue piece is read a few times, not once per batch, however many queues share the
    read-ahead pool: a floor on the read-ahead once made the pieces of thousands of queues overflow the pool,
    which then emptied at every batch (8192 queues: 20 reads of each queue, verify 4x slower)."""
    root = F.make_store(tmp_path / "store", messages=3000, queues=120, cq_units=1000, file_size=1 << 20)
    nq = len(list((root / "consumequeue").glob("*/*")))
    assert nq >= 120
    monkeypatch.setattr(cb, "CQ_CACHE_BYTES", nq * 512)     # a share of 25 units per queue, about all it holds
    reads: list = []
    real = cb.pread_or_empty
    monkeypatch.setattr(cb, "pread_or_empty", lambda p, *a: reads.append(p) or real(p, *a))
    # one commitlog file, dozens of windows: one RangeScan and its pool meet every queue again and again
    got, want = _both(monkeypatch, root, 1 << 20, 1000 * 20, DELAYS, pieces=(), window=8192)
    assert got == want
    per = {}
    for p in reads:
        per[p] = per.get(p, 0) + 1
    assert len(per) >= nq - 1 and len(reads) > 0
    assert max(per.values()) <= 3, sorted(per.values())[-5:]


def test_pools_of_one_process_share_one_buffer(tmp_path, monkeypatch):
    """The read-ahead pool of a range takes the buffer the pool before it released (its pages mapped already:
    a buffer grown by doubling for every range mapped twice its size again), whatever it held is forgotten, and
    verify gives the buffer back once its walk is over."""
    from dataclasses import asdict

    from rmqctl.check import cq_units as CU
    from rmqctl.check import run
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    CU.forget_spare()
    a = CU.CqPool(1 << 16)
    a.put(3, 0, 0, bytes(range(20)) * 4)
    assert a.holds(3, 0, 0, 80)
    a.release()
    b = CU.CqPool(1 << 16)
    assert b.buf is a.buf and not b.holds(3, 0, 0, 20)
    b.put(1, 0, 20, b"\x07" * 40)
    assert bytes(b.units(1)) == b"\x07" * 40
    CU.CqPool(1 << 17).release()            # another cap: a buffer of that size, kept instead
    assert len(CU._SPARE) == 1 and len(CU._SPARE[0]) == 1 << 17
    CU.forget_spare()
    assert not CU._SPARE
    # verify: several ranges in this process, the same report as pools of their own, and nothing kept after
    root = F.make_store(tmp_path / "store", messages=3000, queues=40, cq_units=1000, file_size=1 << 16)
    store = Store.open(root, StoreConfig().with_values({"mappedFileSizeCommitLog": 1 << 16,
                                                        "mappedFileSizeConsumeQueue": 1000 * 20}),
                       check_supported=False)
    made = []
    real = CU.CqPool.__init__
    monkeypatch.setattr(CU.CqPool, "__init__", lambda self, cap: made.append(bool(CU._SPARE)) or real(self, cap))
    shared = run.verify_store(store, jobs=1)
    assert not CU._SPARE
    monkeypatch.setattr(CU, "_SPARE", _NoSpare())
    alone = run.verify_store(store, jobs=1)
    assert len(made) > 2 and any(made)      # the fault is there: later ranges took the buffer before them
    assert [asdict(f) for f in shared.findings] == [asdict(f) for f in alone.findings]


class _NoSpare(list):
    """A spare list that keeps nothing: every pool gets a fresh buffer."""

    def __setitem__(self, k, v):
        pass


@pytest.mark.parametrize("kernel,stays_frozen", [("numba", True), ("numpy", False)])
def test_verify_j_leaves_numbas_objects_frozen(kernel, stays_frozen, tmp_path):
    """verify -j freezes the parent's objects around its pools; numba's, frozen when it loaded, stay frozen after
    (thawed, the collections at interpreter exit cost 0.13-0.2 s), while a process that had frozen nothing gets
    its objects back."""
    import os
    import subprocess
    import sys

    store = tmp_path / "s"
    shutil.copytree(BROKER / "store", store)
    code = ("import gc, sys\nfrom rmqctl.check import run\nfrom rmqctl.cli import main\ncalls = []\n"
            "real = run._freeze\nrun._freeze = lambda: calls.append(1) or real()\n"
            "sys.argv = ['rmqctl', 'verify', '-j', '2', '--json', sys.argv[1]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nprint(len(calls), gc.get_freeze_count(), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "RMQCTL_KERNEL": kernel})
    calls, frozen = map(int, r.stderr.strip().splitlines()[-1].split())
    assert calls >= 1, r.stderr            # the walk went through the pool
    assert (frozen > 0) == stays_frozen, r.stderr
