"""The 5.x compaction store (CompactionStore / CompactionLog / SparseConsumeQueue) as the broker reads it.

Per compaction queue <topic>/<qid>:
  compaction/compactionLog/<topic>/<qid>/<20 digits>  commitlog-format records (PHYSICALOFFSET = the position in
                                                      the compaction log, QUEUEOFFSET the original one)
  compaction/compactionCq/<topic>/<qid>/<20 digits>   46-byte units, one CQ file per log file, SAME NAME
  compaction/position-checkpoint                      {"queueOffsetMap": {"<topic>_<qid>": last compacted offset}}

What the broker does with them when it loads (CompactionStore.load -> CompactionLog.load -> TopicPartitionLog.init,
5.3.3; checked with the oracle, tests/test_compaction.py):
  * a log directory without its CQ directory (or a CQ directory without its log directory): the queue is not
    loaded; the files stay; the broker serves nothing of the queue from the compaction store and every later
    dispatch to it fails;
  * a file whose size differs from the configured size: the queue is not loaded (IOException, caught);
  * the CQ is recovered (SparseConsumeQueue.recover: per file, valid units from the start: offset >= 0,
    size > 0, msgBaseOffset >= 0, batchSize > 0); the last valid unit of the LAST CQ file gives maxPhyOffsetInLog
    (offset + size); log files that start after it are DELETED, the one holding it ends there;
  * then every log file must have a CQ file of the same name and vice versa, else load() of the whole broker
    fails ("log file mismatch with consumeQueue file"); a "*.delete" file left by an interrupted compaction also
    fails it.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from rmqctl.formats import batch_consumequeue as bcqf
from rmqctl.formats.compaction import (
    COMPACTION_CQ_DEFAULT_FILE_SIZE,
    COMPACTION_LOG_DEFAULT_FILE_SIZE,
    compaction_log_size,
)

UNIT = struct.Struct(">qiqqqhii")
UNIT_SIZE = bcqf.UNIT_SIZE
assert UNIT.size == UNIT_SIZE
END_UNIT = UNIT.pack(-1, 0, 0, 0, 0, 0, bcqf.INVALID_POS, 0)   # SparseConsumeQueue.putEndPositionInfo
LOG_DIR, CQ_DIR = "compactionLog", "compactionCq"
BLANK_MAGIC = -875286124
END_FILE_MIN_BLANK_LENGTH = 8


def unit_valid(u) -> bool:
    """SparseConsumeQueue.recover / getMax: offset >= 0, size > 0, msgBaseOffset >= 0, batchSize > 0."""
    return u[0] >= 0 and u[1] > 0 and u[4] >= 0 and u[5] > 0


@dataclass
class CFile:
    path: Path
    start: int
    size: int

    @property
    def name(self) -> str:
        return self.path.name


@dataclass
class CompactionQueue:
    root: Path
    topic: str
    queue_id: int
    log_dir: Path
    cq_dir: Path
    log_files: list = field(default_factory=list)
    cq_files: list = field(default_factory=list)
    strays: list = field(default_factory=list)       # paths whose name is not an offset
    last_entry: dict = field(default_factory=dict)   # "log"/"cq" -> name of the last directory entry
    has_log_dir: bool = False
    has_cq_dir: bool = False

    @property
    def key(self) -> str:
        return f"{self.topic}_{self.queue_id}"

    def read_cq(self, f: CFile, cq_size: int) -> list:
        with open(f.path, "rb") as fh:
            data = fh.read(min(f.size, cq_size))
        n = len(data) // UNIT_SIZE
        return [UNIT.unpack_from(data, i * UNIT_SIZE) for i in range(n)]


def _scan_dir(d: Path, root: Path, skip) -> tuple[list, list, str | None]:
    """(offset files, strays, name of the last entry): MappedFileQueue.load sorts every entry by name, skips
    directories (e.g. a leftover compacting/), deletes a 0-byte file only when it is the LAST entry. Links out of
    the store and special files are not read (skip(path, why))."""
    from rmqctl.store.files import read_refusal

    files, strays = [], []
    if not d.is_dir():
        return files, strays, None
    names = sorted(os.listdir(d))
    for n in names:
        p = d / n
        if p.is_dir():
            continue
        why = read_refusal(p, root)
        if why:
            skip(p, why)
            continue
        if n.isdigit():
            files.append(CFile(p, int(n), p.stat().st_size))
        else:
            strays.append(p)
    return files, strays, (names[-1] if names else None)


def queues(root: Path, skip=None) -> list[CompactionQueue]:
    """Every <topic>/<qid> with a log or a CQ directory (non-numeric queue directories skipped, as the broker).
    skip(path, why) is told of what is not read (links out of the store, special files)."""
    from rmqctl.store.files import inside

    skip = skip or (lambda p, why: None)
    base = Path(root) / "compaction"
    seen: dict = {}
    for sub in (LOG_DIR, CQ_DIR):
        d = base / sub
        if not d.is_dir():
            continue
        for t in sorted(os.listdir(d)):
            if not (d / t).is_dir():
                continue
            for q in os.listdir(d / t):
                if q.lstrip("-").isdigit() and (d / t / q).is_dir():
                    if not inside(d / t / q, root):
                        skip(d / t / q, f"symlink to {os.path.realpath(d / t / q)}, outside the store: not followed")
                        continue
                    seen[(t, int(q))] = True
    out = []
    for (t, q) in sorted(seen):
        cq = CompactionQueue(Path(root), t, q, base / LOG_DIR / t / str(q), base / CQ_DIR / t / str(q))
        cq.has_log_dir, cq.has_cq_dir = cq.log_dir.is_dir(), cq.cq_dir.is_dir()
        if not (inside(cq.log_dir, root) and inside(cq.cq_dir, root)):
            continue                      # the partner is a link out of the store: reported above
        cq.log_files, s1, cq.last_entry["log"] = _scan_dir(cq.log_dir, Path(root), skip)
        cq.cq_files, s2, cq.last_entry["cq"] = _scan_dir(cq.cq_dir, Path(root), skip)
        cq.strays = s1 + s2
        out.append(cq)
    return out


def _most_common(sizes: list) -> int | None:
    from collections import Counter

    if not sizes:
        return None
    (size, _), *_ = Counter(sizes).most_common(1)
    return size


@dataclass
class Sizes:
    cq: int
    log: int
    how: str


def sizes(root: Path, config=None) -> Sizes:
    """compactionCqMappedFileSize (rounded down to 46 B units) and the log size derived from it, from the broker
    config when given (a StoreConfig), else from the files present, else the defaults."""
    conf = {}
    if config is not None and getattr(config, "compaction_cq_file_size", None):
        conf["compactionCqMappedFileSize"] = config.compaction_cq_file_size
    if config is not None and getattr(config, "compaction_mapped_file_size", None):
        conf["compactionMappedFileSize"] = config.compaction_mapped_file_size
    cq = log = None
    how = []
    if "compactionCqMappedFileSize" in conf:
        cq = int(conf["compactionCqMappedFileSize"]) // UNIT_SIZE * UNIT_SIZE
        how.append("compactionCqMappedFileSize from the broker config")
    if "compactionMappedFileSize" in conf:
        log = compaction_log_size(int(conf["compactionMappedFileSize"]), cq or COMPACTION_CQ_DEFAULT_FILE_SIZE)
    qs = queues(root) if cq is None or log is None else []
    if cq is None:
        cq = _most_common([f.size for q in qs for f in q.cq_files if f.size > 0 and f.size % UNIT_SIZE == 0])
        how.append("compaction CQ file size from the files" if cq else "default compaction CQ file size")
        cq = cq or COMPACTION_CQ_DEFAULT_FILE_SIZE
    if log is None:
        log = _most_common([f.size for q in qs for f in q.log_files if f.size > 0 and f.size % cq == 0])
        log = log or (compaction_log_size(100 * 1024 * 1024, cq) if cq != COMPACTION_CQ_DEFAULT_FILE_SIZE
                      else COMPACTION_LOG_DEFAULT_FILE_SIZE)
    return Sizes(cq, log, "; ".join(how))


@dataclass
class Verdict:
    """What the broker's load does with one compaction queue."""
    loads: bool                     # the queue is loaded and served
    fails_broker: bool = False      # load() of the whole broker fails
    why: str = ""
    deletes: list = field(default_factory=list)        # log files the broker deletes at load
    cq_ends: dict = field(default_factory=dict)        # CQ file start -> valid bytes (recover)
    max_phy: int = -1                                   # maxPhyOffsetInLog
    log_end: int | None = None                          # where the log's write position ends (absolute)


def verdict(q: CompactionQueue, sz: Sizes) -> Verdict:
    if not q.has_cq_dir or not q.has_log_dir:
        missing = "compaction CQ" if not q.has_cq_dir else "compaction log"
        return Verdict(False, why=f"no {missing} directory: the broker does not load the queue (it serves nothing of "
                                  "it from the compaction store, later dispatches to it fail)")
    for which, files, want, d in (("log", q.log_files, sz.log, q.log_dir), ("cq", q.cq_files, sz.cq, q.cq_dir)):
        entries = sorted([(f.name, f.size, True) for f in files]
                         + [(p.name, p.stat().st_size, False) for p in q.strays if p.parent == d])
        for name, size, numeric in entries:
            if size == 0 and name == q.last_entry.get(which):
                continue          # the broker deletes it at load
            if size != want:
                return Verdict(False, why=f"{name}: {size} bytes, the broker expects {want} ({sz.how}): it does not "
                                          "load the queue (serves nothing of it from the compaction store)")
            if not numeric:
                return Verdict(False, True, why=f"{name}: not an offset name (a file the size of a "
                                                f"{'log' if which == 'log' else 'CQ'} file: the broker's load fails "
                                                "on its name" + ("; left by an interrupted compaction"
                                                                 if name.endswith(".delete") else "") + ")")
    cqf = [f for f in q.cq_files if f.size > 0]
    logf = [f for f in q.log_files if f.size > 0]
    v = Verdict(True)
    for i, f in enumerate(cqf):
        units = q.read_cq(f, sz.cq)
        n = 0
        while n < len(units) and unit_valid(units[n]):
            n += 1
        v.cq_ends[f.start] = n * UNIT_SIZE
        if i == len(cqf) - 1 and n:
            last = units[n - 1]
            v.max_phy = last[0] + last[1]
    if v.max_phy > 0:
        for f in logf:
            if f.start + sz.log > v.max_phy:
                if v.max_phy >= f.start:
                    v.log_end = v.max_phy
                else:
                    v.deletes.append(f)
    kept = [f for f in logf if f not in v.deletes]
    lnames, cnames = {f.name for f in kept}, {f.name for f in cqf}
    if lnames - cnames:
        v.loads, v.fails_broker = False, True
        v.why = ("log file(s) without a CQ file of the same name: " + ", ".join(sorted(lnames - cnames))
                 + ": the broker's load fails (log file mismatch with consumeQueue file)")
    elif cnames - lnames:
        v.loads, v.fails_broker = False, True
        v.why = ("CQ file(s) without a log file of the same name: " + ", ".join(sorted(cnames - lnames))
                 + ": the broker's load fails (consumeQueue file mismatch with log file)")
    return v


def cq_max_offset(q: CompactionQueue, sz: Sizes, v: Verdict) -> int:
    """getMaxOffsetInQueue after recovery: last valid unit of the last CQ file (else of the one before) + 1."""
    cqf = [f for f in q.cq_files if f.size > 0]
    for f in reversed(cqf[-2:]):
        n = v.cq_ends.get(f.start, 0) // UNIT_SIZE
        if n:
            u = q.read_cq(f, sz.cq)[n - 1]
            return u[4] + u[5]
    return 0


def position_checkpoint(root: Path) -> tuple[dict | None, str | None]:
    """queueOffsetMap of compaction/position-checkpoint (the .bak when the main cannot be parsed, as ConfigManager)."""
    from rmqctl import fastjson
    from rmqctl.errors import FormatError

    base = Path(root) / "compaction"
    for name in ("position-checkpoint", "position-checkpoint.bak"):
        p = base / name
        if not p.is_file() or p.stat().st_size == 0:
            continue
        try:
            doc = fastjson.loads(p.read_bytes(), p)
        except FormatError:
            continue
        m = doc.get("queueOffsetMap") if isinstance(doc, dict) else None
        if isinstance(m, dict):
            return m, name
    return None, None


def summarize(root: Path, config=None, topics: set | None = None) -> dict | None:
    """The compaction store at a glance (dump STORE): per queue its files, queue offsets, position and what the
    broker's load does with it (topics: rmqctl.config.topics.compaction_topics). None when the store has no
    compaction queue."""
    qs = queues(root)
    if not qs:
        return None
    sz = sizes(root, config)
    positions, _ = position_checkpoint(root)
    positions = positions or {}
    out = {"cq_file_size": sz.cq, "log_file_size": sz.log,
           "topics": sorted(topics) if topics is not None else None, "queues": []}
    for q in qs:
        v = verdict(q, sz)
        units = 0
        first = None
        for f in q.cq_files:
            if f.size == sz.cq:
                n = v.cq_ends.get(f.start, 0) // UNIT_SIZE
                units += n
                if first is None and n:
                    first = q.read_cq(f, sz.cq)[0][4]
        out["queues"].append({
            "topic": q.topic, "queue_id": q.queue_id,
            "log_files": [f.name for f in q.log_files], "cq_files": [f.name for f in q.cq_files],
            "units": units, "min_offset": first if first is not None else 0,
            "max_offset": cq_max_offset(q, sz, v) if v.loads else None,
            "position": positions.get(q.key),
            "broker_load": "loads" if v.loads and not v.deletes else (
                f"loads, deletes {', '.join(f.name for f in v.deletes)}" if v.loads else
                ("FAILS (the broker does not start)" if v.fails_broker else "not loaded")),
            **({"why": v.why} if v.why else {})})
    return out
