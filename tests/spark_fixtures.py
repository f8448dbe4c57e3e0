"""Small stores written byte by byte with the broker's layout (docs/store-format.md), for the
Spark tests before/beside the oracle fixtures. Independent of the kernel: records are packed here
with struct + zlib, so a kernel bug cannot hide in both writer and reader."""
from __future__ import annotations

import json
import os

import pytest
import random
import struct
import zlib

V1 = -626843481
BLANK = -875286124


def encode_props(props: dict) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()


def record(pos: int, topic: str, queue_id: int, queue_offset: int, body: bytes, props: dict,
           store_ts: int, sys_flag: int = 0, born_ts: int | None = None, reconsume: int = 0,
           flag: int = 0) -> bytes:
    tb, pb = topic.encode(), encode_props(props)
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + len(body) + 1 + len(tb) + 2 + len(pb)
    out = struct.pack(">iiiiiqqiq", total, V1, zlib.crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset,
                      pos, sys_flag, store_ts - 5 if born_ts is None else born_ts)
    out += bytes([10, 0, 0, 1]) + struct.pack(">i", 50000)
    out += struct.pack(">q", store_ts) + bytes([10, 0, 0, 2]) + struct.pack(">i", 10911)
    out += struct.pack(">iqi", reconsume, 0, len(body)) + body
    out += struct.pack(">b", len(tb)) + tb + struct.pack(">h", len(pb)) + pb
    assert len(out) == total
    return out


def write_store(root, messages, file_size=64 * 1024, consumer_offsets=None):
    """messages: dicts (topic, queue_id, body, props, store_ts, sys_flag). Queue offsets are assigned
    per (topic, queue) for NOT/COMMIT and 0 for PREPARED/ROLLBACK, like the broker. Returns the
    expected rows [(topic, queue_id, queue_offset, physical_offset, size, store_ts)]."""
    cl = os.path.join(root, "commitlog")
    os.makedirs(cl, exist_ok=True)
    os.makedirs(os.path.join(root, "config"), exist_ok=True)
    next_off: dict = {}
    files, cur, start = [], bytearray(), 0
    expected = []
    for m in messages:
        sf = m.get("sys_flag", 0)
        key = (m["topic"], m["queue_id"])
        dispatched = (sf & 0xC) in (0, 8)
        qo = next_off.get(key, 0) if dispatched else 0
        rec = record(start + len(cur), m["topic"], m["queue_id"], qo, m["body"], m.get("props", {}),
                     m["store_ts"], sf)
        if len(cur) + len(rec) + 8 > file_size:
            blank = file_size - len(cur)
            cur += struct.pack(">ii", blank, BLANK)
            cur += bytes(file_size - len(cur))
            files.append((start, bytes(cur)))
            start += file_size
            cur = bytearray()
            rec = record(start, m["topic"], m["queue_id"], qo, m["body"], m.get("props", {}), m["store_ts"], sf)
        expected.append((m["topic"], m["queue_id"], qo, start + len(cur), len(rec), m["store_ts"]))
        cur += rec
        if dispatched:
            next_off[key] = qo + 1
    cur += bytes(file_size - len(cur))
    files.append((start, bytes(cur)))
    for s, data in files:
        with open(os.path.join(cl, f"{s:020d}"), "wb") as f:
            f.write(data)
    if consumer_offsets is not None:
        table = {}
        for (topic, group), qmap in consumer_offsets.items():
            table[f"{topic}@{group}"] = qmap
        body = json.dumps({"offsetTable": table}, indent="\t")
        # the broker's dialect: unquoted int keys
        import re

        body = re.sub(r'"(\d+)":', r"\1:", body)
        with open(os.path.join(root, "config", "consumerOffset.json"), "w") as f:
            f.write(body)
    return expected


def sample_messages(n=300, seed=1, t0=1_700_000_000_000, topics=("TopicA", "TopicB", "Orders")):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        topic = topics[i % len(topics)]
        props = {"UNIQ_KEY": f"UK{seed}{i:08d}", "TAGS": rnd.choice(["a", "b", "payment"]),
                 "KEYS": " ".join(f"k{rnd.randrange(40)}" for _ in range(rnd.randrange(0, 3)))}
        if not props["KEYS"]:
            del props["KEYS"]
        sf = 0
        if i % 37 == 5:
            sf = 4     # PREPARED
        elif i % 41 == 7:
            sf = 8     # COMMIT
        out.append({"topic": topic, "queue_id": rnd.randrange(3), "body": os.urandom(rnd.randrange(0, 900)),
                    "props": props, "store_ts": t0 + i * 1500, "sys_flag": sf})
    out.append({"topic": "SCHEDULE_TOPIC_XXXX", "queue_id": 2, "body": b"delayed",
                "props": {"DELAY": "3", "REAL_TOPIC": "TopicA", "REAL_QID": "0", "UNIQ_KEY": "UKD"},
                "store_ts": t0 + n * 1500})
    return out


@pytest.fixture(scope="session")
def spark():
    """The one local[2] SparkSession of the test run (UI off, 2 shuffle partitions)."""
    from rmqctl.spark.session import get_session

    return get_session("local[2]", shuffle_partitions=2)
