"""verify's index-item checks compiled by numba (rmqctl.kernels.index_nb) equal the numpy checks: the same findings,
in the same order, on index files built as the broker builds them and under random damage of every kind the
checks look for, with batches small enough that chains, the order check and the first-offender rule cross them.
And the compiled checks are used exactly when the process already runs the numba kernel."""
import dataclasses
import random
import struct

import pytest

from rmqctl import kernels
from rmqctl.check import index as ixc
from rmqctl.kernels import index_nb

KINDS = {"index.chain_cycle", "index.chain_bucket", "index.time_diff", "index.phy_order", "index.slot_hash"}


def _index_file(path, rnd, slots: int, count: int, damage: int) -> set:
    """An index file as IndexFile.putKey writes it (count - 1 items, each linked to the last item of its slot), then
    `damage` random faults; returns the kinds of fault injected."""
    begin_ts = 1_700_000_000_000
    head = [0] * slots
    items, phy = [], 1000
    for n in range(1, count):
        kh = rnd.choice([rnd.randint(-(1 << 31), (1 << 31) - 1), rnd.randint(0, 50)])   # negative hashes too
        s = kh % slots
        phy += rnd.randint(0, 3000)
        items.append([kh, phy, rnd.randint(0, 100), head[s]])
        head[s] = n
    end_ts = begin_ts + 100_000
    done = set()
    for _ in range(damage):
        i = rnd.randrange(len(items))
        n = i + 1
        kind = rnd.choice(["cycle", "bucket", "time", "phy", "head", "older", "stale"])
        mine = [m for m in range(1, n) if items[m - 1][0] % slots == items[i][0] % slots]
        if kind == "older":         # a link to an older item of its own bucket (not the last): no fault
            if len(mine) > 1:
                items[i][3] = rnd.choice(mine[:-1])
            continue
        if kind == "stale":         # a slot's head left at an older item of the slot (a table page not flushed)
            s = rnd.randrange(slots)
            older = [m for m in range(1, count) if items[m - 1][0] % slots == s][:-1]
            if older:
                head[s] = rnd.choice(older)
            continue
        if kind == "cycle":
            items[i][3] = rnd.choice([n, n + rnd.randint(1, 5), -rnd.randint(1, 9)])
        elif kind == "bucket" and n > 2:
            other = [m for m in range(1, n) if items[m - 1][0] % slots != items[i][0] % slots]
            if not other:
                continue
            items[i][3] = rnd.choice(other)
        elif kind == "time" and n >= 2:
            items[i][2] = rnd.choice([-1, -rnd.randint(2, 1 << 20), 101 + rnd.randint(0, 1000)])
        elif kind == "phy" and n > 1:
            items[i][1] = items[i - 1][1] - rnd.randint(1, 500)
        elif kind == "head":
            s = rnd.randrange(slots)
            wrong = [m for m in range(1, count) if items[m - 1][0] % slots != s]
            if not wrong:
                continue
            head[s] = rnd.choice(wrong)
        else:
            continue
        done.add(kind)
    _write(path, head, items, 4 * slots, begin_ts, end_ts)
    return done


def _write(path, head: list, items: list, index_num: int, begin_ts: int, end_ts: int) -> None:
    """An index file of these slot heads and items ([keyHash, phyOffset, timeDiff, prevIndex], items 1 on: item
    0's place stays empty), zero-filled to index_num items."""
    count = len(items) + 1
    hdr = struct.pack(">qqqqii", begin_ts, end_ts, items[0][1], items[-1][1], sum(1 for h in head if h), count)
    body = struct.pack(f">{len(head)}i", *head) + bytes(20) + b"".join(struct.pack(">iqii", *it) for it in items)
    path.write_bytes(hdr + body + bytes(20 * (index_num - count)))


def _facts(path, slots: int, compiled):
    f = ixc.index_file_facts(path, slots, 4 * slots, sample=0, compiled=compiled)
    return [dataclasses.astuple(x) for x in f.findings]


@pytest.mark.parametrize("batch", [1, 7, 64, ixc.BATCH])
def test_compiled_item_checks_equal_numpy(tmp_path, monkeypatch, batch):
    monkeypatch.setattr(ixc, "BATCH", batch)
    rnd = random.Random(batch)
    seen = set()
    for case in range(40):
        slots = rnd.choice([1, 2, 7, 31, 97])
        count = rnd.randint(2, 4 * slots) if slots > 1 else rnd.randint(2, 4)
        damage = rnd.choice([0, 0, 1, 2, 5])
        p = tmp_path / f"i{case}"
        injected = _index_file(p, rnd, slots, count, damage)
        want = _facts(p, slots, False)
        assert _facts(p, slots, index_nb) == want, (case, injected)
        kinds = {w[1] for w in want} & KINDS
        assert bool(kinds) == bool(injected), (case, injected, want)     # the fault is there, and seen
        seen |= kinds
    assert seen == KINDS


def _by_definition(path, slots: int):
    """The bucket and slot-head findings as their definitions read, with every item's slot in hand: an item
    whose prevIndex (0 < prevIndex < item) is an item of another slot (the first such); slots whose head (0 <
    head < count) is an item of another slot (how many, and the first)."""
    data = path.read_bytes()
    count = struct.unpack_from(">i", data, 36)[0]
    head = struct.unpack_from(f">{slots}i", data, 40)
    at = 40 + 4 * slots
    items = [struct.unpack_from(">iqii", data, at + 20 * n) for n in range(count)]
    slot_of = [kh % slots for kh, _phy, _td, _pre in items]
    got = []
    for n in range(1, count):
        pre = items[n][3]
        if 0 < pre < n and slot_of[pre] != slot_of[n]:
            got.append(("index.chain_bucket", at + 20 * n, f"slot {slot_of[n]}", f"slot {slot_of[pre]}"))
            break
    wrong = [s for s in range(slots) if 0 < head[s] < count and slot_of[head[s]] != s]
    if wrong:
        s = wrong[0]
        got.append(("index.slot_hash", 40 + 4 * s, f"slot {s}", f"item {head[s]} in slot {slot_of[head[s]]}",
                    len(wrong)))
    return got


@pytest.mark.parametrize("compiled", [False, index_nb], ids=["numpy", "numba"])
@pytest.mark.parametrize("reads", [(ixc.BATCH, ixc.HEADS, ixc.RUN_GAP, ixc.RUN_MAX), (5, 3, 1, 2), (7, 2, 4, 9)],
                         ids=["default", "small", "odd"])
def test_bucket_and_head_checks_as_defined(tmp_path, monkeypatch, compiled, reads):
    """The bucket and slot-head checks keep each slot's last item instead of every item's slot, and read back
    only the items putKey would not have linked: their findings are those of the definitions with every item's
    slot in hand -- on files with links to older items of the same slot and heads left at older items (no
    fault, read back), with faults, and with the reads cut small."""
    batch, heads, gap, run = reads
    for name, v in (("BATCH", batch), ("HEADS", heads), ("RUN_GAP", gap), ("RUN_MAX", run)):
        monkeypatch.setattr(ixc, name, v)
    read_back = []
    real = ixc._slots_of
    monkeypatch.setattr(ixc, "_slots_of", lambda *a: read_back.append(len(a[2])) or real(*a))
    rnd = random.Random(31)
    clean_read_back = 0
    for case in range(80):
        slots = rnd.choice([1, 2, 7, 31, 97])
        count = rnd.randint(2, 4 * slots) if slots > 1 else rnd.randint(2, 4)
        p = tmp_path / f"i{case}"
        injected = _index_file(p, rnd, slots, count, rnd.choice([0, 1, 2, 5, 9]))
        read_back.clear()
        found = ixc.index_file_facts(p, slots, 4 * slots, sample=0, compiled=compiled).findings
        got = []
        for f in found:
            if f.check in ("index.chain_bucket", "index.slot_hash"):
                got.append((f.check, f.offset, f.expected, f.actual)
                           + ((int(f.message.split()[0]),) if f.check == "index.slot_hash" else ()))
        assert got == _by_definition(p, slots), (case, injected)
        if not got and read_back:
            clean_read_back += 1
    assert clean_read_back >= 5      # the read-back path ran on files with nothing to report


@pytest.mark.parametrize("compiled", [False, index_nb], ids=["numpy", "numba"])
def test_no_read_back_once_the_bucket_check_has_reported(tmp_path, monkeypatch, compiled):
    """After the first link into another bucket is reported, links to older items of their own slot (which the
    check would read back) are not read back any more: the bucket check reports one offender a file."""
    monkeypatch.setattr(ixc, "BATCH", 1)
    slots, count = 7, 80
    kh = [0] + [n * 3 for n in range(1, count)]           # item n in slot 3n mod 7
    prev, last = [0] * count, [0] * slots
    for n in range(1, count):
        prev[n], last[kh[n] % slots] = last[kh[n] % slots], n
    assert kh[1] % slots != kh[3] % slots
    prev[3] = 1                                              # the offender: item 1 is in another slot
    older = [n for n in range(4, count) if prev[n] and prev[prev[n]]]
    for n in older:
        prev[n] = prev[prev[n]]                              # its own slot's item before the last: no fault
    assert len(older) > 20
    p = tmp_path / "i"
    _write(p, last, [[kh[n], 1000 + n, 0, prev[n]] for n in range(1, count)], 128, 1_700_000_000_000,
           1_700_000_100_000)
    read_back = []
    real = ixc._slots_of
    monkeypatch.setattr(ixc, "_slots_of", lambda *a: read_back.extend(int(x) for x in a[2]) or real(*a))
    found = ixc.index_file_facts(p, slots, 128, sample=0, compiled=compiled).findings
    assert [f.check for f in found] == ["index.chain_bucket"] and found[0].offset == 40 + 4 * slots + 20 * 3
    assert read_back and max(read_back) <= 3


def test_a_short_file_reads_as_zeros_in_both(tmp_path):
    """A file cut inside its items (the broker zero-extends it): both paths read the missing items as zeros."""
    rnd = random.Random(5)
    p = tmp_path / "i"
    _index_file(p, rnd, 31, 100, 0)
    data = p.read_bytes()
    p.write_bytes(data[:40 + 4 * 31 + 20 * 60 + 7])
    want = _facts(p, 31, False)
    # zero items after the real ones: out of order, and slots whose head they are point into slot 0
    assert {w[1] for w in want} == {"index.file_size", "index.phy_order", "index.slot_hash"}
    assert _facts(p, 31, index_nb) == want


def test_the_compiled_checks_run_only_beside_the_compiled_walk(monkeypatch, tmp_path):
    p = tmp_path / "i"
    _index_file(p, random.Random(2), 7, 20, 0)
    used = []
    real = index_nb.items
    monkeypatch.setattr(index_nb, "items", lambda *a: used.append(1) or real(*a))
    monkeypatch.setattr(kernels, "_loaded", {})
    monkeypatch.setenv("RMQCTL_KERNEL", "numpy")
    assert kernels.index_kernel() is None
    ixc.index_file_facts(p, 7, 28, sample=0)
    assert not used
    monkeypatch.setenv("RMQCTL_KERNEL", "auto")     # numba not loaded yet by any walk of this process
    assert kernels.index_kernel() is None
    monkeypatch.setenv("RMQCTL_KERNEL", "numba")
    assert kernels.walk_kernel() is not None
    assert kernels.index_kernel() is index_nb
    ixc.index_file_facts(p, 7, 28, sample=0)
    assert used


def _whole(path, slots, compiled):
    f = ixc.index_file_facts(path, slots, 4 * slots, sample=0, compiled=compiled)
    return [dataclasses.astuple(x) for x in f.findings], f.hdr, f.first, f.last


@pytest.mark.parametrize("compiled", [False, index_nb], ids=["numpy", "numba"])
def test_pieces_joined_equal_one_pass(tmp_path, monkeypatch, compiled):
    """verify -j checks a large index file in pieces (items lo .. hi-1 each, the last piece also the rest of the
    file): joined, the pieces' facts equal one pass's -- the first offender of each check, in one pass's order --
    whatever the cuts, batch-aligned or not."""
    monkeypatch.setattr(ixc, "BATCH", 5)
    rnd = random.Random(17)
    kinds = set()
    for case in range(60):
        slots = rnd.choice([2, 7, 31])
        count = rnd.randint(3, 4 * slots)
        p = tmp_path / f"i{case}"
        _index_file(p, rnd, slots, count, rnd.choice([0, 1, 3, 6]))
        want = _whole(p, slots, compiled)
        kinds |= {w[1] for w in want[0]}
        cuts = sorted(rnd.sample(range(2, count), min(count - 2, rnd.randint(1, 4))))
        if rnd.random() < 0.3:
            cuts = [c for c in range(1 + ixc.BATCH, count, ixc.BATCH)] or cuts
        bounds = [1, *cuts, count]
        parts = [ixc.index_file_facts(p, slots, 4 * slots, sample=0, compiled=compiled, part=(a, b))
                 for a, b in zip(bounds, bounds[1:])]
        joined = ixc.join_parts(parts)
        assert ([dataclasses.astuple(x) for x in joined.findings], joined.hdr, joined.first, joined.last) == want, \
            (case, bounds)
    assert kinds >= KINDS


def test_index_pieces_cover_each_large_file_once(tmp_path, monkeypatch):
    from rmqctl.check import run

    rnd = random.Random(4)
    paths = []
    for n, count in enumerate((120, 3, 400)):
        p = tmp_path / f"i{n}"
        _index_file(p, rnd, 128, count, 0)
        paths.append(p)
    monkeypatch.setattr(ixc, "BATCH", 8)
    monkeypatch.setattr(run, "INDEX_PIECE_ITEMS", 16)
    pieces = run._index_pieces(paths, 12)      # 4 workers' worth per file
    by_file: dict = {}
    for i, part in pieces:
        by_file.setdefault(i, []).append(part)
    assert by_file[1] == [None]                 # too small to split
    for i, count in ((0, 120), (2, 400)):
        parts = by_file[i]
        assert parts[0][1] == count              # the last piece (slots, samples) goes first
        cover = sorted(parts)
        assert cover[0][0] == 1 and all(a[1] == b[0] for a, b in zip(cover, cover[1:]))
        assert 1 < len(parts) <= 4 and all((a - 1) % 8 == 0 for a, _b in parts)
    assert run._index_pieces(paths, 3) == [(0, None), (1, None), (2, None)]     # as many files as workers
    # with the walk's bytes: no more pieces than it takes for none to outlast a worker's share of all the work
    items = run.ITEM_BYTES * (120 + 3 + 400)
    alone = run._index_pieces(paths, 12, 0)       # no walk: 12 workers share 523 items' work, 44 each
    assert [sum(1 for i, _p in alone if i == f) for f in range(3)] == [3, 1, 4]     # 120 / 44 -> 3; 400: at most 4
    assert run._index_pieces(paths, 12, 1 << 40) == [(0, None), (1, None), (2, None)]
    two = run._index_pieces(paths, 12, 12 * run.ITEM_BYTES * 400 // 2 - items)     # file 2: two workers' shares
    assert sorted(p for i, p in two if i == 2) == [(1, 201), (201, 400)] and (0, None) in two
