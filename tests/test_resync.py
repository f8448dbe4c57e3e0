"""rmqctl.scan.find_next_record: the first position after `pos` where a valid record starts whose PHYSICALOFFSET is
its position -- wherever it lies against the search's windows (they grow from 64 KiB), behind junk and decoys (the
magic code with a wrong PHYSICALOFFSET, a record whose body CRC fails)."""
from __future__ import annotations

import os
import random

import pytest

import faultlib as F
from rmqctl.formats import commitlog as cl
from rmqctl.scan import find_next_record

MAGICS = (cl.MESSAGE_MAGIC_CODE_V1.to_bytes(4, "big", signed=True),
          cl.MESSAGE_MAGIC_CODE_V2.to_bytes(4, "big", signed=True))
BASE = 1 << 30      # the file's start offset


def _junk(rnd, n: int) -> bytearray:
    """n random bytes holding no magic code at all."""
    out = bytearray(rnd.randbytes(n))
    for m in MAGICS:
        i = out.find(m)
        while i >= 0:
            out[i] ^= 0x01
            i = out.find(m, i)
    return out


def _rec(at: int, qoff: int = 0, phys: int | None = None, body: bytes = b"payload") -> bytes:
    return F._record(topic="T", qid=0, qoff=qoff, phys=BASE + at if phys is None else phys, body=body, props=b"",
                     born_ts=1, store_ts=2)


def _place(data: bytearray, at: int, rec: bytes) -> None:
    data[at:at + len(rec)] = rec


K64 = 64 * 1024
# around the end of the first window (64 KiB), the second (64 + 256 KiB) and inside the third
WHERE = [K64 - 5, K64 - 4, K64 - 3, K64 - 1, K64, K64 + 1, K64 + 3, K64 + 320 * 1024 - 4, K64 + 320 * 1024 + 2,
         900 * 1024, 5000]


@pytest.mark.parametrize("at", WHERE)
@pytest.mark.parametrize("pos", [0, 1000])
def test_first_valid_record_wherever_it_lies_against_the_windows(tmp_path, at, pos):
    rnd = random.Random(at * 7 + pos)
    size = 1200 * 1024
    data = _junk(rnd, size)
    # decoys before it: a magic code with the wrong PHYSICALOFFSET, and a record whose body CRC fails
    wrong = _rec(at // 3, phys=BASE + at // 3 + 1)
    _place(data, at // 3, wrong)
    bad = bytearray(_rec(at // 2))
    bad[-12] ^= 0xFF        # inside the body: its CRC no longer matches
    _place(data, at // 2, bad)
    good = _rec(at)
    _place(data, at, good)
    _place(data, at + len(good), _rec(at + len(good), qoff=1))
    p = tmp_path / "log"
    p.write_bytes(bytes(data))
    fd = os.open(p, os.O_RDONLY)
    try:
        assert find_next_record(fd, BASE, size, min(pos, at - 1)) == at
        assert find_next_record(fd, BASE, size, at) == at + len(good)        # strictly after pos
        assert find_next_record(fd, BASE, size, min(pos, at - 1), at) is None    # the end bounds the search
    finally:
        os.close(fd)


def test_nothing_but_junk_gives_none(tmp_path):
    data = _junk(random.Random(1), 700 * 1024)
    p = tmp_path / "log"
    p.write_bytes(bytes(data))
    fd = os.open(p, os.O_RDONLY)
    try:
        assert find_next_record(fd, BASE, len(data), 0) is None
    finally:
        os.close(fd)
