"""checkpoint, abort, lock, timer and compaction files (docs/store-format.md, docs/recovery.md): values
against what exists, and
what the broker's next start will do."""
from __future__ import annotations

import os
import struct
import time

from rmqctl.check.findings import ERROR, INFO, WARNING, Finding
from rmqctl.formats import checkpoint as ckf
from rmqctl.store.files import read_bytes, read_refusal

YEAR_2000_MS = 946_684_800_000
FUTURE_SLACK_MS = 24 * 3600 * 1000


def _ts_problem(v: int, now_ms: int) -> str | None:
    if v == 0:
        return None
    if v < 0:
        return "negative"
    if v < YEAR_2000_MS:
        return "before the year 2000"
    if v > now_ms + FUTURE_SLACK_MS:
        return "in the future"
    return None


def check_checkpoint(store, findings: list, cl_end: int | None, last_store_ts: int | None):
    """Returns the parsed Checkpoint (or None when missing/unusable)."""
    p = str(store.checkpoint_path)
    try:
        ck = store.checkpoint()
    except Exception as e:  # noqa: BLE001 - unreadable: reported, the other checks go on
        findings.append(Finding(ERROR, "checkpoint.unreadable", p, None, None, None, str(e)))
        return None
    if ck is None and store.checkpoint_path in store.not_followed:
        return None   # reported once, as not followed
    if ck is None:
        findings.append(Finding(WARNING, "checkpoint.missing", p, None, "a 4096-byte checkpoint", "missing",
                                "the broker starts from a zero checkpoint: an abnormal recovery scans from file 0"))
        return None
    if ck.size != ckf.FILE_SIZE:
        findings.append(Finding(ERROR, "checkpoint.size", p, 0, ckf.FILE_SIZE, ck.size,
                                "short or zero checkpoint: the broker maps 4096 bytes, missing ones read as 0"))
    now = int(time.time() * 1000)
    fields = [("physicMsgTimestamp", 0, ck.physic_msg_timestamp), ("logicsMsgTimestamp", 8, ck.logics_msg_timestamp),
              ("indexMsgTimestamp", 16, ck.index_msg_timestamp)]
    for name, off, v in fields:
        why = _ts_problem(v, now)
        if why:
            findings.append(Finding(ERROR, "checkpoint.timestamp", p, off, "0 or a plausible ms timestamp", v,
                                    f"{name} is {why} (garbage checkpoint): recovery start is unpredictable"))
        elif v and last_store_ts and v > last_store_ts + FUTURE_SLACK_MS:
            findings.append(Finding(WARNING, "checkpoint.timestamp", p, off, f"<= {last_store_ts}", v,
                                    f"{name} is later than the last message's store time"))
    for name, off, v in (("masterFlushedOffset", 24, ck.master_flushed_offset),
                         ("confirmPhyOffset", 32, ck.confirm_phy_offset)):
        if v < 0 or (v > 0 and cl_end is not None and v > cl_end):
            findings.append(Finding(ERROR, "checkpoint.offset", p, off, f"0..{cl_end}", v,
                                    f"{name} outside the commitlog"))
    if ck.size >= 40:
        rest = read_bytes(store.checkpoint_path, store.root, limit=1 << 20)[40:]
        if any(rest):
            findings.append(Finding(WARNING, "checkpoint.padding", p, 40, "zero bytes", "non-zero bytes",
                                    "bytes after the checkpoint's fields are not zero"))
    return ck


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


def predict_recovery(store, findings: list, files: list, ck, cq_max_phys: int) -> dict:
    """What the next broker start will do (docs/recovery.md, "The broker's start-up, in order"): normal or
    abnormal recovery, from which file.
    `files` = [(MappedFile, first_store_ts, first_magic)] in order."""
    abnormal = store.abort_exists
    p = str(store.abort_path if abnormal else store.checkpoint_path)
    n = len(files)
    if not n:
        return {"recovery": "abnormal" if abnormal else "normal", "start_file": None}
    if abnormal:
        min_ts = ck.min_timestamp if ck else 0
        start = 0
        for i in range(n - 1, -1, -1):
            _, ts, magic = files[i]
            if ts and magic is not None and ts <= min_ts:
                start = i
                break
        f = files[start][0]
        scan_bytes = sum(x[0].size for x in files[start:])
        msg = (f"abort file present: the next start runs ABNORMAL recovery from {f.path.name} "
               f"({n - start} of {n} file(s), {_size(scan_bytes)} re-read with CRC and re-dispatched)")
        if start == 0 and n > 3:
            msg += "; the checkpoint does not let it skip any file (slow start)"
        findings.append(Finding(WARNING, "abort.present", str(store.abort_path), None, "no abort file (clean shutdown)",
                                "abort present", msg))
        return {"recovery": "abnormal", "start_file": f.path.name, "files_scanned": n - start}
    start = max(0, n - 3)
    for i in range(n - 1, -1, -1):   # 5.3.2+: last file starting at or before the CQs' max physical offset
        if files[i][0].start <= cq_max_phys:
            start532 = i
            break
    else:
        start532 = 0
    findings.append(Finding(INFO, "recovery.predicted", p, None, None, None,
                            f"normal recovery: from {files[start][0].path.name} (4.9-5.3.1) or "
                            f"{files[start532][0].path.name} (5.3.2+)"))
    return {"recovery": "normal", "start_file": files[start][0].path.name}


def check_lock(store, findings: list) -> bool:
    """True when a live process holds the broker's lock (then everything stays read-only anyway)."""
    try:
        state = store.lock_state()
    except Exception as e:  # noqa: BLE001
        findings.append(Finding(WARNING, "lock.unreadable", str(store.root / "lock"), None, None, None, str(e)))
        return False
    if state == "held":
        findings.append(Finding(WARNING, "lock.held", str(store.root / "lock"), 0, "lock free", "held",
                                "a live process (a running broker?) holds the store lock: results describe a store "
                                "that is being written; verify stayed read-only"))
        return True
    return False


def check_timer(store, findings: list, timer_cq_max: int | None) -> None:
    """config/timercheck offsets within what exists (F23), timerwheel size, timerlog file sizes."""
    from rmqctl.formats import timer as tf

    tc = store.config_dir / "timercheck"
    tlog = store.root / "timerlog"
    log_end = 0
    if tlog.is_dir():
        names = sorted(n for n in os.listdir(tlog) if n.isdigit() and len(n) == 20)
        for n in names:
            sz = os.stat(tlog / n).st_size
            if sz != tf.TIMERLOG_FILE_SIZE and sz != 0:
                pass  # size is broker config (mappedFileSizeTimerLog); only report zero-length
            if sz == 0:
                findings.append(Finding(ERROR, "timer.timerlog_size", str(tlog / n), 0, "non-empty", 0,
                                        "zero-length timerlog file"))
            log_end = max(log_end, int(n) + sz)
    wheel = store.root / "timerwheel"
    if wheel.exists():
        sz = wheel.stat().st_size
        if sz not in (0, tf.WHEEL_FILE_SIZE):
            findings.append(Finding(ERROR, "timer.timerwheel_size", str(wheel), 0, tf.WHEEL_FILE_SIZE, sz,
                                    "the broker fails to start on a timerwheel of another size"))
    if not tc.exists() or _not_followed(store, tc):
        return
    raw = read_bytes(tc, store.root, limit=1 << 20)
    if len(raw) < 56:
        if raw:
            findings.append(Finding(ERROR, "timer.timercheck", str(tc), len(raw), ">= 56 bytes", len(raw),
                                    "short timercheck"))
        return
    last_read, flush_pos, queue_off, master_off = struct.unpack_from(">4q", raw, 0)
    if flush_pos < 0 or (log_end and flush_pos > log_end):
        findings.append(Finding(ERROR, "timer.flush_pos", str(tc), 8, f"0..{log_end}", flush_pos,
                                "lastTimerLogFlushPos beyond the timerlog"))
    if timer_cq_max is not None and (queue_off < 0 or queue_off > timer_cq_max):
        findings.append(Finding(ERROR, "timer.queue_offset", str(tc), 16, f"0..{timer_cq_max}", queue_off,
                                "lastTimerQueueOffset beyond the rmq_sys_wheel_timer consume queue"))


def check_compaction(store, findings: list, queue_max) -> None:
    """compaction/position-checkpoint offsets within each queue's max (queue_max(topic, qid) -> int|None)."""
    from rmqctl import fastjson
    from rmqctl.errors import FormatError

    p = store.root / "compaction" / "position-checkpoint"
    if not p.exists() or _not_followed(store, p) or p.stat().st_size == 0:
        return
    try:
        doc = fastjson.loads(read_bytes(p, store.root), p)
    except FormatError as e:
        findings.append(Finding(ERROR, "compaction.checkpoint", str(p), e.offset, "JSON", "unparsable", e.message))
        return
    table = doc.get("queueOffsetMap") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        return
    for k, v in table.items():
        topic, _, q = str(k).rpartition("_")
        try:
            qid, off = int(q), int(v)
        except (TypeError, ValueError):
            findings.append(Finding(ERROR, "compaction.checkpoint", str(p), None, "<topic>_<qid>: offset", k, ""))
            continue
        mx = queue_max(topic, qid)
        if mx is not None and off > mx:
            findings.append(Finding(ERROR, "compaction.offset", str(p), None, f"<= {mx}", off,
                                    f"compaction position of {topic}:{qid} beyond the queue's max offset"))


def _not_followed(store, p) -> bool:
    """A link out of the store or a non-regular file: recorded for verify's not-followed line, not read."""
    why = read_refusal(p, store.root)
    if why:
        store._skip(p, why)
    return bool(why)
