"""Write a synthetic commitlog of N messages of B-byte bodies (spec layout, valid CRCs, 1 GiB files,
BLANK records at file ends) for benchmarks. Streaming: memory stays flat.

    python bench/gen_commitlog.py /tmp/bench-store --bytes 1073741824 --body 1024
"""
from __future__ import annotations

import argparse
import struct
import zlib
from pathlib import Path

from rmqctl.formats.commitlog import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE_V1

HEAD = struct.Struct(">iiiiiqqiq4siq4siiqi")


def build(root: Path, total_bytes: int, body_size: int, file_size: int = 1 << 30, topics: int = 8,
          queues: int = 4) -> dict:
    cl_dir = root / "commitlog"
    cl_dir.mkdir(parents=True, exist_ok=True)
    body = (b"rmqctl-bench-" * (body_size // 13 + 1))[:body_size]
    crc = zlib.crc32(body) & 0x7FFFFFFF
    names = [f"BenchTopic{i}".encode() for i in range(topics)]
    qoff = {}
    phys, msgs, ts = 0, 0, 1_700_000_000_000
    f_start = 0
    out = None
    buf = bytearray()
    while phys < total_bytes:
        if out is None:
            out = open(cl_dir / f"{f_start:020d}", "wb")
        t = names[msgs % topics]
        q = (msgs // topics) % queues
        props = b"TAGS\x01TagA\x02KEYS\x01key-%d\x02UNIQ_KEY\x01%032X\x02" % (msgs, msgs)
        total = 91 + len(body) + len(t) + len(props)
        pos = phys - f_start
        if pos + total + 8 > file_size:
            buf += struct.pack(">ii", file_size - pos, BLANK_MAGIC_CODE)
            out.write(buf)
            out.truncate(file_size)
            out.close()
            buf.clear()
            out = None
            f_start += file_size
            phys = f_start
            continue
        k = (t, q)
        qo = qoff.get(k, 0)
        qoff[k] = qo + 1
        buf += HEAD.pack(total, MESSAGE_MAGIC_CODE_V1, crc, q, 0, qo, phys, 0, ts, b"\x7f\0\0\1", 5000,
                         ts + 1, b"\x7f\0\0\1", 10911, 0, 0, len(body))
        buf += body + bytes([len(t)]) + t + struct.pack(">h", len(props)) + props
        if len(buf) > (8 << 20):
            out.write(buf)
            buf.clear()
        phys += total
        msgs += 1
        ts += 1
    if out is not None:
        out.write(buf)
        out.truncate(file_size)
        out.close()
    return {"messages": msgs, "bytes": phys, "files": f_start // file_size + 1}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--file-size", type=int, default=1 << 30)
    ap.add_argument("--topics", type=int, default=8)
    ap.add_argument("--queues", type=int, default=4, help="per topic")
    a = ap.parse_args()
    print(build(a.root, a.bytes, a.body, a.file_size, a.topics, a.queues))
