"""Which index files a recovery keeps (full, and ending before the cut) and where regeneration starts."""
from __future__ import annotations

import os

from rmqctl.store.commitlog import open_ro


def index_headers(store):
    from rmqctl.store.index import HEADER

    out = []
    for p in store.index_files():
        with open_ro(p) as fd:
            data = os.pread(fd, 40, 0)
        if len(data) < 40:
            data = data.ljust(40, b"\0")
        out.append((p, HEADER.unpack(data)))
    return out


def index_plan(store, cut: int) -> dict:
    """Keep full index files that end before the cut; regenerate from there."""
    from rmqctl.store.index import IndexFile

    cfg = store.config
    heads = index_headers(store)
    kept = []
    for p, h in heads:
        begin_ts, end_ts, begin_phy, end_phy, slots, count = h
        if count >= cfg.index_num and end_phy < cut and p.stat().st_size == cfg.index_file_size:
            kept.append((p, h))
        else:
            break
    rest = heads[len(kept):]
    if kept:
        p, h = kept[-1]
        end_phy = h[3]
        # how many of the record-at-end_phy's keys the kept file already holds
        n = 0
        with IndexFile(p, cfg.hash_slot_num, cfg.index_num) as ixf:
            k = h[5] - 1
            while k >= 1:
                if ixf.item(k)[1] != end_phy:
                    break
                n += 1
                k -= 1
        return {"kept": kept, "prev": (h[3], h[1]), "prev_name": p.name, "skip": (end_phy, n),
                "from": end_phy, "names": [q.name for q, _ in rest], "drop": [q for q, _ in rest]}
    return {"kept": [], "prev": None, "prev_name": None, "skip": None, "from": store.commitlog.min_offset,
            "names": [q.name for q, _ in rest], "drop": [q for q, _ in rest]}
