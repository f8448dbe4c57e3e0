"""The broker's config files and how the broker loads them (docs/store-format.md, Config JSON files, docs/faults.md).

``ConfigManager.load()`` (every version up to 5.3.3): read the main file; if it is missing or empty,
or if decoding throws, load ``<file>.bak`` instead. ``loadBak()``: a non-empty ``.bak`` that does not
decode makes load() return false -> **the broker fails to start**; a missing or empty ``.bak`` returns
true with the managers' empty defaults -> **the broker starts with EMPTY tables** (all consumer offsets
gone). A file holding the literal ``null`` decodes to null: the manager keeps its empty defaults and
reports success, without looking at ``.bak``. (After 5.3.3 the broker also deletes an empty or corrupt
main file before loading ``.bak``.)

``load_config(path)`` reproduces that decision and says which copy was used (``Loaded.used``) and what
the broker would do (``Loaded.verdict``), plus what is wrong with each copy (stale trailing bytes after
a complete JSON value, docs/faults.md, are reported as such). A copy that parses is then judged by meaning,
as the broker's ``decode()`` binds it (rmqctl.config.meaning): a table of the wrong type makes decode throw
(the broker loads ``.bak``); a missing or misspelt table loads fine and leaves the broker with an EMPTY
table (``.bak`` is never read).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqctl import fastjson
from rmqctl.config import meaning as mn
from rmqctl.errors import FormatError, UsageError

LOAD_MAIN = "load main"
LOAD_BAK = "load .bak"
FAIL = "fail to start"
EMPTY = "start with EMPTY tables"


@dataclass(frozen=True)
class ConfigKind:
    name: str                 # consumerOffset
    filename: str             # consumerOffset.json
    tables: tuple = ()        # top-level tables whose loss matters
    noun: str = "tables"      # for "broker would start with EMPTY <noun>"
    compact: bool = False     # BrowserCompatible compact form (timermetrics, transactionMetrics)
    binary: bool = False      # timercheck
    summary: str = ""


KINDS: dict[str, ConfigKind] = {k.name: k for k in [
    ConfigKind("topics", "topics.json", ("topicConfigTable",), "topics",
               summary="TopicConfigManager: topic -> queue numbers, perm, attributes"),
    ConfigKind("subscriptionGroup", "subscriptionGroup.json", ("subscriptionGroupTable",), "subscription groups",
               summary="SubscriptionGroupManager: group -> retry, broadcast, consume settings"),
    ConfigKind("consumerOffset", "consumerOffset.json", ("offsetTable",), "offsets",
               summary="ConsumerOffsetManager: <topic>@<group> -> {queueId: next offset to consume}"),
    ConfigKind("lmqConsumerOffset", "lmqConsumerOffset.json", ("offsetTable", "lmqOffsetTable"), "offsets",
               summary="LmqConsumerOffsetManager (enableLmq=true): offsetTable + lmqOffsetTable"),
    ConfigKind("delayOffset", "delayOffset.json", ("offsetTable",), "delay offsets",
               summary="ScheduleMessageService: delay level -> offset in SCHEDULE_TOPIC_XXXX queue level-1"),
    ConfigKind("consumerFilter", "consumerFilter.json", ("filterDataByTopic",), "filters",
               summary="ConsumerFilterManager: SQL92/bloom filter data"),
    ConfigKind("consumerOrderInfo", "consumerOrderInfo.json", ("table",), "order info",
               summary="ConsumerOrderInfoManager (5.x POP orderly)"),
    ConfigKind("topicQueueMapping", "topicQueueMapping.json", ("topicQueueMappingInfoMap",), "queue mappings",
               summary="static topic queue mapping (5.x)"),
    ConfigKind("messageRequestMode", "messageRequestMode.json", ("messageRequestModeMap",), "request modes",
               summary="MessageRequestModeManager (5.x): PULL/POP per topic and group"),
    ConfigKind("timermetrics", "timermetrics", ("timingCount",), "timer metrics", compact=True,
               summary="TimerMetrics (5.x): compact BrowserCompatible JSON"),
    ConfigKind("transactionMetrics", "transactionMetrics", ("transactionCount",), "transaction metrics",
               compact=True, summary="TransactionMetrics (5.2+): compact BrowserCompatible JSON"),
    ConfigKind("timercheck", "timercheck", (), binary=True,
               summary="TimerCheckpoint (5.x): binary, 7 big-endian i64 fields"),
]}
_BY_FILENAME = {k.filename: k for k in KINDS.values()}


def kind_for(name: str) -> ConfigKind:
    """NAME (consumerOffset) or file name (consumerOffset.json, consumerOffset.json.bak)."""
    base = name[:-4] if name.endswith(".bak") else name
    k = KINDS.get(base) or _BY_FILENAME.get(base)
    if k is None:
        lower = {n.lower(): v for n, v in KINDS.items()}
        k = lower.get(base.lower().removesuffix(".json"))
    if k is None:
        raise UsageError(f"unknown config file {name!r}; known: {', '.join(KINDS)}")
    return k


@dataclass
class Target:
    """Where a config file lives: the store root (lock, quarantine), its config dir and the file."""
    store: Path
    config_dir: Path
    path: Path
    kind: ConfigKind
    bak_only: bool = False    # the operator named a .bak file itself: read just that file


def config_dir_of(where) -> tuple[Path, Path]:
    """(store root, config dir) for a store dir or a config dir."""
    where = Path(where)
    if not where.exists():
        raise UsageError("no such file or directory", path=where)
    if not where.is_dir():
        raise UsageError("expected a store or config directory", path=where)
    if (where / "config").is_dir() or any((where / n).exists() for n in ("commitlog", "consumequeue", "checkpoint")):
        return where, where / "config"  # a store root (its config/ may not exist yet)
    return where.parent, where


def locate(where, name: str | None = None) -> Target:
    """``where`` is a store dir, its config dir, or one config file (then ``name`` is optional)."""
    where = Path(where)
    if where.is_file() or (not where.exists() and where.parent.is_dir() and name is None):
        kind = kind_for(name or where.name)
        store = where.parent.parent if where.parent.name == "config" else where.parent
        bak_only = where.name.endswith(".bak")
        path = where.with_name(where.name[:-4]) if bak_only else where
        return Target(store, where.parent, path, kind, bak_only)
    if name is None:
        raise UsageError("which config file? give NAME (e.g. consumerOffset)")
    store, cdir = config_dir_of(where)
    kind = kind_for(name)
    _refuse_rocksdb_table(cdir, kind.name)
    bak_only = name.endswith(".bak")
    return Target(store, cdir, cdir / kind.filename, kind, bak_only)


def _refuse_rocksdb_table(cdir: Path, name: str) -> None:
    """storeType=defaultRocksDB keeps topics, subscription groups and consumer offsets in RocksDB tables under
    config/ (the broker loads those, not the JSON files): only `config show` reads them (exit 8 otherwise)."""
    from rmqctl.store.rocksdb_cq import CONFIG_TABLES

    table = CONFIG_TABLES.get(name)
    if table is not None and (cdir / table / "CURRENT").is_file():
        from rmqctl.errors import UnsupportedStoreError

        raise UnsupportedStoreError(f"{name} is the RocksDB table config/{table}/ here (storeType=defaultRocksDB), "
                                    f"which the broker loads instead of {name}.json: `rmqctl config show STORE "
                                    f"{name}` reads it; this command does not", path=cdir / table)


@dataclass
class Copy:
    """One copy (main or .bak) of a config file as the broker's loader sees it."""
    path: Path
    status: str = "missing"   # missing | empty | ok | null | corrupt | unreadable
    size: int = 0
    raw: bytes | None = None
    doc: Any = None
    error: FormatError | None = None
    stale_tail: tuple | None = None   # (value_end, trailing bytes) for `{..}old_garbage}`
    meaning: mn.Meaning | None = None  # what decode() makes of it (judged kinds that parse)

    @property
    def usable(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.status == "missing":
            return "missing"
        if self.status == "empty":
            return "empty (0 bytes)" if self.size == 0 else f"empty ({self.size} bytes of whitespace)"
        if self.status == "null":
            return "holds `null`"
        if self.status == "unreadable":
            return f"unreadable ({self.error})"
        if self.status == "corrupt":
            if self.meaning is not None and self.meaning.decode_error:
                return f"parses, but the broker's decode fails: {self.meaning.decode_error}"
            if self.stale_tail:
                end, n = self.stale_tail
                return (f"{n} stale trailing byte(s) after a complete JSON value ending at offset {end} "
                        f"(torn write)")
            e = self.error
            return f"unparsable at offset {e.offset}: {e.message}" if e else "unparsable"
        m = self.meaning
        if m is not None and m.empties:
            if m.null_tables:
                return f"parses, but {' and '.join(m.null_tables)} is null"
            s = f"parses, but has no {' or '.join(m.missing_tables)}"
            if m.unknown_keys:
                s += f" (unknown key{'s' if len(m.unknown_keys) > 1 else ''} {', '.join(m.unknown_keys[:3])} ignored)"
            return s
        if m is not None and m.entries is not None:
            return f"ok ({self.size} bytes, {m.entries} entr{'y' if m.entries == 1 else 'ies'})"
        return f"ok ({self.size} bytes)"


def read_copy(path: Path, kind: ConfigKind | None = None) -> Copy:
    from rmqctl.store.files import read_refusal

    c = Copy(Path(path))
    # links may point anywhere inside the store (config/'s parent), or the bare config folder
    folder = Path(path).parent
    why = read_refusal(path, folder.parent if folder.name == "config" else folder)
    if why:
        c.status, c.error = "unreadable", FormatError(why, path=path)
        return c
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return c
    except IsADirectoryError:
        c.status, c.error = "unreadable", FormatError("is a directory", path=path)
        return c
    except OSError as e:
        c.status, c.error = "unreadable", FormatError(e.strerror or str(e), path=path)
        return c
    c.raw, c.size = raw, len(raw)
    if kind is not None and kind.binary:
        c.status = "ok" if raw else "empty"
        if raw:
            c.doc = decode_timercheck(raw, path)
        return c
    if not raw:
        c.status = "empty"
        return c
    try:
        doc = fastjson.loads(raw, path)
    except fastjson.TrailingData as e:
        c.status, c.error, c.stale_tail = "corrupt", e, (e.value_end, e.trailing)
        return c
    except FormatError as e:
        text = raw.lstrip(b"\xef\xbb\xbf")
        if not text.strip(b" \t\r\n\f\b"):
            c.status = "empty"  # whitespace only: decode throws -> .bak, same as empty
        else:
            c.status = "corrupt"
        c.error = e
        return c
    if doc is None:
        c.status = "null"
        return c
    if kind is not None and mn.judged(kind.name) and (isinstance(doc, dict) or doc == []):
        c.meaning = mn.analyze(kind.name, doc)
        if c.meaning.decode_error:
            c.status, c.error = "corrupt", FormatError(c.meaning.decode_error, path=path)
            return c
        if not isinstance(doc, dict):
            doc = {}  # `[]` binds as an empty bean
    if not isinstance(doc, dict):
        c.status = "corrupt"
        c.error = FormatError(f"top-level value is a {type(doc).__name__}, not an object", path=path, offset=0)
        return c
    c.status, c.doc = "ok", doc
    return c


@dataclass
class Loaded:
    target: Target
    main: Copy
    bak: Copy
    used: str | None            # "main" | ".bak" | None
    verdict: str                # LOAD_MAIN | LOAD_BAK | FAIL | EMPTY
    doc: Any = None             # what the broker would load (None when it fails or starts empty)
    notes: list = field(default_factory=list)

    @property
    def kind(self) -> ConfigKind:
        return self.target.kind

    @property
    def ok(self) -> bool:
        return self.verdict in (LOAD_MAIN, LOAD_BAK)

    @property
    def verdict_text(self) -> str:
        """The verdict for humans: also says when a copy that loads leaves the broker empty."""
        if self.verdict == EMPTY and self.used is not None:
            return f"load {self.used}, start with EMPTY {self.kind.noun}"
        return self.verdict

    @property
    def source(self) -> Copy:
        return self.bak if self.used == ".bak" else self.main

    def summary(self) -> str:
        name = self.target.path.name
        s = f"{name}: main {self.main.describe()}"
        if self.used != "main" or self.bak.status != "missing":
            s += f"; .bak {self.bak.describe()}"
        return s + f"; broker would {self.verdict_text}"

    def problem(self) -> str:
        """The one-line error when the broker would not load usable content."""
        if self.verdict == FAIL:
            return f"broker would fail to start: main {self.main.describe()}, .bak {self.bak.describe()}"
        src = self.source
        if self.used is not None and src.meaning is not None and src.meaning.empties:
            which = "main" if self.used == "main" else ".bak"
            m = src.meaning
            what = (f"sets {' and '.join(m.null_tables)} to null" if m.null_tables else
                    f"has no {' or '.join(m.missing_tables)}" +
                    (f" (unknown key {', '.join(m.unknown_keys[:3])})" if m.unknown_keys else ""))
            s = f"{which} parses but {what}: the broker starts with EMPTY {self.kind.noun}"
            if self.used == "main":
                b = self.bak
                n = b.meaning.entries if b.usable and b.meaning is not None and not b.meaning.empties else None
                s += f"; .bak has {n} entr{'y' if n == 1 else 'ies'}" if n is not None else f"; .bak {b.describe()}"
            return s
        return (f"broker would start with EMPTY {self.kind.noun}: main {self.main.describe()}, "
                f".bak {self.bak.describe()}")


def load_config(target: Target) -> Loaded:
    """What ``ConfigManager.load()`` would do with this file (see the module doc)."""
    kind = target.kind
    main = read_copy(target.path, kind)
    bak = read_copy(target.path.with_name(target.path.name + ".bak"), kind)
    if target.bak_only:
        # The operator asked for the .bak itself: show it as the main copy, no fallback.
        main, bak = bak, Copy(bak.path.with_name(bak.path.name + ".bak"))
    if kind.binary:
        if main.usable:
            return Loaded(target, main, bak, "main", LOAD_MAIN, main.doc)
        return Loaded(target, main, bak, None, EMPTY, None,
                      ["the broker maps a fresh zero checkpoint: timer state restarts from scratch"])
    if main.status == "ok":
        if main.meaning is not None and main.meaning.empties:
            return Loaded(target, main, bak, "main", EMPTY, main.doc,
                          [_empties_note(main, kind)])
        return Loaded(target, main, bak, "main", LOAD_MAIN, main.doc)
    if main.status == "null":
        return Loaded(target, main, bak, "main", EMPTY, None,
                      ["main holds the literal `null`: the broker reports success, keeps its empty defaults and "
                       "never looks at .bak"])
    if main.status == "unreadable":
        notes = ["main cannot be read by rmqctl (permissions?); the broker may read it"]
    else:
        notes = []
    # missing, empty, corrupt -> loadBak()
    if main.status in ("empty", "corrupt"):
        notes.append("brokers after 5.3.3 delete the bad main file before loading .bak")
    if bak.status == "ok":
        if bak.meaning is not None and bak.meaning.empties:
            notes.append(_empties_note(bak, kind))
            return Loaded(target, main, bak, ".bak", EMPTY, bak.doc, notes)
        return Loaded(target, main, bak, ".bak", LOAD_BAK, bak.doc, notes)
    if bak.status == "null":
        notes.append(".bak holds `null`: loaded as empty defaults")
        return Loaded(target, main, bak, ".bak", EMPTY, None, notes)
    if bak.status == "corrupt" or (bak.status == "unreadable" and bak.size):
        return Loaded(target, main, bak, None, FAIL, None, notes)
    if bak.status == "empty" and bak.size:
        # whitespace-only .bak: non-empty string, decode throws -> loadBak returns false
        return Loaded(target, main, bak, None, FAIL, None, notes)
    return Loaded(target, main, bak, None, EMPTY, None, notes)


def _empties_note(c: Copy, kind: ConfigKind) -> str:
    m = c.meaning
    which = "main" if not c.path.name.endswith(".bak") else ".bak"
    if m.null_tables:
        return (f"{which} sets {' and '.join(m.null_tables)} to null: the broker loads it without looking further "
                f"and runs with no {kind.noun} at all (its next persist fails)")
    return (f"{which} parses but has no {' or '.join(m.missing_tables)}: fastjson ignores unknown keys, so the "
            f"broker loads it and starts with EMPTY {kind.noun}")


def load(where, name: str | None = None) -> Loaded:
    return load_config(locate(where, name))


def config_files(config_dir: Path) -> list[ConfigKind]:
    """The known config kinds present (main or .bak) in a config dir."""
    out = []
    for k in KINDS.values():
        p = Path(config_dir) / k.filename
        if p.exists() or p.with_name(p.name + ".bak").exists():
            out.append(k)
    return out


# -- timercheck -------------------------------------------------------------------------------------
TIMERCHECK_FIELDS = ("lastReadTimeMs", "lastTimerLogFlushPos", "lastTimerQueueOffset", "masterTimerQueueOffset",
                     "dataVersion.stateVersion", "dataVersion.timestamp", "dataVersion.counter")


def decode_timercheck(raw: bytes, path=None) -> dict:
    """The 56 bytes of i64 fields at the start of config/timercheck (docs/store-format.md, "Timer store"),
    decoded with the codec derived
    from formats.timer.TimerCheckpoint; the broker maps 4096 bytes, other writers (rocketmq-rust) write 56."""
    import struct

    from rmqctl.formats._derive import struct_format
    from rmqctl.formats.timer import TimerCheckpoint

    codec = struct.Struct(struct_format(TimerCheckpoint))
    if len(raw) < codec.size:
        raise FormatError(f"timercheck is {len(raw)} bytes, shorter than its {codec.size} bytes of fields",
                          path=path, offset=len(raw))
    out = dict(zip(TIMERCHECK_FIELDS, codec.unpack_from(raw, 0)))
    out["_size"] = len(raw)
    out["_nonzero_padding"] = any(raw[codec.size:])
    return out


def file_mode_or_default(path: Path) -> int:
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o644


# -- helpers shared by the domain verbs -------------------------------------------------------------
def next_version(doc: dict) -> None:
    """``DataVersion.nextVersion()``: counter + 1, timestamp = now (only when the file has a dataVersion)."""
    import time

    dv = doc.get("dataVersion")
    if isinstance(dv, dict):
        c = dv.get("counter", 0)
        try:
            dv["counter"] = int(c) + 1
        except (TypeError, ValueError):
            dv["counter"] = 1
        dv["timestamp"] = int(time.time() * 1000)


def looks_v5(doc: dict, table: str | None = None, marker: str | None = None) -> bool:
    """5.x files carry dataVersion.stateVersion (or, per entry, a 5.x-only field such as ``marker``)."""
    dv = doc.get("dataVersion")
    if isinstance(dv, dict) and "stateVersion" in dv:
        return True
    if table and marker:
        t = doc.get(table)
        if isinstance(t, dict):
            return any(isinstance(v, dict) and marker in v for v in t.values())
    return False


def top_table(doc: dict, name: str) -> dict:
    """A top-level map of a config document (created empty when absent), e.g. topicConfigTable."""
    t = doc.get(name)
    if t is None:
        t = doc[name] = {}
    if not isinstance(t, dict):
        raise UsageError(f"{name} is not an object")
    return t


def delete_entry(doc: dict, table_name: str, name: str, what: str):
    """Remove one entry of a top-level map and bump dataVersion like the broker's managers; the old value."""
    t = top_table(doc, table_name)
    if name not in t:
        raise UsageError(f"no {what}")
    old = t.pop(name)
    next_version(doc)
    return old


def as_int(v, what: str = "value", path=None) -> int:
    """Numbers the broker coerces: 5, "5" (fastjson converts numeric strings for int/long fields)."""
    if isinstance(v, bool):
        raise FormatError(f"{what} is a boolean, expected a number", path=path)
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v.strip())
    if isinstance(v, float) and v == int(v):
        return int(v)
    raise FormatError(f"{what} {v!r} is not a number", path=path)
