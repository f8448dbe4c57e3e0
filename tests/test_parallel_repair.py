"""`rebuild -j N` and `recover -j N` (rmqctl.repair.parallel) plan and stage exactly what one process does:
the same actions, notes and summaries, byte-identical staged files -- on every fixture store and on random
stores with many files, records straddling tiny split points (RMQCTL_SPLIT_BYTES), valid-looking records
hidden inside bodies (a worker resyncs on them: the parent must re-walk) and damage; a -j 2 recover killed
at every journal step converges and undoes like -j 1."""
from __future__ import annotations

import hashlib
import json
import random
import struct
from pathlib import Path

import pytest

import faultlib as F
from conftest import FIXTURES, run_cli
from rmqctl.repair import parallel as P

SPLIT = P.SPLIT_ENV


def _cfg(conf: Path):
    from rmqctl.store.config import StoreConfig

    return StoreConfig().with_values(json.loads(conf.read_text())["store_config"])


def _hashed(ctx) -> dict:
    out = ctx.plan.to_json()
    for a, j in zip(ctx.plan.actions, out["actions"]):
        if a.kind in ("write_file", "create_file"):
            j["staged_sha256"] = hashlib.sha256(Path(a.payload[1]).read_bytes()).hexdigest()
    out.pop("store", None)
    out["cut"], out["last_valid"] = ctx.cut, ctx.last_valid
    return out


def _rebuild(root, conf, what, jobs, tmp) -> dict:
    from rmqctl.repair import rebuild as RB
    from rmqctl.store.layout import Store

    staging = tmp / f"rb-{what}-{jobs}"
    staging.mkdir(parents=True)
    return _hashed(RB.analyze_rebuild(Store.open(root, _cfg(conf)), what, staging, jobs=jobs))


def _recover(root, conf, jobs, tmp, speculate=True, **opts) -> dict:
    from rmqctl.repair import recover as R
    from rmqctl.repair import speculation
    from rmqctl.store.layout import Store

    staging = tmp / f"rec-{jobs}-{speculate}-{len(list(tmp.iterdir()))}"
    staging.mkdir(parents=True)
    old, speculation.SPECULATE = speculation.SPECULATE, speculate
    try:
        return _hashed(R.analyze(Store.open(root, _cfg(conf)), R.Options(jobs=jobs, **opts), staging))
    finally:
        speculation.SPECULATE = old


def _walks(monkeypatch):
    """Count the parallel walks, so a test fails if -j silently ran one process."""
    n = {"walks": 0}
    real = P.walk

    def counting(*a, **k):
        n["walks"] += 1
        return real(*a, **k)

    monkeypatch.setattr(P, "walk", counting)
    return n


FIX = sorted(p.parent for p in (FIXTURES / "stores").glob("*/manifest.json")
             if not any((p.parent / "store").glob("dledger-*")))


@pytest.mark.parametrize("fixture", FIX, ids=lambda p: p.name)
def test_fixture_rebuild_and_recover_equal_one_process(tmp_path, monkeypatch, fixture):
    monkeypatch.setenv(SPLIT, "2500")
    F.copy_store(fixture, tmp_path / fixture.name)
    root = tmp_path / fixture.name / "store"
    conf = tmp_path / fixture.name / "manifest.json"
    n = _walks(monkeypatch)
    records = (root / "commitlog").is_dir() and bool(F.commitlog_records(root))
    if records:
        F.torn_tail(root)      # recover has a tail to cut, queues and index something to redo
    for p in list((root / "consumequeue").rglob("0*"))[:3] + list((root / "index").glob("*"))[:1]:
        if p.is_file():
            p.write_bytes(bytes(p.stat().st_size))
    for what in ("cq", "index"):
        assert _rebuild(root, conf, what, 1, tmp_path) == _rebuild(root, conf, what, 2, tmp_path), what
    assert _recover(root, conf, 1, tmp_path) == _recover(root, conf, 2, tmp_path)
    from rmqctl.store.layout import Store

    # index always splits; cq and recover stay in one process where batch consume queues are
    if records:
        assert n["walks"] >= (3 if P.splittable(Store.open(root, _cfg(conf))) else 1)


# -- random stores ------------------------------------------------------------------------------------

TOPICS = ["TopicA", "TopicB", "主题", "%RETRY%g1"]


def random_store(root: Path, seed: int, *, files: int = 6, fs: int = 24 * 1024) -> Path:
    """`files` commitlog files of random records (bodies 0-3000 bytes, tags, keys, __CRC32# tails), each
    ended by a BLANK, the last one half full; some bodies hide a complete valid-looking record (its
    PHYSICALOFFSET is where it lies), which a resync can land on. Empty queues and index (rebuild/recover
    write everything), small index geometry so index files roll."""
    rnd = random.Random(seed)
    for d in ("commitlog", "consumequeue", "index"):
        (root / d).mkdir(parents=True)
    qo: dict = {}
    ts = 1_700_000_000_000
    for n in range(files):
        base, buf, pos = n * fs, bytearray(fs), 0
        stop_at = fs if n < files - 1 else fs // 2
        while True:
            topic, qid = rnd.choice(TOPICS), rnd.randint(0, 2)
            props = {"TAGS": rnd.choice(["a", "b", "c d"]), "KEYS": " ".join(f"k{rnd.randint(0, 50)}"
                                                                           for _ in range(rnd.randint(0, 3)))}
            if rnd.random() < 0.5:
                props["UNIQ_KEY"] = f"U{rnd.randint(0, 10**9):x}"
            body = bytearray(rnd.randbytes(rnd.randint(0, 3000)))
            sf = rnd.choice([0, 0, 0, 0, 8, 0xC, 4])
            qoff = qo.get((topic, qid), 0)
            kw = dict(topic=topic, qid=qid, qoff=qoff, phys=base + pos, props=F._props(props), born_ts=ts, store_ts=ts,
                      sys_flag=sf, prop_crc=rnd.random() < 0.2)
            if rnd.random() < 0.15 and len(body) > 400:
                # a whole valid-looking record inside the body, its PHYSICALOFFSET right for where it lies
                tail = 1 + len(topic.encode()) + 2 + len(kw["props"]) + (20 if kw["prop_crc"] else 0)
                at = base + pos + len(F._record(body=bytes(body), **kw)) - tail - len(body) + 100
                inner = F._record(topic="Ghost", qid=0, qoff=0, phys=at, body=b"ghost", props=b"", born_ts=ts,
                                  store_ts=ts)
                body[100:100 + len(inner)] = inner
            rec = F._record(body=bytes(body), **kw)
            if pos + len(rec) + 8 > stop_at:
                break
            buf[pos:pos + len(rec)] = rec
            pos += len(rec)
            ts += rnd.randint(0, 1500)
            if sf in (0, 8):
                qo[(topic, qid)] = qoff + 1
        if n < files - 1:
            buf[pos:pos + 8] = struct.pack(">ii", fs - pos, -875286124)
        (root / "commitlog" / f"{base:020d}").write_bytes(bytes(buf))
    (root / "abort").write_bytes(b"")
    conf = root.parent / "manifest.json"
    conf.write_text(json.dumps({"store_config": {"mappedFileSizeCommitLog": fs, "mappedFileSizeConsumeQueue": 20 * 23,
                                                 "maxHashSlotNum": 7, "maxIndexNum": 61 + seed % 50}}))
    return root


def _damage(root: Path, rnd: random.Random, kind: str) -> None:
    recs = F.commitlog_records(root)
    if kind == "flip":
        F.flip_body_bit(root, recs[rnd.randrange(len(recs) // 2, len(recs))])
    elif kind == "torn":
        F.torn_tail(root)
    elif kind == "zero":
        F.zero_page(root, recs[rnd.randrange(len(recs) // 2, len(recs))], length=512)


@pytest.mark.parametrize("seed", range(4))
def test_random_stores_with_tiny_splits_equal_one_process(tmp_path, monkeypatch, seed):
    rnd = random.Random(seed)
    root = random_store(tmp_path / "s" / "store", seed)
    conf = root.parent / "manifest.json"
    before = F.tree_hashes(root)
    kind = ["none", "flip", "torn", "zero"][seed % 4]
    _damage(root, rnd, kind)
    assert (F.tree_hashes(root) != before) == (kind != "none"), "the damage was not injected"
    monkeypatch.setenv(SPLIT, str(rnd.choice([300, 1000, 4096, 9000])))
    n = _walks(monkeypatch)
    jobs = rnd.choice([2, 3])
    for what in ("cq", "index"):
        assert _rebuild(root, conf, what, 1, tmp_path) == _rebuild(root, conf, what, jobs, tmp_path), what
    for kw in ({"from_start": True}, {"on_corruption": "quarantine"}):
        assert _recover(root, conf, 1, tmp_path, **kw) == _recover(root, conf, jobs, tmp_path, **kw), kw
    assert _recover(root, conf, 1, tmp_path, speculate=False) == _recover(root, conf, jobs, tmp_path, speculate=False)
    assert n["walks"] >= 4


def test_a_walk_ending_early_lets_the_ranges_in_flight_finish(tmp_path, monkeypatch):
    """The walk stops at a corrupt record early in the store while ranges after it are still being walked:
    the pool is closed once they finish, never terminated (a worker killed while it sends its result holds
    the result queue's lock, and terminate() then hangs for ever)."""
    import multiprocessing.pool as mpp

    root = random_store(tmp_path / "s" / "store", 1)
    conf = root.parent / "manifest.json"
    recs = F.commitlog_records(root)
    before = F.tree_hashes(root)
    F.flip_body_bit(root, recs[len(recs) // 10])
    assert F.tree_hashes(root) != before, "the damage was not injected"
    monkeypatch.setenv(SPLIT, "300")
    killed = []
    real = mpp.Pool.terminate
    monkeypatch.setattr(mpp.Pool, "terminate", lambda self: killed.append(1) or real(self))
    n = _walks(monkeypatch)
    assert _recover(root, conf, 1, tmp_path) == _recover(root, conf, 2, tmp_path)
    assert n["walks"] and not killed


def test_a_resync_inside_a_body_is_walked_again(tmp_path, monkeypatch):
    """A split point inside a record whose body hides a valid record: that range begins at the ghost,
    not where the chain hands off; the parent walks the rest of the file itself and the ghost never
    becomes a unit."""
    root = random_store(tmp_path / "s" / "store", 11, files=3)
    conf = root.parent / "manifest.json"
    from rmqctl.resync import split_points

    fs = 24 * 1024
    raw = F.commitlog_files(root)[0].read_bytes()
    chain = [r.offset for r in F.commitlog_records(root) if r.offset < fs] + [fs]
    ghost_len = len(F._record(topic="Ghost", qid=0, qoff=0, phys=0, body=b"ghost", props=b"", born_ts=0, store_ts=0))
    ghosts = [i - (ghost_len - 8) for i in range(len(raw)) if raw.startswith(b"\x05Ghost", i)]
    assert ghosts, "no hidden record was generated"
    # a split size whose nominal point falls inside a ghost's outer record, before the ghost, with the
    # outer record ending before the next point: that range resyncs on the ghost, off the chain
    pick = None
    for nb in range(300, fs):
        pts = split_points(fs, fs, -(-fs // nb))[:-1] + [fs]
        for g in ghosts:
            o = max(c for c in chain if c < g)
            e = min(c for c in chain if c > g)
            if any(o < a < g and e < b for a, b in zip(pts, pts[1:])):
                pick = nb
                break
        if pick:
            break
    assert pick, "no split size puts a range start inside a ghost's record"
    monkeypatch.setenv(SPLIT, str(pick))
    P.STATS["rewalks"] = 0
    a = _rebuild(root, conf, "cq", 1, tmp_path)
    b = _rebuild(root, conf, "cq", 2, tmp_path)
    assert a == b
    assert P.STATS["rewalks"], "no range resynced on a hidden record: the re-walk was not exercised"
    assert not any("Ghost" in x["path"] for x in b["actions"])


def test_memory_window_is_bounded(tmp_path, monkeypatch):
    """The parent never has more than 2 x jobs ranges submitted ahead of the one it merges."""
    import multiprocessing.pool as mpp

    root = random_store(tmp_path / "s" / "store", 3, files=6)
    conf = root.parent / "manifest.json"
    monkeypatch.setenv(SPLIT, "500")
    seen = {"max": 0, "now": 0}
    real = mpp.ApplyResult.get

    orig_apply = mpp.Pool.apply_async

    def apply_async(self, *a, **k):
        seen["now"] += 1
        seen["max"] = max(seen["max"], seen["now"])
        return orig_apply(self, *a, **k)

    def get(self, *a, **k):
        seen["now"] -= 1
        return real(self, *a, **k)

    monkeypatch.setattr(mpp.Pool, "apply_async", apply_async)
    monkeypatch.setattr(mpp.ApplyResult, "get", get)
    _rebuild(root, conf, "index", 2, tmp_path)
    assert 1 < seen["max"] <= 4



def test_results_through_shared_memory_and_past_a_full_slot_are_the_same(tmp_path, monkeypatch):
    """A range's arrays reach the parent through its slot of shared memory; one larger than the slot goes through
    the pool's pipe. Slots small enough for both to happen in one walk: the plans and files are -j 1's."""
    root = random_store(tmp_path / "s" / "store", 7, files=4)
    conf = root.parent / "manifest.json"
    monkeypatch.setenv(SPLIT, "4096")
    monkeypatch.setattr(P, "_slot_bytes", lambda rb: 200)
    kinds: list = []
    real = P._from_slot
    monkeypatch.setattr(P, "_from_slot", lambda payload, *a: kinds.append(type(payload).__name__) or real(payload, *a))
    for what in ("cq", "index"):
        assert _rebuild(root, conf, what, 1, tmp_path) == _rebuild(root, conf, what, 2, tmp_path), what
    assert _recover(root, conf, 1, tmp_path, from_start=True) == _recover(root, conf, 2, tmp_path, from_start=True)
    assert "_InSlot" in kinds and {"dict", "list"} & set(kinds), kinds      # in the slot, and past it
    kinds.clear()

    def no_room(*a, **k):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(P.mmap, "mmap", no_room)      # no shared mapping: every result through the pipe
    assert _rebuild(root, conf, "cq", 1, tmp_path / "x") == _rebuild(root, conf, "cq", 2, tmp_path / "x")
    assert kinds and "_InSlot" not in kinds and "dict" in kinds, kinds


# -- the command line ----------------------------------------------------------------------------------

def test_jobs_option_on_the_command_line(tmp_path):
    root = random_store(tmp_path / "a" / "store", 5, files=4)
    conf = root.parent / "manifest.json"
    F.copy_store(tmp_path / "a", tmp_path / "b")
    other = tmp_path / "b" / "store"
    outs = []
    for r, j in ((root, "1"), (other, "2")):
        p = run_cli("rebuild", "index", "-j", j, "--json", "--dry-run", "--config", conf, r,
                    env={SPLIT: "3000"})
        assert p.returncode == 4, p.stderr
        outs.append(json.loads(p.stdout)["summary"])
    assert outs[0] == outs[1] and outs[0]["items"] > 0
    p = run_cli("recover", "-j", "0", root)
    assert p.returncode == 2 and b"Traceback" not in p.stderr
    for r, j in ((root, "1"), (other, "2")):
        p = run_cli("recover", "--jobs", j, "--config", conf, r, env={SPLIT: "3000"})
        assert p.returncode == 1, p.stderr
    assert F.tree_hashes(root) == F.tree_hashes(other)


# -- kill -9 at every step, -j 2 -----------------------------------------------------------------------

def test_kill_at_every_step_with_two_jobs_converges(tmp_path):
    import test_kill_resume as K

    argv = ["recover", "-j", "2", "--config", "{C}", "{S}"]
    env = {SPLIT: "3000"}
    ref = K.prepared(tmp_path / "ref", "crash-multifile-v5", F.torn_tail)
    original = K.tree(ref)
    one = K.prepared(tmp_path / "one", "crash-multifile-v5", F.torn_tail)
    assert run_cli(*K._argv(["recover", "-j", "1", "--config", "{C}", "{S}"], one)).returncode == 1
    r = run_cli(*K._argv(argv, ref), env=env)
    assert r.returncode == 1, r.stderr
    expected = K.tree(ref)
    assert expected != original and K.tree(one)[0] == expected[0]
    steps = K._journal_steps(ref)
    assert steps == K._journal_steps(one)
    for n in range(1, steps + 1):
        root = K.prepared(tmp_path / str(n), "crash-multifile-v5", F.torn_tail)
        r = run_cli(*K._argv(argv, root), env={**env, K.KILL: str(n)})
        assert r.returncode == 137, (n, r.stderr)
        r = run_cli(*K._argv(argv, root), env=env)
        assert r.returncode in (0, 1), (n, r.stderr)
        assert K.tree(root) == expected, f"killed after step {n} of {steps}"
        assert K._journal_steps(root) == steps
        if n == steps:     # undo after a kill is the same journal whatever -j (test_kill_resume covers each step)
            assert run_cli("undo", root).returncode == 0
            assert K.tree(root) == original, f"undo after kill at step {n}"


def test_deleted_topics_are_skipped_and_counted_the_same(tmp_path, monkeypatch):
    """rebuild's topics.json filter runs in the workers on their own copy: the skipped counts merged in the
    parent equal one process's (the plan lists them), and the skipped topic's queues are not built."""
    root = random_store(tmp_path / "s" / "store", 8, files=4)
    conf = root.parent / "manifest.json"
    (root / "config").mkdir()
    dv = {"counter": 1, "stateVersion": 0, "timestamp": 1700000000000}
    table = {t: {"topicName": t, "readQueueNums": 3, "writeQueueNums": 3, "perm": 6} for t in ("TopicA", "TopicB")}
    (root / "config" / "topics.json").write_text(json.dumps({"dataVersion": dv, "topicConfigTable": table}))
    monkeypatch.setenv(SPLIT, "2000")
    n = _walks(monkeypatch)
    got = {}
    for what in ("cq", "index"):
        a, got[what] = _rebuild(root, conf, what, 1, tmp_path), _rebuild(root, conf, what, 2, tmp_path)
        assert a == got[what]
        assert a["topics"]["skipped"].get("主题", 0) > 0, a["topics"]
    assert any("TopicA" in x["path"] for x in got["cq"]["actions"])
    assert not any("主题" in x["path"] for x in got["cq"]["actions"])
    assert n["walks"] == 2


def test_range_size_follows_the_share_and_the_bytes_in_flight(tmp_path, monkeypatch):
    """A range is a quarter of a worker's share, within [MIN_RANGE, RANGE_BYTES], and the ranges in flight (2 x
    jobs) hold IN_FLIGHT_BYTES at most, however many queues the store holds (a store of 8192 queues walked in whole
    files held a whole file's units in a worker and in the parent); RMQCTL_SPLIT_BYTES still rules. The rebuild of
    a store of many queues is -j 1's."""
    monkeypatch.delenv(SPLIT, raising=False)
    mib = 1 << 20
    assert P.range_bytes() == P.MIN_RANGE
    assert P.range_bytes(512 * mib, 2) == 64 * mib > P.MIN_RANGE
    assert P.range_bytes(1 << 40, 2) == min(P.RANGE_BYTES, P.IN_FLIGHT_BYTES // 4)
    assert P.range_bytes(1 << 40, 16) == max(P.MIN_RANGE, P.IN_FLIGHT_BYTES // 32)
    monkeypatch.setenv(SPLIT, "5000")
    assert P.range_bytes(1 << 40, 2) == 5000
    monkeypatch.delenv(SPLIT)
    root = F.make_store(tmp_path / "store", messages=1200, queues=40, file_size=1 << 20)
    conf = tmp_path / "manifest.json"
    conf.write_text(json.dumps({"store_config": {"mappedFileSizeCommitLog": 1 << 20,
                                                 "mappedFileSizeConsumeQueue": 64 * 20,
                                                 "maxHashSlotNum": 512, "maxIndexNum": 2048}}))
    sizes: list = []
    real = P._tasks
    monkeypatch.setattr(P, "_tasks", lambda visited, nbytes: sizes.append(nbytes) or real(visited, nbytes))
    monkeypatch.setattr(P, "RANGE_BYTES", 4096)
    monkeypatch.setattr(P, "MIN_RANGE", 4096)
    got = _rebuild(root, conf, "cq", 2, tmp_path / "j2")
    assert sizes == [4096]
    assert got == _rebuild(root, conf, "cq", 1, tmp_path / "j1")
