"""Records carrying DUP_INFO (duplication / controller mode): counted and reported, never acted on
(docs/recovery.md, docs/faults.md)."""
from __future__ import annotations


class DupInfo:
    """F22: records carrying DUP_INFO (duplication / controller mode, apache/rocketmq#8032). With duplicationEnable the
    broker's checkMessageAndReturnSize fails a record WITHOUT a well-formed DUP_INFO, so its recovery
    stops at the first such record -- at file 0 that truncates the whole log. rmqctl never ends valid
    data for a missing DUP_INFO; it only reports what it saw. Cheap: one bytes.find per batch, the
    property parse only for batches that contain the name at all."""

    NAME = b"DUP_INFO"

    def __init__(self):
        self.has = self.missing = self.bad = 0
        self.first_missing = self.first_has = None

    def feed(self, b) -> None:
        import numpy as np

        from rmqctl.repair import vecdispatch as VD

        n = len(b)
        nb = VD.rebuild_kernel()
        raw = b.raw if hasattr(b.raw, "find") else bytes(b.raw)
        # the numba kernel reads the properties fields in place (shared with dispatch); numpy: a cheap
        # search of the window before building Props
        if nb is None and raw.find(self.NAME + b"\x01") < 0:
            self.missing += n
            if self.first_missing is None and n:
                self.first_missing = int(b.offset[0])
            return
        props = VD.props_of(b) if nb is not None else VD.Props(b)
        has, vs, vl = props.value(self.NAME)
        k = int(has.sum())
        self.has += k
        self.missing += n - k
        if k and self.first_has is None:
            self.first_has = int(b.offset[int(np.flatnonzero(has)[0])])
        if k < n and self.first_missing is None:
            self.first_missing = int(b.offset[int(np.flatnonzero(~has)[0])])
        for s0, ln in zip(vs[has].tolist(), vl[has].tolist()):
            if props.buf[s0:s0 + ln].tobytes().count(b"_") != 1:
                self.bad += 1

    def report(self, plan) -> None:
        if not self.has:
            return
        plan.commitlog["dup_info"] = {"records_with": self.has, "records_without": self.missing,
                                      "malformed": self.bad, "first_without": self.first_missing}
        msg = (f"{self.has} record(s) carry DUP_INFO (from {self.first_has}): a duplication/controller-mode "
               "store. Recovery here follows the non-controller rules (confirmOffset = start of the last "
               "valid record); no record is dropped for a missing or malformed DUP_INFO")
        if self.missing or self.bad:
            msg += (f" -- {self.missing} record(s) lack it (first at {self.first_missing}), {self.bad} malformed: a "
                    "broker with duplicationEnable=true would end its recovery at the first of them and truncate "
                    "the log there; run it with duplicationEnable=false after this repair")
        plan.notes.append(msg)
