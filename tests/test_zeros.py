"""rmqctl.store.zeros.next_nonzero (where a mostly-zero file's zeros end) equals a plain scan of the bytes: in
files of written zeros and sparse files (holes), non-zero bytes on and beside 1 MiB piece edges, ranges ending
before or past the file's end; also where the file system has no SEEK_DATA."""
from __future__ import annotations

import os
import random

import pytest

from rmqctl.store import zeros

MIB = zeros.PIECE


def _expected(nonzero: list, pos: int, end: int):
    """The first of the file's non-zero byte positions in [pos, end)."""
    return next((m for m in nonzero if pos <= m < end), None)


@pytest.mark.parametrize("how", ["plain", "no_seek_data"])
def test_next_nonzero_equals_a_plain_scan(tmp_path, monkeypatch, how):
    if how == "no_seek_data":
        monkeypatch.delattr(os, "SEEK_DATA")
    rng = random.Random(7)
    size = 3 * MIB + 12345
    spots = [0, 1, MIB - 1, MIB, MIB + 1, 2 * MIB - 1, 2 * MIB + 77, size - 1]
    for sparse in (False, True):
        for case in range(12):
            marks = sorted(rng.sample(spots, rng.randint(0, 3)))
            p = tmp_path / f"f{sparse}{case}"
            with open(p, "wb") as f:
                if not sparse:
                    f.write(bytes(size))
                for m in marks:
                    f.seek(m)
                    f.write(bytes([rng.randint(1, 255)]))
                f.truncate(size)
            data = p.read_bytes()
            nonzero = sorted(set(marks))
            assert [i for i in nonzero if data[i]] == nonzero and data.count(0) == size - len(nonzero)  # written
            fd = os.open(p, os.O_RDONLY)
            try:
                for pos in (0, 1, MIB - 1, MIB, MIB + 2, 2 * MIB, size - 1, size):
                    for end in (pos + 1, MIB, 2 * MIB + 78, size, size + 3 * MIB):
                        if end > pos:
                            assert zeros.next_nonzero(fd, pos, end) == _expected(nonzero, pos, end), (marks, pos, end)
                            assert zeros.all_zero(fd, pos, end) == (_expected(nonzero, pos, end) is None)
            finally:
                os.close(fd)
