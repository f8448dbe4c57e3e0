"""dump --json on the batch path (rmqctl.dump_json_batch) writes the same bytes as rendering each record
with message_json (the record-at-a-time path, RMQCTL_DUMP_JSON=record): on every broker-written commitlog
and compaction log file, with windows small enough that records cross them, in every body mode and with
every filter, under random damage, and on records built to take each per-record fallback."""
from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import zlib

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import FIXTURES, REAL_WORLD, real_world_glob
from rmqctl.dumping import commitlog_file, commitlog_json
from rmqctl.render import json_line, message_json


@pytest.fixture(autouse=True, params=["numba", "numpy"])
def kernel(request, monkeypatch):
    """Every test runs with the compiled renderer (rmqctl.kernels.dumpjson_nb; RMQCTL_KERNEL=numba loads it
    for any file size) and with the numpy one (RMQCTL_KERNEL=numpy, the fallback)."""
    from rmqctl import dump_json_batch, kernels

    if request.param != "-":       # "-": a test that renders nothing, run once
        monkeypatch.setenv("RMQCTL_KERNEL", request.param)
    # process-wide state a dump leaves (load_now's eager switch, bytes rendered): restored after each test
    monkeypatch.setattr(kernels, "_eager", [False])
    monkeypatch.setattr(dump_json_batch, "_rendered", [0])
    return request.param


def reference(path, body="base64", raw_body=False, **kw) -> bytes:
    out = []
    for tag, v in commitlog_file(path, **kw):
        out.append(message_json(v, body, raw_body) if tag == "message" else json_line("dump", v))
    return ("".join(x + "\n" for x in out)).encode("utf-8")


def batch(path, body="base64", raw_body=False, window=None, stats=None, record_head=0, **kw) -> bytes:
    out = []
    for tag, v in commitlog_json(path, body=body, raw_body=raw_body, window=window, stats=stats,
                                 record_head=record_head, **kw):
        if tag == "message":
            out.append((message_json(v, body, raw_body) + "\n").encode())
        else:
            out.append(bytes(v) if tag == "lines" else (json_line("dump", v) + "\n").encode())
    return b"".join(out)


def files():
    out = sorted(real_world_glob("commitlog/0*"))
    out += sorted((FIXTURES / "stores").rglob("commitlog/0*"))
    out += sorted((FIXTURES / "stores").rglob("compactionLog/*/*/0*"))
    return out


FILES = files()


@pytest.mark.parametrize("path", FILES, ids=[str(p).split("/")[-4] + "/" + p.name for p in FILES])
def test_same_bytes_on_broker_files(path):
    ref = reference(path)
    assert batch(path) == ref
    assert batch(path, window=700) == ref          # records crossing window edges
    for body in ("text", "hex", "none"):
        assert batch(path, body=body, window=4096) == reference(path, body=body)
    assert batch(path, raw_body=True) == reference(path, raw_body=True)
    assert batch(path, check_crc=False) == reference(path, check_crc=False)


def test_the_corpus_takes_every_fallback(kernel):
    """The broker-written files hold records of every per-record kind (compressed, IPv6, non-ASCII, __CRC32#):
    counted, so that the comparisons above are known to cover them."""
    for name in ("compressed-v5", "ipv6-v5", "unicode-v5"):
        slow = 0
        for p in sorted((FIXTURES / "stores" / name).rglob("commitlog/0*")):
            stats = {}
            assert batch(p, stats=stats) == reference(p)
            assert type(stats["renderer"]).__name__ == {"numba": "CompiledRenderer", "numpy": "Renderer"}[kernel]
            slow += stats["renderer"].slow_records + stats["renderer"].slow_props
        assert slow > 0, name


FILTER_FILE = next(p for p in FILES if "basic-multifile-v5" in str(p))


@pytest.mark.parametrize("kw", [dict(skip=3), dict(count=0), dict(count=5), dict(skip=2, count=4),
                                dict(queue=1), dict(queue=0, count=2), dict(topic="TopicTest"),
                                dict(topic="nope"), dict(from_offset=0), dict(count=10 ** 6)])
@pytest.mark.parametrize("head", [0, 700, 10 ** 9])
def test_filters(kw, head):
    """Filters, also when the first `head` bytes of records go record by record and the rest in windows."""
    assert batch(FILTER_FILE, window=900, record_head=head, **kw) == reference(FILTER_FILE, **kw)


def test_from_offset_of_a_later_record():
    ref = reference(FILTER_FILE)
    import json

    offs = [json.loads(x)["physical_offset"] for x in ref.splitlines() if b'"kind":"message"' in x]
    assert len(offs) > 3
    for o in (offs[2], offs[-1]):
        assert batch(FILTER_FILE, from_offset=o) == reference(FILTER_FILE, from_offset=o)


# --- records built to exercise every branch of the bulk steps ------------------------------------------------
HEAD = struct.Struct(">iiiiiqqiq4siq4siiqi")


def record(phys, props: bytes, *, topic=b"T1", body=b"hello", qid=0, qoff=0, flag=0, sys_flag=0, born=1700000000000,
           port=5000, reconsume=0, prepared=0, v2=False):
    total = 91 + (1 if v2 else 0) + len(body) + len(topic) + len(props)
    crc = zlib.crc32(body) & 0x7FFFFFFF
    magic = -626843477 if v2 else -626843481
    out = HEAD.pack(total, magic, crc, qid, flag, qoff, phys, sys_flag, born, b"\x0a\x00\x00\x01", port, born + 1,
                    b"\xc0\xa8\x01\x02", 10911, reconsume, prepared, len(body)) + body
    out += (struct.pack(">h", len(topic)) if v2 else bytes([len(topic)])) + topic
    return out + struct.pack(">h", len(props)) + props


PROPS = [b"", b"\x02", b"A\x01b\x02", b"A\x01b", b"A\x01b\x02C\x01d\x02", b"A\x01b\x02A\x01c\x02",   # repeated name
         b"A\x01b\x01c\x02", b"\x01b\x02", b"A\x01\x02", b"A\x01b\x02\x02", b"A\x01b\x00c\x02", b"Ab\x02",
         b"A\x01\xc3\xa9\x02", b"A\x01\xff\xfe\x02", b"A\x01q\"x\\\x02", b"A\x01\x7f\x1f\x02", b"\x02\x02A\x01b",
         b"KEYS\x01k1 k2\x02UNIQ_KEY\x0101ABCDEF\x02TAGS\x01t\x02", b"MIN_OFFSET\x010\x02MAX_OFFSET\x019\x02",
         b"LONG_NAME_ABCDEFGHIJ\x011\x02LONG_NAME_ABCDXFGHIJ\x012\x02",
         b"".join(b"N%d\x01v\x02" % i for i in range(70)),         # more names than the compiled check takes
         b"".join(b"N%d\x01v\x02" % (i % 40) for i in range(41))]
TOPICS = [b"T1", b"Topic-%d", b"t\"q", b"t\x01", "tëst".encode(), b"\xff", b"t\x00z", b"\x00"]


def build_file(tmp_path, recs) -> "os.PathLike":
    data = bytearray()
    for kw in recs:
        data += record(len(data), **kw)
    (tmp_path / "commitlog").mkdir(exist_ok=True)
    p = tmp_path / "commitlog" / "00000000000000000000"
    p.write_bytes(bytes(data) + bytes(64))
    return p


def test_every_properties_and_topic_form(tmp_path):
    rnd = random.Random(5)
    recs = []
    for i in range(300):
        recs.append(dict(props=rnd.choice(PROPS), topic=rnd.choice(TOPICS).replace(b"%d", b"%d" % (i % 3)),
                         qid=rnd.choice([0, 1, -1, 2 ** 31 - 1]), qoff=rnd.choice([0, i, -5, 2 ** 63 - 1, -2 ** 63]),
                         flag=rnd.choice([0, 7, -1]), born=rnd.choice([0, -1, 1700000000000 + i]),
                         port=rnd.choice([0, 65535, -1]), reconsume=rnd.choice([0, 16]),
                         prepared=rnd.choice([0, 123456789012]), sys_flag=rnd.choice([0, 0, 4, 8, 12]),
                         v2=rnd.random() < 0.2, body=rnd.choice([b"", b"x", b"ab", b"\x00\xff\n\"", b"\xe2\x82"])))
    p = build_file(tmp_path, recs)
    stats = {}
    batch(p, stats=stats)
    assert stats["renderer"].slow_records > 10 and stats["renderer"].slow_props > 10
    for body in ("base64", "text", "hex", "none"):
        for window in (None, 500):
            assert batch(p, body=body, window=window) == reference(p, body=body)


def test_long_v2_topics(tmp_path, kernel):
    """A topic longer than the numpy renderer's column (255 bytes, V2 records) takes the per-record path there
    (the compiled renderer copies any topic that needs no escaping)."""
    recs = [dict(props=b"A\x01b\x02", topic=(b"L" * n) + b"%d" % i, v2=True) for i, n in enumerate([5, 300, 40, 1000])]
    p = build_file(tmp_path, recs)
    stats = {}
    assert batch(p, stats=stats) == reference(p)
    assert stats["renderer"].slow_records == {"numpy": 2, "numba": 0}[kernel]


def test_uniform_windows(tmp_path):
    """Windows where every row holds the same value in a column (the template text path) and where none does."""
    same = [dict(props=b"A\x01b\x02") for _ in range(50)]
    p = build_file(tmp_path, same)
    stats = {}
    assert batch(p, stats=stats) == reference(p)
    assert stats["renderer"].slow_records == stats["renderer"].slow_props == 0     # every line in bulk
    assert batch(p, window=300) == reference(p)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 8191), st.integers(1, 255)), min_size=0, max_size=8),
       st.integers(200, 8192), st.sampled_from([None, 300, 1000]), st.sampled_from(["base64", "text"]),
       st.booleans())
def test_same_bytes_under_damage(tmp_path, flips, cut, window, body, crc):
    src = REAL_WORLD / "apache__rocketmq/store/commitlog/00000000000000000000"
    data = bytearray(src.read_bytes())
    for pos, x in flips:
        data[pos] ^= x
    p = tmp_path / "00000000000000000000"
    p.write_bytes(bytes(data[:cut]))
    assert batch(p, window=window, body=body, check_crc=crc) == reference(p, body=body, check_crc=crc)


# --- through the CLI ------------------------------------------------------------------------------------------
def test_cli_paths_agree(monkeypatch):
    from rmqctl.cli import cli

    d = FIXTURES / "stores" / "mixed-v5" / "store" / "commitlog"
    runner = CliRunner()
    args = ["dump", "--json", str(d)]
    got = runner.invoke(cli, args)
    monkeypatch.setenv("RMQCTL_DUMP_JSON", "record")
    ref = runner.invoke(cli, args)
    assert got.exit_code == ref.exit_code == 0
    assert got.stdout_bytes == ref.stdout_bytes and b'"kind":"message"' in ref.stdout_bytes


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_cli_windows_past_the_record_head(tmp_path, encoding):
    """A file longer than the record-by-record head: windows reach stdout as bytes (UTF-8 stdout) or as text
    (any other encoding), the same lines as RMQCTL_DUMP_JSON=record."""
    recs = [dict(props=b"A\x01b\x02", body=bytes([i % 256]) * 4000, qoff=i) for i in range(1300)]
    p = build_file(tmp_path, recs)
    assert p.stat().st_size > 5 << 20
    exe = [sys.executable, "-m", "rmqctl", "dump", "--json", str(p)]
    env = {**os.environ, "PYTHONIOENCODING": encoding}
    got = subprocess.run(exe, capture_output=True, env=env)
    ref = subprocess.run(exe, capture_output=True, env={**env, "RMQCTL_DUMP_JSON": "record"})
    assert got.returncode == ref.returncode == 0 and got.stderr == ref.stderr == b""
    assert got.stdout == ref.stdout and got.stdout.count(b'"kind":"message"') == 1300


def test_closed_pipe_exits_0_quietly(tmp_path):
    recs = [dict(props=b"A\x01b\x02", body=bytes(4000)) for _ in range(3000)]
    p = build_file(tmp_path, recs)
    exe = [sys.executable, "-m", "rmqctl", "dump", "--json", str(p)]
    proc = subprocess.Popen(exe, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0
    assert first.startswith(b'{"schema":"rmqctl.dump/1","kind":"message"') and err == b""


@pytest.mark.parametrize("kernel", ["numpy"], indirect=True)
def test_without_pybase64(monkeypatch):
    """The base64 of the default install (binascii) gives the same lines as the optional pybase64."""
    import binascii
    from functools import partial

    from rmqctl import dump_json_batch

    monkeypatch.setattr(dump_json_batch, "_b64", partial(binascii.b2a_base64, newline=False))
    assert batch(FILTER_FILE) == reference(FILTER_FILE)


@pytest.mark.parametrize("kernel", ["-"], indirect=True)
def test_compiled_base64_without_pybase64(tmp_path):
    """The compiled renderer's own base64 (RMQCTL_B64=table: what it binds when pybase64 is missing) gives the
    same lines, on every body length modulo 3 and on a broker-written file."""
    recs = [dict(props=b"A\x01b\x02", body=bytes(range(256))[:n] * (1 + n % 3)) for n in range(0, 256, 7)]
    p = build_file(tmp_path, recs)
    code = ("import sys; from rmqctl.kernels import dumpjson_nb as k; print(k.B64_IMPL); "
            "sys.path.insert(0, sys.argv[1]); import test_dump_json_batch as t; from pathlib import Path; "
            "print(all(t.batch(Path(f)) == t.reference(Path(f)) for f in sys.argv[2:]))")
    env = {**os.environ, "RMQCTL_B64": "table", "RMQCTL_KERNEL": "numba"}
    r = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__), str(p), str(FILTER_FILE)],
                       capture_output=True, text=True, env=env)
    assert r.stdout.split() == ["table", "True"], r.stderr[-3000:]


@pytest.mark.parametrize("kernel", ["-"], indirect=True)
def test_auto_loads_the_compiler_only_for_a_long_pass(tmp_path):
    """RMQCTL_KERNEL=auto: the numpy renderer for a file with less than COMPILED_AFTER bytes ahead or bodies
    as text (numba not loaded), the compiled one past it; numba missing, or no writable compile cache: the
    numpy renderer, silently."""
    code = ("import sys; from rmqctl import dump_json_batch as d; a = d._compiled(10 << 20); "
            "b = sys.modules.get('numba') is not None or d._compiled(d.COMPILED_AFTER, 'text') is not None; "
            "c = d._compiled(d.COMPILED_AFTER); print(a is None, b, c is None, sys.modules.get('numba') is not None)")
    env = {**os.environ, "RMQCTL_KERNEL": "auto"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert (r.stdout, r.stderr) == ("True False False True\n", "")
    r = subprocess.run([sys.executable, "-c", "import sys; sys.modules['numba'] = None; " + code],
                       capture_output=True, text=True, env=env)
    assert (r.stdout, r.stderr) == ("True False True False\n", "")
    env = {k: v for k, v in env.items() if k != "NUMBA_CACHE_DIR"}
    (tmp_path / "file").write_text("")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**env, "XDG_CACHE_HOME": str(tmp_path / "file")})
    assert (r.stdout, r.stderr) == ("True False True False\n", "")


@pytest.mark.parametrize("kernel", ["-"], indirect=True)
def test_is_zero_at_chunk_edges(tmp_path):
    """The zero check behind every trailer (rmqctl.scan.is_zero, reused buffer): a non-zero byte anywhere in
    the range, at and around chunk edges, is seen; one outside it, or a file shorter than the range, is not."""
    from rmqctl.scan import is_zero

    p = tmp_path / "f"
    size = 10_000
    with open(p, "wb") as f:
        f.write(bytes(size))
    fd = os.open(p, os.O_RDONLY)
    try:
        assert is_zero(fd, 0, size, chunk=1000) and is_zero(fd, 5, size + 500, chunk=999) and is_zero(fd, 7, 7)
    finally:
        os.close(fd)
    for at in (0, 1, 998, 999, 1000, 1001, 4321, size - 1):
        data = bytearray(size)
        data[at] = 7
        p.write_bytes(data)
        fd = os.open(p, os.O_RDONLY)
        try:
            for start, end, chunk in ((0, size, 1000), (0, size, 999), (1, size, 1 << 20), (0, size + 10, 333)):
                assert is_zero(fd, start, end, chunk=chunk) == (not start <= at < end), (at, start, end, chunk)
            assert is_zero(fd, at + 1, size, chunk=1000) and is_zero(fd, 0, at, chunk=7)
        finally:
            os.close(fd)


@pytest.mark.parametrize("kernel", ["-"], indirect=True)
def test_bytes_ahead_probe(tmp_path):
    """auto's estimate of the records ahead (dump_json_batch._ahead): a 1 GiB file zero-filled after 1 MiB of
    records (the active commitlog file) has none worth loading numba for; one with data COMPILED_AFTER on has
    the whole rest; a file shorter than COMPILED_AFTER, what is left."""
    from rmqctl import dump_json_batch as d

    p = tmp_path / "f"
    with open(p, "wb") as f:
        f.write(b"\x01" * (1 << 20))
        f.truncate(1 << 30)                 # sparse: no disk used
    fd = os.open(p, os.O_RDONLY)
    try:
        assert d._ahead(fd, 4 << 20, 1 << 30) == 0
        assert d._ahead(fd, 0, 100 << 20) == 100 << 20
    finally:
        os.close(fd)
    with open(p, "r+b") as f:
        f.seek((4 << 20) + d.COMPILED_AFTER - 1)
        f.write(b"\x05")
    fd = os.open(p, os.O_RDONLY)
    try:
        assert d._ahead(fd, 4 << 20, 1 << 30) == (1 << 30) - (4 << 20)
        assert d._ahead(fd, 5 << 20, 1 << 30) == 0         # that byte is past this start's probe
    finally:
        os.close(fd)
