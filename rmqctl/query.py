"""Finding messages in a stopped broker's store, the way the broker's own queries find them.

Every lookup goes through the structure the broker would use and reads only what that structure points
at: a commitlog offset or offsetMsgId -> one bounded read; topic/queue/offset -> consume-queue units;
key or unique key -> index slot chains (IndexService.queryOffset, then DefaultMessageStore.queryMessage);
store time -> the consume queue's binary search (ConsumeQueue.getOffsetInQueueByTime). Where the index
or a consume queue is missing or damaged the engine falls back to a commitlog scan and says so.

The engine is a library (no click, no rich): notes go to a callback, damaged input is counted in
`problems`, results are scan.Record objects rendered by rmqctl.render.
"""
from __future__ import annotations

import heapq
import os
import re
import struct
import zlib
from collections import deque
from dataclasses import dataclass, field

from rmqctl.dispatch import goes_to_consume_queue, goes_to_index, lmq_on, lmq_targets, multi_dispatch_on
from rmqctl.errors import UsageError
from rmqctl.formats import properties as P
from rmqctl.formats.consumequeue import PRE_BLANK_SIZE
from rmqctl.scan import FileWalk, host_text
from rmqctl.store.commitlog import CommitLog, open_ro
from rmqctl.timeparse import parse_time  # noqa: F401  (re-exported: library callers import it from here)

MAX_TIME = (1 << 63) - 1


# --- argument parsing (shared by the CLI and library callers) -------------------------------------
def parse_msg_id(text: str) -> tuple[bytes, int, int]:
    """MessageDecoder.decodeMessageId: 32 hex chars = IPv4 host + port + offset, 56 = IPv6."""
    s = text.strip()
    if len(s) not in (32, 56) or not re.fullmatch(r"[0-9A-Fa-f]+", s):
        raise UsageError(f"bad message id {text!r}: an offsetMsgId is 32 (IPv4) or 56 (IPv6) hex characters")
    b = bytes.fromhex(s)
    alen = 4 if len(b) == 16 else 16
    port, offset = struct.unpack_from(">iq", b, alen)
    return b[:alen], port, offset


# --- the engine -----------------------------------------------------------------------------------
@dataclass
class Stats:
    """What a query touched (the benchmark and -v print these)."""

    index_item_reads: int = 0
    index_files_searched: list = field(default_factory=list)
    raw_phys_offsets: list = field(default_factory=list)     # IndexService.queryOffset, incl. collisions
    loaded_phys_offsets: list = field(default_factory=list)  # DefaultMessageStore.queryMessage
    collisions: int = 0
    cq_unit_reads: int = 0
    commitlog_reads: int = 0
    scanned_records: int = 0
    queue_offset: int | None = None                          # --time answer


class QueryEngine:
    """Open once per command; `with QueryEngine(store) as q: for r in q.by_key(...)`."""

    def __init__(self, store, note=None, version: int = 5):
        self.store = store
        self.version = version      # broker major version whose time search to reproduce (4 or 5)
        self.cl = CommitLog(store)
        self.problems: list[str] = []
        self.notes: list[str] = []
        self._note_cb = note
        self.stats = Stats()
        self._fds: dict = {}
        self._store_hosts = None

    # -- plumbing
    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def close(self):
        for cm, _ in self._fds.values():
            cm.__exit__(None, None, None)
        self._fds.clear()

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        if self._note_cb:
            self._note_cb(msg)

    def problem(self, msg: str) -> None:
        """Damaged input: reported, and the command exits 4."""
        self.problems.append(msg)
        self.note(msg)

    def _fd(self, f):
        ent = self._fds.get(f.path)
        if ent is None:
            cm = open_ro(f.path)
            ent = self._fds[f.path] = (cm, cm.__enter__())
        return ent[1]

    # -- single records
    def read_at(self, offset: int, size: int | None = None):
        """(Record, None) for a message starting exactly at `offset`, else (None, why). One bounded read.
        Body CRC, __CRC32# and PHYSICALOFFSET are checked but do not hide the record: a mismatch comes
        back in the second element while the record is still returned."""
        f = self.store.commitlog.file_for(offset, self.cl.file_size)
        if f is None or offset < 0:
            return None, "no commitlog file holds this offset"
        pos = offset - f.start
        fd = self._fd(f)
        self.stats.commitlog_reads += 1
        if size is None or size <= 0 or size == PRE_BLANK_SIZE:
            head = os.pread(fd, 8, pos)
            if len(head) < 8:
                return None, "past the end of the file"
            size = struct.unpack(">i", head[:4])[0]
        end = min(f.size, self.cl.file_size, pos + max(size, 8))
        w = FileWalk(fd, f.start, f.size, pos, end, check_crc=False, check_phys=False, check_prop_crc=False,
                     path=str(f.path), window=max(size, 8))
        for r in w:
            bad = []
            r.crc_ok = (zlib.crc32(r.body) & 0x7FFFFFFF) == r.body_crc
            if not r.crc_ok:
                bad.append(f"body CRC mismatch (BODYCRC {r.body_crc})")
            if r.prop_crc is False:
                bad.append("__CRC32# property mismatch")
            if r.physical_offset != offset:
                bad.append(f"PHYSICALOFFSET field says {r.physical_offset}: stale bytes from an older record")
            return r, ("; ".join(bad) or None)
        st = w.stop
        kinds = {"zeros": "unwritten space (zeros), no message here", "blank": "end-of-file filler record",
                 "end": "past the end of the file"}
        return None, kinds.get(st.kind, f"{st.kind}{': ' + st.detail if st.detail else ''}")

    def _checked(self, r, bad, offset):
        if bad:
            self.problem(f"commitlog offset {offset}: {bad}")
        return r

    def store_hosts(self) -> set:
        """This store's own address(es), learned from its records (first record of the first and last file)."""
        if self._store_hosts is None:
            hosts = set()
            files = self.store.commitlog.files
            for f in ({files[0].path: files[0], files[-1].path: files[-1]}.values() if files else []):
                r, _ = self.read_at(f.start)
                if r is not None:
                    hosts.add((r.store_host_raw, r.store_port))
            self._store_hosts = hosts
        return self._store_hosts

    # -- queries
    def by_phys_offset(self, offset: int, count: int = 1):
        """The message at a commitlog offset, and the count-1 following ones."""
        r, bad = self.read_at(offset)
        if r is None:
            raise UsageError(f"no message starts at commitlog offset {offset}: {bad}")
        yield self._checked(r, bad, offset)
        if count > 1:
            n = 1
            for r2 in self.cl.records(start=r.end, check_crc=True, stop_at_bad=True):
                yield r2
                n += 1
                if n >= count:
                    break

    def by_msg_id(self, msg_id: str):
        """offsetMsgId -> store host + commitlog offset. An id whose host did not store the message found at
        that offset (another broker's id) is a warning; the store's hosts are learned from its records."""
        addr, port, offset = parse_msg_id(msg_id)
        host = host_text(addr, port)
        r, bad = self.read_at(offset)
        if r is None:
            mine = self.store_hosts()
            other = "" if not mine or (addr, port) in mine else (
                f"; the id names host {host}, this store's messages are stored by "
                f"{', '.join(sorted(host_text(a, p) for a, p in mine))}")
            hint = " (a client UNIQ_KEY is also 32 hex characters: try --uniq-key with --topic)" \
                if len(msg_id.strip()) == 32 else ""
            raise UsageError(f"message id {msg_id}: no message starts at commitlog offset {offset}: "
                             f"{bad}{other}{hint}")
        if (r.store_host_raw, r.store_port) != (addr, port):
            self.note(f"warning: message id {msg_id} names host {host}, but the message at commitlog offset "
                      f"{offset} was stored by {r.store_host}: the id probably belongs to another broker")
        yield self._checked(r, bad, offset)

    # consume queue
    def _queue(self, topic: str, queue_id: int):
        from rmqctl.store.timesearch import load_queue

        if self.store.engine == "rocksdb":     # storeType=defaultRocksDB: RocksDBConsumeQueueStore
            from rmqctl.store.rocksdb_cq import RocksQueueView

            return RocksQueueView(self.store, topic, queue_id)

        return load_queue(self.store, topic, queue_id)

    def _batch(self, topic: str, queue_id: int) -> bool:
        """(topic, queue_id) is a batch consume queue with files (5.x BatchCQ)."""
        from rmqctl.store import batchcq as B

        return (self.store.root / B.DIR / topic / str(queue_id)).is_dir()

    def queue_offset_in(self, r, topic: str, queue_id: int):
        """The record's offset in consume queue (topic, queue_id), or None when the broker does not dispatch
        it there: its own topic/queue, or one of its multi-dispatch targets (INNER_MULTI_DISPATCH) when the
        store's config follows them."""
        if not goes_to_consume_queue(r.sys_flag):
            return None
        if r.topic == topic and r.queue_id == queue_id:
            return r.queue_offset
        cfg = self.store.config
        if multi_dispatch_on(cfg):
            for name, qid, qoff in lmq_targets(r.topic, r.queue_id, r.properties, lmq_on(cfg)):
                if name == topic and qid == queue_id:
                    return qoff
        return None

    def in_queue(self, r, topic: str, queue_id: int | None = None) -> bool:
        """Whether the broker dispatches the record to (topic, queue_id); queue_id None: any queue of topic."""
        if queue_id is not None:
            return self.queue_offset_in(r, topic, queue_id) is not None
        if not goes_to_consume_queue(r.sys_flag):
            return False
        if r.topic == topic:
            return True
        cfg = self.store.config
        return multi_dispatch_on(cfg) and any(
            name == topic for name, _, _ in lmq_targets(r.topic, r.queue_id, r.properties, lmq_on(cfg)))

    def _unit_record(self, topic, queue_id, qoff, unit):
        phys, size, _ = unit
        if phys == 0 and size == PRE_BLANK_SIZE:
            self.note(f"{topic}/{queue_id} offset {qoff}: pre-blank unit (no message)")
            return None
        r, bad = self.read_at(phys, size)
        if r is None:
            self.problem(f"consume queue {topic}/{queue_id} offset {qoff} points at commitlog offset {phys} "
                         f"size {size}: {bad}")
            return None
        if r.total_size != size or self.queue_offset_in(r, topic, queue_id) is None:
            self.problem(f"consume queue {topic}/{queue_id} offset {qoff} points at commitlog offset {phys} "
                         f"size {size}, but the message there is {r.topic}/{r.queue_id} size {r.total_size}")
        return self._checked(r, bad, phys)

    def by_queue_offset(self, topic: str, queue_id: int, offset: int, count: int = 1):
        """Units [offset, offset+count) of a consume queue and their messages."""
        if self._batch(topic, queue_id):
            from rmqctl import bcqquery

            yield from bcqquery.by_queue_offset(self, topic, queue_id, offset, count)
            return
        from rmqctl import compactionquery

        served = compactionquery.served_queue(self.store, topic, queue_id)
        if served is not None:
            if served[2].loads:
                yield from compactionquery.by_queue_offset(self, served, topic, queue_id, offset, count)
                return
            self.note(f"{topic}/{queue_id} is a compaction topic the broker does not serve from its compaction "
                      f"store ({served[2].why}): answered from the consume queue")
        v = self._queue(topic, queue_id)
        try:
            if not v.files:
                self.note(f"no consume queue {topic}/{queue_id}: scanning the commitlog")
                def want(r):
                    qo = self.queue_offset_in(r, topic, queue_id)
                    return qo is not None and offset <= qo < offset + count

                yield from self._scan(want, limit=count)
                return
            lo, hi = v.min_offset, v.max_offset
            if not lo <= offset < hi:
                raise UsageError(f"queue offset {offset} is outside {topic}/{queue_id}'s range [{lo}, {hi})")
            for q in range(offset, min(hi, offset + count)):
                u = v.unit_at(q)
                r = self._unit_record(topic, queue_id, q, u) if u else None
                if r is not None:
                    yield r
        finally:
            self.stats.cq_unit_reads += v.reads
            v.close()

    def by_time(self, topic: str, queue_id: int, timestamp: int, count: int = 1):
        """The broker's search by store time (first offset stored at or after `timestamp`) + its message(s)."""
        from rmqctl.store.timesearch import CommitLogTimes, PickupError

        if self._batch(topic, queue_id):
            from rmqctl import bcqquery

            yield from bcqquery.by_time(self, topic, queue_id, timestamp, count)
            return
        v = self._queue(topic, queue_id)
        pick = CommitLogTimes(self.store)
        try:
            if not v.files:
                self.note(f"no consume queue {topic}/{queue_id}: scanning the commitlog")
                yield from self._scan(lambda r: r.store_timestamp >= timestamp and self.in_queue(r, topic, queue_id),
                                      limit=count)
                return
            try:
                off = _offset_by_time(v, timestamp, pick, self.version)
            except PickupError as e:
                self.problem(f"consume queue {topic}/{queue_id}: {e} (the broker's search throws here)")
                return
            for n in v.notes:
                self.note(n)
            self.stats.queue_offset = off
            what = "first offset stored at or after" if self.version == 5 else "offset stored nearest to"
            self.note(f"{topic}/{queue_id}: {what} {timestamp}: {off} "
                      f"(queue holds [{v.min_offset}, {v.max_offset}))")
            for q in range(max(off, v.min_offset), min(v.max_offset, off + count)):
                u = v.unit_at(q)
                r = self._unit_record(topic, queue_id, q, u) if u else None
                if r is not None:
                    yield r
        finally:
            self.stats.cq_unit_reads += v.reads
            self.stats.commitlog_reads += pick.reads
            pick.close()
            v.close()

    def by_time_range(self, topic: str, begin: int, end: int, limit: int | None = None,
                      queue_id: int | None = None):
        """Messages of every queue of `topic` stored in [begin, end], merged in commitlog order. Each queue
        is bisected twice (first offset >= begin, first offset >= end+1), then read sequentially."""
        from rmqctl.store.timesearch import CommitLogTimes

        qids = [q for t, q in self.store.queues() if t == topic and queue_id in (None, q)]
        bqids = [q for t, q in self.store.queues("batchconsumequeue") if t == topic and queue_id in (None, q)]
        if not qids and not bqids:
            which = topic if queue_id is None else f"{topic}/{queue_id}"
            self.note(f"no consume queue for {which}: scanning the commitlog")
            yield from self._scan(lambda r: begin <= r.store_timestamp <= end and self.in_queue(r, topic, queue_id),
                                  limit=limit, keep="first")
            return
        pick = CommitLogTimes(self.store)
        views = []

        def one(qid):
            v = self._queue(topic, qid)
            views.append(v)
            if not v.files or v.max_offset <= v.min_offset:
                return
            lo = _offset_by_time(v, begin, pick)
            hi = v.max_offset if end >= MAX_TIME else _offset_by_time(v, end + 1, pick)
            lo, hi = max(lo, v.min_offset), min(hi, v.max_offset)
            for q in range(lo, hi):
                u = v.unit_at(q)
                r = self._unit_record(topic, qid, q, u) if u else None
                if r is not None and begin <= r.store_timestamp <= end:
                    yield r

        try:
            n = 0
            from rmqctl import bcqquery

            batch = [bcqquery.by_time_range(self, topic, q, begin, end) for q in bqids]
            for r in heapq.merge(*(one(q) for q in qids), *batch, key=lambda r: r.offset):
                yield r
                n += 1
                if limit is not None and n >= limit:
                    break
        finally:
            for v in views:
                self.stats.cq_unit_reads += v.reads
                v.close()
            self.stats.commitlog_reads += pick.reads
            pick.close()

    # index
    def _index_files(self):
        from rmqctl.store.index import IndexFile

        cfg = self.store.config
        geo = cfg.index_geometry_files
        if geo and geo != (cfg.hash_slot_num, cfg.index_num):
            self.note(f"the index files were written with maxHashSlotNum {geo[0]}, maxIndexNum {geo[1]}; "
                      f"searching them as the broker config says ({cfg.hash_slot_num}, {cfg.index_num}), "
                      f"as a broker started with it would")
        files = []
        for p in self.store.index_files():
            f = IndexFile(p, cfg.hash_slot_num, cfg.index_num)
            f.__enter__()
            self._fds[p] = (f, None)
            files.append(f)
        return files

    def by_key(self, topic: str, key: str, begin: int = 0, end: int = MAX_TIME, max_num: int = 64,
               uniq: bool = False):
        """IndexService.queryOffset + DefaultMessageStore.queryMessage, then the client's filter: keep
        messages of `topic` whose KEYS (or UNIQ_KEY with uniq=True) really contain `key`. Index entries of
        other keys with the same hash (collisions) are dropped and counted. Falls back to a commitlog scan
        when there is no index or it is damaged; also scans records after the index's last entry."""
        from rmqctl.formats.index import MAX_MSGS_NUM_BATCH
        from rmqctl.store.index import query_offset

        if max_num > MAX_MSGS_NUM_BATCH:
            self.note(f"--max {max_num}: the broker returns at most {MAX_MSGS_NUM_BATCH} "
                      f"(maxMsgsNumBatch); use --scan for more")
        match = _matcher(topic, key, uniq)
        files = self._index_files()
        if not files:
            self.note("no index files: scanning the commitlog")
            yield from self._scan_keys(match, begin, end, max_num)
            return
        damaged = [f"{f.path.name}: {p}" for f in files for p in f.problems()]
        size_bad = [f.path.name for f in files if f.size not in (f.expected_size,)]
        if size_bad:
            self.note(f"index files {', '.join(size_bad)} are not {files[0].expected_size} bytes "
                      f"(maxHashSlotNum {files[0].hash_slot_num}, maxIndexNum {files[0].index_num}); "
                      f"the broker maps them at that size")
        if damaged:
            for d in damaged:
                self.problem(f"index {d}")
            self.note("index damaged: scanning the commitlog instead")
            yield from self._scan_keys(match, begin, end, max_num)
            return
        self._crash_note(files)

        q = query_offset(files, topic, key, max_num, begin, end)
        self.stats.index_item_reads += q.item_reads
        self.stats.index_files_searched = q.files_searched
        self.stats.raw_phys_offsets = list(q.phys_offsets)
        if q.problems:
            for p in q.problems:
                self.problem(f"index {p}")
            self.note("index damaged: scanning the commitlog instead")
            yield from self._scan_keys(match, begin, end, max_num)
            return
        loaded = self._query_message(q.phys_offsets, topic, key, max_num, begin, end, files)
        self.stats.loaded_phys_offsets = [r.offset for r in loaded]
        kept = [r for r in loaded if match(r)]
        self.stats.collisions = len(loaded) - len(kept)
        if self.stats.collisions:
            self.note(f"dropped {self.stats.collisions} index hit(s) of other keys with the same hash "
                      f"(topic#key hash collisions)")
        yield from kept
        # Records after the last index entry (a crash before dispatch) are not in any index file.
        room = min(max_num, MAX_MSGS_NUM_BATCH) - len(kept)
        if room > 0:
            yield from self._tail(files[-1].loaded_header().end_phy_offset, match, begin, end, room)

    def _query_message(self, first, topic, key, max_num, begin, end, files):
        """DefaultMessageStore.queryMessage: sort the offsets, load each message; when none could be
        loaded, retry (3 tries in all) with the end time moved back to the first offset's store time."""
        from rmqctl.store.index import query_offset

        offsets, last_time = first, end
        for attempt in range(3):
            if attempt:
                q = query_offset(files, topic, key, max_num, begin, last_time)
                self.stats.index_item_reads += q.item_reads
                offsets = q.phys_offsets
            if not offsets:
                break
            out = []
            for m, off in enumerate(sorted(offsets)):
                r, bad = self.read_at(off)
                if r is None:
                    self.problem(f"index points at commitlog offset {off}: {bad}")
                    continue
                if m == 0:
                    last_time = r.store_timestamp
                out.append(self._checked(r, bad, off))
            if out:
                return out
            if last_time < begin:
                break
        return []

    def _tail(self, end_phy, match, begin, end, room):
        r0, _ = self.read_at(end_phy) if end_phy > 0 else (None, None)
        start = r0.end if r0 is not None else None
        if start is None:
            return
        n = found = 0
        for r in self.cl.records(start=start, check_crc=True, stop_at_bad=True):
            n += 1
            if goes_to_index(r.sys_flag) and begin <= r.store_timestamp <= end and match(r) and found < room:
                found += 1
                yield r
        self.stats.scanned_records += n
        if n:
            self.note(f"the index ends at commitlog offset {end_phy}; scanned the {n} message(s) after it "
                      f"(not indexed yet: the broker re-dispatches them at its next start), {found} matched")

    def _crash_note(self, files):
        if not self.store.abort_exists:
            return
        ck = self.store.checkpoint()
        limit = ck.index_msg_timestamp if ck else 0
        doomed = [f.path.name for f in files if f.loaded_header().end_timestamp > limit]
        if doomed:
            self.note(f"abort file present: at its next start the broker deletes index file(s) "
                      f"{', '.join(doomed)} (endTimestamp > checkpoint indexMsgTimestamp {limit}) and rebuilds "
                      f"them from the commitlog; answering from the files as they are")

    def scan_keys(self, topic, key, begin=0, end=MAX_TIME, max_num=64, uniq=False):
        """Key lookup by a full commitlog scan (no index): every match, newest max_num kept."""
        self.note("scanning the commitlog (--scan)")
        yield from self._scan_keys(_matcher(topic, key, uniq), begin, end, max_num)

    # commitlog scans
    def _scan_keys(self, match, begin, end, max_num):
        yield from self._scan(lambda r: goes_to_index(r.sys_flag) and begin <= r.store_timestamp <= end
                              and match(r), limit=max_num, keep="last")

    def _scan(self, pred, limit=None, keep="first"):
        """Walk every commitlog file (a damaged file ends that file, the next one is still read)."""
        from rmqctl.store.commitlog import Walk
        from rmqctl.terminal import progress

        walk = Walk()
        kept = deque(maxlen=limit if keep == "last" else None)
        n = found = 0
        files = self.store.commitlog.files
        with progress(sum(f.size for f in files), "scanning the commitlog") as bar:
            done = files[0].start if files else 0
            for r in self.cl.records(walk=walk, stop_at_bad=False):
                n += 1
                if not n & 63:
                    bar.advance(r.offset - done)
                    done = r.offset
                if pred(r):
                    found += 1
                    if keep == "last":
                        kept.append(_detach(r))
                    else:
                        yield r
                        if limit is not None and found >= limit:
                            break
        self.stats.scanned_records += n
        for e in walk.ends:
            if not e.stop.normal and e.stop.kind != "end":
                self.problem(f"{e.file.path}: offset {e.stop.offset}: scan stopped: {e.stop.kind}"
                             f"{': ' + e.stop.detail if e.stop.detail else ''}")
        yield from kept


def _offset_by_time(v, timestamp: int, pick, version: int = 5) -> int:
    """The broker's search by time: RocksDB queues search the store times in their units, file queues bisect
    with the commitlog's store times."""
    if hasattr(v, "offset_by_time"):
        return v.offset_by_time(timestamp)
    from rmqctl.store.timesearch import offset_in_queue_by_time

    return offset_in_queue_by_time(v, timestamp, pick, version=version)


def _matcher(topic: str, key: str, uniq: bool):
    if uniq:
        return lambda r: r.topic == topic and r.properties.get(P.UNIQ_KEY) == key
    return lambda r: r.topic == topic and key in (r.properties.get(P.KEYS) or "").split(P.KEY_SEPARATOR)


def _detach(r):
    """Keep a record without pinning the scan's 8 MB read window."""
    raw = r.raw
    r.buf, r.body_rel, r.rel = raw, r.body_rel - r.rel, 0
    return r
