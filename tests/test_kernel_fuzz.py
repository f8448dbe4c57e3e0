"""Hypothesis: random flips and truncations of broker-written commitlog bytes never raise anything but
our error kinds, never loop, and a flipped body byte never verifies clean."""
import os

from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import REAL_WORLD
from rmqctl import dumping
from rmqctl.errors import RmqError
from rmqctl.scan import FileWalk, find_next_record

SRC = (REAL_WORLD / "apache__rocketmq/store/commitlog/00000000000000000000").read_bytes()
BODY_AT = 88  # IPv4/IPv4 records: body starts at byte 88 of the record; records are 172 bytes here


def _walk(tmp_path, data):
    p = tmp_path / "00000000000000000000"
    p.write_bytes(data)
    fd = os.open(p, os.O_RDONLY)
    try:
        w = FileWalk(fd, 0, len(data))
        recs = []
        for r in w:
            recs.append(r)
            assert len(recs) <= len(data) // 92 + 1  # never loops
        nxt = find_next_record(fd, 0, len(data), w.stop.pos) if not w.stop.normal else None
        return recs, w.stop, nxt
    finally:
        os.close(fd)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(SRC) - 1), st.integers(1, 255)), min_size=1, max_size=8),
       st.integers(0, len(SRC)))
def test_flips_and_truncations_are_handled(tmp_path, flips, cut):
    data = bytearray(SRC)
    for pos, x in flips:
        data[pos] ^= x
    data = bytes(data[:cut])
    recs, stop, nxt = _walk(tmp_path, data)
    assert stop.kind
    for r in recs:  # whatever was accepted is self-consistent
        assert r.physical_offset == r.offset and r.crc_ok
    p = tmp_path / "commitlog"
    p.mkdir(exist_ok=True)
    f = p / "00000000000000000000"
    f.write_bytes(data)
    try:
        for _ in dumping.commitlog_file(f):
            pass
    except RmqError:
        pass


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 46), st.integers(0, 31), st.integers(1, 255))
def test_flipped_body_byte_never_verifies_clean(tmp_path, record, at, x):
    data = bytearray(SRC)
    data[record * 172 + BODY_AT + at] ^= x
    recs, stop, nxt = _walk(tmp_path, bytes(data))
    assert len(recs) == record and stop.kind == "bad_body_crc" and stop.offset == record * 172
    # resync finds the next good record (unless the bad one was the last)
    assert nxt == (record + 1) * 172 if record < 46 else nxt is None
