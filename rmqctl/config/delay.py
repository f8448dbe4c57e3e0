"""Delay offsets (delayOffset.json): ``offsetTable`` maps a delay **level** (1-based, unquoted int key)
to the next offset ScheduleMessageService will process in ``SCHEDULE_TOPIC_XXXX`` queue level-1."""
from __future__ import annotations

from rmqctl.config.files import as_int, next_version
from rmqctl.errors import UsageError

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


def table(doc: dict) -> dict:
    t = doc.get("offsetTable")
    if t is None:
        t = doc["offsetTable"] = {}
    if not isinstance(t, dict):
        raise UsageError("offsetTable is not an object")
    return t


def rows(doc: dict, store=None, delay_levels=None) -> list[dict]:
    out = []
    have = set(store.queues()) if store is not None else set()
    for k, v in table(doc).items():
        try:
            level, off = as_int(k, "delay level"), as_int(v, "delay offset")
        except Exception:  # noqa: BLE001
            continue
        r = {"level": level, "queue": level - 1, "offset": off, "delay_ms": None, "max": None, "lag": None}
        if delay_levels and 1 <= level <= len(delay_levels):
            r["delay_ms"] = delay_levels[level - 1]
        if (SCHEDULE_TOPIC, level - 1) in have:
            mx = store.consume_queue(SCHEDULE_TOPIC, level - 1).max_offset()
            r["max"], r["lag"] = mx, max(0, mx - off)
        out.append(r)
    out.sort(key=lambda r: r["level"])
    return out


def set_level(doc: dict, level: int, offset: int) -> int | None:
    if level < 1:
        raise UsageError(f"delay level is 1-based, got {level}")
    if offset < 0:
        raise UsageError(f"offset must be >= 0, got {offset}")
    t = table(doc)
    key = level if (level in t or str(level) not in t) else str(level)
    old = t.get(key)
    t[key] = offset
    next_version(doc)
    return None if old is None else as_int(old)
