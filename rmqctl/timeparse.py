"""The one time parser behind every option that takes a time (query --time/--begin/--end, config offsets
reset --to-time, stats/export --begin/--end).

Accepted forms:
  * epoch milliseconds: ``1714536000000`` (digits only);
  * ISO-8601 with or without a zone: ``2024-05-01T12:00:00Z``, ``2024-05-01 12:00:00.250+08:00``,
    ``2024-05-01`` (parsed by python-dateutil's ``isoparse``);
  * mqadmin's ``yyyy-MM-dd#HH:mm:ss:SSS`` (resetOffsetByTime -s);
  * ``now``, and times relative to now: ``-2h``, ``-30m``, ``-7d``, ``-90s``, ``-1w``, ``-500ms``
    (also ``now-2h``; ``+`` counts forward).

Zone rule: a time written without a zone is the machine's local time, as mqadmin reads it
(SimpleDateFormat in the JVM's default zone); set ``TZ`` to change it, or pass ``--utc`` to read such
times as UTC. ``describe()`` gives the line every command echoes on stderr: the instant in UTC and in
epoch milliseconds.
"""
from __future__ import annotations

import datetime as _dt
import re
import time as _time

from rmqctl.errors import UsageError

_EPOCH = re.compile(r"\d+")
_MQADMIN = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})#(\d{1,2}):(\d{1,2}):(\d{1,2}):(\d{1,3})")
_RELATIVE = re.compile(r"(?:now)?\s*([+-])\s*(\d+)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_HELP = ("give epoch milliseconds, ISO-8601 (2024-05-01T12:00:00Z), yyyy-MM-dd#HH:mm:ss:SSS, "
         "now, or a relative time (-2h, -30m, -7d)")

_now_ms: int | None = None


def now_ms() -> int:
    """One "now" per process, so that --begin -2h --end now are read against the same instant."""
    global _now_ms
    if _now_ms is None:
        _now_ms = int(_time.time() * 1000)
    return _now_ms


class Instant(int):
    """Epoch milliseconds that remember how they were read (for the echo on stderr)."""

    zone_note: str = ""

    def __new__(cls, ms: int, zone_note: str = ""):
        self = super().__new__(cls, ms)
        self.zone_note = zone_note
        return self


def _zoneless(d: _dt.datetime, utc: bool) -> Instant:
    if utc:
        d = d.replace(tzinfo=_dt.timezone.utc)
        note = "no zone given: read as UTC (--utc)"
    else:
        d = d.astimezone()   # the machine's local zone (TZ)
        note = f"no zone given: read as local time UTC{_offset(d)}"
    return Instant(_ms(d), note)


def _offset(d: _dt.datetime) -> str:
    z = d.strftime("%z") or "+0000"
    return f"{z[:3]}:{z[3:]}"


def _ms(d: _dt.datetime) -> int:
    delta = d - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def parse_time(text, what: str = "time", *, utc: bool = False, now: int | None = None) -> Instant:
    """Epoch milliseconds of `text` (see the module doc for the forms and the zone rule)."""
    s = str(text).strip()
    if not s:
        raise UsageError(f"bad {what} {text!r}: empty; {_HELP}")
    if _EPOCH.fullmatch(s):
        return Instant(int(s))
    if s.lower() == "now":
        return Instant(now_ms() if now is None else now, "now")
    m = _RELATIVE.fullmatch(s)
    if m:
        sign, n, unit = m.groups()
        base = now_ms() if now is None else now
        delta = int(n) * _UNIT_MS[unit.lower()]
        return Instant(base + delta if sign == "+" else base - delta, f"now {sign}{n}{unit.lower()}")
    m = _MQADMIN.fullmatch(s)
    try:
        if m:
            y, mo, d, h, mi, sec, ms = map(int, m.groups())
            return _zoneless(_dt.datetime(y, mo, d, h, mi, sec, ms * 1000), utc)
        from dateutil.parser import isoparse   # lazy: `rmqctl --help` stays light

        d = isoparse(s)
    except (ValueError, OverflowError) as e:
        raise UsageError(f"bad {what} {text!r}: {_HELP} ({e})") from None
    if d.tzinfo is None:
        return _zoneless(d, utc)
    return Instant(_ms(d))


def parse_optional(text, what: str = "time", *, utc: bool = False) -> Instant | None:
    return None if text is None else parse_time(text, what, utc=utc)


def utc_text(ms: int) -> str:
    try:
        d = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(milliseconds=int(ms))
    except OverflowError:
        return "out of range"
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


def describe(what: str, text, ms: int) -> str:
    """The echo line: `--begin 2024-05-01 12:00 = 2024-05-01T04:00:00.000Z = 1714536000000 ms (...)`."""
    note = getattr(ms, "zone_note", "")
    return f"{what} {str(text).strip()} = {utc_text(ms)} = {int(ms)} ms" + (f" ({note})" if note else "")
