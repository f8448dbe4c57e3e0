"""recover / rebuild cq on a storeType=defaultRocksDB store: refused (exit 8) with what the broker redoes on start.

rmqctl does not write RocksDB offline: a write rewrites MANIFEST/SST files and compacts (nothing to journal and undo
byte-exact), and the binding's default SST format is one the broker's RocksDB 8.4.0 cannot read (docs/rocksdb.md).
"""
from __future__ import annotations

from rmqctl.errors import UnsupportedStoreError
from rmqctl.store.rocksdb_cq import ConsumeQueues, engine_of


def start_plan(store) -> str:
    """What the broker redoes on start for a RocksDB store (the plan rebuild cq / recover print when refusing)."""
    from rmqctl.dispatch import goes_to_consume_queue
    from rmqctl.store.commitlog import CommitLog

    with ConsumeQueues.open(store.root, max(0, store.commitlog.min_offset)) as c:
        ckpt = c.checkpoint if c.checkpoint is not None else 0
    n, queues, end = 0, set(), max(0, store.commitlog.min_offset)
    for r in CommitLog(store).records(check_crc=False, check_prop_crc=False):
        end = r.end
        if r.offset >= ckpt and goes_to_consume_queue(r.sys_flag):
            n += 1
            queues.add((r.topic, r.queue_id))
    how = "abnormal recovery (abort present)" if store.abort_exists else "normal recovery"
    if n:
        redo = (f"re-dispatches the commitlog from offset {ckpt} (the RocksDB's dispatch checkpoint) to {end}: "
                f"{n} message(s) into {len(queues)} queue(s)")
    else:
        redo = f"has nothing to re-dispatch (the RocksDB's dispatch checkpoint {ckpt} is at the commitlog end {end})"
    tail = f", and deletes the units beyond the commitlog end {end}" if ckpt > end else ""
    return f"on its next start ({how}) the broker {redo}{tail}"


def refuse_offline_write(store_dir, command: str) -> None:
    """rebuild cq / recover on a storeType=defaultRocksDB store: UnsupportedStoreError (exit 8) with the plan."""
    from rmqctl.store.layout import Store

    if engine_of(store_dir) != "rocksdb":
        return
    store = Store.open(store_dir, rocksdb=True)
    raise UnsupportedStoreError(
        f"{command}: the consume queues are in RocksDB (storeType=defaultRocksDB); rmqctl does not write RocksDB "
        f"offline (its SST/MANIFEST files cannot be journaled and undone byte-exact); plan: {start_plan(store)}",
        path=store_dir)
