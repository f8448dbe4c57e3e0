"""Read-only access to a storeType=defaultRocksDB store (5.x): the consume-queue RocksDB at store/consumequeue/ and
the metadata RocksDBs at store/config/{topics,subscriptionGroups,consumerOffsets}/ (layouts: formats/rocksdb_cq.py).

The binding (rocksdict, the `rocksdb` extra) is imported only here and only when such a store is read. Opening a
RocksDB, even read-only, writes into the directory (rocksdict adds rocksdict-config.json; RocksDB may write an info
LOG): every database is opened through a private view, a temporary directory holding symlinks to the immutable
SST/blob files and copies of the small mutable ones (CURRENT, MANIFEST, OPTIONS, IDENTITY, WAL). The store's own
bytes are never written.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rmqctl.errors import FormatError, UnsupportedStoreError
from rmqctl.formats import rocksdb_cq as F

INSTALL_HINT = "pip install 'rmqctl[rocksdb]'"
_IMMUTABLE = (".sst", ".blob")
_SKIP = ("LOCK",)


def is_rocksdb_dir(d) -> bool:
    d = Path(d)
    return d.is_dir() and (d / "CURRENT").is_file()


def engine_of(root) -> str:
    """'rocksdb' when the store's consume queues live in RocksDB (storeType=defaultRocksDB), else 'file'.

    A file store with rocksdbCQDoubleWriteEnable=true also opens a RocksDB at consumequeue/, beside the topic
    directories (DefaultMessageStore.enableRocksdbCQWrite uses the same store config); the broker serves the file
    queues there, so such a store counts as 'file' (its RocksDB copy is not read)."""
    cq = Path(root) / "consumequeue"
    if not is_rocksdb_dir(cq):
        return "file"
    try:
        topic_dirs = any(p.is_dir() for p in cq.iterdir())
    except OSError:
        topic_dirs = False
    return "file" if topic_dirs else "rocksdb"


def metadata_dirs(root) -> dict[str, Path]:
    base = Path(root) / "config"
    return {n: base / n for n in F.METADATA_DIRS if is_rocksdb_dir(base / n)}


def binding():
    try:
        import rocksdict
    except ImportError:
        raise UnsupportedStoreError(f"RocksDB store (storeType=defaultRocksDB): reading it needs the RocksDB "
                                    f"binding: {INSTALL_HINT}") from None
    return rocksdict


@contextmanager
def private_view(dbdir):
    """A temporary directory RocksDB may write into, standing for `dbdir` (which is only read)."""
    dbdir = Path(dbdir)
    tmp = Path(tempfile.mkdtemp(prefix="rmqctl-rocksdb-"))
    try:
        for p in sorted(dbdir.iterdir()):
            if not p.is_file() or p.name in _SKIP or p.name.startswith("LOG"):
                continue
            if p.name.endswith(_IMMUTABLE):
                os.symlink(p.resolve(), tmp / p.name)
            else:
                shutil.copyfile(p, tmp / p.name)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class RocksDB:
    """One RocksDB opened read-only through a private view; column families by name (raw bytes keys/values)."""

    def __init__(self, dbdir):
        self.path = Path(dbdir)
        rd = binding()
        self._view = private_view(self.path)
        tmp = self._view.__enter__()
        try:
            names = rd.Rdict.list_cf(str(tmp))
            opts = rd.Options(raw_mode=True)
            self.db = rd.Rdict(str(tmp), options=opts, access_type=rd.AccessType.read_only(),
                               column_families={n: rd.Options(raw_mode=True) for n in names if n != "default"})
        except Exception as e:       # the binding's own error types: one line naming the directory
            self._view.__exit__(None, None, None)
            if isinstance(e, UnsupportedStoreError):
                raise
            raise FormatError(f"cannot open this RocksDB read-only: {str(e).splitlines()[0] if str(e) else e!r}",
                              path=self.path) from None
        self.column_families = names

    def cf(self, name: str):
        if name == "default":
            return self.db
        if name not in self.column_families:
            return None
        return self.db.get_column_family(name)

    def items(self, name: str = "default", prefix: bytes | None = None):
        c = self.cf(name)
        if c is None:
            return
        it = c.iter()
        if prefix is None:
            it.seek_to_first()
        else:
            it.seek(prefix)
        while it.valid():
            k = it.key()
            if prefix is not None and not k.startswith(prefix):
                break
            yield k, it.value()
            it.next()

    def get(self, key: bytes, name: str = "default"):
        c = self.cf(name)
        return None if c is None else c.get(key)

    def close(self):
        try:
            self.db.close()
        finally:
            self._view.__exit__(None, None, None)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


# --- key/value parsing (sizes and field order from formats/rocksdb_cq.py) ------------------------------------------
_CQV = struct.Struct(">qiqq")
_OFFV = struct.Struct(">qq")
assert _CQV.size == F.CQ_VALUE_SIZE and _OFFV.size == F.OFFSET_VALUE_SIZE


def cq_key(topic: str, queue_id: int, queue_offset: int) -> bytes:
    """formats.rocksdb_cq.CqKey built with struct (the hot path of verify and query; tests check both agree)."""
    t = topic.encode()
    return struct.pack(f">Ic{len(t)}scicq", len(t), F.CTRL_1, t, F.CTRL_1, queue_id, F.CTRL_1,
                       queue_offset)


@dataclass
class Unit:
    topic: str
    queue_id: int
    queue_offset: int
    phy_offset: int
    size: int
    tags_code: int
    store_timestamp: int


@dataclass
class Bad:
    """A key or value that does not follow the declared layout."""
    cf: str
    key: bytes
    why: str


def parse_cq(k: bytes, v: bytes):
    if len(k) < F.CQ_KEY_FIXED:
        return Bad(F.CQ_COLUMN_FAMILY, k, f"key of {len(k)} bytes, shorter than the fixed {F.CQ_KEY_FIXED}")
    (tl,) = struct.unpack_from(">I", k, 0)
    if len(k) != F.CQ_KEY_FIXED + tl:
        return Bad(F.CQ_COLUMN_FAMILY, k, f"key of {len(k)} bytes, topic length {tl} says {F.CQ_KEY_FIXED + tl}")
    if k[4:5] != F.CTRL_1 or k[5 + tl:6 + tl] != F.CTRL_1 or k[10 + tl:11 + tl] != F.CTRL_1:
        return Bad(F.CQ_COLUMN_FAMILY, k, "key separator bytes are not 0x01")
    try:
        topic = k[5:5 + tl].decode()
    except UnicodeDecodeError:
        return Bad(F.CQ_COLUMN_FAMILY, k, "topic is not UTF-8")
    (qid,) = struct.unpack_from(">i", k, 6 + tl)
    (qoff,) = struct.unpack_from(">q", k, 11 + tl)
    if len(v) != F.CQ_VALUE_SIZE:
        return Bad(F.CQ_COLUMN_FAMILY, k, f"value of {len(v)} bytes, expected {F.CQ_VALUE_SIZE} "
                                          f"({topic}/{qid} offset {qoff})")
    phy, size, tags, ts = _CQV.unpack(v)
    return Unit(topic, qid, qoff, phy, size, tags, ts)


@dataclass
class OffsetEntry:
    topic: str
    kind: str           # "max" / "min"
    queue_id: int
    phy_offset: int
    queue_offset: int | None   # None for CHECKPOINT_TOPIC (8-byte value)


def parse_offset(k: bytes, v: bytes):
    cf = F.OFFSET_COLUMN_FAMILY
    if len(k) <= F.OFFSET_KEY_FIXED:
        return Bad(cf, k, f"key of {len(k)} bytes, not longer than the fixed {F.OFFSET_KEY_FIXED}")
    (tl,) = struct.unpack_from(">I", k, 0)
    if len(k) != F.OFFSET_KEY_FIXED + tl:
        return Bad(cf, k, f"key of {len(k)} bytes, topic length {tl} says {F.OFFSET_KEY_FIXED + tl}")
    if k[4:5] != F.CTRL_1 or k[5 + tl:6 + tl] != F.CTRL_1 or k[9 + tl:10 + tl] != F.CTRL_1:
        return Bad(cf, k, "key separator bytes are not 0x01")
    try:
        topic = k[5:5 + tl].decode()
    except UnicodeDecodeError:
        return Bad(cf, k, "topic is not UTF-8")
    kind = k[6 + tl:9 + tl]
    if kind not in (F.MAX, F.MIN):
        return Bad(cf, k, f"entry kind {kind!r}, expected b'max' or b'min'")
    (qid,) = struct.unpack_from(">i", k, 10 + tl)
    if topic == F.CHECKPOINT_TOPIC:
        if len(v) != 8:
            return Bad(cf, k, f"dispatch checkpoint value of {len(v)} bytes, expected 8")
        return OffsetEntry(topic, kind.decode(), qid, struct.unpack(">q", v)[0], None)
    if len(v) != F.OFFSET_VALUE_SIZE:
        return Bad(cf, k, f"value of {len(v)} bytes, expected {F.OFFSET_VALUE_SIZE} ({topic}/{qid} {kind.decode()})")
    phy, qoff = _OFFV.unpack(v)
    return OffsetEntry(topic, kind.decode(), qid, phy, qoff)


@dataclass
class QueueInfo:
    topic: str
    queue_id: int
    max_entry: OffsetEntry | None = None
    min_entry: OffsetEntry | None = None
    first: int | None = None        # lowest / highest unit key present (filled by a scan)
    last: int | None = None
    units: int = 0

    @property
    def max_offset(self) -> int:
        """getMaxOffsetInQueue: the max entry's queue offset + 1 (0 without one)."""
        return 0 if self.max_entry is None else self.max_entry.queue_offset + 1


@dataclass
class ConsumeQueues:
    """The consume-queue RocksDB of a store: offset table, checkpoint, units on demand."""
    db: RocksDB
    commitlog_min: int = 0
    queues: dict = field(default_factory=dict)
    checkpoint: int | None = None
    bad: list = field(default_factory=list)

    @classmethod
    def open(cls, root, commitlog_min: int = 0) -> ConsumeQueues:
        db = RocksDB(Path(root) / "consumequeue")
        self = cls(db, commitlog_min)
        if F.OFFSET_COLUMN_FAMILY not in db.column_families:
            self.bad.append(Bad(F.OFFSET_COLUMN_FAMILY, b"", "the offset column family is missing"))
        for k, v in db.items(F.OFFSET_COLUMN_FAMILY):
            e = parse_offset(k, v)
            if isinstance(e, Bad):
                self.bad.append(e)
                continue
            if e.topic == F.CHECKPOINT_TOPIC:
                self.checkpoint = e.phy_offset
                continue
            q = self.queues.setdefault((e.topic, e.queue_id), QueueInfo(e.topic, e.queue_id))
            setattr(q, "max_entry" if e.kind == "max" else "min_entry", e)
        return self

    def close(self):
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def units(self, topic: str | None = None, queue_id: int | None = None):
        """Every unit (or Bad) in key order; one queue with topic+queue_id (a prefix seek)."""
        prefix = F.cq_queue_prefix(topic, queue_id) if topic is not None and queue_id is not None else None
        for k, v in self.db.items(F.CQ_COLUMN_FAMILY, prefix):
            u = parse_cq(k, v)
            if topic is not None and isinstance(u, Unit) and u.topic != topic:
                continue
            yield u

    def unit(self, topic: str, queue_id: int, queue_offset: int) -> Unit | None:
        k = cq_key(topic, queue_id, queue_offset)
        v = self.db.get(k)
        if v is None:
            return None
        u = parse_cq(k, v)
        if isinstance(u, Bad):
            raise FormatError(u.why, path=self.db.path, field=f"{topic}/{queue_id} offset {queue_offset}")
        return u

    def unit_or_bad(self, topic: str, queue_id: int, queue_offset: int):
        """The unit, a Bad (malformed value) or None, by a point lookup."""
        k = cq_key(topic, queue_id, queue_offset)
        v = self.db.get(k)
        return None if v is None else parse_cq(k, v)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """getMinCqOffset (RocksDBConsumeQueueOffsetTable): the min entry while its message is still in the
        commitlog; else correctMinCqOffset: the max entry's offset + 1 when even the last unit is expired, else the
        broker's binary search (binarySearchInCQ, min=true) for the first unit at or after the commitlog's min offset
        from the min entry's offset (0 without one). That search steps over a missing unit as if it were below the
        target, so a hole in a queue makes the broker's min offset jump past it (the units before are not served)."""
        q = self.queues.get((topic, queue_id))
        cl_min = self.commitlog_min
        lo = 0
        if q is not None and q.min_entry is not None:
            if q.min_entry.phy_offset >= cl_min:
                return q.min_entry.queue_offset
            lo = q.min_entry.queue_offset
        if q is None or q.max_entry is None:
            return 0
        mx = q.max_entry
        if mx.phy_offset < cl_min:
            return mx.queue_offset + 1
        low, high, result = lo, mx.queue_offset, -1
        while high >= low:
            mid = low + ((high - low) >> 1)
            u = self.unit(topic, queue_id, mid)
            if u is None:
                low = mid + 1
                continue
            if u.phy_offset == cl_min:
                result = mid
                break
            if u.phy_offset > cl_min:
                high, result = mid - 1, mid
            else:
                low = mid + 1
        # no unit found: the broker records the max entry as the min (what every later call returns)
        return mx.queue_offset if result == -1 else result

    def max_offset(self, topic: str, queue_id: int) -> int:
        q = self.queues.get((topic, queue_id))
        return 0 if q is None else q.max_offset

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """RocksDBConsumeQueueStore.getOffsetInQueueByTime(..., LOWER): binary search over the store times in the
        unit values (binarySearchInCQByTime); 0 for a queue without a max entry."""
        q = self.queues.get((topic, queue_id))
        if q is None or q.max_entry is None:
            return 0
        low, high = self.min_offset(topic, queue_id), q.max_entry.queue_offset
        ceiling, floor = high, low
        u = self.unit(topic, queue_id, ceiling)
        if u is not None and u.store_timestamp < timestamp:
            return ceiling + 1
        u = self.unit(topic, queue_id, floor)
        if u is not None and u.store_timestamp > timestamp:
            return floor
        target, right = -1, -1
        while high >= low:
            mid = low + ((high - low) >> 1)
            u = self.unit(topic, queue_id, mid)
            if u is None:
                low = mid + 1
                continue
            if u.phy_offset < self.commitlog_min:
                low = mid + 1
                continue
            if u.store_timestamp < 0:
                return 0
            if u.store_timestamp == timestamp:
                target = mid
                break
            if u.store_timestamp > timestamp:
                high, right = mid - 1, mid
            else:
                low = mid + 1
        if target == -1:
            return right
        while target - 1 >= floor:
            u = self.unit(topic, queue_id, target - 1)
            if u is None or u.store_timestamp != timestamp:
                break
            target -= 1
        return target


def read_metadata(root) -> dict:
    """{table: {"entries": {key: document}, "data_version": ..., "forbidden": {...}, "bad": [...]}} of the
    metadata RocksDBs present under store/config/."""
    return {name: read_metadata_one(d) for name, d in metadata_dirs(root).items()}


def read_metadata_one(d) -> dict:
    t: dict = {"path": str(d), "entries": {}, "bad": []}
    if True:
        with RocksDB(d) as db:
            for k, v in db.items("default"):
                key = k.decode("utf-8", "replace")
                try:
                    t["entries"][key] = json.loads(v)
                except ValueError as e:
                    t["bad"].append(f"{key}: value is not JSON ({e})")
            dv = db.get(F.KV_DATA_VERSION_KEY, "kvDataVersion")
            t["data_version"] = None
            if dv is not None:
                try:
                    t["data_version"] = json.loads(dv)
                except ValueError:
                    t["bad"].append("kvDataVersion: value is not JSON")
            forb = {}
            for k, v in db.items("forbidden"):
                try:
                    forb[k.decode("utf-8", "replace")] = json.loads(v)
                except ValueError:
                    t["bad"].append(f"forbidden {k!r}: value is not JSON")
            if forb:
                t["forbidden"] = forb
    return t


def offsets_table(meta: dict) -> dict:
    """consumerOffsets as the JSON store's offsetTable: {"topic@group": {queueId: offset}}."""
    t = meta.get("consumerOffsets", {}).get("entries", {})
    return {k: {int(q): o for q, o in (v.get("offsetTable") or {}).items()} for k, v in t.items()
            if isinstance(v, dict)}


def rocksdb_version(dbdir) -> str | None:
    """The RocksDB version that last wrote the database: `rocksdb_version=` of its newest OPTIONS file (evidence of
    the broker's rocketmq-rocksdb; 5.3.3 ships rocketmq-rocksdb 1.0.2, RocksDB 8.4.0). Read as text, no binding."""
    opts = sorted(Path(dbdir).glob("OPTIONS-*"), key=lambda p: (len(p.name), p.name))
    if not opts:
        return None
    try:
        with open(opts[-1], "rb") as f:
            head = f.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    for line in head.splitlines():
        line = line.strip()
        if line.startswith("rocksdb_version="):
            return line.split("=", 1)[1]
    return None


def summarize(store) -> dict:
    """The `rocksdb` part of `dump STORE` and its consume_queues list (in the file-store shape)."""
    root = store.root
    out: dict = {}
    cqs = []
    if is_rocksdb_dir(root / "consumequeue"):
        with ConsumeQueues.open(root, store.commitlog.min_offset) as c:
            for (t, q), info in sorted(c.queues.items()):
                cqs.append({"topic": t, "queue_id": q, "files": 0, "min_offset": c.min_offset(t, q),
                            "max_offset": info.max_offset})
            out["consume_queues"] = {
                "path": str(root / "consumequeue"), "rocksdb_version": rocksdb_version(root / "consumequeue"),
                "column_families": c.db.column_families, "queues": len(c.queues),
                "dispatched_up_to": c.checkpoint, "malformed_entries": len(c.bad)}
    meta = {}
    for name, d in metadata_dirs(root).items():
        try:
            m = read_metadata_one(d)
            meta[name] = {"entries": len(m["entries"]), "data_version": m["data_version"],
                          "rocksdb_version": rocksdb_version(d), "problems": m["bad"]}
        except FormatError as e:
            meta[name] = {"entries": 0, "data_version": None, "rocksdb_version": rocksdb_version(d),
                          "problems": [str(e)]}
    if meta:
        out["metadata"] = meta
    return {"rocksdb": out, "consume_queues": cqs}


def dump_dir(d, *, topic: str | None = None, queue: int | None = None, skip: int = 0, count: int | None = None):
    """`dump DIR` of one RocksDB directory: the consume-queue RocksDB (units, then the offset column family) or a
    metadata RocksDB (every entry of every column family), as dump items."""
    d = Path(d)
    items = _dump_cq(d, topic, queue) if d.name == "consumequeue" else _dump_meta(d)
    n = 0
    for i, it in enumerate(items):
        if i < skip:
            continue
        if count is not None and n >= count:
            return
        n += 1
        yield it


def _bad_item(b: Bad) -> dict:
    return {"kind": "rocksdb_malformed", "column_family": b.cf, "key": b.key.hex(), "problem": b.why}


def _dump_cq(d: Path, topic, queue):
    with ConsumeQueues.open(d.parent) as c:
        for u in c.units(topic, queue):
            if isinstance(u, Bad):
                yield _bad_item(u)
            elif queue is None or u.queue_id == queue:
                yield {"kind": "rocksdb_cq_unit", "topic": u.topic, "queue_id": u.queue_id,
                       "queue_offset": u.queue_offset, "physical_offset": u.phy_offset, "size": u.size,
                       "tags_code": u.tags_code, "store_timestamp": u.store_timestamp}
        for b in c.bad:
            yield _bad_item(b)
        for (t, q), info in sorted(c.queues.items()):
            if (topic is not None and t != topic) or (queue is not None and q != queue):
                continue
            for e in (info.min_entry, info.max_entry):
                if e is not None:
                    yield {"kind": "rocksdb_cq_offset", "topic": t, "queue_id": q, "entry": e.kind,
                           "physical_offset": e.phy_offset, "queue_offset": e.queue_offset}
        if c.checkpoint is not None and topic is None:
            yield {"kind": "rocksdb_checkpoint", "dispatched_up_to": c.checkpoint}


def _dump_meta(d: Path):
    with RocksDB(d) as db:
        for cf in db.column_families:
            for k, v in db.items(cf):
                try:
                    val = json.loads(v)
                except ValueError:
                    val = v.decode("utf-8", "replace")
                yield {"kind": "rocksdb_metadata", "table": d.name, "column_family": cf,
                       "key": k.decode("utf-8", "replace"), "value": val}


class RocksQueueView:
    """One RocksDB consume queue in the shape of timesearch.QueueView (what query reads): min/max offsets as the
    broker serves them, unit_at(q) -> (commitlog offset, size, tagsCode), the broker's search by time."""

    def __init__(self, store, topic: str, queue_id: int):
        self.topic, self.queue_id = topic, queue_id
        self.cqs = ConsumeQueues.open(store.root, max(0, store.commitlog.min_offset))
        self.reads = 0
        self.notes: list = []
        known = (topic, queue_id) in self.cqs.queues
        self.files = [str(self.cqs.db.path)] if known else []
        self.min_offset = self.cqs.min_offset(topic, queue_id) if known else 0
        self.max_offset = self.cqs.max_offset(topic, queue_id)

    def unit_at(self, q: int):
        self.reads += 1
        u = self.cqs.unit(self.topic, self.queue_id, q)
        return None if u is None else (u.phy_offset, u.size, u.tags_code)

    def offset_by_time(self, timestamp: int) -> int:
        return self.cqs.offset_by_time(self.topic, self.queue_id, timestamp)

    def close(self):
        self.cqs.close()


def queue_ids(root) -> list[tuple[str, int]]:
    """(topic, queueId) of every queue with an entry in the offset column family or a unit."""
    with ConsumeQueues.open(root) as c:
        return sorted(c.queues)


def offsets_json(root) -> bytes:
    """The RocksDB consumer offsets in consumerOffset.json's shape ({"offsetTable": {"topic@group": {q: o}}})."""
    return json.dumps({"offsetTable": offsets_table(read_metadata(root))}).encode()


# config name (as `rmqctl config` names the JSON files) -> metadata RocksDB directory under config/
CONFIG_TABLES = {"topics": "topics", "subscriptionGroup": "subscriptionGroups", "consumerOffset": "consumerOffsets"}


def config_table(target, name: str | None):
    """(config name, RocksDB dir) when `config show TARGET [NAME]` names a metadata RocksDB, else None. TARGET is a
    store, its config/ or the RocksDB directory itself; a broker with storeType=defaultRocksDB loads these
    RocksDBs (the JSON files are merged in only when the RocksDB has no data)."""
    target = Path(target)
    rev = {v: k for k, v in CONFIG_TABLES.items()}
    if is_rocksdb_dir(target) and target.name in rev and name is None:
        return rev[target.name], target
    if name is None or not target.is_dir():
        return None
    key = name.removesuffix(".json")
    if key not in CONFIG_TABLES:
        return None
    for cdir in (target / "config", target):
        d = cdir / CONFIG_TABLES[key]
        if is_rocksdb_dir(d):
            return key, d
    return None


def config_document(name: str, d) -> tuple[dict, dict]:
    """(document in the JSON file's shape, summary) of one metadata RocksDB: topics -> topicConfigTable,
    subscriptionGroup -> subscriptionGroupTable (+ forbiddenTable), consumerOffset -> offsetTable."""
    m = read_metadata_one(d)
    dv = m.get("data_version")
    if name == "topics":
        doc = {"topicConfigTable": m["entries"]}
    elif name == "subscriptionGroup":
        doc = {"subscriptionGroupTable": m["entries"], "forbiddenTable": m.get("forbidden", {})}
    else:
        doc = {"offsetTable": {k: (v.get("offsetTable") if isinstance(v, dict) else v)
                               for k, v in m["entries"].items()}}
    if dv is not None:
        doc["dataVersion"] = dv
    size = sum(p.stat().st_size for p in Path(d).iterdir() if p.is_file())
    return doc, {"entries": len(m["entries"]), "problems": m["bad"], "size": size}
