"""Batch consume queues (5.x BatchCQ topics) in recover and rebuild cq: BatchConsumeQueue.recover,
truncateDirtyLogicFiles and putBatchMessagePositionInfo reproduced as whole replacement files.

Broker behaviour (BatchConsumeQueue.java, 5.3.3):
* a record is skipped when its offset is at or below the offset of the queue's last unit (already built);
* otherwise its 46-byte unit (offset, size, tagsCode, store time, msgBaseOffset, batchSize, -1, 0) is APPENDED at
  the queue's write end; there is no placement by queue offset and no pre-blank unit: an empty queue starts
  at file 0 (MappedFileQueue.getLastMappedFile(getMaxOffset() = 0)); a full file is followed by the next;
* msgBaseOffset/batchSize are INNER_BASE/INNER_NUM when the record has both, else QUEUEOFFSET and 1;
* recovery reads the last three files up to the first unit with offset < 0, size <= 0, msgBaseOffset < 0 or
  batchSize <= 0, and truncateDirtyLogicFiles drops the units at or after the commitlog's end.
Where rmqctl differs on purpose (as for plain queues, docs/recovery.md): dropped tails are zero-filled, not
left as stale units after the write position.

The queue state reuses rebuild_cq.QueueState's file staging (bytes, file size, streaming of completed files);
only how a unit is placed differs. Queues of BatchCQ topics are never created under consumequeue/.
"""
from __future__ import annotations

from dataclasses import dataclass

from rmqctl.config.topics import batch_topics
from rmqctl.repair import rebuild_cq as RC
from rmqctl.store import batchcq as B
from rmqctl.store.files import FileQueue

UNIT = B.UNIT
UNIT_SIZE = B.UNIT_SIZE


def is_batch(store, topic: str) -> bool:
    """topic's queues are batch consume queues (cached per store object)."""
    topics = store.__dict__.get("_batch_topics")
    if topics is None:
        topics = store.__dict__["_batch_topics"] = batch_topics(store)
    return topic in topics


def any_batch(store) -> bool:
    """Some topic's queues are batch consume queues."""
    is_batch(store, "")
    return bool(store.__dict__["_batch_topics"])


def queues(store) -> list:
    """Every queue directory the broker loads: consumequeue/ and batchconsumequeue/."""
    return sorted(set(store.queues()) | set(store.queues(B.DIR)))


@dataclass
class BcqState(RC.QueueState):
    batch_cq = True
    first_start: int = 0       # where appends begin when nothing is kept (the broker's kept/first file)
    next_base: int | None = None   # msgBaseOffset + batchSize of the last unit (kept or appended)

    def put(self, phys: int, size: int, tags: int, cq_offset: int, ts: int = -1, props=None) -> None:
        base, n = B.inner_batch(props or {}, cq_offset)
        self.put_unit(phys, size, tags, ts, base, n)

    def put_unit(self, phys, size, tags, ts, base, n) -> None:
        if phys + size <= self.max_phys:
            return
        if self.base is None:
            self.base = self.end = self.out_base = self.first_start
        self.out += UNIT.pack(phys, size, tags, ts, base, n, -1, 0)
        self.next_base = base + n
        self.end += UNIT_SIZE
        self.max_phys = phys + size
        self.added += 1
        if self.stage_dir is not None and self.end - self.out_base >= self.spill_at:
            self.flush_full()

    def put_many(self, phys, size, tags, cq_offset, ts=None) -> None:
        for j in range(len(phys)):
            self.put(int(phys[j]), int(size[j]), int(tags[j]), int(cq_offset[j]), int(ts[j]) if ts is not None else -1)

    def put_rows(self, bt, props, sel, codes, fillers=()) -> None:
        """One scanvec batch's records `sel` of this queue (codes: their tagsCodes). fillers (recover
        --on-corruption quarantine): a lost record's placeholder takes the unit of the offsets it left out."""
        has_n, ns, nl = props.value(B.INNER_NUM.encode())
        has_b, bs, bl = props.value(B.INNER_BASE.encode())
        buf = props.buf
        for j, code in zip(sel.tolist(), codes.tolist()):
            p = {}
            if has_n[j] and has_b[j]:
                p = {B.INNER_NUM: bytes(buf[ns[j]:ns[j] + nl[j]]).decode("utf-8", "replace"),
                     B.INNER_BASE: bytes(buf[bs[j]:bs[j] + bl[j]]).decode("utf-8", "replace")}
            phys, size, qo = int(bt.offset[j]), int(bt.total_size[j]), int(bt.queue_offset[j])
            if fillers and self.next_base is not None and phys + size > self.max_phys:
                base = B.inner_batch(p, qo)[0]
                cands = [f for f in fillers if f.kind == "record" and self.max_phys <= f.start < phys]
                if cands and 0 < base - self.next_base < (1 << 15):
                    f = cands[-1]
                    self.put_unit(f.start, f.end - f.start, 0, f.store_ts, self.next_base, base - self.next_base)
            self.put(phys, size, int(code), qo, int(bt.store_timestamp[j]), p)


def _scan(store, topic, qid):
    d = store.root / B.DIR / topic / str(qid)
    return d, FileQueue.scan(d, root=store.root)


def empty_state(store, topic: str, qid: int) -> BcqState:
    """A queue rebuilt from nothing: units from the first existing file's start (0 for a new queue)."""
    d, fq = _scan(store, topic, qid)
    st = BcqState(topic, qid, d, store.config.bcq_file_size, fq.files)
    st.first_start = fq.files[0].start if fq.files else 0
    st.start_from_existing()
    return st


def truncate_state(store, topic: str, qid: int, cut: int | None) -> BcqState:
    """Where BatchConsumeQueue.recover and truncateDirtyLogicFiles(cut) leave this queue."""
    d, fq = _scan(store, topic, qid)
    fs = store.config.bcq_file_size
    files = fq.files
    st = BcqState(topic, qid, d, fs, files)
    if not files:
        st.start_from_existing()
        return st
    first = max(0, len(files) - 3)
    keep_end, max_phys, next_base = files[first].start, -1, None
    limit = cut if cut is not None else 2**62
    per_file = max(1, fs // UNIT_SIZE)
    for i in range(first, len(files)):
        f = files[i]
        if i > first and f.start != keep_end:
            break
        data = RC.read_file(f.path, min(f.size, fs))
        n_ok = 0
        for k in range(len(data) // UNIT_SIZE):
            phys, size, _, _, base, n, _, _ = UNIT.unpack_from(data, k * UNIT_SIZE)
            if not B.valid(phys, size, base, n) or phys >= limit:
                break
            n_ok += 1
            max_phys, next_base = phys + size, base + n
        keep_end = f.start + n_ok * UNIT_SIZE
        if n_ok < per_file:
            break
    for f in files:
        if f.start + fs <= keep_end:
            continue
        data = RC.read_file(f.path, min(f.size, fs))
        for k in range(max(0, (keep_end - f.start) // UNIT_SIZE), len(data) // UNIT_SIZE):
            raw = data[k * UNIT_SIZE:(k + 1) * UNIT_SIZE]
            if not raw.strip(b"\0"):
                continue
            st.dropped_units += 1
            phys, size, _, _, base, n, _, _ = UNIT.unpack(raw)
            if B.valid(phys, size, base, n) and phys < limit:
                st.dropped_valid_below = phys if st.dropped_valid_below is None else min(phys, st.dropped_valid_below)
    st.first_start = files[first].start
    st.kept_any = keep_end > files[0].start
    st.keep_end, st.max_phys = (keep_end if st.kept_any else 0), max_phys
    st.next_base = next_base if st.kept_any else None
    st.start_from_existing()
    return st
