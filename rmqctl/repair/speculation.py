"""Recover in one commitlog walk instead of two: pass 2's dispatch done during pass 1 on a guess that
``holds()`` checks afterwards (docs/architecture.md)."""
from __future__ import annotations

import gc
import shutil
from pathlib import Path

from rmqctl.errors import ProblemsFound
from rmqctl.repair import batchcq as BQ
from rmqctl.repair import queue_state as QS
from rmqctl.repair import rebuild_cq as RC
from rmqctl.repair.batch_dispatch import HeldWindows, dispatch_batch
from rmqctl.repair.index_plan import index_plan
from rmqctl.repair.rebuild_index import IndexRebuilder
from rmqctl.scan import BLANK_RECORD, END
from rmqctl.store.commitlog import Walk

SPECULATE = True        # tests turn it off to compare both ways


STATE_FIELDS = ("keep_end", "kept_any", "max_phys", "dropped_units", "dropped_valid_below")


class Speculation:
    """Pass 2's dispatch done during pass 1, assuming the end of valid data lies beyond every consume-queue
    unit and index file (cut = infinity for truncate_state and index_plan). holds() compares that
    assumption with what the real end gives; only an exact match lets the speculative builders stand."""

    def __init__(self, store, staging, cfg):
        self.store, self.cfg = store, cfg
        self.dir = Path(staging) / "spec"
        self.states: dict = {}
        self.snap: dict = {}
        self.fresh: dict = {}       # (topic, qid) -> the state before dispatch (plain queues without ext)
        self.idx = None
        self.rebuilder = None
        self.topics = None
        self.held = None
        self.lower = None
        self.start_at = None

    @classmethod
    def start(cls, store, files, scan_start, opts, staging, cfg):
        from rmqctl.repair import parallel as P
        from rmqctl.repair import vecdispatch as VD

        sp = cls(store, staging, cfg)
        lower = scan_start
        # every queue's states stay until the end: a full collection in the middle of building them (tens of
        # thousands of objects on a store of many queues, none garbage) walks them all for nothing (~50 ms)
        collecting = gc.isenabled()
        gc.disable()
        try:
            for (topic, qid), st in QS.truncate_states(store, BQ.queues(store), None).items():
                if type(st) is RC.QueueState and st.ext is None:   # plain queues (not batch ones): seen_phys is theirs
                    sp.fresh[(topic, qid)] = st.fresh_copy()
                st.stage_dir = sp.dir.joinpath("cq", topic, str(qid))
                sp.states[(topic, qid)] = st
                sp.snap[(topic, qid)] = tuple(getattr(st, k) for k in STATE_FIELDS)
                if st.dropped_valid_below is not None and not opts.from_start:
                    lower = min(lower, max(st.max_phys, files[0].start) if st.max_phys >= 0 else files[0].start)
        finally:
            if collecting:
                gc.enable()
        sp.lower = lower
        sp.idx = index_plan(store, 2**62) if cfg.message_index_enable else None
        start = min(lower, sp.idx["from"]) if sp.idx is not None else lower
        sp.start_at = max(start, files[0].start)
        if sp.idx is not None:
            (sp.dir / "index").mkdir(parents=True, exist_ok=True)
            i = sp.idx
            sp.rebuilder = IndexRebuilder(sp.dir / "index", cfg.hash_slot_num, cfg.index_num, i["names"],
                                          prev=i["prev"], prev_name=i["prev_name"], skip_keys_at=i["skip"])
        sp.topics = VD.Topics()
        sp.held = HeldWindows(store, sp.topics, sp.states, sp.dir)
        try:
            if sp.start_at < scan_start:
                # records before the broker's start file: trusted like pass 2 trusts them (no CRC)
                walk = Walk()
                if opts.jobs > 1 and P.splittable(store):   # the index from its start: often most of the store
                    P.walk(store, files, sp.start_at, scan_start, jobs=opts.jobs, walk=walk, check_crc=False,
                           sink=P.speculation_dispatch(sp))
                else:
                    for b in VD.batches(store, files, sp.start_at, scan_start, check_crc=False, walk=walk):
                        sp.feed(b)
                stop = walk.ends[-1].stop if walk.ends else None
                if stop is not None and stop.kind not in (END, BLANK_RECORD):
                    raise ProblemsFound(f"corrupt record before the broker's recovery start file ({stop.kind}: "
                                        f"{stop.detail}); run `rmqctl recover --from-start`", offset=stop.offset)
                if stop is None or stop.kind != BLANK_RECORD or walk.ends[-1].file.start + cfg.commitlog_file_size \
                        != scan_start:
                    return sp.drop()    # the walk would not have reached the start file: let pass 2 decide
                sp.held.flush()     # pass 1 may feed the states directly (-j)
        except BaseException:
            sp.drop()
            raise
        return sp

    def truncated(self, topic: str, qid: int, cut: int | None):
        """queue_state.truncate_state(store, topic, qid, cut) without reading the queue again, when the cut lies
        above every unit it read (the result is then the one computed for no cut); else None."""
        st = self.fresh.get((topic, qid))
        if st is None or (cut is not None and st.seen_phys >= cut):
            return None
        return st.fresh_copy()

    def feed(self, b) -> None:
        dispatch_batch(self.store, b, self.topics, self.states, self.rebuilder,
                       self.idx["from"] if self.idx is not None else None, self.cfg.delay_levels, self.dir,
                       held=self.held)

    def holds(self, states, lower, idx, dispatch_start) -> bool:
        """Whether the real end gives what was guessed (pass 1 is over: the units it held are appended first)."""
        self.held.flush()
        if lower != self.lower or dispatch_start != self.start_at:
            return False
        if set(states) != set(self.snap):
            return False
        for k, st in states.items():
            if tuple(getattr(st, f) for f in STATE_FIELDS) != self.snap[k]:
                return False
        if (idx is None) != (self.idx is None):
            return False
        if idx is not None:
            a, b = idx, self.idx
            if [p for p, _ in a["kept"]] != [p for p, _ in b["kept"]] or a["prev"] != b["prev"] or \
                    a["skip"] != b["skip"] or a["from"] != b["from"] or a["names"] != b["names"] or \
                    a["drop"] != b["drop"] or a["prev_name"] != b["prev_name"]:
                return False
        return True

    def drop(self):
        if self.rebuilder is not None:
            self.rebuilder.abort()
            self.rebuilder = None
        shutil.rmtree(self.dir, ignore_errors=True)
        return None
