"""timerlog dump: a full file ends with TimerLog.append's BLANK (size = bytes to the end of the file, 8 zero bytes,
BLANK_MAGIC_CODE), which is not a unit; unit positions are timerlog offsets across files. The files are laid out
by a model of RocketMQ 5.3.3 TimerLog.append (a unit goes to the next file when unit + 16-byte blank would not
fit)."""
from __future__ import annotations

import json
import struct

import pytest

from rmqctl.formats import timer as tf


def _write_timerlog(d, file_size, n_units):
    """Returns the positions TimerLog.append returned, writing the files as it does."""
    files, positions, cur, wrote = {}, [], 0, 0
    buf = bytearray(file_size)
    for k in range(n_units):
        if tf.TIMERLOG_UNIT_SIZE + tf.TIMERLOG_MIN_BLANK > file_size - wrote:
            struct.pack_into(">iqi", buf, wrote, file_size - wrote, 0, tf.TIMERLOG_BLANK_MAGIC)
            files[cur] = buf
            cur, wrote, buf = cur + file_size, 0, bytearray(file_size)
        unit = struct.pack(">iqiqiqiiq", 52, positions[-1] if positions else 0, tf.MAGIC_DEFAULT,
                           1_700_000_000_000 + k, 1000, 4096 * k, 300, 12345, 0)
        buf[wrote:wrote + 52] = unit
        positions.append(cur + wrote)
        wrote += 52
    files[cur] = buf
    d.mkdir(parents=True)
    for start, b in files.items():
        (d / f"{start:020d}").write_bytes(bytes(b))
    return positions


@pytest.mark.parametrize("file_size", [208, 200, 52 * 5 + 16])
def test_timerlog_blank_ends_file(cli, tmp_path, file_size):
    d = tmp_path / "store" / "timerlog"
    positions = _write_timerlog(d, file_size, 11)
    files = sorted(d.iterdir())
    assert len(files) >= 3
    first = files[0].read_bytes()
    at = max(p for p in positions if p < file_size) + 52
    bsize, _, bmagic = struct.unpack_from(">iqi", first, at)
    assert bmagic == tf.TIMERLOG_BLANK_MAGIC and bsize == file_size - at     # a BLANK really ends the file
    units, trailers = [], []
    for f in files:
        code, out, err = cli("dump", "--json", f)
        assert code == 0, err
        rows = [json.loads(x) for x in out.splitlines()]
        units += [r for r in rows if r["kind"] == "timerlog_unit"]
        trailers += [r for r in rows if r["kind"] == "trailer"]
    assert [u["position"] for u in units] == positions
    assert all(u["size"] == 52 and u["magic"] == tf.MAGIC_DEFAULT for u in units)
    assert [u["curr_write_time_ms"] for u in units] == [1_700_000_000_000 + k for k in range(11)]
    full = trailers[:-1]
    assert all(t["trailing"] == "blank" and t["valid_bytes"] + t["blank_size"] == file_size for t in full)
    assert "problem" not in trailers[-1]


@pytest.mark.parametrize("file_size,n", [(200, 3), (200, 4), (208, 4), (216, 4), (52 * 5 + 16, 5)])
def test_timerlog_end_after_a_blank_is_the_file_end(tmp_path, file_size, n):
    """recover's timerlog end (the bound for timercheck's flush position): after a BLANK, TimerLog.append has set
    the wrote position to the file end; otherwise it is the end of the last unit."""
    from types import SimpleNamespace

    from rmqctl.repair.timer_plan import timerlog_end as _timerlog_end

    d = tmp_path / "store" / "timerlog"
    positions = _write_timerlog(d, file_size, n)
    f0 = (d / ("0" * 20)).read_bytes()
    at = max(p for p in positions if p < file_size) + 52
    has_blank = at + 16 <= file_size and struct.unpack_from(">iqi", f0, at)[2] == tf.TIMERLOG_BLANK_MAGIC
    if len(list(d.iterdir())) > 1:       # drop the next file: the blank-ended file is the last one
        for f in sorted(d.iterdir())[1:]:
            f.unlink()
    want = file_size if has_blank else positions[-1] + 52
    assert _timerlog_end(SimpleNamespace(root=tmp_path / "store")) == want
