"""truncate_many (the states of many plain queues decided together) gives what truncate_state gives queue by
queue, on random queues of every shape truncate_state distinguishes, and takes its own way on the usual ones."""
from __future__ import annotations

import random

import pytest

from rmqctl.repair import rebuild_cq as RC
from rmqctl.repair import truncate_many as TM
from rmqctl.store.config import StoreConfig
from rmqctl.store import queue_heads as QH
from rmqctl.store.layout import Store
from queue_shapes import FS, UNIT, random_store, units


def _fields(st):
    return {k: v for k, v in st.__dict__.items()}


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("cut", [None, 3000, 900, 200, 0])
def test_many_queues_decided_together_are_decided_as_one_by_one(tmp_path, monkeypatch, seed, cut):
    store, keys = random_store(tmp_path, seed)
    want = {k: _fields(RC.truncate_state(store, k[0], k[1], cut)) for k in keys}
    alone = []
    real = RC.truncate_state
    monkeypatch.setattr(RC, "truncate_state", lambda *a: alone.append(a[1:3]) or real(*a))
    monkeypatch.setattr(TM, "GROUP_BYTES", random.Random(seed).choice([1, 200, 1 << 20]))    # group edges too
    got = TM.truncate_many(store, keys, cut)
    assert list(got) == keys
    assert {k: _fields(v) for k, v in got.items()} == want
    # the usual queues were decided together, not one by one (an empty directory counts as usual)
    assert len(alone) < len(keys) // 2
    for k in alone:
        assert QH.read_usual(store, k[0], k[1], FS, last=3) is None


def test_the_states_feed_the_same_repair(tmp_path):
    """A recover of a store of many random queues plans the same with the states decided together as one by
    one (the replacement files compared byte for byte)."""
    from rmqctl.repair import queue_state as QS

    store, keys = random_store(tmp_path, 99, n=60, odd=0.0)
    together = QS.truncate_states(store, keys, None)
    for k in keys:
        one = RC.truncate_state(store, k[0], k[1], None)
        for st, tag in ((one, "one"), (together[k], "many")):
            st.stage_dir = tmp_path / tag / k[0] / str(k[1])
            st.put(10_000 + 100 * k[1], 40, 5, st.end // 20 if st.base is not None else 0)
        a = [(s, p.read_bytes()) for s, p in one.finish_files()]
        b = [(s, p.read_bytes()) for s, p in together[k].finish_files()]
        assert a == b
        assert one.delete_files() == together[k].delete_files()


def test_links_and_ext_stores_go_one_by_one(tmp_path, monkeypatch):
    """A queue directory that is a link, a linked file, and every queue of a store with ext files: truncate_state
    itself decides them."""
    store, keys = random_store(tmp_path, 5, n=14, odd=0.0)
    d = store.consumequeue_dir / "T0" / "0"
    f = next(d.iterdir(), None)
    if f is None:
        (d / f"{0:020d}").write_bytes(UNIT.pack(1, 1, 1).ljust(FS, b"\0"))
        f = d / f"{0:020d}"
    target = tmp_path / "outside"
    target.write_bytes(f.read_bytes())
    f.unlink()
    f.symlink_to(target)
    alone = []
    real = RC.truncate_state
    monkeypatch.setattr(RC, "truncate_state", lambda *a: alone.append(a[1:3]) or real(*a))
    TM.truncate_many(store, keys, None)
    assert alone == [("T0", 0)]
    alone.clear()
    ext = Store(store.root, StoreConfig().with_values({"mappedFileSizeConsumeQueue": FS,
                                                       "enableConsumeQueueExt": "true"}))
    TM.truncate_many(ext, keys, None)
    assert alone == keys


BIG = 20 * 1024     # five pages: room for holes


@pytest.mark.parametrize("shape", ["units then a hole", "a unit across the first hole's page", "data after a hole",
                                   "a hole first", "written through", "nothing", "negative units"])
def test_sparse_queue_files_read_as_load_units_reads_them(tmp_path, monkeypatch, shape):
    """Files mapped by the broker hold their units, then a hole: read up to the hole when no data follows it, else
    as load_units reads them; the same states either way."""
    import os

    rng = random.Random(shape)
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    keys = []
    for q in range(6):
        d = root / "consumequeue" / "T" / str(q)
        d.mkdir(parents=True)
        keys.append(("T", q))
        for k in range(rng.choice([1, 2, 3])):
            p = d / f"{k * BIG:020d}"
            with open(p, "wb") as f:
                f.truncate(BIG)
            fd = os.open(p, os.O_WRONLY)
            try:
                phys = [1000 * q + 50_000 * k]
                if shape == "units then a hole":
                    os.pwrite(fd, units(rng, rng.randrange(1, 150), phys), 0)
                elif shape == "a unit across the first hole's page":
                    os.pwrite(fd, units(rng, 205, phys)[:4096], 0)         # unit 204 ends in the next page
                elif shape == "data after a hole":
                    os.pwrite(fd, units(rng, 10, phys), 0)
                    os.pwrite(fd, units(rng, 1, phys), 12 * 1024)
                elif shape == "a hole first":
                    os.pwrite(fd, units(rng, 3, phys), 8 * 1024)
                elif shape == "negative units":      # no offset above -1 among them: the zeros after must not count
                    os.pwrite(fd, UNIT.pack(-5, 3, 1) * rng.randrange(1, 9), 0)
                elif shape == "written through":
                    os.pwrite(fd, units(rng, BIG // 20 - 2, phys).ljust(BIG, b"\0"), 0)
            finally:
                os.close(fd)
    store = Store(root, StoreConfig().with_values({"mappedFileSizeConsumeQueue": BIG}))
    if shape == "a unit across the first hole's page":
        f = root / "consumequeue" / "T" / "0" / f"{0:020d}"
        fd = os.open(f, os.O_RDONLY)
        try:    # the fault is there: the file's first data extent ends inside a unit
            hole = os.lseek(fd, 0, os.SEEK_HOLE)
        finally:
            os.close(fd)
        assert hole % 20 and hole < BIG
    real, slow = RC.unit_bytes, []
    for small in (QH.SMALL_FILE, 4096):     # a file longer than SMALL_FILE: that queue alone
        monkeypatch.setattr(QH, "SMALL_FILE", small)
        for cut in (None, 60_000, 2_000):
            want = {k: _fields(RC.truncate_state(store, k[0], k[1], cut)) for k in keys}
            slow.clear()
            monkeypatch.setattr(RC, "unit_bytes", lambda *a: slow.append(a) or real(*a))
            got = TM.truncate_many(store, keys, cut)
            monkeypatch.setattr(RC, "unit_bytes", real)
            assert {k: _fields(v) for k, v in got.items()} == want
            alone = ("data after a hole", "a hole first") + (("written through",) if small == 4096 else ())
            assert bool(slow) is (shape in alone)
