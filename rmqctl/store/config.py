"""The broker settings that shape a store's files (sizes are not stored in the files themselves).

Sources, in order: explicit values, a broker config file (`broker.conf` key=value, or JSON with the
same keys), then inference from the files on disk, then the broker's defaults.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from rmqctl.errors import UsageError
from rmqctl.formats import commitlog as cl, consumequeue as cq, index as ix

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """messageDelayLevel -> delay in ms per level (level n is element n-1)."""
    out = []
    for tok in text.split():
        m = re.fullmatch(r"(\d+)([smhd])", tok)
        if not m:
            raise UsageError(f"bad messageDelayLevel token {tok!r}")
        out.append(int(m.group(1)) * _UNITS[m.group(2)])
    return out


class _Ignored(ValueError):
    pass


JAVA_INT_MAX = 2**31 - 1


def _java_int(v) -> int:
    """Integer.parseInt: optional sign and digits only (no blanks); anything else the broker ignores."""
    if isinstance(v, bool):
        raise _Ignored(v)
    if isinstance(v, int):
        return v
    if not re.fullmatch(r"[+-]?[0-9]+", str(v)) or not -JAVA_INT_MAX - 1 <= int(v) <= JAVA_INT_MAX:
        raise _Ignored(v)
    return int(v)


def _cq_size(v) -> int:
    """MessageStoreConfig.getMappedFileSizeConsumeQueue: the configured size rounded up to whole 20-byte units
    (Math.ceil of the quotient, every version from 4.1 on): 6000010 maps files of 6000020 bytes."""
    n = _java_int(v)
    return -(-n // cq.UNIT_SIZE) * cq.UNIT_SIZE


def _java_bool(v) -> bool:
    """Boolean.parseBoolean: "true" in any case, untrimmed; everything else is false."""
    return v is True or (isinstance(v, str) and v.lower() == "true")


def parse_version(text: str) -> tuple:
    """'4.7.0' / '5' / 'rocketmq-all-4.9.7' -> (4, 7, 0) / (5, 0, 0) / (4, 9, 7)."""
    m = re.fullmatch(r"(?:rocketmq-all-|v)?(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text).strip())
    if not m:
        raise UsageError(f"bad broker version {text!r} (want e.g. 4.9.7)")
    return tuple(int(x or 0) for x in m.groups())


@dataclass(frozen=True)
class StoreConfig:
    commitlog_file_size: int = cl.DEFAULT_FILE_SIZE
    cq_file_size: int = cq.DEFAULT_FILE_SIZE
    hash_slot_num: int = ix.DEFAULT_HASH_SLOT_NUM
    index_num: int = ix.DEFAULT_INDEX_NUM
    delay_levels: tuple = field(default_factory=lambda: tuple(parse_delay_levels(DEFAULT_DELAY_LEVELS)))
    message_index_enable: bool = True
    enable_lmq: bool = False
    enable_multi_dispatch: bool = False
    enable_cq_ext: bool = False          # enableConsumeQueueExt: CQ units hold consumequeue_ext addresses
    cq_ext_file_size: int = 48 * 1024 * 1024
    bcq_file_size: int = 300_000 * 46     # mapperFileSizeBatchConsumeQueue (5.x BatchCQ topics)
    multi_path_commitlog: bool = False   # storePathCommitLog with ',' (MultiPathMappedFileQueue): unsupported
    commitlog_path: str | None = None    # storePathCommitLog (one directory), as the broker resolves it
    explicit: frozenset = frozenset()   # which fields came from the operator or a config file
    broker_version: tuple | None = None   # (major, minor, patch) given by the operator, for version-specific rules
    index_geometry_files: tuple | None = None   # (slots, items) the index files were written with, when they tell
    compaction_cq_file_size: int | None = None      # compactionCqMappedFileSize (5.x compaction topics)
    compaction_mapped_file_size: int | None = None  # compactionMappedFileSize (the log size derives from both)
    timerlog_file_size: int | None = None   # mappedFileSizeTimerLog (None: the timerlog files' own size)
    timer_precision_ms: int = 1000          # timerPrecisionMs

    KEYS = {
        "mappedFileSizeCommitLog": ("commitlog_file_size", _java_int),
        "mappedFileSizeConsumeQueue": ("cq_file_size", _cq_size),
        "maxHashSlotNum": ("hash_slot_num", _java_int),
        "maxIndexNum": ("index_num", _java_int),
        "messageDelayLevel": ("delay_levels", lambda v: tuple(parse_delay_levels(str(v).strip()))),
        "messageIndexEnable": ("message_index_enable", _java_bool),
        "enableLmq": ("enable_lmq", _java_bool),
        "enableMultiDispatch": ("enable_multi_dispatch", _java_bool),
        "storePathCommitLog": ("multi_path_commitlog", lambda v: "," in str(v)),
        "enableConsumeQueueExt": ("enable_cq_ext", _java_bool),
        "mappedFileSizeConsumeQueueExt": ("cq_ext_file_size", _java_int),
        "compactionCqMappedFileSize": ("compaction_cq_file_size", _java_int),
        "compactionMappedFileSize": ("compaction_mapped_file_size", _java_int),
        "mappedFileSizeTimerLog": ("timerlog_file_size", _java_int),
        "timerPrecisionMs": ("timer_precision_ms", _java_int),
        "mapperFileSizeBatchConsumeQueue": ("bcq_file_size", _java_int),
    }

    # RocketMQ 4.5.1 and older spell the two sizes with one p (mapedFileSizeCommitLog): read when the current
    # spelling is absent (a broker reads only its own spelling, which rmqctl cannot tell without the version)
    OLD_KEYS = {"mapedFileSizeCommitLog": "mappedFileSizeCommitLog",
                "mapedFileSizeConsumeQueue": "mappedFileSizeConsumeQueue"}
    # a mapped file of no bytes, or fewer, cannot exist: the broker fails to map its files
    SIZES = ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "mappedFileSizeConsumeQueueExt",
             "mapperFileSizeBatchConsumeQueue", "compactionCqMappedFileSize", "compactionMappedFileSize",
             "mappedFileSizeTimerLog")

    INDEX = {"maxHashSlotNum": "hash slot", "maxIndexNum": "item"}

    @property
    def index_file_size(self) -> int:
        return ix.file_size(self.hash_slot_num, self.index_num)

    def with_values(self, values: dict) -> "StoreConfig":
        """Apply broker-config keys (camelCase, as in broker.conf)."""
        changes, explicit = {}, set(self.explicit)
        path = values.get("storePathCommitLog")
        if path and "," not in str(path):
            changes["commitlog_path"] = str(path).strip()
        for key, v in values.items():
            today = self.OLD_KEYS.get(key)
            k = today if today is not None and today not in values else key
            if k in self.KEYS and v is not None:
                attr, conv = self.KEYS[k]
                try:
                    changes[attr] = conv(v)
                except _Ignored:   # MixAll.properties2Object drops a value it cannot parse: the default stays
                    continue
                if k in self.SIZES and changes[attr] <= 0:
                    raise UsageError(f"{v}: no mapped file is {changes[attr]} bytes long (the broker fails to map "
                                     "its files)", field=key)
                if k in self.INDEX and changes[attr] <= 0:
                    raise UsageError(f"{v}: an index file needs at least one {self.INDEX[k]} (the broker indexes "
                                     "nothing with it)", field=key)
                explicit.add(attr)
        out = replace(self, **changes, explicit=frozenset(explicit))
        if {"hash_slot_num", "index_num"} & changes.keys() and out.index_file_size > JAVA_INT_MAX:
            raise UsageError(f"maxHashSlotNum {out.hash_slot_num} and maxIndexNum {out.index_num} make index files of "
                             f"{out.index_file_size} bytes, past the broker's int file size")
        return out

    @classmethod
    def from_file(cls, path) -> "StoreConfig":
        """broker.conf as the broker reads it (rmqctl.brokerconf), or JSON with the same keys."""
        from rmqctl.brokerconf import read_broker_config

        values = read_broker_config(path)
        try:
            return cls().with_values(values)
        except UsageError as e:
            e.path = e.path or str(path)
            raise


def commitlog_dir(config: StoreConfig, root: Path) -> Path:
    """storePathCommitLog when the broker config sets it (a relative path is taken from the store root), else
    <root>/commitlog (the broker's default, storePathRootDir/commitlog)."""
    if config.commitlog_path:
        return root / config.commitlog_path
    return root / "commitlog"


def infer(config: StoreConfig, root: Path) -> StoreConfig:
    """Fill in sizes that were not given from the files present (the broker requires equal sizes)."""
    changes = {}
    if "commitlog_file_size" not in config.explicit:
        size = _first_file_size(commitlog_dir(config, root), digits=20)
        for d in sorted(root.glob("dledger-*/data")) if not size and root.is_dir() else []:
            size = _first_file_size(d, digits=20)   # DLedger: mappedFileSizeCommitLog sizes its data files
            break
        if size:
            changes["commitlog_file_size"] = size
    if "cq_file_size" not in config.explicit:
        size = _cq_file_size(root / "consumequeue")
        if size:
            changes["cq_file_size"] = size
    geo = index_geometry(root / "index", (config.hash_slot_num, config.index_num))
    if geo:
        changes["index_geometry_files"] = geo
    if "hash_slot_num" not in config.explicit and "index_num" not in config.explicit:
        if geo:
            changes.update(hash_slot_num=geo[0], index_num=geo[1])
        else:
            size = _first_file_size(root / "index", digits=17)
            if size and size != ix.file_size(ix.DEFAULT_HASH_SLOT_NUM, ix.DEFAULT_INDEX_NUM) and (size - 40) % 84 == 0:
                slots = (size - 40) // 84   # nothing written to tell: guess the broker's default 4:1 ratio
                changes.update(hash_slot_num=slots, index_num=4 * slots)
    if "enable_cq_ext" not in config.explicit or "cq_ext_file_size" not in config.explicit:
        size = _cq_file_size(root / "consumequeue_ext", unit=1)
        if size:     # ext files exist: the broker that wrote them had enableConsumeQueueExt on
            if "enable_cq_ext" not in config.explicit:
                changes["enable_cq_ext"] = True
            if "cq_ext_file_size" not in config.explicit:
                changes["cq_ext_file_size"] = size
    if "bcq_file_size" not in config.explicit:
        size = _cq_file_size(root / "batchconsumequeue", unit=46)
        if size:
            changes["bcq_file_size"] = size
    return replace(config, **changes) if changes else config


def index_geometry(d: Path, hint: tuple, tries: int = 4) -> tuple | None:
    """(maxHashSlotNum, maxIndexNum) read from the index files themselves (see store.index.solve_geometry): the
    first few files of each size are tried, a geometry found once is the first guess for the rest."""
    from rmqctl.store.index import solve_geometry

    try:
        names = sorted(n for n in os.listdir(d) if len(n) == 17 and n.isdigit())
    except OSError:
        return None
    hints = [hint, (ix.DEFAULT_HASH_SLOT_NUM, ix.DEFAULT_INDEX_NUM)]
    tried: dict = {}
    for n in names:
        try:
            st = os.lstat(d / n)
            if not stat.S_ISREG(st.st_mode):
                continue   # a link or special file (a FIFO would block the read): not a source of geometry
            size = st.st_size
            if tried.get(size, 0) >= tries:
                continue
            tried[size] = tried.get(size, 0) + 1
            geo = solve_geometry(d / n, hints)
        except OSError:
            continue
        if geo:
            return geo
    return None


def _first_file_size(d: Path, digits: int) -> int | None:
    try:
        names = sorted(n for n in os.listdir(d) if len(n) == digits and n.isdigit())
    except OSError:
        return None
    sizes = [os.stat(d / n).st_size for n in names[:3]]
    sizes = [s for s in sizes if s > 0]
    return max(sizes) if sizes else None


def _cq_file_size(d: Path, unit: int = cq.UNIT_SIZE, max_queues: int = 64) -> int | None:
    """mappedFileSizeConsumeQueue from the files: the step between consecutive file names of a queue (names are
    byte offsets), else the most common file size (a file with bytes appended must not win)."""
    from collections import Counter

    steps, sizes, seen = Counter(), Counter(), 0
    try:
        topics = sorted(os.listdir(d))
    except OSError:
        return None
    for topic in topics:
        try:
            qids = sorted(os.listdir(d / topic))
        except OSError:
            continue
        for q in qids:
            if seen >= max_queues:
                break
            seen += 1
            try:
                names = sorted(n for n in os.listdir(d / topic / q) if len(n) == 20 and n.isdigit())
                for a, b in zip(names, names[1:3]):
                    steps[int(b) - int(a)] += 1
                for n in names[:2]:
                    size = os.stat(d / topic / q / n).st_size
                    if size > 0:
                        sizes[size] += 1
            except OSError:
                continue
    for c in (steps, sizes):
        for size, _ in c.most_common():
            if size > 0 and size % unit == 0:
                return size
    return None
