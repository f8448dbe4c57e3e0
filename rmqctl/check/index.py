"""Index-file checks (docs/store-format.md, "Index files"): size, header vs items, slot chains, items vs
messages, timeDiff.

Chains: the broker always links a new item to an OLDER one (preIndexNo < own number), so "every
item's preIndexNo is 0 or smaller than its own number" proves every chain finite -- a cycle is
reported at the first item that breaks it, in one streaming pass without walking chains. Items are
read in 64k batches. That a chain never leaves its bucket, and that a slot's head hashes to it: each
slot's last item so far is kept (the slot table as putKey rebuilds it, 4 bytes a slot: 20 MB for the
default 5 M slots, whatever the item count); putKey links every item to that one, so only a link or a
head elsewhere has its item read back from the file.
Items -> messages: a bounded sample (first, last and evenly spaced items, `sample` per file) is
checked against the commitlog: a valid record there whose topic#key hashes to the item's keyHash.
"""
from __future__ import annotations

import os

from rmqctl import writers
from rmqctl.check.findings import ERROR, INFO, WARNING, Finding
from rmqctl.dispatch import index_keys
from rmqctl.formats import index as ixf
from rmqctl.formats._derive import field_names, numpy_dtype
from rmqctl.kernels import index_kernel
from rmqctl.store.files import open_read

HEADER = writers.INDEX_HEADER     # derived from formats.index.IndexHeader / IndexItem
ITEM = writers.INDEX_ITEM
BATCH = 65536
HEADS = 65536       # slots read at a time for the slot-head check
# items read back for their slots (links and heads putKey would not have made): those fewer than RUN_GAP items
# apart in one read, of RUN_MAX items at most
RUN_GAP, RUN_MAX = 64, 1 << 16


def check_index_file(path, hash_slot_num: int, index_num: int, findings: list, *, commitlog=None,
                     cl_min: int = 0, cl_end: int | None = None, sample: int = 64, is_last: bool = False,
                     checkpoint=None, broker_version: tuple | None = None) -> dict:
    """Returns the header as a dict (for the caller's cross-checks)."""
    facts = index_file_facts(path, hash_slot_num, index_num, commitlog=commitlog if sample else None,
                             sample=sample, broker_version=broker_version)
    return finish_index_file(facts, findings, cl_min=cl_min, cl_end=cl_end, is_last=is_last,
                             checkpoint=checkpoint)


class IndexFacts:
    """What one index file's checks find without the commitlog's end or the checkpoint (so verify -j can run
    them beside the commitlog walk): the findings so far, the header, the first and last item, and the sampled
    items' verdicts. finish_index_file adds the checks that need the walk's results."""

    def __init__(self, path: str, hdr: dict, findings: list):
        self.path, self.hdr, self.findings = path, hdr, findings
        self.first = self.last = None   # (keyHash, phyOffset, timeDiff, prevIndex) of items 1 and count-1
        self.slots_end = 0              # where the items start
        self.picks = 0                  # items sampled
        self.samples: list = []         # (item number, keyHash, phyOffset, why or None) per sampled item
        self.items_at = None            # where the item checks' findings stand in `findings`
        self.hits: list = []            # a piece's item findings (item number, check, Finding): join_parts


def index_file_facts(path, hash_slot_num: int, index_num: int, *, commitlog=None, sample: int = 64,
                     broker_version: tuple | None = None, compiled=None, part=None) -> IndexFacts:
    """`compiled`: the item checks' kernel (rmqctl.kernels.index_nb, or False for numpy); None: the compiled
    one when this process already uses the numba kernel. `part`: (lo, hi), a piece of the file for verify -j:
    only items lo .. hi-1 are checked (their findings kept apart in `hits`, for join_parts), and only the piece
    that reaches the last item checks the rest of the file (header times, slots, slot heads, samples)."""
    p = str(path)
    facts = IndexFacts(p, {}, [])
    findings = facts.findings
    size = os.stat(path).st_size
    expected = ixf.file_size(hash_slot_num, index_num)
    if size != expected:
        findings.append(Finding(WARNING if size < expected else ERROR, "index.file_size", p, 0, expected, size,
                                "index file size differs from 40 + 4*maxHashSlotNum + 20*maxIndexNum "
                                "(wrong --index-slots/--index-items, or a short file the broker zero-extends)"))
        if size < ixf.HEADER_SIZE:
            return facts
    fd = open_read(path)
    try:
        def pread(n, pos):
            data = os.pread(fd, n, pos)
            return data.ljust(n, b"\0")

        hdr = facts.hdr = dict(zip(field_names(ixf.IndexHeader), HEADER.unpack(pread(ixf.HEADER_SIZE, 0))))
        count = hdr["index_count"]
        if count <= 0 or count > index_num:
            findings.append(Finding(ERROR, "index.index_count", p, 36, f"1..{index_num}", count,
                                    "header indexCount out of range"))
            return facts
        lo, hi = (1, count) if part is None else (max(1, part[0]), min(part[1], count))
        if hi < count:       # a piece before the last: its item checks alone
            _check_items(p, pread, hash_slot_num, hdr, facts.hits, _kernel(compiled, hash_slot_num), lo, hi)
            return facts
        if count > 1 and hdr["end_timestamp"] < hdr["begin_timestamp"]:
            findings.append(Finding(ERROR, "index.header_time", p, 8, f">= {hdr['begin_timestamp']}",
                                    hdr["end_timestamp"], "endTimestamp before beginTimestamp"))
        _check_slots(p, pread, hash_slot_num, hdr, broker_version, findings)
        nb = _kernel(compiled, hash_slot_num)
        last = _check_items(p, pread, hash_slot_num, hdr, facts.hits, nb, lo, hi)
        facts.items_at = len(findings)
        if part is None:
            findings.extend(f for _n, _kind, f in facts.hits)
            facts.hits = []
        _check_slot_heads(p, pread, hash_slot_num, last, count, findings, nb)
        if count > 1:
            slots_end = facts.slots_end = ixf.HEADER_SIZE + ixf.SLOT_SIZE * hash_slot_num
            facts.first = ITEM.unpack(pread(ixf.ITEM_SIZE, slots_end + ixf.ITEM_SIZE))
            facts.last = ITEM.unpack(pread(ixf.ITEM_SIZE, slots_end + ixf.ITEM_SIZE * (count - 1)))
            if commitlog is not None and sample:
                _sample_items(facts, pread, slots_end, count, sample, commitlog)
        return facts
    finally:
        os.close(fd)


def _kernel(compiled, hash_slot_num: int):
    nb = (index_kernel() if compiled is None else compiled) or None
    return nb if hash_slot_num > 0 else None     # numpy's modulo by zero gives 0 (with a warning); numba's raises


def item_count(path) -> int | None:
    """The header's indexCount (items + 1), or None when the file has no whole header."""
    fd = open_read(path)
    try:
        data = os.pread(fd, ixf.HEADER_SIZE, 0)
    finally:
        os.close(fd)
    return HEADER.unpack(data)[5] if len(data) == ixf.HEADER_SIZE else None


def join_parts(parts: list) -> IndexFacts:
    """One file's facts from its pieces' (index_file_facts with `part`, in item order, the last piece last): the
    last piece's, with the first offender of each item check across all pieces, in the order one pass over the
    whole file reports them (by batch of BATCH items, then check)."""
    tail = parts[-1]
    if tail.items_at is None:       # stopped before the items (size or count): every piece stopped alike
        return tail
    first: dict = {}
    for f in parts:
        for num, kind, finding in f.hits:
            if kind not in first or num < first[kind][0]:
                first[kind] = (num, finding)
    ordered = sorted(first.items(), key=lambda kv: ((kv[1][0] - 1) // BATCH, kv[0]))
    tail.findings[tail.items_at:tail.items_at] = [finding for _kind, (_num, finding) in ordered]
    tail.hits = []
    return tail


def finish_index_file(facts: IndexFacts, findings: list, *, cl_min: int = 0, cl_end: int | None = None,
                      is_last: bool = False, checkpoint=None) -> dict:
    """Add the file's findings to `findings`, with the checks against the commitlog's range and the checkpoint;
    returns the header."""
    findings.extend(facts.findings)
    if facts.first is not None:
        _check_header_against_items(facts, findings, cl_end=cl_end, is_last=is_last, checkpoint=checkpoint)
        _sample_finding(facts, cl_min, cl_end, findings)
    return facts.hdr


def _check_slots(p, pread, hash_slot_num: int, hdr: dict, broker_version, findings: list):
    """Slot values are item numbers inside the file; hashSlotCount as the broker version counts it."""
    import numpy as np

    count = hdr["index_count"]
    slots = np.frombuffer(pread(ixf.SLOT_SIZE * hash_slot_num, ixf.HEADER_SIZE), dtype=">i4")
    nonempty = int(np.count_nonzero(slots > 0))
    bad = np.nonzero((slots < 0) | (slots >= count))[0]
    if bad.size:
        s = int(bad[0])
        findings.append(Finding(ERROR, "index.slot_range", p, ixf.HEADER_SIZE + ixf.SLOT_SIZE * s, f"0..{count - 1}",
                                int(slots[s]), f"{bad.size} slot(s) hold item numbers outside the file"))
    _check_slot_count(p, nonempty, hdr["hash_slot_count"], count, broker_version, findings)


def _check_items(p, pread, hash_slot_num: int, hdr: dict, hits: list, nb=None, lo: int = 1, hi: int | None = None):
    """Items lo .. hi-1 (default: all), BATCH at a time: chains end (preIndexNo older than the item) and stay in
    their bucket, timeDiff within the header's span, items in commitlog order -- the first of each kind
    appended to `hits` as (item number, check, Finding). Items before lo are read for their slots only.
    Returns each slot's last item after item hi-1 (0: none), as putKey leaves the slot table.
    `nb`: rmqctl.kernels.index_nb, or None for numpy."""
    import numpy as np

    count = hdr["index_count"]
    hi = count if hi is None else hi
    begin_ts, end_ts = hdr["begin_timestamp"], hdr["end_timestamp"]
    slots_end = ixf.HEADER_SIZE + ixf.SLOT_SIZE * hash_slot_num
    limit = (end_ts - begin_ts) // 1000 if begin_ts > 0 else 0
    last = np.zeros(max(hash_slot_num, 1), dtype=np.int32)
    out = np.zeros(7, np.int64)
    cand = np.empty((min(BATCH, max(hi, 1)), 3), np.int64)

    def slot_at(nums):
        return _slots_of(pread, slots_end, nums, hash_slot_num)

    todo = KINDS
    last_phy = None
    n = 1
    while n < hi:
        checking = n >= lo
        k = min(BATCH, (hi if checking else lo) - n)
        raw = pread(k * ixf.ITEM_SIZE, slots_end + ixf.ITEM_SIZE * n)
        if nb is not None:
            nb.items(np.frombuffer(raw, np.uint8), k, n, hash_slot_num, last, max(limit, 0),
                     0 if last_phy is None else last_phy, last_phy is not None, todo if checking else 0, out, cand)
        else:
            _items_numpy(raw, k, n, hash_slot_num, last, max(limit, 0), last_phy, out, checking, cand,
                         bool(todo & BUCKET))
        m = int(out[6])
        if m:       # links putKey would not have made: their items' slots, read back (batch order kept)
            c = cand[:m]
            off = np.nonzero(slot_at(c[:, 1]) != c[:, 2])[0]
            if off.size and (out[1] < 0 or c[off[0], 0] < out[1]):
                out[1] = c[off[0], 0]
        for bit, j in ((CYCLE, 0), (BUCKET, 1), (TIME, 2), (PHY, 3)):
            if checking and todo & bit and out[j] >= 0:
                todo &= ~bit
                hits.append((n + int(out[j]), bit,
                             _item_finding(p, bit, raw, int(out[j]), n, slots_end, slot_at, limit, int(out[4]))))
        last_phy = int(out[5])
        n += k
    return last


def _slots_of(pread, slots_end: int, nums, hash_slot_num: int):
    """The slot of each item number in `nums` (keyHash mod the slot count, Python's sign rule), read from the
    file: items fewer than RUN_GAP apart in one read."""
    import numpy as np

    nums = np.asarray(nums, np.int64)
    u = np.unique(nums)
    kh = np.empty(len(u), np.int64)
    a = 0
    while a < len(u):
        lo, e = int(u[a]), a + 1
        while e < len(u) and u[e] - u[e - 1] <= RUN_GAP and u[e] - lo < RUN_MAX:
            e += 1
        raw = pread(ixf.ITEM_SIZE * (int(u[e - 1]) - lo + 1), slots_end + ixf.ITEM_SIZE * lo)
        kh[a:e] = np.frombuffer(raw, ">i4")[(u[a:e] - lo) * (ixf.ITEM_SIZE // 4)]
        a = e
    return (kh % hash_slot_num)[np.searchsorted(u, nums)]


CYCLE, BUCKET, TIME, PHY = 1, 2, 4, 8      # the item checks, each reported at its first offender
KINDS = CYCLE | BUCKET | TIME | PHY


def _items_numpy(raw: bytes, k: int, n: int, hash_slot_num: int, last, limit: int, last_phy, out,
                 checking: bool = True, cand=None, bucket: bool = True) -> None:
    """rmqctl.kernels.index_nb.items in numpy, for every check (none unless `checking`; the bucket check only
    while `bucket`): out[0..3] the batch position of each check's first offender (-1: none), out[4] the phyOffset
    before the out-of-order one, out[5] the batch's last phyOffset, out[6] the links left to the caller (in
    cand's rows, as the kernel leaves them); `last` advanced past the batch."""
    import numpy as np

    a = np.frombuffer(raw, dtype=numpy_dtype(ixf.IndexItem))
    s = a["key_hash"].astype(np.int64) % hash_slot_num
    nums = np.arange(n, n + k)
    # each item's slot's last item before it: the one before it in the batch, else the last before the batch
    order = np.argsort(s, kind="stable")
    ss, nn = s[order], nums[order]
    first = np.concatenate(([True], ss[1:] != ss[:-1]))
    expect = np.empty(k, np.int64)
    expect[order] = np.where(first, last[ss], np.concatenate(([0], nn[:-1])))
    ends = np.concatenate((ss[1:] != ss[:-1], [True]))
    last[ss[ends]] = nn[ends]
    out[:4] = -1
    out[5] = a["phy_offset"][-1]
    out[6] = 0
    if not checking:
        return
    pre_no = a["pre_index_no"].astype(np.int64)
    bad = np.nonzero((pre_no < 0) | (pre_no >= nums))[0]
    if bad.size:
        out[0] = bad[0]
    odd = np.nonzero((pre_no > 0) & (pre_no < nums) & (pre_no != expect))[0] if bucket else ()
    if len(odd):
        inside = odd[pre_no[odd] >= n]
        wrong = inside[s[pre_no[inside] - n] != s[inside]]
        rest = odd[pre_no[odd] < n]
        if wrong.size:
            out[1] = wrong[0]
            rest = rest[rest < wrong[0]]
        m = rest.size
        cand[:m, 0], cand[:m, 1], cand[:m, 2] = rest, pre_no[rest], s[rest]
        out[6] = m
    # item 1's timeDiff is relative to the previous file's end (docs/store-format.md, "Slots and items"): items >= 2
    td = a["time_diff"]
    badt = np.nonzero((nums >= 2) & ((td < 0) | (td > limit)))[0]
    if badt.size:
        out[2] = badt[0]
    phys = a["phy_offset"]
    prev = np.concatenate(([last_phy if last_phy is not None else phys[0]], phys[:-1]))
    badp = np.nonzero(phys < prev)[0]
    if badp.size:
        out[3], out[4] = badp[0], prev[badp[0]]


def _item_finding(p, kind: int, raw: bytes, i: int, n: int, slots_end: int, slot_at, limit: int, before: int):
    """The finding for the batch's item i (item number n + i) failing check `kind`."""
    _kh, phy, td, pre = ITEM.unpack_from(raw, ixf.ITEM_SIZE * i)
    num = n + i
    at = slots_end + ixf.ITEM_SIZE * num
    if kind == CYCLE:
        return Finding(ERROR, "index.chain_cycle", p, at, f"preIndexNo < {num}", pre,
                       "prevIndex points at the same or a newer item: the chain loops")
    if kind == BUCKET:
        own, other = slot_at([num, pre])
        return Finding(ERROR, "index.chain_bucket", p, at, f"slot {int(own)}", f"slot {int(other)}",
                       "prevIndex links into another hash bucket")
    if kind == TIME:
        return Finding(ERROR, "index.time_diff", p, at + 12, f"0..{limit}", td,
                       "timeDiff outside [0, (endTimestamp - beginTimestamp)/1000]")
    return Finding(ERROR, "index.phy_order", p, at + 4, f">= {before}", phy, "items are not in commitlog order")


def _check_slot_heads(p, pread, hash_slot_num: int, last, count: int, findings: list, nb=None) -> None:
    """A slot's head item must hash to that slot. A head that is the slot's last item does (`last`: each slot's
    last item, as putKey made the table); any other is read back from the file. HEADS slots at a time."""
    import numpy as np

    slots_end = ixf.HEADER_SIZE + ixf.SLOT_SIZE * hash_slot_num
    cand = np.empty((min(HEADS, max(hash_slot_num, 1)), 3), np.int64)
    n_wrong, first = 0, None
    for a in range(0, hash_slot_num, HEADS):
        w = min(HEADS, hash_slot_num - a)
        raw = pread(ixf.SLOT_SIZE * w, ixf.HEADER_SIZE + ixf.SLOT_SIZE * a)
        if nb is not None:
            m = nb.slot_heads(np.frombuffer(raw, np.uint8), a, count, last, cand)
            slot, head = cand[:m, 0], cand[:m, 1]
        else:
            vals = np.frombuffer(raw, ">i4").astype(np.int64)
            at = np.nonzero((vals > 0) & (vals < count) & (vals != last[a:a + w]))[0]
            slot, head = at + a, vals[at]
        if len(slot):
            got = _slots_of(pread, slots_end, head, hash_slot_num)
            wrong = np.nonzero(got != slot)[0]
            if wrong.size:
                n_wrong += wrong.size
                if first is None:
                    first = tuple(int(x[wrong[0]]) for x in (slot, head, got))
    if n_wrong:
        s, v, elsewhere = first
        findings.append(Finding(ERROR, "index.slot_hash", p, ixf.HEADER_SIZE + ixf.SLOT_SIZE * s, f"slot {s}",
                                f"item {v} in slot {elsewhere}",
                                f"{n_wrong} slot(s) point at items whose keyHash belongs elsewhere"))


def _check_header_against_items(facts: IndexFacts, findings: list, *, cl_end, is_last, checkpoint) -> None:
    """begin/endPhyOffset against the first and last item; the end against the commitlog and, after an
    abnormal shutdown, the checkpoint's indexMsgTimestamp."""
    p, hdr, first, last = facts.path, facts.hdr, facts.first, facts.last
    begin_phy, end_phy = hdr["begin_phy_offset"], hdr["end_phy_offset"]
    end_ts = hdr["end_timestamp"]
    if first[1] != begin_phy:
        findings.append(Finding(ERROR, "index.header_begin_phy", p, 16, first[1], begin_phy,
                                "beginPhyOffset differs from item 1"))
    if last[1] != end_phy:
        findings.append(Finding(ERROR, "index.header_end_phy", p, 24, last[1], end_phy,
                                "endPhyOffset differs from the last item"))
    if cl_end is not None and end_phy >= cl_end:
        findings.append(Finding(ERROR, "index.ahead", p, 24, f"< {cl_end} (commitlog end)", end_phy,
                                "index entries point past the end of the commitlog"))
    if checkpoint is not None and not is_last and checkpoint.index_msg_timestamp and \
            end_ts > checkpoint.index_msg_timestamp:
        findings.append(Finding(WARNING, "index.after_checkpoint", p, 8,
                                f"<= {checkpoint.index_msg_timestamp} (checkpoint indexMsgTimestamp)",
                                end_ts, "after an abnormal shutdown the broker DELETES this full "
                                "index file (IndexService.load)"))


# IndexFile.putKey: up to 4.7.0 hashSlotCount grows with every key; from 4.7.1 (commit a14cf634a5 "fix increase
# hashSlot value") only when a key lands in an empty slot
COUNTS_EVERY_KEY_UNTIL = (4, 7, 0)


def _check_slot_count(p, nonempty, slot_count, count, version, findings) -> None:
    every_key = count - 1
    if version is not None and version <= COUNTS_EVERY_KEY_UNTIL:
        if slot_count != every_key:
            findings.append(Finding(ERROR, "index.hash_slot_count", p, 32, every_key, slot_count,
                                    "header hashSlotCount differs from the number of items (RocketMQ "
                                    f"{'.'.join(map(str, version))} (--broker-version) counts every key)"))
        return
    if nonempty == slot_count:
        return
    if version is None and slot_count == every_key:
        findings.append(Finding(INFO, "index.legacy_slot_count", p, 32, nonempty, slot_count,
                                "header hashSlotCount counts every key, as RocketMQ 4.7.0 and older write it "
                                "(4.7.1+ counts used slots): taken as written by such a broker "
                                "(--broker-version to check against another)"))
        return
    why = (f"RocketMQ {'.'.join(map(str, version))} (--broker-version)" if version is not None else
           "assuming RocketMQ 4.7.1+, since the value is not the item count that 4.7.0 and older write either")
    findings.append(Finding(ERROR, "index.hash_slot_count", p, 32, nonempty, slot_count,
                            f"header hashSlotCount differs from the number of non-empty slots ({why} "
                            "counts used slots)"))


def _sample_items(facts: IndexFacts, pread, slots_end, count, sample, commitlog) -> None:
    """Read the sampled items' messages (first, last and evenly spaced items): a verdict per item, judged
    against the commitlog's range later (_sample_finding)."""
    from rmqctl.errors import RmqError

    step = max(1, (count - 1) // sample)
    picks = sorted(set(list(range(1, count, step)) + [count - 1]))
    facts.picks = len(picks)
    for n in picks:
        kh, phy, td, pre = ITEM.unpack(pread(ixf.ITEM_SIZE, slots_end + ixf.ITEM_SIZE * n))
        try:
            rec = commitlog.read_record(phy)
        except RmqError as e:
            why = f"no valid message at offset {phy} ({e.message})"
        else:
            hashes = {ixf.key_hash(rec.topic, k) for k in index_keys(rec.properties)}
            why = None if kh in hashes else f"message at {phy} has no key of {rec.topic!r} hashing to {kh}"
        facts.samples.append((n, kh, phy, why))


def _sample_finding(facts: IndexFacts, cl_min, cl_end, findings) -> None:
    """Sampled items inside the commitlog's range whose message does not carry their key."""
    bad = [(n, kh, why) for n, kh, phy, why in facts.samples
           if why is not None and phy >= cl_min and (cl_end is None or phy < cl_end)]
    if bad:
        n, kh, why = bad[0]
        findings.append(Finding(ERROR, "index.item_message", facts.path, facts.slots_end + ixf.ITEM_SIZE * n,
                                f"keyHash {kh}", why,
                                f"{len(bad)} of {facts.picks} sampled items do not match their message"))


def first_indexed_message(commitlog):
    """Offset of the first record IndexService.buildIndex would index (a key or UNIQ_KEY, not ROLLBACK)."""
    from rmqctl.dispatch import goes_to_index

    for r in commitlog.records(check_crc=False, check_prop_crc=False):
        if goes_to_index(r.sys_flag) and index_keys(r.properties):
            return r.offset
    return None


def check_index_missing(store, commitlog, findings: list) -> None:
    """No index files while the commitlog holds keyed messages: the broker rebuilds nothing for them at start
    (only abnormal recovery re-dispatches, from its start file on), so its key queries find none."""
    if not store.config.message_index_enable:
        return
    first = first_indexed_message(commitlog)
    if first is None:
        return
    findings.append(Finding(WARNING, "index.missing", str(store.index_dir), None,
                            "index files for the keyed messages", "no index files",
                            f"the commitlog holds messages with keys (the first at offset {first}) but there are "
                            "no index files: the broker finds none of them by key and does not rebuild them; "
                            "`rmqctl rebuild index` builds them (unless the broker runs with "
                            "messageIndexEnable=false)"))


def note(findings: list, path, msg: str) -> None:
    findings.append(Finding(INFO, "index.note", str(path), None, None, None, msg))
