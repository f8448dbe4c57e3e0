"""The numba-compiled record kernel (rmqctl.kernels): its CRC implementations equal zlib's, it equals the
numpy kernel column for column and stop for stop on records of every shape under random damage, the
selection (RMQCTL_KERNEL) and its errors, and the quick paths never load it.

Agreement with FileWalk on every fixture and real-world file runs each kernel in tests/test_scanvec.py,
and the rebuild end-to-end comparisons in tests/test_rebuild_vec.py; verify's in tests/test_verify_batch.py."""
import ctypes
import os
import random
import subprocess
import sys
import zlib

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import faultlib as F
from conftest import REAL_WORLD
from rmqctl import kernels
from rmqctl.scanvec import walk_file

COLUMNS = ("rel", "total_size", "magic_code", "body_crc", "queue_id", "flag", "queue_offset", "physical_offset",
           "sys_flag", "born_timestamp", "store_timestamp", "reconsume_times", "prepared_transaction_offset",
           "body_rel", "body_length", "topic_rel", "topic_length", "props_rel", "props_length", "prop_crc")


def test_every_crc_implementation_is_zlibs():
    """ISA-L's, the system libz's and the table CRC the kernel may call equal zlib.crc32 (the broker's
    UtilAll.crc32 is java.util.zip.CRC32, zlib's polynomial), through the calling convention the kernel uses."""
    from rmqctl.kernels import walk_nb
    from rmqctl.kernels.crc_table_nb import crc32_table

    impls = {name: fn for name, fn in walk_nb._candidates()}
    assert set(impls) == {"isal", "zlib", "table"}
    impls["table"] = crc32_table.address
    rnd = random.Random(11)
    for name, fn in impls.items():
        addr = fn if isinstance(fn, int) else ctypes.cast(fn, ctypes.c_void_p).value
        crc = walk_nb._CRC_PROTO(addr)
        for n in (0, 1, 7, 8, 9, 63, 1024, 4097, 1 << 16):
            data = rnd.randbytes(n)
            assert crc(0, data, n) & 0xFFFFFFFF == zlib.crc32(data), (name, n)
    assert walk_nb.CRC_IMPL == "isal"       # installed with the `fast` extra: the fastest one is picked


def _crc_tail(head: bytes) -> bytes:
    """The 20-byte __CRC32# property the broker appends: the CRC's decimal digits, least significant first."""
    crc = zlib.crc32(bytes(head)) & 0x7FFFFFFF
    return b"__CRC32#\x01" + "".join(str(crc // 10 ** i % 10) for i in range(10)).encode() + b"\x02"


def _store_file(tmp_path) -> bytes:
    """Records of every shape the kernel branches on: V1 and V2 magic, IPv6 born host, __CRC32# tails,
    PREPARED/ROLLBACK flags, SCHEDULE_TOPIC_XXXX (FileWalk's DELAY rule), empty bodies, then a BLANK."""
    rnd = random.Random(3)
    out, pos = bytearray(), 0
    for i in range(60):
        topic = rnd.choice(["TopicA", "主题", "SCHEDULE_TOPIC_XXXX", "T" * 127])
        props = b"DELAY\x01%d\x02" % rnd.randint(0, 20) if topic.startswith("SCHED") else b"KEYS\x01k%d\x02" % i
        body = rnd.randbytes(rnd.randint(0, 300) if i % 7 else 0)
        rec = bytearray(F._record(topic=topic, qid=i % 3, qoff=i, phys=pos, body=body,
                                  props=props, born_ts=1_700_000_000_000 + i, store_ts=1_700_000_000_000 + i,
                                  sys_flag=rnd.choice([0, 0x10, 4, 8]), prop_crc=i % 3 == 0))
        if i % 4 == 1:      # the V2 magic: a 2-byte topic length
            t = topic.encode()
            at = rec.index(bytes([len(t)]) + t, 80)
            rec[4:8] = (-626843477).to_bytes(4, "big", signed=True)
            rec[at:at + 1] = len(t).to_bytes(2, "big")
            rec[0:4] = len(rec).to_bytes(4, "big")
            if i % 3 == 0:   # the __CRC32# tail covers the header: recompute it
                rec[-20:] = _crc_tail(rec[:-20])
        out += rec
        pos += len(rec)
    out += (4096).to_bytes(4, "big") + (-875286124).to_bytes(4, "big", signed=True) + bytes(4088)
    return bytes(out)


def _columns(path, window, **kw):
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        gen = walk_file(fd, 0, size, 0, window=window, **kw)
        got = []
        while True:
            try:
                bt = next(gen)
            except StopIteration as e:
                return got, (e.value.kind, e.value.offset, e.value.pos)
            got.append(tuple(np.asarray(getattr(bt, c), np.int64).tolist() for c in COLUMNS)
                       + (bt.topics(), [bytes(p) for p in bt.properties_raw()]))
    finally:
        os.close(fd)


BASES = {"real": (REAL_WORLD / "apache__rocketmq/store/commitlog/00000000000000000000").read_bytes()}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["real", "shapes"]), st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), max_size=6),
       st.floats(0.05, 1), st.sampled_from([300, 2048, 1 << 20]),
       st.tuples(st.booleans(), st.booleans(), st.booleans()))
def test_numba_equals_numpy_column_for_column_under_damage(tmp_path, monkeypatch, base, flips, cut, window, checks):
    if "shapes" not in BASES:
        BASES["shapes"] = _store_file(tmp_path)
    data = bytearray(BASES[base])
    for at, x in flips:
        data[int(at * (len(data) - 1))] ^= x
    p = tmp_path / "00000000000000000000"
    p.write_bytes(bytes(data[:max(1, int(cut * len(data)))]))
    kw = dict(check_crc=checks[0], check_phys=checks[1], check_prop_crc=checks[2])
    res = {}
    for k in ("numpy", "numba"):
        monkeypatch.setenv("RMQCTL_KERNEL", k)
        assert kernels.name() == k
        res[k] = _columns(p, window, **kw)
    assert res["numba"] == res["numpy"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=30), st.binary(max_size=3))
def test_numba_hash_ranges_equal_numpys(parts, pad):
    """The compiled Java String.hashCode of byte ranges equals vecdispatch's numpy one, ASCII or not."""
    from rmqctl.kernels import dispatch_nb
    from rmqctl.repair import vecdispatch as VD

    buf = np.frombuffer(pad.join(parts) + pad, np.uint8)
    lens = np.asarray([len(p) for p in parts], np.int64)
    starts = np.asarray([sum(len(q) + len(pad) for q in parts[:i]) for i in range(len(parts))], np.int64)
    old = os.environ.get("RMQCTL_KERNEL")
    os.environ["RMQCTL_KERNEL"] = "numpy"      # (hypothesis: no function-scoped monkeypatch)
    try:
        want = VD.hash_ranges(buf, starts, lens)
    finally:
        os.environ.pop("RMQCTL_KERNEL")
        if old is not None:
            os.environ["RMQCTL_KERNEL"] = old
    got = dispatch_nb.hash_ranges(buf, starts, lens)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from([b"A", b"B", b"X", b"INNER_MULTI_QUEUE_OFFSET"]), min_size=1, max_size=60)
       .map(b"".join),
       st.lists(st.tuples(st.floats(0, 1), st.integers(0, 40)), max_size=8),
       st.sampled_from([b"AB", b"A", b"ABA", b"INNER_MULTI_QUEUE_OFFSET"]))
def test_any_in_ranges_equals_bytes_search(data, ranges, pat):
    """rebuild's multi-dispatch prefilter (numba kernel): the pattern inside one of the ranges."""
    from rmqctl.kernels import dispatch_nb

    raw = data
    rel = np.asarray([int(a * (len(raw) - 1)) for a, _ in ranges], np.int64)
    lens = np.asarray([min(n, len(raw) - int(a * (len(raw) - 1))) for a, n in ranges], np.int64)
    want = any(pat in raw[a:a + n] for a, n in zip(rel.tolist(), lens.tolist()))
    assert dispatch_nb.any_in_ranges(np.frombuffer(raw, np.uint8), rel, lens, pat) == want


def test_the_shapes_file_has_every_shape(tmp_path, monkeypatch):
    """The damage test above only means something if its clean file walks through every branch."""
    p = tmp_path / "00000000000000000000"
    p.write_bytes(_store_file(tmp_path))
    monkeypatch.setenv("RMQCTL_KERNEL", "numba")
    got, stop = _columns(p, 1 << 20)
    cols = {c: sum((list(b[i]) for b in got), []) for i, c in enumerate(COLUMNS)}
    assert len(cols["rel"]) == 60 and stop[0] == "blank"
    assert {-626843481, -626843477} <= set(cols["magic_code"])
    assert {0, 0x10, 4, 8} <= set(cols["sys_flag"])
    assert {-1, 1} <= set(cols["prop_crc"]) and 0 in cols["body_length"]


def test_selection_and_unknown_value(monkeypatch, tmp_path):
    from rmqctl.cli import run

    monkeypatch.setenv("RMQCTL_KERNEL", "numpy")
    assert kernels.walk_kernel() is None and kernels.name() == "numpy"
    monkeypatch.setenv("RMQCTL_KERNEL", "NUMBA")
    assert kernels.name() == "numba"
    monkeypatch.setenv("RMQCTL_KERNEL", "")
    monkeypatch.setattr(kernels, "_walked", [0])
    monkeypatch.setattr(kernels, "_loaded", {})
    assert kernels.name() == "numpy"            # auto: numpy until the process has walked AUTO_AFTER bytes,
    kernels.note_walked(kernels.AUTO_AFTER)
    assert kernels.name() == "numba"            # then numba when it imports
    monkeypatch.setenv("RMQCTL_KERNEL", "fortran")
    r = subprocess.run([sys.executable, "-m", "rmqctl", "verify", str(tmp_path)], capture_output=True, text=True,
                       env={**os.environ, "RMQCTL_KERNEL": "fortran"})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["rmqctl: RMQCTL_KERNEL: unknown kernel 'fortran' (use one of: auto, numba, "
                                     "numpy)"]
    assert run(["verify", str(tmp_path)]) == 2


def test_without_numba(tmp_path):
    """numba missing: auto is the numpy kernel, silently; RMQCTL_KERNEL=numba is one line and exit 2."""
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / "00000000000000000000").write_bytes(BASES["real"])
    code = ("import sys; sys.modules['numba'] = None; from rmqctl import kernels; from rmqctl.cli import run; "
            "kernels.note_walked(kernels.AUTO_AFTER); print(kernels.name()); sys.stdout.flush(); "
            "sys.exit(int(run(['verify', sys.argv[1]])))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                       env={**os.environ, "RMQCTL_KERNEL": "auto"})
    assert r.stdout.splitlines()[0] == "numpy" and r.returncode in (0, 4) and "numba" not in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-c", code.replace("print(kernels.name()); ", ""), str(tmp_path)],
                       capture_output=True, text=True, env={**os.environ, "RMQCTL_KERNEL": "numba"})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["rmqctl: RMQCTL_KERNEL: the numba kernel needs numba (pip install "
                                     "'rmqctl[fast]') and a writable cache directory (NUMBA_CACHE_DIR)"]


def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernels.cache_dir() == str(tmp_path / "xdg" / "rmqctl" / "numba")
    assert (tmp_path / "xdg" / "rmqctl" / "numba").is_dir()
    (tmp_path / "file").write_bytes(b"")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))   # nothing can be created there
    assert kernels.cache_dir() is None
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))   # the user's own choice wins
    assert kernels.cache_dir() == str(tmp_path / "mine")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "file" / "x"))   # when it can be written
    assert kernels.cache_dir() is None


def test_no_writable_cache_falls_back_to_numpy_silently(tmp_path):
    (tmp_path / "file").write_bytes(b"")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "file"), RMQCTL_KERNEL="auto")
    code = ("import sys; from rmqctl import kernels; kernels.note_walked(kernels.AUTO_AFTER); "
            "print(kernels.name(), 'numba' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert (r.returncode, r.stdout, r.stderr) == (0, "numpy False\n", "")


def test_quick_paths_load_neither_numpy_nor_numba(tmp_path):
    """--help, dump of one file and query never load the compiler (nor numpy for --help)."""
    d = tmp_path / "store" / "commitlog"
    d.mkdir(parents=True)
    (d / "00000000000000000000").write_bytes(BASES["real"])
    code = ("import sys; from rmqctl.cli import run; a = sys.argv[1:]; "
            "c = [int(run(['--help']))]; "
            "h = sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'numba', 'llvmlite'}); "
            "c += [int(run(['dump', a[0], '--json'])), int(run(['query', a[1], '--phys-offset', '0', '--json']))]; "
            "q = sorted({m.split('.')[0] for m in sys.modules} & {'numba', 'llvmlite'}); "
            "sys.stdout.flush(); print(c, h, q, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, str(d / "00000000000000000000"), str(tmp_path / "store")],
                       capture_output=True, text=True, env={**os.environ, "RMQCTL_KERNEL": "numba"})
    assert r.stderr.splitlines()[-1] == "[0, 0, 0] [] []", r.stderr
    assert r.stdout.count('"physical_offset":0,') == 2     # dump's first record and query's answer
