"""dump: every broker-written file reads without a traceback; bad input gives one line and exit 4."""
import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, REAL_WORLD, real_world_files, run_cli
from rmqctl.formats import kind_for_path

RW = real_world_files()


@pytest.mark.parametrize("path", RW, ids=[str(p.relative_to(REAL_WORLD)) for p in RW])
def test_every_real_world_file_dumps(cli, path):
    if kind_for_path(path) is None:
        pytest.fail(f"no kind for {path}")  # every file the corpus holds is a known kind
    code, out, err = cli("dump", path, "--json")
    assert "Traceback" not in err
    assert code in (0, 4), err
    if code == 4:
        assert len(err.strip().splitlines()) == 1 and str(path) in err
    for line in out.splitlines():
        json.loads(line)


def test_real_world_stores_summarise(cli):
    roots = sorted({p.parent for p in REAL_WORLD.rglob("checkpoint")})
    assert roots
    for root in roots:
        code, out, err = cli("dump", root, "--json")
        assert code == 0, err
        s = json.loads(out)
        assert s["kind"] == "store" and "checkpoint" in s


def test_broker_written_unit_test_commitlog(cli):
    p = REAL_WORLD / "apache__rocketmq/store/commitlog/00000000000000000000"
    code, out, err = cli("dump", p, "--json", "--body", "text")
    assert code == 0
    lines = [json.loads(x) for x in out.splitlines()]
    msgs = [x for x in lines if x["kind"] == "message"]
    assert len(msgs) == 47 and all(m["body_crc_ok"] for m in msgs)
    assert msgs[0]["body"] == "Once, there was a chance for me!"
    assert [m["physical_offset"] for m in msgs] == [172 * i for i in range(47)]
    assert lines[-1]["kind"] == "trailer" and lines[-1]["stop"] == "blank"
    # a full file ends with a BLANK record covering the rest of the file
    assert lines[-1]["valid_bytes"] + lines[-1]["blank_size"] == 8192


def _commitlog_copy(tmp_path):
    src = REAL_WORLD / "apache__rocketmq/store/commitlog/00000000000000000000"
    d = tmp_path / "store" / "commitlog"
    d.mkdir(parents=True)
    dst = d / "00000000000000000000"
    dst.write_bytes(src.read_bytes())
    return dst


def _patch(path, offset, data):
    b = bytearray(path.read_bytes())
    b[offset:offset + len(data)] = data
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("what,offset,data,field", [
    ("body bit flip", 172 + 90, b"\xff", "BODYCRC"),
    ("bad magic", 172 + 4, b"\x00\x00\x00\x01", "MAGICCODE"),
    ("length larger than the file", 172, (10 ** 9).to_bytes(4, "big"), "TOTALSIZE"),
    ("negative body length", 172 + 84, (-5).to_bytes(4, "big", signed=True), "BODYLENGTH"),
    ("garbage", 344, b"\x13\x37" * 50, "MAGICCODE"),
])
def test_bad_commitlog_one_line_exit_4(cli, tmp_path, what, offset, data, field):
    p = _commitlog_copy(tmp_path)
    _patch(p, offset, data)
    code, out, err = cli("dump", p)
    assert code == 4, what
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(p) in err and "offset" in err and field in err


def test_truncated_commitlog(cli, tmp_path):
    p = _commitlog_copy(tmp_path)
    p.write_bytes(p.read_bytes()[:172 * 3 + 50])
    code, out, err = cli("dump", p)
    assert code == 4 and f"offset {172 * 3}" in err and "TOTALSIZE" in err


def test_empty_file(cli, tmp_path):
    p = _commitlog_copy(tmp_path)
    p.write_bytes(b"")
    code, out, err = cli("dump", p)
    assert code == 4 and "empty file" in err and "offset 0" in err


def test_wrong_kind_index_as_commitlog(cli, tmp_path):
    p = _commitlog_copy(tmp_path)
    code, out, err = cli("dump", p, "--kind", "index", "--index-slots", "10", "--index-items", "40")
    assert code == 4 and "index_count" in err


def test_cq_trailing_invalid_bytes(cli, tmp_path):
    d = tmp_path / "store/consumequeue/T/0"
    d.mkdir(parents=True)
    unit = (0).to_bytes(8, "big") + (172).to_bytes(4, "big") + (5).to_bytes(8, "big")
    p = d / "00000000000000000000"
    p.write_bytes(unit * 3 + bytes(20) + b"\x01" + bytes(19 + 20 * 5))
    code, out, err = cli("dump", p)
    assert code == 4 and "offset 60" in err
    assert "invalid bytes at offset 60" in out
    p.write_bytes(unit * 3 + bytes(200))
    code, out, err = cli("dump", p)
    assert code == 0 and "200 zero bytes after the last record at offset 60" in out


def test_usage_error_exit_2(cli):
    code, out, err = cli("dump", "--count", "-3", "x")
    assert code == 2


def test_help_imports_neither_numpy_nor_pyspark():
    code = ("import sys; from rmqctl.cli import run; run(['--help']); "
            "bad=[m for m in sys.modules if m.split('.')[0] in ('numpy','pyspark','pyarrow')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dump_and_query_paths_do_not_import_pyspark(tmp_path):
    p = _commitlog_copy(tmp_path)
    code = ("import sys; from rmqctl.cli import run; run(['dump', sys.argv[1], '--json']); "
            "bad=[m for m in sys.modules if m.split('.')[0] in ('pyspark',)]; sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_broken_pipe_exits_0(tmp_path):
    p = _commitlog_copy(tmp_path)
    cmd = f"{sys.executable} -m rmqctl dump {p} --json | head -n 1 >/dev/null; echo ${{PIPESTATUS[0]}}"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    assert r.stdout.strip() == "0", r.stderr
    assert "Traceback" not in r.stderr


def test_sigint_exits_130(tmp_path):
    # a slow consumer keeps dump busy; Ctrl-C must give 130 and one line
    p = _commitlog_copy(tmp_path)
    r = subprocess.Popen([sys.executable, "-c",
                          "import sys, time\nfrom rmqctl.cli import run\n"
                          "import rmqctl.dumping as d\norig = d.commitlog_file\n"
                          "def slow(*a, **k):\n    for x in orig(*a, **k):\n        time.sleep(0.5)\n        yield x\n"
                          "d.commitlog_file = slow\nsys.exit(run(['dump', sys.argv[1]]))", str(p)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.5)
    r.send_signal(signal.SIGINT)
    _, err = r.communicate(timeout=30)
    assert r.returncode == 130, err
    assert b"Traceback" not in err and err.strip().endswith(b"interrupted")


def test_fixture_stores_summarise(cli):
    stores = sorted((FIXTURES / "stores").glob("*/store")) if (FIXTURES / "stores").is_dir() else []
    for s in stores:
        code, out, err = cli("dump", s, "--json")
        assert code == 0, err


def test_real_exit_code_via_subprocess(tmp_path):
    p = _commitlog_copy(tmp_path)
    _patch(p, 172 + 90, b"\xff")
    r = run_cli("dump", p)
    assert r.returncode == 4 and r.stderr.decode().startswith("rmqctl: ")


@pytest.mark.parametrize("layout,expect", [     # DLedger commitlogs are read: tests/test_dledger.py
    ("consumequeue/rocksdb", "RocksDB consume queues"),
    ("config/consumerOffsets/CURRENT", "RocksDB metadata"),
])
def test_unsupported_layouts_are_flagged(cli, tmp_path, layout, expect):
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    target = root / layout
    if "." in target.name or target.name.isupper():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("x")
    else:
        target.mkdir(parents=True)
    code, out, err = cli("dump", root, "--json")
    if layout.endswith("CURRENT"):   # read with the rocksdb extra (tests/test_rocksdb.py): a broken one is named
        assert code == 0 and json.loads(out)["rocksdb"]["metadata"]["consumerOffsets"]["problems"]
    else:
        assert code == 0 and expect in json.loads(out)["unsupported"][0]
    from rmqctl.errors import UnsupportedStoreError
    from rmqctl.store.layout import Store

    with pytest.raises(UnsupportedStoreError, match=expect):
        Store.open(root)


def test_multi_path_commitlog_is_flagged(cli, tmp_path):
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    conf = tmp_path / "broker.conf"
    conf.write_text("storePathCommitLog=/a/commitlog,/b/commitlog\n")
    code, out, err = cli("dump", root, "--json", "--broker-config", conf)
    assert "multi-path" in json.loads(out)["unsupported"][0]
