"""verify's queue checks over many queues at once (rmqctl.check.queues_many) give check_queue's results and
findings, in queue order, on random queues of every shape check_queue distinguishes; the usual queues are screened
together, and the screen sends a queue to check_queue exactly when check_queue has a finding of the queue's own."""
from __future__ import annotations

import random
from dataclasses import asdict

import pytest

from rmqctl.check import consumequeue as cqc
from rmqctl.check import queues_many as QM
from rmqctl.check.commitlog_results import QueueTrack
from rmqctl.store import queue_heads as QH
from queue_shapes import FS, PRE, UNIT, random_store

OWN = {"cq.hole", "cq.pre_blank", "cq.ahead", "cq.orphan_unit", "cq.points_into_gap"}


def _tracks(rng, keys):
    """Made-up commitlog tracks: some queues none, others a compared range with the odd missing unit."""
    out = {}
    for k in keys:
        if rng.random() < 0.3:
            continue
        lo = rng.randrange(0, 40)
        t = QueueTrack(first_q=lo, last_q=lo + rng.randrange(0, 30), next_q=-1, count=3, first_phys=100)
        if rng.random() < 0.2:
            t.missing, t.first_missing = 1, (200, lo + 1)
        out[k] = t
    return out


def _one_by_one(store, keys, tracks, cl_min, cl_end, scanned, gaps):
    findings, res = [], {}
    for topic, qid in keys:
        res[(topic, qid)] = asdict(cqc.check_queue(store.root, topic, qid, FS, tracks.get((topic, qid)), cl_min,
                                                   cl_end, findings, commitlog_scanned=scanned, cl_gaps=gaps))
    return res, [asdict(f) for f in findings]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("listed", [True, False])
def test_many_queues_checked_together_as_one_by_one(tmp_path, monkeypatch, seed, listed):
    store, keys = random_store(tmp_path, seed)
    rng = random.Random(seed)
    tracks = _tracks(rng, keys)
    alone = []
    real = cqc.check_queue
    for cl_min, cl_end, scanned, gaps in ((0, 10**9, True, ()), (0, 1500, True, ()), (700, 2500, True, ()),
                                         (0, 0, False, None), (0, 1500, True, ((300, 600),))):
        want = _one_by_one(store, keys, tracks, cl_min, cl_end, scanned, gaps)
        monkeypatch.setattr(QM, "GROUP_BYTES", rng.choice([1, 300, 1 << 20]))       # group edges too
        monkeypatch.setattr(QH, "SMALL_FILE", rng.choice([QH.SMALL_FILE, 64]))      # larger files go alone
        alone.clear()
        monkeypatch.setattr(cqc, "check_queue", lambda *a, **k: alone.append(a[1:3]) or real(*a, **k))
        findings = []
        if listed:
            with store.listed_once():
                got = QM.check_queues(store, keys, FS, tracks, cl_min, cl_end, findings, scanned, gaps)
        else:
            got = QM.check_queues(store, keys, FS, tracks, cl_min, cl_end, findings, scanned, gaps)
        monkeypatch.setattr(cqc, "check_queue", real)
        assert list(got) == keys
        assert ({k: asdict(v) for k, v in got.items()}, [asdict(f) for f in findings]) == want
        if gaps:        # a unit into a missing commitlog file is reported per queue: no screen
            assert alone == keys
            continue
        # a usual queue of small files goes to check_queue exactly when check_queue finds something of its own
        for topic, qid in keys:
            usual = QH.read_usual(store, topic, qid, FS) is not None
            own = []
            real(store.root, topic, qid, FS, tracks.get((topic, qid)), cl_min, cl_end, own, commitlog_scanned=scanned,
                 cl_gaps=gaps)
            mine = any(f.check in OWN for f in own)
            assert ((topic, qid) in alone) is (not usual or mine), (topic, qid, [f.check for f in own])
        assert len(alone) < len(keys)


def test_sparse_files_and_files_past_the_first_hole(tmp_path):
    """Files of several pages: units then a hole, a unit cut by the hole's page, data after the hole, a second file
    after a first one ending in its hole. Checked as check_queue reads them (the zeros of a hole end a queue)."""
    import os

    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    store, keys = random_store(tmp_path, 3, n=20, odd=0.0)
    big = 40 * 1024     # ten pages: a data extent of whole pages may end on a unit (at 20 KiB)
    unit = (100).to_bytes(8, "big") + (5).to_bytes(4, "big") + (1).to_bytes(8, "big")
    shapes = [[[(0, 3)]], [[(0, 205)]], [[(0, 3), (615, 1)]], [[(0, 3)], [(0, 4)]], [[(0, 2048)], [(0, 2)]],
              [[(0, 205), (615, 1)]], [[(0, 1024)], [(0, 2)]]]
    for (topic, qid), files in zip(keys, shapes):
        d = store.consumequeue_dir / topic / str(qid)
        for p in d.iterdir():
            p.unlink()
        for k, writes in enumerate(files):
            p = d / f"{k * big:020d}"
            with open(p, "wb") as f:
                f.truncate(big)
            fd = os.open(p, os.O_WRONLY)
            try:
                for at, count in writes:
                    os.pwrite(fd, unit * count, at * 20)
            finally:
                os.close(fd)
    keys = keys[:len(shapes)]
    store = Store(store.root, StoreConfig().with_values({"mappedFileSizeConsumeQueue": big}))
    want_f, want = [], {}
    for t, q in keys:
        want[(t, q)] = asdict(cqc.check_queue(store.root, t, q, big, None, 0, 0, want_f, commitlog_scanned=False,
                                                  cl_gaps=None))
    # the faults are there: four holes (one after the whole pages of valid units of a first file, then its hole),
    # and only the queue of a first full file goes on into its second
    assert [f.check for f in want_f] == ["cq.hole"] * 4 and want[keys[4]]["valid_end"] == 2050
    got_f = []
    got = QM.check_queues(store, keys, big, {}, 0, 0, got_f, False, None)
    assert {k: asdict(v) for k, v in got.items()} == want
    assert [asdict(f) for f in got_f] == [asdict(f) for f in want_f]


def _u(phys, size=10, tags=1):
    return UNIT.pack(phys, size, tags)


P = PRE


# one queue each: (files as lists of units, the commitlog pass's (first, last) queue offsets or None)
SHAPES = {
    "pre-blank units lead": ([[P, P, _u(2000), _u(2010)]], (2, 3)),
    "a pre-blank after a real unit": ([[_u(2000), P, _u(2010)]], (0, 2)),
    "a pre-blank in the second file": ([[_u(2000 + 10 * i) for i in range(8)], [P, _u(3000)]], (0, 9)),
    "a full first file of pre-blanks, then one more": ([[P] * 8, [P, _u(3000)]], (9, 9)),
    "pre-blank units only": ([[P, P, P]], None),
    "expired units below the compared ones": ([[_u(100), _u(200), _u(2000), _u(2100)]], (2, 3)),
    "a live unit below the compared ones": ([[_u(100), _u(1500), _u(2000), _u(2100)]], (2, 3)),
    "a live unit above the compared ones": ([[_u(2000), _u(2100), _u(2200)]], (0, 1)),
    "an expired unit above the compared ones": ([[_u(2000), _u(2100), _u(300)]], (0, 1)),
    "units compared across two files": ([[_u(2000 + 10 * i) for i in range(8)], [_u(3000), _u(3010)]], (0, 9)),
    "a live unit past the compared ones, in the second file": (
        [[_u(2000 + 10 * i) for i in range(8)], [_u(3000), _u(3010)]], (0, 8)),
    "no unit compared, all expired": ([[_u(100), _u(200)]], None),
    "a unit ending where the commitlog begins, below the compared ones": ([[_u(990), _u(2000)]], (1, 1)),
    "no unit compared, one live": ([[_u(100), _u(2000)]], None),
    "a full first file, an empty second": ([[_u(2000 + 10 * i) for i in range(8)], []], (0, 7)),
    "one unit in the first file, units in the second": ([[_u(2000)], [_u(3000)]], (0, 0)),
}


@pytest.mark.parametrize("scanned,cl_min", [(True, 1000), (True, 0), (False, 1000)])
def test_each_finding_of_a_queue_sends_it_to_check_queue(tmp_path, scanned, cl_min):
    """Queues of one shape each, beside clean ones: a queue goes to check_queue exactly when check_queue has a
    finding of the queue's own, and the results agree (the commitlog's min offset 1000: units ending below it
    lie in deleted files; 0: none did)."""
    from rmqctl.store.config import StoreConfig
    from rmqctl.store.layout import Store

    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    keys, tracks = [], {}
    for i, (files, rec) in enumerate(SHAPES.values()):
        key = ("T", i)
        d = root / "consumequeue" / "T" / str(i)
        d.mkdir(parents=True)
        for k, units in enumerate(files):
            (d / f"{k * FS:020d}").write_bytes(b"".join(units).ljust(FS, b"\0"))
        if rec is not None:
            tracks[key] = QueueTrack(first_q=rec[0], last_q=rec[1], next_q=rec[1] + 1, count=rec[1] - rec[0] + 1)
        keys.append(key)
    store = Store(root, StoreConfig().with_values({"mappedFileSizeConsumeQueue": FS}))
    gaps = () if scanned else None
    want = _one_by_one(store, keys, tracks, cl_min, 5000, scanned, gaps)
    alone = []
    real = cqc.check_queue
    findings = []
    try:
        cqc.check_queue = lambda *a, **k: alone.append(a[1:3]) or real(*a, **k)
        got = QM.check_queues(store, keys, FS, tracks, cl_min, 5000, findings, scanned, gaps)
    finally:
        cqc.check_queue = real
    assert ({k: asdict(v) for k, v in got.items()}, [asdict(f) for f in findings]) == want
    own = {}
    for f in want[1]:
        if f["check"] in OWN:
            own.setdefault(int(f["path"].split("/")[-2]), []).append(f["check"])
    names = list(SHAPES)
    assert {names[q] for _, q in alone} == {names[q] for q in own}
    if scanned and cl_min:     # the faults are there: each shape that should be reported is
        assert {names[q] for q in own} == {
            "a pre-blank after a real unit", "a pre-blank in the second file",
            "a full first file of pre-blanks, then one more", "a live unit below the compared ones",
            "a live unit above the compared ones", "a live unit past the compared ones, in the second file",
            "no unit compared, one live", "one unit in the first file, units in the second"}
