"""The batch kernels (rmqctl.scanvec's numpy kernel, rmqctl.kernels' numba one) agree with the
record-at-a-time kernel (rmqctl.scan.FileWalk) record for record and on where and why a walk stops: on
every broker-written file, with small windows (records crossing window edges), and under random damage."""
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import FIXTURES, REAL_WORLD, real_world_glob
from kernel_params import kernel  # noqa: F401  -- every test here runs with each kernel
from rmqctl.scan import FileWalk
from rmqctl.scanvec import walk_file

FIELDS = ("total_size", "magic_code", "body_crc", "queue_id", "flag", "queue_offset", "physical_offset", "sys_flag",
          "born_timestamp", "store_timestamp", "reconsume_times", "prepared_transaction_offset", "body_length")


def both(path, start=0, window=1 << 20, **kw):
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        fs = int(path.name) if path.name.isdigit() else 0
        w = FileWalk(fd, fs, size, start, **kw)
        ref = [(r.offset, *(getattr(r, f) for f in FIELDS), r.topic, r.properties_raw, r.prop_crc) for r in w]
        got = []
        gen = walk_file(fd, fs, size, start, window=window, **kw)
        while True:
            try:
                bt = next(gen)
            except StopIteration as e:
                stop = e.value
                break
            topics, props = bt.topics(), bt.properties_raw()
            offs = bt.offset.tolist()
            cols = [getattr(bt, f).tolist() for f in FIELDS]
            for i in range(len(bt)):
                pc = int(bt.prop_crc[i])
                got.append((offs[i], *(c[i] for c in cols), topics[i], props[i], None if pc < 0 else bool(pc)))
        return ref, w.stop, got, stop
    finally:
        os.close(fd)


def commitlogs():
    out = sorted(real_world_glob("commitlog/0*"))
    if (FIXTURES / "stores").is_dir():
        out += sorted((FIXTURES / "stores").rglob("commitlog/0*"))
    return out


FILES = commitlogs()


@pytest.mark.parametrize("path", FILES, ids=[str(p).split("/")[-4] + "/" + p.name for p in FILES])
@pytest.mark.parametrize("window", [700, 4096, 1 << 20])
def test_agrees_on_broker_files(path, window, kernel):
    ref, rstop, got, gstop = both(path, window=window)
    assert got == ref
    assert (gstop.kind, gstop.offset) == (rstop.kind, rstop.offset)


SRC = REAL_WORLD / "apache__rocketmq/store/commitlog/00000000000000000000"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 8191), st.integers(1, 255)), min_size=0, max_size=6),
       st.integers(200, 8192), st.sampled_from([300, 1000, 8192]), st.booleans())
def test_agrees_under_damage(tmp_path, kernel, flips, cut, window, phys):
    data = bytearray(SRC.read_bytes())
    for pos, x in flips:
        data[pos] ^= x
    p = tmp_path / "00000000000000000000"
    p.write_bytes(bytes(data[:cut]))
    ref, rstop, got, gstop = both(p, window=window, check_phys=phys)
    assert got == ref
    assert (gstop.kind, gstop.offset) == (rstop.kind, rstop.offset)


def test_isal_crc_is_the_broker_crc():
    """The fast CRC the kernel picks (ISA-L when installed) equals zlib's and an independent crcmod CRC-32."""
    import random
    import zlib

    import crcmod
    from isal.isal_zlib import crc32 as isal_crc32

    from rmqctl import scanvec

    ref = crcmod.predefined.mkCrcFun("crc-32")
    rnd = random.Random(7)
    for n in (0, 1, 5, 63, 1024, 4097, 1 << 16):
        data = rnd.randbytes(n)
        assert isal_crc32(data) == zlib.crc32(data) == ref(data)
        assert scanvec._crc32(memoryview(data)) == zlib.crc32(data)
