"""The Arrow batch builder (rmqctl.spark.batches) against the reference row builder (dataset.message_row
over rmqctl.scan.FileWalk): properties parsing on adversarial bytes, and whole rows -- IPv6 hosts,
SCHEDULE_TOPIC_XXXX delays, invalid UTF-8, duplicates -- on every fixture and on hand-made stores."""
from __future__ import annotations

import random
import struct
import zlib

import numpy as np
import pytest

from oracle_helpers import fixture_dirs
from rmqctl.formats.properties import KEYS, TAGS, UNIQ_KEY, parse_properties

FIXTURES = [p for p in fixture_dirs() if (p / "store" / "commitlog").is_dir()]
ALPHABET = [b"a", b"b", b"KEYS", b"TAGS", b"UNIQ_KEY", b" ", b"\x01", b"\x02", b"\xc3\xa9", b"\xff", b"\xc3"]


def _blobs(rng, n):
    out = []
    for _ in range(n):
        k = rng.choice([0, 1, 3, 8, 20])
        out.append(b"".join(rng.choice(ALPHABET) for _ in range(k)))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_properties_equal_parse_properties(seed):
    import pyarrow as pa

    from rmqctl.spark.batches import _Props

    rng = random.Random(seed)
    blobs = _blobs(rng, rng.choice([1, 5, 60]))
    if seed % 2:                      # valid UTF-8 only: the vectorised path
        blobs = [b.replace(b"\xff", b"x").replace(b"\xc3\xa9", b"e").replace(b"\xc3", b"y") for b in blobs]
    gap = b"\x02\x01Z"                # bytes between records the parser must not see
    raw, rel = gap, []
    for b in blobs:
        rel.append(len(raw))
        raw += b + gap
    p = _Props(raw, np.array(rel, np.int64), np.array([len(b) for b in blobs], np.int64))
    want = [parse_properties(b) for b in blobs]
    assert p.map().to_pylist() == [list(d.items()) for d in want]
    for name in (TAGS, UNIQ_KEY, "a"):
        assert p.column(name).to_pylist() == [d.get(name) for d in want]
    assert p.keys().to_pylist() == [[k for k in d[KEYS].split(" ") if k] if d.get(KEYS) else [] for d in want]
    assert (seed % 2 == 0) or p.utf8
    assert isinstance(p.map(), pa.MapArray)


def _norm(v):
    if isinstance(v, dict):
        return tuple(v.items())
    if isinstance(v, list):
        return tuple(v)
    return v


def _arrow_rows(path, name="s", flt=None, split_size=None, window=None):
    """Every row the batch path gives for a store: planned splits, statuses chained like the driver."""
    from rmqctl.spark.batches import split_arrow
    from rmqctl.spark.dataset import message_columns
    from rmqctl.spark.plan import parse_store_args, plan_local, resolve
    from rmqctl.store.layout import Store

    store = Store.open(path)
    files = [(str(f.path), f.start, f.size) for f in store.commitlog.files]
    ref = parse_store_args([f"{name}={path}"])[0]
    cols = message_columns(body=True)
    cfg = {"delay_levels": tuple(store.config.delay_levels)}
    plan = plan_local([ref], {name: files}, split_size=split_size)
    opts = {"window": window} if window else {}
    for _ in range(4):
        got, sts = [], {}
        for s in plan.splits:
            g = split_arrow(s, opts, cfg, cols, flt)
            try:
                while True:
                    got.extend(tuple(_norm(r[c]) for c, _ in cols) for r in next(g).to_pylist())
            except StopIteration as e:
                sts[s.id] = e.value[0]
        exact, fixed, _ = resolve(plan, sts)
        if exact:
            return got
        plan = fixed
    raise AssertionError("did not converge")


def _ref_rows(path, name="s", flt=None):
    from rmqctl.spark.dataset import local_messages

    return [tuple(_norm(x) for x in r) for r in local_messages(path, name=name, body=True, flt=flt)]


@pytest.mark.parametrize("fx", FIXTURES, ids=[p.name for p in FIXTURES])
def test_rows_equal_reference_on_fixtures(fx):
    want = _ref_rows(fx / "store")
    for size, window in ((None, None), (97, 4096), (3000, 700)):
        assert _arrow_rows(fx / "store", split_size=size, window=window) == want, (size, window)


def _pack(pos, topic, props: bytes, body, *, v6_born=False, v6_store=False, sys_flag=0, qid=0, qoff=0,
          ts=1_700_000_000_000):
    sys_flag |= (0x10 if v6_born else 0) | (0x20 if v6_store else 0)
    born = (bytes(range(1, 17)) if v6_born else bytes([10, 0, 0, 1])) + struct.pack(">i", 50000)
    store = (bytes(range(32, 48)) if v6_store else bytes([10, 0, 0, 2])) + struct.pack(">i", 10911)
    tb = topic.encode("utf-8", errors="surrogateescape")
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(born) + 8 + len(store) + 4 + 8 + 4 + len(body) + 1 + len(tb) + 2 \
        + len(props)
    out = struct.pack(">iiiiiqqiq", total, -626843481, zlib.crc32(body) & 0x7FFFFFFF, qid, 0, qoff, pos, sys_flag,
                      ts - 3) + born + struct.pack(">q", ts) + store + struct.pack(">iqi", 0, 0, len(body)) + body
    out += struct.pack(">b", len(tb)) + tb + struct.pack(">h", len(props)) + props
    assert len(out) == total
    return out


def test_rows_equal_reference_on_odd_records(tmp_path):
    """IPv6 hosts, delayed messages, invalid UTF-8 in topic and properties, duplicate names, a
    properties field opening with \\x02 -- each mixed into otherwise plain windows."""
    from rmqctl.spark.dataset import Filter

    rng = random.Random(7)
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    data = bytearray()
    for i in range(600):
        kind = i % 9
        props = f"KEYS\x01k{i % 13} kk{i % 5}\x02UNIQ_KEY\x01U{i}\x02TAGS\x01t{i % 3}\x02".encode()
        topic = "T%d" % (i % 4)
        kw = {}
        if kind == 1:
            kw = {"v6_born": True}
        elif kind == 2:
            kw = {"v6_store": True}
        elif kind == 3:
            topic, props = "SCHEDULE_TOPIC_XXXX", props + f"DELAY\x01{i % 20}\x02REAL_TOPIC\x01T1\x02".encode()
        elif kind == 4:
            props = b"TAGS\x01a\xffb\x02" + props
        elif kind == 5:
            topic = "T\udcff"          # a raw 0xFF byte in the topic
        elif kind == 6:
            props = b"\x02TAGS\x01x\x02KEYS\x01\x02TAGS\x01y\x01z\x02" + props + b"TAGS\x01last"
        elif kind == 7:
            kw = {"sys_flag": rng.choice([4, 8, 12])}
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
        data += _pack(len(data), topic, props, body, qid=i % 3, qoff=i, ts=1_700_000_000_000 + i * 1000, **kw)
    data += bytes(256 * 1024 - len(data) % (256 * 1024))
    (root / "commitlog" / ("%020d" % 0)).write_bytes(bytes(data))
    want = _ref_rows(root)
    assert len(want) == 600
    assert any(r[18].startswith("[") for r in want) and any(r[20].startswith("[") for r in want)
    assert _arrow_rows(root) == want
    assert _arrow_rows(root, split_size=5000, window=2048) == want
    for flt in (Filter(topics=frozenset({"T1", "SCHEDULE_TOPIC_XXXX"})), Filter(keys=frozenset({"k3", "U10"})),
                Filter(queues=frozenset({1}), begin=1_700_000_100_000, end=1_700_000_400_000),
                Filter(transaction_types=frozenset({"PREPARED", "ROLLBACK"}))):
        w = _ref_rows(root, flt=flt)
        assert 0 < len(w) < 600
        assert _arrow_rows(root, flt=flt, split_size=20000) == w
