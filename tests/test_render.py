"""The dump --json fast path writes exactly what jsonl(message_dict(...)) writes."""
import os

import pytest

from conftest import FIXTURES, real_world_glob
from rmqctl.render import jsonl, message_dict, message_json
from rmqctl.scan import FileWalk
from test_formats_vectors import EX1, EX2


def _records(path, data=None):
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        yield from FileWalk(fd, int(path.name), size, check_phys=False)
    finally:
        os.close(fd)


def _files():
    out = sorted(real_world_glob("commitlog/0*"))
    if (FIXTURES / "stores").is_dir():
        out += sorted((FIXTURES / "stores").rglob("commitlog/0*"))
    return out


@pytest.mark.parametrize("body", ["base64", "hex", "text", "none"])
def test_fast_json_equals_dict_json(tmp_path, body):
    p = tmp_path / "00000000000000000000"
    p.write_bytes(EX1 + EX2 + bytes(16))
    files = [p] + _files()
    n = 0
    for f in files:
        for r in _records(f):
            assert message_json(r, body) == jsonl(message_dict(r, body))
            n += 1
    assert n > 2
