"""The numba dispatch of rebuild/recover (rmqctl.kernels.rebuild_nb: properties read in place, topic numbering,
TAGS hash, index items, IndexFile.putKey runs) gives exactly what the numpy dispatch gives:

* on random property fields and topics (duplicates, empty values, \\x01 in values, spaces, non-ASCII, torn
  UTF-8, look-alike names): every value() answer, tagsCodes, index items, topic numbers -- and both equal the
  per-record rules;
* IndexFileBuilder.put_many on random item runs (slot collisions, stale slot values, first-item timing);
* end to end: `rebuild cq|index` and `recover` (one process and -j 2) on every fixture store and on random
  damaged stores plan and stage the same bytes with RMQCTL_KERNEL=numba and =numpy.
"""
from __future__ import annotations

import os
import random
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import faultlib as F
from rmqctl.kernels import rebuild_nb
from rmqctl.repair import parallel as P
from rmqctl.repair import vecdispatch as VD
from rmqctl.repair.rebuild_index import IndexFileBuilder
from test_parallel_repair import FIX, _damage, _rebuild, _recover, random_store
from test_rebuild_vec import dispatched, expected, fake_batch, raw_props, topic_st

EXTRA = [b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"CLUSTER", b"TAG", b"INNER_MULTI_QUEUE_OFFSET", b"DUP_INFO"]


_dispatch = dispatched


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(topic_st, raw_props), min_size=1, max_size=12), st.sampled_from([b"\x02Z", b"", b"\x01"]))
def test_in_place_properties_equal_the_numpy_dispatch(recs, pad):
    delay = [1000, 5000, 10000]
    b_np, b_nb = fake_batch(recs, pad), fake_batch(recs, pad)
    try:
        want = expected(recs, b_np, delay)
    except ValueError:      # SCHEDULE_TOPIC_XXXX with a DELAY that is no int: the walk rejects the record
        assume(False)
    with mock.patch.dict(os.environ, {"RMQCTL_KERNEL": "numpy"}):
        p_np = VD.props_of(b_np)
        assert type(p_np) is VD.Props
        got_np = _dispatch(b_np, p_np, delay)
    with mock.patch.dict(os.environ, {"RMQCTL_KERNEL": "numba"}):
        p_nb = VD.props_of(b_nb)
        assert isinstance(p_nb, VD.PropsNB)
        got_nb = _dispatch(b_nb, p_nb, delay)
    assert got_nb == got_np
    assert got_nb[0] == [t for t, _ in recs]
    assert list(got_nb[1:]) == list(want)
    for name in EXTRA:
        h1, s1, l1 = p_np.value(name)
        h2, s2, l2 = p_nb.value(name)
        assert h1.tolist() == h2.tolist(), name
        for i in np.flatnonzero(h1).tolist():
            assert p_np.buf[s1[i]:s1[i] + l1[i]].tobytes() == p_nb.buf[s2[i]:s2[i] + l2[i]].tobytes(), name


def test_many_topics_in_one_batch_are_numbered_exactly():
    """Hundreds of topics, same lengths, in runs and interleaved: the compiled numbering (hash table, bytes
    compared) equals the numpy one."""
    rnd = random.Random(5)
    names = [f"T{i:04d}" for i in range(300)] + ["主题", "T0001x"]
    recs = [(rnd.choice(names), b"TAGS\x01a") for _ in range(3000)]
    recs[100:400] = [("T0007", b"")] * 300
    b = fake_batch(recs)
    with mock.patch.dict(os.environ, {"RMQCTL_KERNEL": "numba"}):
        topics = VD.Topics()
        got = [topics.names[i] for i in topics.of(b).tolist()]
    assert got == [t for t, _ in recs]


def _index_file(tmp_path, name, S, N, runs, prev_ts, kernel):
    with mock.patch.dict(os.environ, {"RMQCTL_KERNEL": kernel}):
        f = IndexFileBuilder(tmp_path / f"{name}-{kernel}", name, S, N, 1000, prev_ts)
        for h, phy, ts in runs:
            f.put_many(h, phy, ts)
        f.finish()
    return (tmp_path / f"{name}-{kernel}").read_bytes(), f.hash_slot_count, f.index_count


@pytest.mark.parametrize("seed", range(6))
def test_put_keys_equals_the_numpy_put_many(tmp_path, seed):
    rnd = np.random.default_rng(seed)
    S, N = int(rnd.integers(1, 40)), int(rnd.integers(50, 400))
    total = N - 1
    runs, left, ts0 = [], total, 1_700_000_000_000
    while left:
        k = int(min(left, rnd.integers(1, 60)))
        h = rnd.integers(0, 2**31, k)
        phy = np.sort(rnd.integers(0, 2**40, k))
        ts = ts0 + np.sort(rnd.integers(-5000, 2**33, k))
        runs.append((h.astype(np.int64), phy.astype(np.int64), ts.astype(np.int64)))
        left -= k
    prev_ts = [0, -1, ts0 - 3000, ts0 + 10**6][seed % 4]
    a = _index_file(tmp_path, "f", S, N, runs, prev_ts, "numpy")
    b = _index_file(tmp_path, "f", S, N, runs, prev_ts, "numba")
    assert a == b
    assert a[2] == N


def test_stale_slot_values_are_dropped_alike(tmp_path):
    """A slot holding a number beyond the file's count (a stale table) is treated as empty by both."""
    out = []
    for kernel in ("numpy", "numba"):
        with mock.patch.dict(os.environ, {"RMQCTL_KERNEL": kernel}):
            f = IndexFileBuilder(tmp_path / kernel, "x", 4, 20, 0, 0)
            f.slots[:] = [0, 99, -3, 1]
            f.put_many(np.asarray([1, 2, 3, 1], np.int64), np.arange(4, dtype=np.int64) * 10,
                       np.full(4, 1_700_000_000_000, np.int64))
            f.finish()
        out.append(((tmp_path / kernel).read_bytes(), f.hash_slot_count))
    assert out[0] == out[1]
    assert out[0][1] == 2        # 99 (beyond the count) and -3 count as empty; 1 is a real chain


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 7), st.integers(0, 400), st.integers(1, 10**6), st.randoms())
def test_put_keys_by_blocks_equals_one_pass(S, bits, k, n0, rnd):
    """The slot table visited block by block gives the one pass's items, count and table: runs longer and
    shorter than a block, slots hit many times, stale slot values (negative, beyond the count)."""
    r = np.random.default_rng(rnd.getrandbits(32))
    h = r.integers(0, 2**31 - 1, k) if rnd.random() < 0.5 else r.integers(0, 5, k) * r.integers(1, S + 1)
    phy, ts = np.sort(r.integers(0, 2**40, k)), 1_700_000_000_000 + np.sort(r.integers(-5000, 2**33, k))
    table = r.integers(-3, n0 + k + 3, S).astype(np.int32)
    b0, b1 = int(r.choice([0, -1, 1_699_999_999_000])), 1_700_000_000_000
    got, want = table.copy(), table.copy()
    a = rebuild_nb.put_keys(got, S, h, phy, ts, n0, b0, b1, bits=bits)
    b = rebuild_nb.put_keys(want, S, h, phy, ts, n0, b0, b1, bits=0)
    assert a[0].tobytes() == b[0].tobytes() and a[1] == b[1]
    assert (got == want).all()


def test_runs_go_by_blocks_only_when_their_keys_scatter(monkeypatch):
    """put_keys picks blocks for a long run over a large table whose keys each hit a slot-table line of their own
    (random ids), and the one pass for near-sequential keys as a broker writes them (their slots cluster) or a
    short run; the items are the same either way."""
    from rmqctl.repair.rebuild_index import _jhash

    S, k = 5_000_000, 1 << 16
    seq = np.asarray([_jhash(f"Topic#{0x7F000001 << 64 | 20231114 << 24 | i:032X}") for i in range(k)], np.int64)
    rnd = np.random.default_rng(3).integers(0, 2**31 - 1, k)
    assert not rebuild_nb.scattered(seq, S) and rebuild_nb.scattered(rnd, S)
    used = []
    real = rebuild_nb._put_keys_blocked
    monkeypatch.setattr(rebuild_nb, "_put_keys_blocked", lambda *a: used.append(1) or real(*a))
    z = np.zeros(k, np.int64)
    for h, short, want in ((seq, False, []), (rnd, True, []), (rnd, False, [1])):
        used.clear()
        hh = h[:1000] if short else h
        got = rebuild_nb.put_keys(np.zeros(S, np.int32), S, hh, z[:len(hh)], z[:len(hh)], 1, 0, 0)
        assert used == want
        assert got[0].tobytes() == rebuild_nb.put_keys(np.zeros(S, np.int32), S, hh, z[:len(hh)], z[:len(hh)], 1, 0, 0,
                                                       bits=0)[0].tobytes()


@pytest.mark.parametrize("seed", range(8))
def test_gathered_runs_give_the_numpy_files(tmp_path, seed):
    """put_many's compiled path gathers items into runs put later (runs filling inside a call and across
    calls, put by blocks) and may meet the numpy path between two calls: the files are the numpy path's."""
    rnd = np.random.default_rng(100 + seed)
    S, N = int(rnd.integers(8, 200)), int(rnd.integers(50, 600))
    runs, left, ts0 = [], N - 1, 1_700_000_000_000
    while left:
        k = int(min(left, rnd.integers(1, 40)))
        runs.append((rnd.integers(0, 2**31, k).astype(np.int64), np.sort(rnd.integers(0, 2**40, k)).astype(np.int64),
                     (ts0 + np.sort(rnd.integers(-5000, 2**33, k))).astype(np.int64)))
        left -= k
    kernels = [str(rnd.choice(["numba", "numpy"])) if seed % 2 else "numba" for _ in runs]
    want = _index_file(tmp_path, "f", S, N, runs, ts0 - 3000, "numpy")
    with mock.patch.object(rebuild_nb, "BLOCKED_ITEMS", 1), mock.patch.object(rebuild_nb, "BLOCK_BITS", 1 + seed % 3), \
            mock.patch("rmqctl.repair.rebuild_index.RUN_ITEMS", int(rnd.integers(2, 50))):
        f = IndexFileBuilder(tmp_path / "mixed", "f", S, N, 1000, ts0 - 3000)
        for (h, phy, ts), kernel in zip(runs, kernels):
            with mock.patch.dict(os.environ, {"RMQCTL_KERNEL": kernel}):
                f.put_many(h, phy, ts)
        f.finish()
    assert ((tmp_path / "mixed").read_bytes(), f.hash_slot_count, f.index_count) == want


# -- end to end -------------------------------------------------------------------------------------

class _Counted(rebuild_nb.Scan):
    made = 0

    def __init__(self, *a):
        type(self).made += 1
        super().__init__(*a)


def _both(fn, tmp_path, records=True):
    """fn(staging dir) with each kernel: equal results; the numba run went through the compiled dispatch
    (in this process: -j 1, or the parent's re-walks) when the store has records."""
    got = {}
    for kernel in ("numpy", "numba"):
        d = tmp_path / f"{kernel}-{len(list(tmp_path.iterdir()))}"
        d.mkdir()
        _Counted.made = 0
        with mock.patch.dict(os.environ, {"RMQCTL_KERNEL": kernel}), mock.patch.object(rebuild_nb, "Scan", _Counted):
            got[kernel] = fn(d)
        if records is not None:     # None: -j 2, the parent may re-walk a range itself (or not)
            assert (_Counted.made > 0) == (kernel == "numba" and records), kernel
    assert got["numba"] == got["numpy"]
    return got["numba"]


@pytest.mark.parametrize("fixture", FIX, ids=lambda p: p.name)
def test_fixture_stores_numba_equals_numpy(tmp_path, fixture):
    F.copy_store(fixture, tmp_path / fixture.name)
    root = tmp_path / fixture.name / "store"
    conf = tmp_path / fixture.name / "manifest.json"
    records = (root / "commitlog").is_dir() and bool(F.commitlog_records(root))
    if records:
        before = F.tree_hashes(root)
        F.torn_tail(root)
        assert F.tree_hashes(root) != before, "the damage was not injected"
    for what in ("cq", "index"):
        _both(lambda t, what=what: _rebuild(root, conf, what, 1, t), tmp_path, records)
    _both(lambda t: _recover(root, conf, 1, t), tmp_path, records)


@pytest.mark.parametrize("seed", range(4))
def test_random_damaged_stores_numba_equals_numpy(tmp_path, monkeypatch, seed):
    rnd = random.Random(100 + seed)
    root = random_store(tmp_path / "s" / "store", seed)
    conf = root.parent / "manifest.json"
    before = F.tree_hashes(root)
    kind = ["flip", "torn", "zero", "none"][seed % 4]
    _damage(root, rnd, kind)
    assert (F.tree_hashes(root) != before) == (kind != "none"), "the damage was not injected"
    monkeypatch.setenv(P.SPLIT_ENV, str(rnd.choice([1000, 4096])))
    for what in ("cq", "index"):
        _both(lambda t, what=what: _rebuild(root, conf, what, 1, t), tmp_path)
        _both(lambda t, what=what: _rebuild(root, conf, what, 2, t), tmp_path, records=None)
    for kw in ({"from_start": True}, {"on_corruption": "quarantine"}, {}):
        _both(lambda t, kw=kw: _recover(root, conf, 1, t, **kw), tmp_path)
        _both(lambda t, kw=kw: _recover(root, conf, 2, t, **kw), tmp_path, records=None)


def test_auto_uses_the_compiled_dispatch_for_big_walks_only(tmp_path, monkeypatch):
    """RMQCTL_KERNEL=auto: a rebuild/recover pass that will walk PAYS_AFTER bytes or more loads numba from its
    first window; a smaller one stays on numpy (a small store never pays numba's load)."""
    from rmqctl import kernels

    fixture = next(p for p in FIX if p.name == "basic-multifile-v5")
    F.copy_store(fixture, tmp_path / "f")
    root, conf = tmp_path / "f" / "store", tmp_path / "f" / "manifest.json"
    monkeypatch.setenv("RMQCTL_KERNEL", "auto")
    for pays_after, compiled in ((1 << 40, False), (1, True)):
        monkeypatch.setattr(kernels, "_walked", [0])
        monkeypatch.setattr(kernels, "_loaded", {})
        monkeypatch.setattr(VD, "PAYS_AFTER", pays_after)
        _Counted.made = 0
        d = tmp_path / f"auto-{pays_after}"
        d.mkdir()
        with mock.patch.object(rebuild_nb, "Scan", _Counted):
            _rebuild(root, conf, "index", 1, d)
        assert (_Counted.made > 0) == compiled
        assert kernels.name() == ("numba" if compiled else "numpy")


def _multifile_store(tmp_path):
    """A copy of the basic-multifile-v5 fixture, opened with its broker's config."""
    import json

    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    fixture = next(p for p in FIX if p.name == "basic-multifile-v5")
    F.copy_store(fixture, tmp_path / "f")
    cfg = json.loads((tmp_path / "f" / "manifest.json").read_text())["store_config"]
    return Store.open(tmp_path / "f" / "store", StoreConfig().with_values(cfg))


def test_auto_with_jobs_decides_by_each_process_share(tmp_path, monkeypatch):
    """-j N: the walk is shared, so auto loads numba in the parent only when each worker's share pays it back
    (past PAYS_AFTER); the same walk in one process does load it."""
    from rmqctl import kernels

    store = _multifile_store(tmp_path)
    files = store.commitlog.files
    fsize = store.config.commitlog_file_size
    total = sum(min(f.size, fsize) for f in files)
    assert total > 4
    monkeypatch.setenv("RMQCTL_KERNEL", "auto")
    monkeypatch.setattr(VD, "PAYS_AFTER", total // 2 + 1)
    for jobs, compiled in ((2, False), (1, True)):
        monkeypatch.setattr(kernels, "_walked", [0])
        monkeypatch.setattr(kernels, "_loaded", {})
        VD.expect_walk(store, files, jobs=jobs)
        assert kernels.name() == ("numba" if compiled else "numpy")


def test_auto_with_jobs_counts_the_largest_range_a_worker_gets(tmp_path, monkeypatch):
    """-j N over few large ranges (a store of many queues gets whole files): a worker walks a whole range whatever
    N is, so the largest range decides when it is above each one's share -- the last file counted up to where its
    zeros start."""
    from rmqctl import kernels
    from rmqctl.store.commitlog import data_estimate

    store = _multifile_store(tmp_path)
    files = store.commitlog.files
    fsize = store.config.commitlog_file_size
    assert len(files) > 2
    sizes = [min(f.size, fsize) for f in files[:-1]] + [data_estimate(str(files[-1].path), fsize)]
    biggest = max(sizes)
    monkeypatch.setenv("RMQCTL_KERNEL", "auto")
    monkeypatch.setattr(VD, "PAYS_AFTER", sum(sizes) // 8 + 1)      # more than a 16th of the walk
    assert VD.PAYS_AFTER <= biggest
    for rb, compiled in ((1 << 40, True), (VD.PAYS_AFTER, True), (VD.PAYS_AFTER - 1, False), (None, False)):
        monkeypatch.setattr(kernels, "_walked", [0])
        monkeypatch.setattr(kernels, "_loaded", {})
        VD.expect_walk(store, files, jobs=16, range_bytes=rb)
        assert kernels.name() == ("numba" if compiled else "numpy"), rb
    monkeypatch.setattr(VD, "PAYS_AFTER", biggest + 1)      # no range that large
    monkeypatch.setattr(kernels, "_walked", [0])
    monkeypatch.setattr(kernels, "_loaded", {})
    VD.expect_walk(store, files, jobs=16, range_bytes=1 << 40)
    assert kernels.name() == "numpy"
    # only the last file walked (recover from a checkpoint there): the files before it count for nothing
    last = sizes[-1]
    assert 0 < last < biggest
    for pays_after, compiled in ((last + 1, False), (last, True)):
        monkeypatch.setattr(VD, "PAYS_AFTER", pays_after)
        monkeypatch.setattr(kernels, "_walked", [0])
        monkeypatch.setattr(kernels, "_loaded", {})
        VD.expect_walk(store, files, start=files[-1].start, jobs=16, range_bytes=1 << 40)
        assert kernels.name() == ("numba" if compiled else "numpy"), pays_after
