"""Message sources for the store engines whose commitlog is not a plain file queue, in the shapes stats,
export and salvage consume.

DLedger (enableDLegerCommitLog=true): every message record sits inside a DLedger entry, at entry pos + 48
(rmqctl.store.dledger). The entries are walked as DLedger's recovery walks them; the records they wrap are
decoded by the same batch kernel as commitlog records (rmqctl.scanvec), over the wrapped records laid end to
end, and each row's physical_offset is the entry's message offset (what the broker's consume queue holds).
The walk ends at the entry log's end, or at the first wrapped record that fails the commitlog record checks
(like CommitLog.records(stop_at_bad=True)). The default engine runs dledger_kernel_batches over the whole log;
the Spark engine walks the entry headers on the driver (dledger_plan) and decodes one data file per task
(dledger_file_batches). rmqctl.spark.dataset turns the batches into the export rows; nothing here imports Spark.

RocksDB consume queues (storeType=defaultRocksDB): the commitlog is a plain file queue; what differs is where
the queues and the committed offsets live (rmqctl.store.rocksdb_cq).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path


def dledger_dir(store_root) -> Path | None:
    from rmqctl.store.dledger import find

    return find(store_root)


def _open_store(store_path, config):
    from rmqctl.store.dledger import READING
    from rmqctl.store.layout import Store

    token = READING.set(True)
    try:
        return Store.open(store_path, config)
    finally:
        READING.reset(token)


def _entry_batch_type():
    from dataclasses import dataclass

    import numpy as np

    from rmqctl.scanvec import Batch

    @dataclass
    class EntryBatch(Batch):
        """A kernel Batch over wrapped records laid end to end; `offset` is each record's place in the DLedger
        data files (entry pos + 48), not its place in the compacted buffer."""

        entry_offset: np.ndarray = None

        @property
        def offset(self):
            return self.entry_offset

    return EntryBatch


_EB = None


def dledger_kernel_batches(store_root, *, check_crc: bool = True, check_prop_crc: bool = True, info: dict | None = None,
                           progress=None):
    """Kernel Batches of the messages a DLedger log wraps, in entry order. `info` receives {"files", "stop",
    "entries"}: stop None while the walk is normal, else {"kind", "offset", "detail"}."""
    from rmqctl.store import dledger as dl

    info = {} if info is None else info
    info.update({"files": 0, "stop": None, "entries": 0})
    log = dl.DLedgerLog.open(dl.find(store_root))
    box: list = []
    seen = set()
    for path, entries, bodies in _by_file(log, box):
        if path not in seen:
            seen.add(path)
            info["files"] += 1
        info["entries"] += len(entries)
        bad = yield from _decode(path, entries, bodies, check_crc, check_prop_crc)
        if progress is not None:
            progress(sum(e.size for e in entries))
        if bad is not None:
            info["stop"] = bad
            return
    st = box[0] if box else None
    if st is not None and not st.normal:
        info["stop"] = {"kind": "dledger_" + st.kind.replace(" ", "_"), "offset": st.offset, "detail": st.detail}


def _decode(path, entries, bodies, check_crc, check_prop_crc):
    """EntryBatches of one run of entries of one data file (the bodies laid end to end, decoded by the batch
    kernel); returns None, or where and why the wrapped records stop being sound."""
    global _EB
    import numpy as np

    from rmqctl.scanvec import walk_file

    if _EB is None:
        _EB = _entry_batch_type()
    fstart = int(path.name)
    rels = np.array([e.pos - fstart + 48 for e in entries], np.int64)
    lens = np.array([e.body_length for e in entries], np.int64)
    cstart = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
    compact = b"".join(bodies)
    msg_off = rels + fstart
    fd = _memory_fd(compact)
    del compact
    bad = None
    try:
        gen = walk_file(fd, 0, int(lens.sum()), check_crc=check_crc, check_phys=False,
                        check_prop_crc=check_prop_crc, path=str(path))
        while True:
            try:
                bt = next(gen)
            except StopIteration as stop_:
                kst = stop_.value
                break
            at = bt.win_pos + bt.rel
            j = np.searchsorted(cstart, at)
            jc = np.minimum(j, len(cstart) - 1)
            ok = (j < len(cstart)) & (cstart[jc] == at) & (lens[jc] == bt.total_size)
            ok &= bt.physical_offset == msg_off[jc]
            k = len(at) if ok.all() else int(np.argmin(ok))
            if k:
                sub = _take_batch(bt, np.arange(len(at)) < k)
                yield _EB(**{f: getattr(sub, f) for f in sub.__dataclass_fields__}, entry_offset=msg_off[jc][:k])
            if k < len(at):
                i = int(jc[k])
                return {"kind": "dledger_message", "offset": int(msg_off[i]),
                        "detail": f"the message in entry {entries[i].index} is not the record the entry holds "
                                  "(size or physical offset differs)"}
        if kst is not None and kst.kind != "end":
            i = max(0, int(min(np.searchsorted(cstart, kst.pos, "right") - 1, len(cstart) - 1)))
            bad = {"kind": kst.kind, "offset": int(msg_off[i]),
                   "detail": f"the message in entry {entries[i].index}: {kst.detail or kst.kind}"}
    finally:
        os.close(fd)
    return bad


def dledger_plan(store_root):
    """Driver side of the Spark engine: ([(data file, start, size, entries DLedger's walk keeps in it)], the
    log's stop as {"kind", "offset", "detail"} or None when it ends normally)."""
    from rmqctl.store import dledger as dl

    log = dl.DLedgerLog.open(dl.find(store_root))
    box: list = []
    counts: dict = {}
    for e, _ in log.walk(box):
        counts[e.path] = counts.get(e.path, 0) + 1
    st = box[0] if box else None
    stop = None if st is None or st.normal else {"kind": "dledger_" + st.kind.replace(" ", "_"),
                                                  "offset": st.offset, "detail": st.detail}
    return [(str(f.path), f.start, f.size, counts[f.path]) for f in log.data if f.path in counts], stop


def dledger_file_batches(path, n_entries: int, *, check_crc=True, check_prop_crc=True):
    """Executor side: EntryBatches of the first n_entries entries of one data file (what DLedger's walk keeps
    there, planned by dledger_plan); returns None or the stop of its wrapped records (as _decode)."""
    from rmqctl.store import dledger as dl

    path = Path(path)
    log = dl.DLedgerLog(path.parent.parent, [dl.DFile(path, int(path.name), path.stat().st_size)], [])
    entries, bodies, n = [], [], 0
    for e, body in log.walk([], bodies=True):
        if len(entries) >= n_entries:
            break
        entries.append(e)
        bodies.append(body)
        n += len(body)
        if n >= CHUNK:
            bad = yield from _decode(path, entries, bodies, check_crc, check_prop_crc)
            if bad is not None:
                return bad
            entries, bodies, n = [], [], 0
    if entries:
        return (yield from _decode(path, entries, bodies, check_crc, check_prop_crc))
    return None


CHUNK = 16 << 20      # wrapped records decoded together (the kernel reads them in 8 MiB windows)


def _by_file(log, box):
    """(data file, entries, the bodies they wrap) in runs of up to CHUNK bytes within one data file, as DLedger's
    walk reaches them."""
    path, entries, bodies, n = None, [], [], 0
    for e, body in log.walk(box, bodies=True):
        if e.path != path or n >= CHUNK:
            if entries:
                yield path, entries, bodies
            path, entries, bodies, n = e.path, [], [], 0
        entries.append(e)
        bodies.append(body)
        n += len(body)
    if entries:
        yield path, entries, bodies


def _take_batch(bt, keep):
    """The Batch restricted to the rows where keep is True (every array field compressed)."""
    from dataclasses import fields, replace

    import numpy as np

    if keep.all():
        return bt
    return replace(bt, **{f.name: getattr(bt, f.name)[keep] for f in fields(bt)
                          if isinstance(getattr(bt, f.name), np.ndarray)})


def _memory_fd(data: bytes) -> int:
    """An fd over bytes in memory, for the pread-based kernel."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("rmqctl-dledger")
    else:
        import tempfile

        with tempfile.TemporaryFile() as f:
            fd = os.dup(f.fileno())
    mv = memoryview(data)
    done = 0
    while done < len(mv):
        done += os.write(fd, mv[done:done + (1 << 30)])
    return fd


def dledger_scan(store) -> dict:
    """What local_batches' `scan` gets for a DLedger store, less the summary: data bytes, consumerOffset.json."""
    from rmqctl.store.files import read_bytes, read_refusal

    data = dledger_dir(store.root) / "data"
    co = store.config_dir / "consumerOffset.json"
    offsets = None
    if co.exists() and not read_refusal(co, store.root):
        offsets = read_bytes(co, store.root)
    return {"bytes": sum(p.stat().st_size for p in data.iterdir() if p.is_file()), "consumer_offsets": offsets}


def open_store(store_path, config=None):
    """Store.open of a DLedger store (its consume queues, config and checkpoint are files)."""
    return _open_store(store_path, config)


def dledger_records(store, start: int = 0):
    """scan.Records of the messages a DLedger log wraps, from message offset `start` on (the salvage fallback
    pass): each checked like a commitlog record; the walk ends at the first that is not sound."""
    from rmqctl.store import dledger as dl

    box: list = []
    for e, rec, bad in dl.message_walk(dl.DLedgerLog.open(dl.find(store.root)), box, check_crc=False):
        if bad is not None:
            return
        if e.message_offset >= start:
            yield rec


def commitlog_records(store, cl, start):
    """The salvage fallback pass's records: the commitlog's, or the DLedger log's wrapped messages."""
    if dledger_dir(store.root) is not None:
        return dledger_records(store, start)
    return cl.records(start=start, check_crc=False, check_phys=False, stop_at_bad=True)


# --- RocksDB consume queues and offsets (storeType=defaultRocksDB) --------------------------------------------
def rocksdb_consumer_offsets(store_root) -> bytes | None:
    """consumerOffset.json's bytes from the RocksDB at config/consumerOffsets/ (None when there is none)."""
    if not (Path(store_root) / "config" / "consumerOffsets" / "CURRENT").is_file():
        return None
    from rmqctl.store.rocksdb_cq import offsets_json

    return offsets_json(store_root)


def rocksdb_document(store_root, name: str) -> dict | None:
    """The JSON file's document (consumerOffset, subscriptionGroup, topics) from its metadata RocksDB, or None."""
    from rmqctl.store.rocksdb_cq import CONFIG_TABLES, config_document, is_rocksdb_dir

    d = Path(store_root) / "config" / CONFIG_TABLES[name]
    if not is_rocksdb_dir(d):
        return None
    return config_document(name, d)[0]


class RocksQueues:
    """load_queue for a RocksDB store: views sharing one opened consume-queue RocksDB."""

    def __init__(self, store):
        from rmqctl.store.rocksdb_cq import ConsumeQueues

        self.cqs = ConsumeQueues.open(store.root, max(0, store.commitlog.min_offset))

    def view(self, topic: str, queue_id: int):
        cqs = self.cqs

        class View:
            files = [str(cqs.db.path)] if (topic, queue_id) in cqs.queues else []
            min_offset = cqs.min_offset(topic, queue_id) if files else 0
            max_offset = cqs.max_offset(topic, queue_id)
            rocksdb = True

            @staticmethod
            def unit_at(q):
                u = cqs.unit(topic, queue_id, q)
                return None if u is None else (u.phy_offset, u.size, u.tags_code)

            @staticmethod
            def close():
                pass

        return View()

    def close(self):
        self.cqs.close()


@contextmanager
def engine_reading(store_root):
    """While open, a DLedger store reads as its entries' messages (rmqctl.store.dledger.READING)."""
    from rmqctl.store.dledger import READING

    token = READING.set(True) if dledger_dir(store_root) is not None else None
    try:
        yield
    finally:
        if token is not None:
            READING.reset(token)
