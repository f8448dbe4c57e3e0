"""Byte declarations of every on-disk file of a RocketMQ store (installed as rmqctl.formats).

Only declarations live here: no I/O, no click, no rich. `KINDS` names every file kind with its
module and declaration; `kind_for_path` maps a path inside a store to its kind.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

OFFSET_NAME = re.compile(r"^\d{20}$")
INDEX_NAME = re.compile(r"^\d{17}$")


@dataclass(frozen=True)
class Kind:
    name: str
    module: str        # module under rmqctl.formats holding the declaration
    declaration: str   # its Construct declarations, comma-separated (record/unit/header first)
    fixed_size: int | None
    summary: str


KINDS = {k.name: k for k in [
    Kind("commitlog", "commitlog", "MessageRecord,BlankRecord", None,
         "commitlog/<20-digit start offset>: message records, BLANK record at the end of each full file"),
    Kind("consumequeue", "consumequeue", "ConsumeQueueUnit", None,
         "consumequeue/<topic>/<queueId>/<20-digit>: 20-byte units (phys offset, size, tagsCode)"),
    Kind("consumequeue_ext", "consumequeue_ext", "CqExtUnit", None,
         "consumequeue_ext/<topic>/<queueId>/<20-digit>: variable ext units (tagsCode, store time, bit map)"),
    Kind("batchconsumequeue", "batch_consumequeue", "BatchConsumeQueueUnit", None,
         "batchconsumequeue/<topic>/<queueId>/<20-digit>: 46-byte units (5.x BatchCQ topics)"),
    Kind("index", "index", "IndexHeader,IndexSlot,IndexItem", None,
         "index/<yyyyMMddHHmmssSSS>: 40-byte header, hash slots, 20-byte items"),
    Kind("checkpoint", "checkpoint", "Checkpoint", 4096,
         "checkpoint: physic/logics/index timestamps, master flushed and confirm offsets in 4096 bytes"),
    Kind("abort", "abort_lock", "Abort", None, "abort: present while a broker runs (empty or PID)"),
    Kind("lock", "abort_lock", "Lock", None, "lock: the broker holds an fcntl lock on byte 0"),
    Kind("timerlog", "timer", "TimerLogUnit,TimerLogBlank", None, "timerlog/<20-digit>: 52-byte timer units (5.x)"),
    Kind("timerwheel", "timer", "TimerWheelSlot", None, "timerwheel: 32-byte slots, 2*7*86400 of them (5.x)"),
    Kind("timercheck", "timer", "TimerCheckpoint", 4096, "config/timercheck: timer checkpoint (5.x)"),
    Kind("compaction_log", "commitlog", "MessageRecord,BlankRecord", None,
         "compaction/compactionLog/<topic>/<queueId>/<20-digit>: commitlog-format records (5.1+)"),
    Kind("compaction_cq", "batch_consumequeue", "BatchConsumeQueueUnit", None,
         "compaction/compactionCq/<topic>/<queueId>/<20-digit>: 46-byte sparse CQ units (5.1+)"),
    Kind("rocksdb_cq", "rocksdb_cq", "CqKey,CqValue,OffsetKey,OffsetValue,CheckpointValue", None,
         "consumequeue/ as a RocksDB (5.x storeType=defaultRocksDB): keys/values of its default and offset "
         "column families"),
    Kind("dledger_data", "dledger", "EntryHeader,BlankEntry", None,
         "dledger-<id>/data/<20-digit>: DLedger entries (48-byte header + one message record), blank at file end"),
    Kind("dledger_index", "dledger", "IndexUnit", None,
         "dledger-<id>/index/<20-digit>: 32-byte units (magic, pos, size, index, term), unit i = entry i"),
    Kind("dledger_checkpoint", "", "", None,
         "dledger-<id>/checkpoint, currterm (+ .bak): Properties text (endIndex, committedIndex / currTerm, "
         "voteLeader)"),
    Kind("config", "", "", None, "config/*.json (+ .bak): fastjson documents (topics, offsets, groups...)"),
]}


def kind_for_path(path) -> str | None:
    """The kind of a file from its path (works on absolute paths and paths inside a store)."""
    p = PurePath(path)
    name, parts = p.name, p.parts
    parent = parts[-2] if len(parts) >= 2 else ""
    if parent.startswith("dledger-") and name in ("checkpoint", "checkpoint.bak", "currterm", "currterm.bak"):
        return "dledger_checkpoint"
    if len(parts) >= 3 and parts[-3].startswith("dledger-") and OFFSET_NAME.match(name):
        if parent == "data":
            return "dledger_data"
        if parent == "index":
            return "dledger_index"
    if name == "checkpoint" and parent != "compaction":
        return "checkpoint"
    if name in ("abort", "abort.bak", "abort.tmp"):
        return "abort"
    if name == "lock":
        return "lock"
    if name == "timerwheel":
        return "timerwheel"
    if name in ("timercheck", "timercheck.bak"):
        return "timercheck"
    if name.endswith(".json") or name.endswith(".json.bak") or name in (
            "timermetrics", "timermetrics.bak", "transactionMetrics", "transactionMetrics.bak",
            "position-checkpoint", "position-checkpoint.bak"):
        return "config"
    for i in range(len(parts) - 2, -1, -1):
        d = parts[i]
        if d == "commitlog" and i == len(parts) - 2:
            return "commitlog"
        if d == "timerlog" and i == len(parts) - 2:
            return "timerlog"
        if d == "index" and i == len(parts) - 2:
            return "index"
        if d == "consumequeue" and i == len(parts) - 4:
            return "consumequeue"
        if d == "consumequeue_ext" and i == len(parts) - 4:
            return "consumequeue_ext"
        if d == "batchconsumequeue" and i == len(parts) - 4:
            return "batchconsumequeue"
        if d == "compactionLog" and i == len(parts) - 4:
            return "compaction_log"
        if d == "compactionCq" and i == len(parts) - 4:
            return "compaction_cq"
    return None
