"""What verify's commitlog pass learns about one file (or one range of it) -- picklable, so worker
processes and Spark tasks can hand it back -- and the settings it runs with."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class QueueTrack:
    """What one file says about one queue: enough to merge files and check the CQ, nothing per message."""
    first_q: int
    last_q: int            # queue offset of the last record
    next_q: int            # expected next queue offset (last_q + INNER_NUM or 1)
    count: int = 0
    first_phys: int = 0
    gaps: int = 0
    first_gap: tuple | None = None      # (phys, expected q, actual q)
    missing: int = 0                    # records with no valid CQ unit
    first_missing: tuple | None = None  # (phys, q)
    mismatches: int = 0
    first_mismatch: tuple | None = None  # (q, expected (phys,size,tags), actual unit)

    def gap_to(self, t: "QueueTrack") -> None:
        """`t` continues this queue directly: a different first offset than expected is a gap."""
        if self.next_q >= 0 and t.first_q != self.next_q:
            self.gaps += 1
            if self.first_gap is None:
                self.first_gap = (t.first_phys, self.next_q, t.first_q)

    def absorb(self, t: "QueueTrack") -> None:
        """Add what a later file/range says about the same queue (counts, first problems, position)."""
        self.gaps += t.gaps
        if self.first_gap is None and t.first_gap:
            self.first_gap = t.first_gap
        self.count += t.count
        self.last_q, self.next_q = t.last_q, t.next_q
        self.missing += t.missing
        if self.first_missing is None:
            self.first_missing = t.first_missing
        self.mismatches += t.mismatches
        if self.first_mismatch is None:
            self.first_mismatch = t.first_mismatch


@dataclass
class FileResult:
    path: str
    start: int
    size: int
    findings: list = field(default_factory=list)
    messages: int = 0
    bytes: int = 0
    end: int = 0                 # absolute offset just after the last valid record (start if none)
    last_valid: int | None = None
    full: bool = False           # ended with a BLANK record
    first_store_ts: int | None = None   # first record, for the broker's recovery start-file rule
    first_magic: int | None = None
    queues: dict = field(default_factory=dict)   # (topic, qid) -> QueueTrack
    # ranges (scan_range): where the range's walk began, where it handed off to the next range (None: the
    # walk of the file ended in this range), the offset of its first stop it resumed after (None: none)
    begin: int | None = 0
    range_end: int | None = None
    handoff: int | None = None
    first_skip: int | None = None


@dataclass
class ScanContext:
    root: str
    file_size: int
    cq_file_size: int
    delay_levels: tuple
    is_last: bool = False
    lock_held: bool = False
    check_cq: bool = True
    batch_topics: frozenset = frozenset()   # topics with a batchconsumequeue/ directory
    multi_dispatch: bool = True     # records carrying multi-dispatch offsets were written with it on
    enable_lmq: bool = True         # %LMQ% targets use queue 0
