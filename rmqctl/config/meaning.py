"""What the broker's ``decode()`` makes of a config document that parses (fastjson 1.2.69 in 4.9.7, 1.2.83 in
5.3.3, binding to the managers' Java beans). Judged by the broker's own config managers (tests/oracle
``config``, tests/test_config_meaning.py):

* Top-level keys bind to bean properties by fastjson's *smart match*: exact, else ignoring case, ``_`` and
  ``-`` (``offset_table`` is ``offsetTable``). Any other key is ignored: ``{"offsetTablX":{..}}`` loads
  fine and the broker starts with an EMPTY table, never looking at ``.bak``. ``{}`` and ``[]`` do the same.
* A table of the wrong JSON type (number, string, array, boolean) makes decode throw: the broker loads
  ``.bak``. So does an entry it cannot bind: an offset entry that is not an object or is null, a queue id or
  delay level that is not an integer, an offset that is not a number or overflows a long, a topic or group
  entry that is not an object, an int field holding a non-numeric string, a boolean field holding a string
  other than true/false, a dataVersion that is not an object (5.x).
* A null table: topics, subscriptionGroup and delayOffset call ``putAll(null)`` and throw (-> ``.bak``);
  consumerOffset assigns it, so the broker runs with no offset table at all (4.9 and 5.3.3 load it; the
  first persist then fails).
* Values decode leniently: numeric strings and decimals (truncated) become numbers, unknown entry fields are
  ignored; negative queue ids and offsets load as they are.
* 4.9.7 ignores dataVersion in consumerOffset, subscriptionGroup and delayOffset (and groupTopicMap): a wrongly
  typed one fails only on 5.x; rmqctl judges by 5.x there (the stricter outcome).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from rmqctl.fastjson import JFloat

_INT = re.compile(r"-?[0-9]+")

# kind -> top-level bean properties; the first ones are the tables whose absence empties the broker's state
_TABLES = {
    "consumerOffset": ("offsetTable",),
    "lmqConsumerOffset": ("offsetTable", "lmqOffsetTable"),
    "topics": ("topicConfigTable",),
    "subscriptionGroup": ("subscriptionGroupTable",),
    "delayOffset": ("offsetTable",),
}
_OTHER_KEYS = {
    "consumerOffset": ("dataVersion", "groupTopicMap"),
    "lmqConsumerOffset": ("dataVersion", "groupTopicMap"),
    "topics": ("dataVersion",),
    "subscriptionGroup": ("dataVersion", "forbiddenTable"),
    "delayOffset": ("dataVersion",),
}
_TOPIC_INTS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")
_TOPIC_BOOLS = ("order",)
_GROUP_INTS = ("retryMaxTimes", "retryQueueNums", "brokerId", "whichBrokerWhenConsumeSlowly",
               "consumeTimeoutMinute", "groupSysFlag")
_GROUP_BOOLS = ("consumeEnable", "consumeBroadcastEnable", "consumeFromMinEnable", "consumeMessageOrderly",
                "notifyConsumerIdsChangedEnable")


def judged(kind_name: str) -> bool:
    """Kinds whose bean rules are known and checked against the broker."""
    return kind_name in _TABLES


def smart_key(key) -> str:
    """fastjson's property match: case-insensitive, ``_`` and ``-`` ignored."""
    return str(key).lower().replace("_", "").replace("-", "")


@dataclass
class Meaning:
    """What decode does with one parsed copy."""
    decode_error: str | None = None       # decode throws -> the broker falls back to .bak
    null_tables: list = field(default_factory=list)    # consumerOffset: loaded as null (no table at all)
    missing_tables: list = field(default_factory=list)  # absent: the broker keeps an EMPTY table
    unknown_keys: list = field(default_factory=list)   # ignored by the broker
    entries: int | None = None            # entries of the main table(s) the broker will hold
    warnings: list = field(default_factory=list)       # loads, but odd (negative queue id / offset)

    @property
    def empties(self) -> bool:
        """The broker loads this copy and ends up without its table(s)."""
        return bool(self.missing_tables or self.null_tables)


def _kind_of(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def _long(v, what: str, *, bits: int = 64) -> str | None:
    """None when fastjson binds ``v`` to a Java long (map values) or int (bean fields, ``bits=32``: these also
    take a boolean), else why not. Numeric strings bind, but not with blanks around them."""
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if isinstance(v, bool) and bits == 32:
        return None
    if isinstance(v, bool) or v is None or isinstance(v, (dict, list)):
        return f"{what} is {_kind_of(v)}, not a number"
    if isinstance(v, (JFloat, float)):
        return None if lo <= int(v) <= hi else f"{what} {v} overflows a {bits}-bit integer"
    if isinstance(v, str):
        if not _INT.fullmatch(v):
            return f"{what} {v!r} is not a number"
        v = int(v)
    if not lo <= v <= hi:
        return f"{what} {v} overflows a {bits}-bit integer"
    return None


def _int_key(k, what: str) -> tuple[int | None, str | None]:
    if isinstance(k, int):
        return k, None
    t = str(k)
    if _INT.fullmatch(t):
        return int(t), None
    return None, f"{what} {k!r} is not an integer"


def _bool(v, what: str) -> str | None:
    if isinstance(v, (bool, int, float)) or v is None:
        return None
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0", ""):
        return None
    return f"{what} is {_kind_of(v)} {_short(v)}, not a boolean"


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def analyze(kind_name: str, doc) -> Meaning:
    """``doc``: the parsed document (dict, or an empty list, which fastjson binds as an empty bean)."""
    m = Meaning()
    tables = _TABLES[kind_name]
    if isinstance(doc, list):
        if doc:
            m.decode_error = "the top-level value is a non-empty array, not an object"
            return m
        doc = {}
    known = {smart_key(k): k for k in tables + _OTHER_KEYS[kind_name]}
    bound: dict = {}
    for k, v in doc.items():
        prop = known.get(smart_key(k))
        if prop is None:
            m.unknown_keys.append(str(k))
        else:
            bound[prop] = v  # the last duplicate wins, as in fastjson
    for prop, v in bound.items():
        err = _check_prop(kind_name, prop, v, m)
        if err:
            m.decode_error = err
            return m
    count = 0
    for t in tables:
        if t not in bound:
            m.missing_tables.append(t)
        elif bound[t] is None:
            m.null_tables.append(t)
        else:
            count += len(bound[t])
    # lmqConsumerOffset: one of its two tables is enough (older files have no lmqOffsetTable)
    if kind_name == "lmqConsumerOffset" and len(m.missing_tables) < len(tables):
        m.missing_tables = []
    m.entries = count
    return m


def _check_prop(kind: str, prop: str, v, m: Meaning) -> str | None:
    if prop == "dataVersion":
        if v is None:
            return "dataVersion is null" if kind == "topics" else None
        if not isinstance(v, dict):
            return f"dataVersion is {_kind_of(v)}, not an object"
        for f in ("counter", "timestamp", "stateVersion"):
            if f in v and v[f] is not None:
                err = _long(v[f], f"dataVersion.{f}")
                if err:
                    return err
        return None
    if v is None:
        if kind in ("consumerOffset", "lmqConsumerOffset"):
            return None  # assigned as null: reported as a null table
        return f"{prop} is null"
    if not isinstance(v, dict):
        return f"{prop} is {_kind_of(v)}, not an object"
    if prop in ("groupTopicMap", "forbiddenTable"):
        return None
    if kind in ("consumerOffset", "lmqConsumerOffset") and prop == "offsetTable":
        for key, queues in v.items():
            where = f"offsetTable.{key}"
            if not isinstance(queues, dict):
                return f"{where} is {_kind_of(queues)}, not an object of queue offsets"
            for q, off in queues.items():
                qid, err = _int_key(q, f"{where}: queue id")
                err = err or _long(off, f"{where}.{q}", bits=64)
                if err:
                    return err
                if qid < 0:
                    m.warnings.append(f"{where}: negative queue id {qid}")
                if isinstance(off, int) and off < 0:
                    m.warnings.append(f"{where}.{q}: negative offset {off}")
        return None
    if prop == "lmqOffsetTable":
        for key, off in v.items():
            err = _long(off, f"lmqOffsetTable.{key}")
            if err:
                return err
        return None
    if kind == "delayOffset":
        for level, off in v.items():
            lv, err = _int_key(level, "offsetTable: delay level")
            err = err or _long(off, f"offsetTable.{level}")
            if err:
                return err
            if lv < 1:
                m.warnings.append(f"offsetTable: delay level {lv} (levels start at 1)")
        return None
    ints, bools = (_TOPIC_INTS, _TOPIC_BOOLS) if kind == "topics" else (_GROUP_INTS, _GROUP_BOOLS)
    for name, entry in v.items():
        where = f"{prop}.{name}"
        if not isinstance(entry, dict):
            return f"{where} is {_kind_of(entry)}, not an object"
        for f, val in entry.items():
            sk = smart_key(f)
            if any(sk == smart_key(x) for x in ints) and val is not None:
                err = _long(val, f"{where}.{f}", bits=32)
                if err:
                    return err
            elif any(sk == smart_key(x) for x in bools):
                err = _bool(val, f"{where}.{f}")
                if err:
                    return err
    return None
