"""A store directory: where each file kind lives, what is present, and what is not supported."""
from __future__ import annotations

import os
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from rmqctl.errors import IOFailure, UnsupportedStoreError, UsageError
from rmqctl.formats import INDEX_NAME, checkpoint as ckf
from rmqctl.formats._derive import field_names, struct_format
from rmqctl.store.config import StoreConfig, commitlog_dir, infer
from rmqctl.store.files import FileQueue, inside, read_bytes, read_refusal
from rmqctl.store.lock import lock_state

CHECKPOINT_FIELDS = field_names(ckf.Checkpoint)
_CHECKPOINT = struct.Struct(struct_format(ckf.Checkpoint))


@dataclass
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    size: int = 0

    @property
    def min_timestamp(self) -> int:
        return ckf.min_timestamp(self.physic_msg_timestamp, self.logics_msg_timestamp)

    @property
    def min_timestamp_index(self) -> int:
        return ckf.min_timestamp_index(self.physic_msg_timestamp, self.logics_msg_timestamp,
                                       self.index_msg_timestamp)

    @classmethod
    def parse(cls, data: bytes) -> "Checkpoint":
        padded = data[:_CHECKPOINT.size].ljust(_CHECKPOINT.size, b"\0")
        return cls(*_CHECKPOINT.unpack(padded), size=len(data))


class Store:
    """A broker store root (the directory holding commitlog/, consumequeue/, checkpoint...)."""

    def __init__(self, root, config: StoreConfig | None = None):
        self.root = Path(root)
        self.config = infer(config or StoreConfig(), self.root)
        # paths the walkers did not follow or open (links out of the store, FIFOs...): path -> why
        self.not_followed: dict[Path, str] = {}
        self._queues_memo: dict | None = None      # kind -> queues, while listed_once

    def _skip(self, path: Path, why: str) -> None:
        self.not_followed.setdefault(Path(path), why)

    def _dir_ok(self, d: Path) -> bool:
        """A directory the walkers may enter: a real one, or a symlink resolving inside the store."""
        if os.path.islink(d):
            if not inside(d, self.root):
                self._skip(d, f"symlink to {os.path.realpath(d)}, outside the store: not followed")
                return False
        return d.is_dir()

    def _entry_dir_ok(self, e: os.DirEntry) -> bool:
        """_dir_ok for a scandir entry: a link is judged as _dir_ok does, anything else by its entry type."""
        if e.is_symlink():
            return self._dir_ok(Path(e.path))
        return e.is_dir(follow_symlinks=False)

    @classmethod
    def open(cls, root, config: StoreConfig | None = None, *, check_supported: bool = True,
             rocksdb: bool = False) -> "Store":
        root = Path(root)
        if not root.exists():
            raise UsageError("no such store directory", path=root)
        if not root.is_dir():
            raise UsageError("not a directory (give the store root, e.g. .../store)", path=root)
        store = cls(root, config)
        if check_supported:
            problems = store.unsupported(rocksdb=rocksdb)
            if problems:
                raise UnsupportedStoreError("; ".join(problems), path=root)
        return store

    # --- locations -------------------------------------------------------------------------
    @property
    def commitlog_dir(self) -> Path:
        if _dledger_reading():
            from rmqctl.store.dledger import find

            d = find(self.root)
            if d is not None:
                return d / "data"   # each message sits at its physical offset there (entry pos + 48)
        return commitlog_dir(self.config, self.root)

    @property
    def consumequeue_dir(self) -> Path:
        return self.root / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def checkpoint_path(self) -> Path:
        return self.root / "checkpoint"

    @property
    def abort_path(self) -> Path:
        return self.root / "abort"

    def looks_like_store(self) -> bool:
        return any((self.root / n).exists() for n in ("commitlog", "consumequeue", "checkpoint", "config", "index"))

    @property
    def engine(self) -> str:
        """'rocksdb' (storeType=defaultRocksDB: consume queues in a RocksDB at consumequeue/) or 'file'."""
        from rmqctl.store.rocksdb_cq import engine_of

        return engine_of(self.root)

    def unsupported(self, *, rocksdb: bool = False) -> list[str]:
        """Layouts rmqctl detects and refuses instead of misreading. rocksdb=True: the caller reads RocksDB
        consume queues and metadata (dump, verify, query, stats --engine local, config show)."""
        out = []
        if self.config.multi_path_commitlog:
            out.append("multi-path commitlog (storePathCommitLog lists several directories) is not supported")
        for p in self.root.iterdir() if self.root.is_dir() else []:
            if p.name.startswith("dledger") and not (p / "data").is_dir():
                out.append(f"DLedger directory ({p.name}/) without its data/ folder: no DLedger log to read")
            elif p.name.startswith("dledger") and not _dledger_reading():
                out.append(f"DLedger commitlog ({p.name}/): this command does not read it (dump, verify, query, "
                           "rebuild, stats, export and export --unconsumed do; recover says what DLedger's own "
                           "recovery will do)")
        # rocksdb=True: the storeType=defaultRocksDB layouts rmqctl reads (consumequeue/CURRENT, config/<table>/CURRENT)
        # are not refused; other RocksDB-looking directories still are
        rocks_cq = self.root / "consumequeue" / "rocksdb"
        cq_current = (self.root / "consumequeue" / "CURRENT").exists()
        if (self.root / "rocksdb").exists() or rocks_cq.exists() or (cq_current and not rocksdb):
            out.append("RocksDB consume queues (storeType=defaultRocksDB) are not supported by this command "
                       "(dump, verify, query, stats, export, export --unconsumed and config show read them)")
        for name in ("topics", "consumerOffsets", "subscriptionGroups"):
            d = self.config_dir / name
            if d.is_dir() and ((d / "CURRENT").exists() or any(d.glob("*.sst"))) and not (
                    rocksdb and (d / "CURRENT").is_file()):
                out.append(f"RocksDB metadata (config/{name}/) is not supported by this command")
        return out

    # --- commitlog -------------------------------------------------------------------------
    @cached_property
    def commitlog(self) -> FileQueue:
        # storePathCommitLog on another disk is part of the store by the broker's own config: links are judged
        # against that directory there
        d = self.commitlog_dir
        return FileQueue.scan(d, root=self.root if self.config.commitlog_path is None else d.parent)

    # --- consume queues --------------------------------------------------------------------
    def queues(self, kind: str = "consumequeue") -> list[tuple[str, int]]:
        """(topic, queueId) of every queue directory; non-numeric queue dirs are skipped like the broker does."""
        if kind == "consumequeue" and self.engine == "rocksdb":     # storeType=defaultRocksDB
            from rmqctl.store.rocksdb_cq import queue_ids

            return queue_ids(self.root)
        memo = self._queues_memo
        if memo is not None:
            if kind not in memo:
                memo[kind] = self._list_queues(kind)
            return list(memo[kind])
        return self._list_queues(kind)

    @contextmanager
    def listed_once(self):
        """While a repair plans, nothing in the store changes: its queue directories are listed once, not by
        every step that goes over the queues (a store may hold tens of thousands). Nested: the outer listing holds."""
        if self._queues_memo is not None:
            yield self
            return
        self._queues_memo = {}
        try:
            yield self
        finally:
            self._queues_memo = None

    def _list_queues(self, kind: str) -> list[tuple[str, int]]:
        base = self.root / kind
        out = []
        if not self._dir_ok(base):
            return out
        plain = set() if self._queues_memo is not None else None
        linked_base = plain is not None and os.path.islink(base)
        # the directory entries' types decide without a syscall (a store may hold tens of thousands of queues);
        # only a link is resolved and judged
        for te in sorted(os.scandir(base), key=lambda e: e.name):
            if not self._entry_dir_ok(te):
                continue
            linked = te.is_symlink()
            with os.scandir(te.path) as it:
                for qe in it:
                    if _is_int(qe.name) and self._entry_dir_ok(qe):
                        out.append((te.name, int(qe.name)))
                        if plain is not None and not linked_base and not linked and not qe.is_symlink():
                            plain.add(out[-1])
        out.sort(key=lambda tq: (tq[0], tq[1]))
        if plain is not None:
            self._queues_memo[("plain", kind)] = plain
        return out

    def queue_dir_plain(self, topic: str, queue_id: int, kind: str = "consumequeue") -> bool:
        """True when the listing of this plan (listed_once) saw <kind>/<topic>/<queue id> as a directory reached
        through no link: it lies inside the store without resolving anything. False when unknown."""
        return (topic, queue_id) in self.plain_queue_dirs(kind)

    def plain_queue_dirs(self, kind: str = "consumequeue") -> set:
        """Every (topic, queue id) queue_dir_plain holds for; empty outside listed_once."""
        memo = self._queues_memo
        if memo is None:
            return set()
        plain = memo.get(("plain", kind))
        if plain is None:
            if kind not in memo:
                self.queues(kind)       # lists the directories (not the RocksDB queues: they have none)
            plain = memo.setdefault(("plain", kind), set())
        return plain

    def queue_dir_entries(self, topic: str, queue_id: int) -> list | None:
        """The scandir entries of consumequeue/<topic>/<queue id> (None: no such directory), listed once per queue
        while a repair plans (listed_once: its size check and its queue states both read them)."""
        memo = self._queues_memo
        key = ("entries", topic, queue_id)
        if memo is not None and key in memo:
            return memo[key]
        try:
            with os.scandir(os.path.join(self.root, "consumequeue", topic, str(queue_id))) as it:
                got = list(it)
        except (FileNotFoundError, NotADirectoryError):
            got = None
        if memo is not None:
            memo[key] = got
        return got

    def consume_queue(self, topic: str, queue_id: int):
        """The queue's reader: rmqctl.store.batchcq.BatchQueue for a batch consume queue (5.x BatchCQ)."""
        from rmqctl.store.consumequeue import ConsumeQueue

        if (self.root / "batchconsumequeue" / topic / str(queue_id)).is_dir():
            from rmqctl.store.batchcq import BatchQueue

            return BatchQueue(self, topic, queue_id)

        return ConsumeQueue(self, topic, queue_id)

    # --- index -----------------------------------------------------------------------------
    def index_files(self) -> list[Path]:
        if not self._dir_ok(self.index_dir):
            return []
        out = []
        for n in sorted(n for n in os.listdir(self.index_dir) if INDEX_NAME.match(n)):
            p = self.index_dir / n
            why = read_refusal(p, self.root)
            if why:
                self._skip(p, why)
            else:
                out.append(p)
        return out

    # --- small files -----------------------------------------------------------------------
    def checkpoint(self) -> Checkpoint | None:
        why = read_refusal(self.checkpoint_path, self.root)
        if why:
            self._skip(self.checkpoint_path, why)
            return None
        try:
            data = read_bytes(self.checkpoint_path, self.root)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise IOFailure(e.strerror or str(e), path=self.checkpoint_path) from e
        return Checkpoint.parse(data)

    @property
    def abort_exists(self) -> bool:
        return self.abort_path.exists()

    def lock_state(self) -> str:
        return lock_state(self.root)


def _is_int(s: str) -> bool:
    try:
        int(s)
        return True
    except ValueError:
        return False


def find_store_root(path) -> Path:
    """Given any path inside a store, the store root (the directory holding commitlog/ etc.)."""
    p = Path(path).resolve()
    for cand in [p, *p.parents]:
        if (cand / "commitlog").is_dir() or (cand / "checkpoint").is_file():
            return cand
    raise UsageError("not inside a store (no commitlog/ or checkpoint found above it)", path=path)


def _dledger_reading() -> bool:
    from rmqctl.store.dledger import READING

    return READING.get()


# What makes a directory a store root (verify's check; the CLI and the Spark readers use it too).
STORE_MARKERS = ("commitlog", "consumequeue", "checkpoint", "config", "index")


def require_store(path) -> Path:
    """PATH must be a store root (what verify checks): a usage error (exit 2) otherwise."""
    p = Path(path)
    if not p.exists():
        raise UsageError("no such store directory", path=p)
    if not p.is_dir():
        raise UsageError("not a directory (give the store root, e.g. .../store)", path=p)
    if not any((p / n).exists() for n in STORE_MARKERS):
        raise UsageError("not a store directory (no commitlog/, consumequeue/, checkpoint, config/ or index/ here)",
                         path=p)
    return p
