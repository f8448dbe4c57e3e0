"""Remote stores read by byte range (rmqctl.spark.remote) against a real HDFS: Apache Hadoop's
MiniDFSCluster (tests/minihdfs) on 127.0.0.1, reached through WebHDFS. No Spark here: the readers,
the listing, and a split walked through a staged range equal the same split walked on the local file."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from oracle_helpers import fixture_dirs

pytestmark = [pytest.mark.hdfs]

STORE = "basic-multifile-v5"


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory):
    from minihdfs.server import MiniHdfs

    fx = next(p for p in fixture_dirs() if p.name == STORE)
    with MiniHdfs(tmp_path_factory.mktemp("hdfs")) as h:
        assert h.upload(fx / "store", "/s/store") > 0
        yield h, fx / "store"


def _local_files(store):
    from rmqctl.store.layout import Store

    return [(str(f.path), f.start, f.size) for f in Store.open(store).commitlog.files]


def test_listing_and_ranged_reads(hdfs):
    from rmqctl.spark import remote

    h, store = hdfs
    local = _local_files(store)
    assert len(local) >= 2
    for uri in (f"{h.rpc}/s/store", f"webhdfs://{h.http}/s/store"):
        files = remote.list_commitlog(uri, {"webhdfs": h.http})
        assert [(f[1], f[2]) for f in files] == [(f[1], f[2]) for f in local]
        assert files[0][0] == f"{uri}/commitlog/{local[0][1]:020d}"
    uri, _, size = remote.list_commitlog(f"{h.rpc}/s/store", {"webhdfs": h.http})[0]
    data = open(local[0][0], "rb").read()
    r = remote.open_reader(uri, {"webhdfs": h.http})
    assert r.size == size == len(data)
    for pos, n in ((0, 100), (1234, 5000), (size - 10, 100), (size, 10)):
        assert r.pread(pos, n) == data[pos:pos + n]
    assert remote.data_extent(r, size) == remote.data_extent(remote.LocalReader(local[0][0]), size)
    co = store / "config" / "consumerOffset.json"
    assert remote.read_small(f"{h.rpc}/s/store/config/consumerOffset.json", {"webhdfs": h.http}) == \
        (co.read_bytes() if co.exists() else None)
    assert remote.list_commitlog(f"{h.rpc}/nothing", {"webhdfs": h.http}) is None
    from rmqctl.errors import IOFailure, UsageError

    with pytest.raises(UsageError, match="not a store"):
        remote.open_store(f"{h.rpc}/nothing", {"webhdfs": h.http})
    with pytest.raises(IOFailure, match="WebHDFS not reachable at http://127.0.0.1:9"):
        remote.open_store("hdfs://127.0.0.1:1/s/store", {"webhdfs": "127.0.0.1:9"})


@pytest.mark.parametrize("tail", [None, 1])
def test_staged_split_equals_local(hdfs, tail, monkeypatch):
    """Every range of every file, cut small, staged from HDFS == walked on the local file (records,
    statuses). tail=1: the stage ends at the range end, so the walk stops in unstaged bytes and the
    stage must be extended -- same result."""
    import pyarrow as pa

    from rmqctl.spark import remote
    from rmqctl.spark.batches import split_arrow
    from rmqctl.spark.dataset import message_columns
    from rmqctl.spark.plan import StoreRef, plan_local

    h, store = hdfs
    ropts = {"webhdfs": h.http}
    files = remote.list_commitlog(f"{h.rpc}/s/store", ropts)
    ref = StoreRef("s", f"{h.rpc}/s/store", None)
    plan = plan_local([ref], {"s": files}, split_size=4096, mode="ranged",
                      extent=remote.extent(ropts))
    assert len(plan.splits) > len(files)
    opts = {"check_crc": True, "check_phys": True, "check_prop_crc": True, "remote": ropts, "stage_tail": tail}
    fills = []
    real_fill = remote.Stage.fill
    monkeypatch.setattr(remote.Stage, "fill", lambda st, lo, hi: (fills.append((lo, hi)), real_fill(st, lo, hi)))
    cfg = {"delay_levels": tuple(range(18))}
    cols = message_columns()
    by_start = {f[1]: f[0] for f in _local_files(store)}
    scratch = remote._scratch_dir()
    before = {n for n in os.listdir(scratch) if n.startswith("rmqctl-range-")}
    for sp in plan.splits:
        gen = remote.ranged(sp, opts, lambda s: split_arrow(s, opts, cfg, cols))
        got = []
        while True:
            try:
                got.append(next(gen))
            except StopIteration as e:
                status, rows = e.value
                break
        want_gen = split_arrow(replace(sp, path=by_start[sp.file_start], mode="pread"), opts, cfg, cols)
        want = []
        while True:
            try:
                want.append(next(want_gen))
            except StopIteration as e:
                want_status, want_rows = e.value
                break
        assert status == want_status and rows == want_rows
        if want:
            g, w = pa.Table.from_batches(got), pa.Table.from_batches(want)
            for c in w.column_names:
                assert g[c].to_pylist() == w[c].to_pylist(), c
    # tail=1: extended at least once per split that owns records (the landing record lies past the end)
    assert (len(fills) > len(plan.splits)) == (tail == 1)
    # the staged copies are gone once their split is done
    assert {n for n in os.listdir(scratch) if n.startswith("rmqctl-range-")} <= before


def test_stage_reads_only_its_range(hdfs):
    """A split stages [start, end + tail), never the whole file."""
    from rmqctl.spark import remote

    h, store = hdfs
    uri, _, size = remote.list_commitlog(f"{h.rpc}/s/store", {"webhdfs": h.http})[0]
    st = remote.Stage(remote.open_reader(uri, {"webhdfs": h.http}, size), size)
    try:
        st.fill(4096, 8192)
        assert st.bytes == 4096 and (st.lo, st.hi) == (4096, 8192)
        st.fill(4096, 10000)                 # only what is not staged yet
        assert st.bytes == 4096 + 1808
        data = open(_local_files(store)[0][0], "rb").read()
        assert os.pread(st.fd, 5904, 4096) == data[4096:10000]
        assert os.path.getsize(st.path) == 10000 < size and os.stat(st.path).st_blocks * 512 < 10000
    finally:
        st.close()
    assert not os.path.exists(st.path)
