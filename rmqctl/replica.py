"""Compare two replicas of a store (master and slave, or two backups), read-only, flat memory.

The common prefix of the two commitlogs is found without a full byte compare: the first record of
each commitlog file both sides hold is compared (a binary search over those files, since replicas
agree up to a point and never again after it), and only inside the last file whose first record
agrees are the records walked in lockstep and compared byte for byte.

What the broker's HA would do (RocketMQ store/ha):
* default mode: the slave reports its max physical offset, the master sends from there
  (DefaultHAConnection: nextTransferFromWhere = slaveRequestOffset, or the start of the master's last
  file when the slave is empty); the slave only checks that the pushed offset equals its own max
  offset (DefaultHAClient), never the contents -- so a diverged slave keeps its foreign records.
* controller mode (5.x AutoSwitchHA): the slave truncates its commitlog to the consistent point found
  by comparing the epoch files (AutoSwitchHAClient.doTruncate -> truncateFiles), then resumes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rmqctl.scan import FileWalk, Record
from rmqctl.store.commitlog import CommitLog, open_ro
from rmqctl.store.layout import Store
from rmqctl.terminal import progress


@dataclass
class Side:
    root: Path
    min_offset: int
    max_offset: int
    file_size: int
    confirm_offset: int | None
    files: int

    def as_dict(self) -> dict:
        return {"store": str(self.root), "min_offset": self.min_offset, "max_offset": self.max_offset,
                "bytes": max(0, self.max_offset - max(self.min_offset, 0)), "file_size": self.file_size,
                "files": self.files, "confirm_offset": self.confirm_offset}


def commitlog_max_offset(store: Store) -> int:
    """getMaxOffset after recovery: the last file's start + the end of its valid records."""
    files = store.commitlog.files
    if not files:
        return 0
    f = files[-1]
    size = store.config.commitlog_file_size
    end = f.start
    with open_ro(f.path) as fd:
        for r in FileWalk(fd, f.start, f.size, 0, min(f.size, size), path=str(f.path)):
            end = r.end
    return end


def _side(store: Store) -> Side:
    cp = store.checkpoint()
    return Side(store.root, store.commitlog.min_offset, commitlog_max_offset(store), store.config.commitlog_file_size,
                None if cp is None else cp.confirm_phy_offset, len(store.commitlog.files))


def _first_record(cl: CommitLog, offset: int, limit: int) -> Record | None:
    f = cl.queue.file_for(offset, cl.file_size)
    if f is None or offset >= limit:
        return None
    with open_ro(f.path) as fd:
        for r in FileWalk(fd, f.start, f.size, offset - f.start, min(f.size, cl.file_size, limit - f.start),
                          path=str(f.path)):
            return r
    return None


def describe(r: Record | None) -> dict | None:
    if r is None:
        return None
    p = r.properties
    return {"physical_offset": r.offset, "size": r.total_size, "topic": r.topic, "queue_id": r.queue_id,
            "queue_offset": r.queue_offset, "keys": p.get("KEYS"), "uniq_key": p.get("UNIQ_KEY"),
            "tags": p.get("TAGS"), "store_timestamp": r.store_timestamp, "body_crc": r.body_crc}


def _records(cl: CommitLog, start: int, end: int):
    """Valid records in [start, end), across files (BLANK ends a file)."""
    yield from cl.records(start, end, check_crc=True)


def common_prefix(a: Store, b: Store, sa: Side, sb: Side, stats: dict) -> int:
    """End of the longest common prefix over [max(min), min(max)); stats counts probes / bytes compared."""
    ca, cb = CommitLog(a), CommitLog(b)
    lo_off = max(sa.min_offset, sb.min_offset, 0)
    hi_off = min(sa.max_offset, sb.max_offset)
    if hi_off <= lo_off:
        return lo_off
    starts_b = {f.start for f in b.commitlog.files}
    common = [f.start for f in a.commitlog.files if f.start in starts_b and lo_off <= f.start < hi_off]
    if not common:
        return lo_off

    def same_first(start: int) -> bool:
        stats["probes"] += 1
        ra, rb = _first_record(ca, start, sa.max_offset), _first_record(cb, start, sb.max_offset)
        return ra is not None and rb is not None and ra.raw == rb.raw

    # last file (index) whose first record agrees; replicas agree on a prefix of files
    lo, hi, good = 0, len(common) - 1, -1
    while lo <= hi:
        mid = (lo + hi) // 2
        if same_first(common[mid]):
            good, lo = mid, mid + 1
        else:
            hi = mid - 1
    if good < 0:
        return common[0]
    start = common[good]
    file_end = min(start + sa.file_size, hi_off)
    pos = start
    ia, ib = _records(ca, start, file_end), _records(cb, start, file_end)
    with progress(file_end - start, "comparing") as bar:
        for ra in ia:
            rb = next(ib, None)
            if rb is None or rb.offset != ra.offset:
                return ra.offset
            stats["bytes_compared"] += ra.total_size
            bar.advance(ra.total_size)
            if ra.raw != rb.raw:
                return ra.offset
            pos = ra.end
    if next(ib, None) is not None:
        return pos
    # the whole file agrees: the next one's first record (if both have it) was already found to differ
    nxt = start + sa.file_size
    if nxt < hi_off:
        return nxt
    return hi_off if pos >= hi_off or file_end == hi_off else pos


def _count(cl: CommitLog, start: int, end: int) -> int:
    n, done = 0, start
    with progress(end - start, "counting") as bar:
        for r in cl.records(start, end, check_crc=False):
            n += 1
            if not n & 1023:
                bar.advance(r.offset - done)
                done = r.offset
    return n


def _queue_maxes(store: Store) -> dict:
    """Max offset of every consume queue and 5.x batch consume queue (counted in inner messages there)."""
    return {(t, q): store.consume_queue(t, q).max_offset()
            for kind in ("consumequeue", "batchconsumequeue") for t, q in store.queues(kind)}


def _offsets(store: Store) -> dict:
    from rmqctl.config import offsets as OF
    from rmqctl.config.files import load

    try:
        loaded = load(store.root, "consumerOffset")
    except Exception:  # noqa: BLE001 - no readable config dir: no offsets to compare
        return {}
    if not isinstance(loaded.doc, dict):
        return {}
    try:
        return {(r.group, r.topic, r.queue): r.offset for r in OF.rows(loaded.doc)}
    except Exception:  # noqa: BLE001 - a table the broker would not decode either
        return {}


def _topics(store: Store) -> dict:
    from rmqctl.config.files import load

    try:
        loaded = load(store.root, "topics")
    except Exception:  # noqa: BLE001
        return {}
    t = loaded.doc.get("topicConfigTable") if isinstance(loaded.doc, dict) else None
    return t if isinstance(t, dict) else {}


@dataclass
class Diff:
    a: Side
    b: Side
    verdict: str                  # identical | b_prefix | a_prefix | diverged | disjoint
    common_end: int
    ahead: dict = field(default_factory=dict)        # {"side", "messages", "bytes"}
    divergent: dict = field(default_factory=dict)    # {"a": record, "b": record}
    queues: list = field(default_factory=list)
    offsets: list = field(default_factory=list)
    topics: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    ha: str = ""
    notes: list = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return self.verdict in ("diverged", "disjoint")

    def verdict_line(self) -> str:
        if self.verdict == "identical":
            return "identical"
        if self.verdict in ("b_prefix", "a_prefix"):
            short, long_ = ("B", "A") if self.verdict == "b_prefix" else ("A", "B")
            return (f"{short} is a prefix of {long_} ({long_} ahead by {self.ahead['messages']} messages / "
                    f"{self.ahead['bytes']} bytes)")
        if self.verdict == "disjoint":
            return "no common range: the commitlogs do not overlap"
        return f"diverged at physical offset {self.common_end}"

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "verdict_line": self.verdict_line(), "a": self.a.as_dict(),
                "b": self.b.as_dict(), "common_prefix_end": self.common_end, "ahead": self.ahead or None,
                "first_divergent": self.divergent or None, "queues": self.queues, "consumer_offsets": self.offsets,
                "topics": self.topics, "ha": self.ha, "notes": self.notes, "stats": self.stats}


def _ha(verdict: str, d: Diff) -> str:
    if verdict == "identical":
        return "either replica can be promoted; a slave started on the other resumes with nothing to copy"
    if verdict in ("b_prefix", "a_prefix"):
        short, long_ = ("B", "A") if verdict == "b_prefix" else ("A", "B")
        off = d.b.max_offset if verdict == "b_prefix" else d.a.max_offset
        master = d.a if verdict == "b_prefix" else d.b
        if off == 0:
            last = master.max_offset - master.max_offset % master.file_size if master.file_size else 0
            return (f"promote {long_}; {short} is empty: as its slave it reports offset 0 and the master sends only "
                    f"from the start of its last commitlog file ({last}), not the older files -- copy those first "
                    f"if the slave must hold them")
        return (f"promote {long_}; {short} as its slave reports max offset {off} and the master sends from there "
                f"(it catches up the {d.ahead['bytes']} bytes); {short} as master would lose them")
    return (f"the broker's HA does not compare contents: a slave reports its max offset, the master sends from "
            f"there and the slave only checks that the offsets match, so the records after {d.common_end} on the "
            f"slave would stay foreign (consumers would read them). Keep one side as master and re-sync the other: "
            f"truncate its commitlog to {d.common_end} (and its consume queues/index beyond) or wipe it; in "
            f"controller mode (5.x) the slave truncates itself to the point its epoch file agrees with the master's")


def diff(root_a, root_b, config=None) -> Diff:
    a, b = Store.open(Path(root_a), config), Store.open(Path(root_b), config)
    sa, sb = _side(a), _side(b)
    stats = {"probes": 0, "bytes_compared": 0}
    notes = []
    if sa.file_size != sb.file_size and a.commitlog.files and b.commitlog.files:
        notes.append(f"commitlog file sizes differ ({sa.file_size} vs {sb.file_size}): not replicas of one store")
    end = common_prefix(a, b, sa, sb, stats)
    lo_off = max(sa.min_offset, sb.min_offset, 0)
    overlap = min(sa.max_offset, sb.max_offset) > lo_off
    if sa.min_offset != sb.min_offset:
        notes.append(f"min offsets differ ({sa.min_offset} vs {sb.min_offset}): compared from {lo_off}")
    d = Diff(sa, sb, "", end, stats=stats, notes=notes)
    ca, cb = CommitLog(a), CommitLog(b)
    if sa.max_offset == sb.max_offset and end >= sa.max_offset:
        d.verdict = "identical"
    elif end >= min(sa.max_offset, sb.max_offset) and (overlap or min(sa.max_offset, sb.max_offset) == lo_off):
        if sb.max_offset < sa.max_offset:
            d.verdict = "b_prefix"
            d.ahead = {"side": "A", "messages": _count(ca, end, sa.max_offset), "bytes": sa.max_offset - end}
        else:
            d.verdict = "a_prefix"
            d.ahead = {"side": "B", "messages": _count(cb, end, sb.max_offset), "bytes": sb.max_offset - end}
    elif not overlap:
        d.verdict = "disjoint"
    else:
        d.verdict = "diverged"
        d.divergent = {"a": describe(_first_record(ca, end, sa.max_offset)),
                       "b": describe(_first_record(cb, end, sb.max_offset)),
                       "a_after_bytes": sa.max_offset - end, "b_after_bytes": sb.max_offset - end}
    d.ha = _ha(d.verdict, d)
    qa, qb = _queue_maxes(a), _queue_maxes(b)
    d.queues = [{"topic": t, "queue_id": q, "a_max": qa.get((t, q)), "b_max": qb.get((t, q))}
                for t, q in sorted(set(qa) | set(qb))]
    oa, ob = _offsets(a), _offsets(b)
    d.offsets = [{"group": g, "topic": t, "queue_id": q, "a": oa.get((g, t, q)), "b": ob.get((g, t, q))}
                 for g, t, q in sorted(set(oa) | set(ob)) if oa.get((g, t, q)) != ob.get((g, t, q))]
    ta, tb = _topics(a), _topics(b)
    d.topics = {"only_a": sorted(set(ta) - set(tb)), "only_b": sorted(set(tb) - set(ta)),
                "changed": sorted(k for k in set(ta) & set(tb) if ta[k] != tb[k])}
    return d
