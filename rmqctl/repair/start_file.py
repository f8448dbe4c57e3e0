"""Where the broker's abnormal recovery starts and where valid data resumes after a stop
(docs/recovery.md, "Where recovery starts")."""
from __future__ import annotations

import os

from rmqctl import writers
from rmqctl.formats import commitlog as clf
from rmqctl.repair.sparse import last_nonzero
from rmqctl.scan import BLANK_RECORD, FileWalk, find_next_record
from rmqctl.store.commitlog import open_ro

# bytes read from a file's start: enough for STORETIMESTAMP after an IPv6 BORNHOST
FIRST_RECORD_PROBE = writers.store_timestamp_offset(clf.BORNHOST_V6_FLAG) + writers.I64.size


def first_record_timestamp(path) -> tuple[int, int] | None:
    """(magic, storeTimestamp) of a file's first record, as isMappedFileMatchedRecover reads them."""
    with open_ro(path) as fd:
        head = os.pread(fd, FIRST_RECORD_PROBE, 0)
    if len(head) < FIRST_RECORD_PROBE:
        return None
    fields = dict(zip(writers.MESSAGE_HEAD_FIELDS, writers.MESSAGE_HEAD.unpack_from(head)))
    ts = writers.I64.unpack_from(head, writers.store_timestamp_offset(fields["sys_flag"]))[0]
    return fields["magic_code"], ts


def broker_start_file(store, files, ckpt) -> tuple[int, str]:
    """recoverAbnormally's start file: the last file whose first record has a message magic, a
    non-zero store timestamp <= checkpoint.getMinTimestamp(); else file 0."""
    min_ts = ckpt.min_timestamp if ckpt is not None else 0
    for i in range(len(files) - 1, -1, -1):
        f = files[i]
        if f.size < FIRST_RECORD_PROBE:
            continue
        mt = first_record_timestamp(f.path)
        if mt is None:
            continue
        magic, ts = mt
        if magic not in clf.MESSAGE_MAGIC_CODES or ts == 0:
            continue
        if ts <= min_ts:
            return i, (f"first record stored at {ts} <= checkpoint min timestamp {min_ts} "
                       "(min(physic, logics) - 3 s)")
    return 0, f"no file's first record is older than the checkpoint min timestamp {min_ts}: full scan from file 0"


def find_resume(store, files, f, stop, fsize) -> int | None:
    """Where valid data resumes after a stop: a resync point in the same file, else the first record of
    a later file (a file whose first record is valid and self-located)."""
    with open_ro(f.path) as fd:
        # nothing but zeros after the stop (the usual unwritten tail): no record can start there
        if last_nonzero(fd, stop.pos + 1, f.size) <= stop.pos + 1:
            nxt = None
        else:
            nxt = find_next_record(fd, f.start, f.size, stop.pos)
    if nxt is not None and stop.kind not in (BLANK_RECORD,):
        return f.start + nxt
    for g in files:
        if g.start <= f.start:
            continue
        with open_ro(g.path) as fd:
            w = FileWalk(fd, g.start, g.size, 0)
            for _ in w:
                return g.start
        return None
    return None
