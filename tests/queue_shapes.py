"""Random consume-queue directories of every shape the per-queue code distinguishes (units valid, pre-blank,
zero, negative, tags-only, size 0; files full or short; odd layouts: a gap, a short file, a stray, a directory, a
misnamed file): the stores on which the passes that decide many queues together are held equal to the one-queue
code."""
from __future__ import annotations

import random
import struct

from rmqctl.store.config import StoreConfig
from rmqctl.store.layout import Store

FS = 160            # 8 units per file
UNIT = struct.Struct(">qiq")
PRE = UNIT.pack(0, 0x7FFFFFFF, 0)


def units(rng, n, phys):
    """n units: mostly valid and rising, with the odd pre-blank, zero, negative or tags-only unit."""
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.06:
            out.append(PRE)
        elif r < 0.12:
            out.append(bytes(20))
        elif r < 0.15:
            out.append(UNIT.pack(-rng.randrange(1, 100), rng.randrange(1, 50), 7))
        elif r < 0.18:
            out.append(UNIT.pack(0, 0, rng.randrange(1, 9)))
        elif r < 0.20:
            out.append(UNIT.pack(phys[0], 0, 3))
        else:
            size = rng.randrange(1, 60)
            out.append(UNIT.pack(phys[0], size, rng.randrange(-5, 1 << 40)))
            phys[0] += size + rng.randrange(0, 30)
    return b"".join(out)


def queue_dir(rng, d, kind):
    """One queue directory of a random shape; `kind` 'plain' keeps to the layout truncate_many takes itself."""
    d.mkdir(parents=True)
    phys = [rng.randrange(0, 500)]
    nfiles = rng.choice([0, 1, 1, 2, 3, 4, 5, 6])
    start = FS * rng.randrange(0, 4)
    for i in range(nfiles):
        full = i < nfiles - 1 or rng.random() < 0.3
        n = 8 if full else rng.randrange(0, 8)
        data = units(rng, n, phys) if rng.random() < 0.85 else PRE * n
        if rng.random() < 0.1:
            data = data + bytes(rng.randrange(0, 40)) + b"\x01"          # a lone non-zero byte after the units
            data = data[:FS]
        p = d / f"{start:020d}"
        p.write_bytes(data)
        with open(p, "r+b") as f:
            f.truncate(FS)
        start += FS
    if kind == "odd" and nfiles:
        c = rng.choice(["gap", "short", "stray", "dir", "name", "early"])
        if c == "gap":
            (d / f"{start + FS:020d}").write_bytes(UNIT.pack(9, 9, 9).ljust(FS, b"\0"))
        elif c == "short":
            (d / f"{start:020d}").write_bytes(UNIT.pack(9, 9, 9))
        elif c == "stray":
            (d / "notes.txt").write_bytes(b"x")
        elif c == "dir":
            (d / f"{start:020d}").mkdir()
        elif c == "early":      # the queue's first file short (of a long queue: a file a repair does not read)
            first = min(d.iterdir())
            with open(first, "r+b") as f:
                f.truncate(FS - 20)
        else:
            (d / f"{start + 7:020d}").write_bytes(bytes(FS))


def random_store(tmp_path, seed, n=40, odd=0.25):
    rng = random.Random(seed)
    root = tmp_path / f"s{seed}"
    (root / "commitlog").mkdir(parents=True)
    keys = []
    for i in range(n):
        topic, qid = f"T{i % 7}", i // 7
        queue_dir(rng, root / "consumequeue" / topic / str(qid), "odd" if rng.random() < odd else "plain")
        keys.append((topic, qid))
    return Store(root, StoreConfig().with_values({"mappedFileSizeConsumeQueue": FS})), sorted(keys)
