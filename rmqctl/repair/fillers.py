"""Synthetic records for ``recover --on-corruption quarantine`` (docs/recovery.md): a ROLLBACK-type
placeholder record that passes the broker's checks over exactly the bad range, or a BLANK end-of-file
record when the good data resumes only in the next file."""
from __future__ import annotations

from dataclasses import dataclass

from rmqctl import writers
from rmqctl.formats import commitlog as clf

QUARANTINE_TOPIC = "rmqctl_quarantine"
QUARANTINE_PROP = "RMQCTL_QUARANTINED"
_LOCALHOST = (b"\x7f\x00\x00\x01", 0)


@dataclass
class Filler:
    start: int
    end: int
    kind: str                    # record | blank
    data: bytes                  # the 8-byte blank header or the whole synthetic record
    store_ts: int = 0


def make_filler_record(start: int, length: int, prev=None) -> bytes | None:
    """A valid ROLLBACK-type record of exactly `length` bytes at `start` (None if it cannot fit)."""
    props = f"{QUARANTINE_PROP}\x01{start}-{start + length}\x02".encode()
    topic = QUARANTINE_TOPIC.encode()
    fixed = writers.message_overhead() + len(topic) + len(props)
    body_len = length - fixed
    if body_len < 0 or length > 0x7FFFFFFF:
        return None
    body = bytes(body_len)
    ts = prev.store_timestamp if prev is not None else 0
    store_host = (prev.store_host_raw, prev.store_port) if prev is not None and len(prev.store_host_raw) == 4 \
        else _LOCALHOST
    host = store_host     # born host = store host
    rec = writers.message_record(topic=topic, body=body, properties=props, physical_offset=start,
                                 sys_flag=clf.TRANSACTION_ROLLBACK_TYPE, born_timestamp=ts, born_host=host,
                                 store_timestamp=ts, store_host=host, magic_code=clf.MESSAGE_MAGIC_CODE_V1)
    assert len(rec) == length
    return rec


def filler_for(start: int, resume: int, f, fsize: int, last) -> Filler:
    class _Prev:
        pass
    prev = None
    if last is not None:
        prev = _Prev()
        prev.store_timestamp, prev.store_host_raw, prev.store_port = last[1], last[2] or b"\x7f\0\0\x01", last[3]
    if resume < f.start + fsize:
        data = make_filler_record(start, resume - start, prev)
        if data is not None:
            return Filler(start, resume, "record", data, prev.store_timestamp if prev else 0)
    # The good data resumes in a later file: a minimal placeholder record (so the lost queue offsets
    # can point at it) followed by a BLANK record to the end of the file; BLANK alone if even the
    # placeholder does not fit.
    room = f.start + fsize - start
    n = min_filler_len(start)
    if room >= n + clf.END_FILE_MIN_BLANK_LENGTH:
        rec = make_filler_record(start, n, prev)
        blank = writers.blank_record(room - n)
        return Filler(start, start + n, "record", rec + blank, prev.store_timestamp if prev else 0)
    return Filler(start, f.start + fsize, "blank", writers.blank_record(room))


def min_filler_len(start: int) -> int:
    n = 140
    for _ in range(3):
        props = f"{QUARANTINE_PROP}\x01{start}-{start + n}\x02".encode()
        n = writers.message_overhead() + len(QUARANTINE_TOPIC) + len(props)
    return n
