"""What a user touches first: dump trailers in text mode, escaping of control characters, progress
bars on a terminal, exit codes of commands given a directory that is not a store, and a missing
Spark extra. Run through the installed console script unless the renderer itself is the subject."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from faultlib import _props, _record
from test_cli_matrix import RAW_C0, RAW_CONTROL, RMQCTL, run_pty

STORE = FIXTURES / "stores" / "basic-multifile-v5" / "store"
FIRST = STORE / "commitlog" / "00000000000000000000"


def rmqctl(*args, env=None, **kw) -> subprocess.CompletedProcess:
    e = dict(os.environ, COLUMNS="100")
    e.update(env or {})
    return subprocess.run([str(RMQCTL), *map(str, args)], capture_output=True, timeout=300, env=e,
                          stdin=subprocess.DEVNULL, **kw)


def _no_crash(r):
    both = r.stdout + r.stderr
    assert b"Traceback" not in both and b"internal error" not in both, r.stderr


# --- dump trailers in text mode --------------------------------------------------------------------------
def test_text_dump_of_a_file_ending_in_blank():
    trailer = json.loads(rmqctl("dump", FIRST, "--json").stdout.splitlines()[-1])
    assert trailer["trailing"] == "blank"          # the case: a full commitlog file ends in a BLANK record
    r = rmqctl("dump", FIRST)
    _no_crash(r)
    assert r.returncode == 0, r.stderr
    last = r.stdout.decode().splitlines()[-1]
    assert last.startswith(f"# {FIRST}: BLANK record") and str(trailer["valid_bytes"]) in last


def test_text_dump_of_the_commitlog_directory():
    r = rmqctl("dump", STORE / "commitlog")
    _no_crash(r)
    assert r.returncode == 0, r.stderr
    trailers = [ln for ln in r.stdout.decode().splitlines() if ln.startswith("# ")]
    assert len(trailers) == len(list((STORE / "commitlog").iterdir()))
    assert sum("BLANK record" in t for t in trailers) >= 2


def _ext_file(tmp_path) -> Path:
    d = tmp_path / "store" / "consumequeue_ext" / "TopicTest" / "0"
    d.mkdir(parents=True)
    unit = struct.pack(">hqqh", 20 + 4, 12345, 1_700_000_000_000, 4) + b"\x01\x02\x03\x04"
    f = d / "00000000000000000000"
    f.write_bytes(unit * 3 + b"\xff\xff" + b"\0" * 100)    # three units, then the end filler
    return f


def test_text_dump_of_a_cq_ext_file_ending_in_its_filler(tmp_path):
    f = _ext_file(tmp_path)
    docs = [json.loads(x) for x in rmqctl("dump", f, "--json").stdout.splitlines()]
    assert [d["kind"] for d in docs] == ["cq_ext_unit"] * 3 + ["trailer"]
    assert docs[-1]["trailing"] == "end_filler"
    r = rmqctl("dump", f)
    _no_crash(r)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines()[-1] == (f"# {f}: end-of-file filler at offset 72, "
                                                  "102 bytes to the end of the file")


def test_text_dump_of_a_checkpoint_with_trailing_garbage(tmp_path):
    f = tmp_path / "checkpoint"
    data = bytearray((STORE / "checkpoint").read_bytes())
    assert not any(data[40:])
    data[100:107] = b"GARBAGE"
    f.write_bytes(data)
    r = rmqctl("dump", f)
    _no_crash(r)
    assert r.returncode == 4
    assert f"# {f}: 7 invalid bytes at offset 100 (then zeros to 4096)" in r.stdout.decode()
    err = r.stderr.decode().splitlines()
    assert len(err) == 1 and err[0].startswith(f"rmqctl: {f}: offset 100: ")


def test_dump_several_paths_reports_a_damaged_one_and_goes_on(tmp_path):
    bad = tmp_path / "commitlog" / "00000000000000000000"
    bad.parent.mkdir()
    bad.write_bytes(b"")                  # a 0-byte commitlog file: a format error of its own
    r = rmqctl("dump", bad, STORE / "checkpoint", "--json")
    _no_crash(r)
    assert r.returncode == 4
    kinds = [json.loads(x)["kind"] for x in r.stdout.splitlines()]
    assert kinds == ["checkpoint", "trailer"]
    assert r.stderr.decode().count("rmqctl: ") == 1 and str(bad) in r.stderr.decode()


# --- control characters ----------------------------------------------------------------------------------
TOPIC = "Evil\x1b[31mTopic"
BODY = b"line1\r\nline2\x1b]0;pwned\x07\x9b\x85 end"
PROPS = {"KEYS": "k\x1b[2J", "UNIQ_KEY": "U1", "TAGS": "t\rag"}


@pytest.fixture
def evil_store(tmp_path):
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    rec = _record(topic=TOPIC, qid=0, qoff=0, phys=0, body=BODY, props=_props(PROPS), born_ts=1_700_000_000_000,
                  store_ts=1_700_000_000_001)
    (root / "commitlog" / ("0" * 20)).write_bytes(rec + b"\0" * (4096 - len(rec)))
    return root


def test_control_characters_are_escaped_in_text_and_exact_in_json(evil_store):
    f = evil_store / "commitlog" / ("0" * 20)
    j = rmqctl("dump", f, "--json", "--body", "text")
    assert j.returncode == 0, j.stderr
    msg = json.loads(j.stdout.splitlines()[0])
    # the record really carries the bytes (JSON keeps them exactly)
    assert msg["topic"] == TOPIC and msg["properties"]["KEYS"] == PROPS["KEYS"]
    assert msg["body"] == BODY.decode("utf-8", "backslashreplace")
    assert not RAW_C0.search(j.stdout.decode())
    # on a terminal the same JSON carries no raw control either, and still parses to the same values
    t = run_pty(["dump", f, "--json", "--body", "text"])
    assert t.rc == 0 and not RAW_CONTROL.search(t.out.decode())
    assert json.loads(t.out.splitlines()[0]) == msg
    for mode in ("pipe", "pty"):
        r = rmqctl("dump", f) if mode == "pipe" else run_pty(["dump", f])
        rc, out = (r.returncode, r.stdout) if mode == "pipe" else (r.rc, r.out)
        assert rc == 0
        text = out.decode()
        assert not RAW_CONTROL.search(text), (mode, text)
        lines = text.splitlines()
        assert sum(ln.startswith("  body[") for ln in lines) == 1      # \r\n in the body does not split it
        assert "Evil\\x1b[31mTopic" in lines[0]
        assert "line1\\r\\nline2\\x1b]0;pwned\\x07\\x9b\\x85 end" in text
        assert "KEYS=k\\x1b[2J" in text and "TAGS=t\\rag" in text


def test_escape_function():
    from rmqctl.terminal import escape

    assert escape("plain ü 主题") == "plain ü 主题"
    assert escape("a\tb\nc\rd\x1b\x07\x7f\x9b\u2028\u202e") == "a\\tb\\nc\\rd\\x1b\\x07\\x7f\\x9b\\u2028\\u202e"
    assert escape(12) == "12"


def test_control_characters_in_the_store_summary_and_verify(evil_store):
    for args in (["dump", evil_store], ["verify", evil_store], ["verify", evil_store, "--summary"],
                 ["stats", "--engine", "local", evil_store]):
        r = run_pty(args)
        assert b"Traceback" not in r.out + r.err
        assert not RAW_CONTROL.search(r.out.decode()), (args, r.out)


# --- terminal --------------------------------------------------------------------------------------------
def test_progress_bar_on_a_terminal_prints_no_markup_tag(monkeypatch):
    monkeypatch.setenv("RMQCTL_PROGRESS_AFTER", "0")     # the bar shows at once (else after 2 s)
    r = run_pty(["verify", STORE])
    assert r.rc == 0
    assert b"verify" in r.err                      # the bar was drawn (stderr is a terminal)
    assert b"[progress." not in r.err, r.err[:200]


# --- exit codes --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["recover", "--dry-run"], ["rebuild", "cq", "--dry-run"],
                                  ["query", "--phys-offset", "0"], ["stats", "--engine", "local"],
                                  pytest.param(["stats"], marks=pytest.mark.spark), ["verify"]])
def test_a_directory_that_is_not_a_store_is_a_usage_error(tmp_path, args):
    (tmp_path / "something").mkdir()
    r = rmqctl(*args, tmp_path)
    _no_crash(r)
    assert r.returncode == 2, r.stderr
    assert r.stderr.decode().strip() == (f"rmqctl: {tmp_path}: not a store directory (no commitlog/, "
                                         "consumequeue/, checkpoint, config/ or index/ here)")


def test_interrupted_is_not_an_exit_bit():
    from rmqctl.status import INTERRUPTED, Exit

    assert INTERRUPTED == 130
    assert 130 not in {int(m) for m in Exit}
    assert all(int(m) & ~0xF == 0 for m in Exit)          # the flags combine in the low four bits
    assert int(Exit.FIXED | Exit.PROBLEMS) == 5


def _blocked_env(tmp_path, modules=("pyspark", "pyarrow")) -> dict:
    """An interpreter on which `import pyspark` / `import pyarrow` fail, as without the extra."""
    d = tmp_path / "block"
    d.mkdir()
    (d / "sitecustomize.py").write_text(
        "import sys\n"
        f"BLOCKED = {tuple(modules)!r}\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _Block())\n")
    return {"PYTHONPATH": str(d)}


_SPARK = pytest.mark.spark     # would start Spark were the extra installed: not in the minimum-versions run


@pytest.mark.parametrize("args", [pytest.param(["stats", STORE], marks=_SPARK), ["stats", "--engine", "local", STORE],
                                  pytest.param(["export", STORE, "--out", "OUT"], marks=_SPARK),
                                  pytest.param(["verify", "--engine", "spark", STORE], marks=_SPARK)])
def test_without_the_spark_extra_one_line_and_exit_2(tmp_path, args):
    env = _blocked_env(tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import pyspark"], env=dict(os.environ, **env),
                           capture_output=True)
    assert probe.returncode != 0 and b"No module named 'pyspark'" in probe.stderr   # really hidden
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    r = rmqctl(*args, env=env)
    _no_crash(r)
    assert r.returncode == 2, r.stderr
    err = r.stderr.decode().splitlines()
    assert len(err) == 1 and err[0].startswith("rmqctl: ") and "pip install 'rmqctl[spark]'" in err[0], err
