"""The broker settings that shape a store's files (sizes are not stored in the files themselves).

Sources, in order: explicit values, a broker config file (`broker.conf` key=value, or JSON with the
same keys), then inference from the files on disk, then the broker's defaults.
"""
from __future__ import annotations

import os
import re
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


def _java_int(v) -> int:
    """Integer.parseInt: optional sign and digits only (no blanks); anything else the broker ignores."""
    if isinstance(v, bool):
        raise _Ignored(v)
    if isinstance(v, int):
        return v
    if not re.fullmatch(r"[+-]?[0-9]+", str(v)) or not -2**31 <= int(v) < 2**31:
        raise _Ignored(v)
    return int(v)


def _java_bool(v) -> bool:
    """Boolean.parseBoolean: "true" in any case, untrimmed; everything else is false."""
    return v is True or (isinstance(v, str) and v.lower() == "true")


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
    multi_path_commitlog: bool = False   # storePathCommitLog with ',' (MultiPathMappedFileQueue): unsupported
    explicit: frozenset = frozenset()   # which fields came from the operator or a config file

    KEYS = {
        "mappedFileSizeCommitLog": ("commitlog_file_size", _java_int),
        "mappedFileSizeConsumeQueue": ("cq_file_size", _java_int),
        "maxHashSlotNum": ("hash_slot_num", _java_int),
        "maxIndexNum": ("index_num", _java_int),
        "messageDelayLevel": ("delay_levels", lambda v: tuple(parse_delay_levels(str(v).strip()))),
        "messageIndexEnable": ("message_index_enable", _java_bool),
        "enableLmq": ("enable_lmq", _java_bool),
        "enableMultiDispatch": ("enable_multi_dispatch", _java_bool),
        "storePathCommitLog": ("multi_path_commitlog", lambda v: "," in str(v)),
        "enableConsumeQueueExt": ("enable_cq_ext", lambda v: str(v).lower() == "true"),
        "mappedFileSizeConsumeQueueExt": ("cq_ext_file_size", int),
    }

    @property
    def index_file_size(self) -> int:
        return ix.file_size(self.hash_slot_num, self.index_num)

    def with_values(self, values: dict) -> "StoreConfig":
        """Apply broker-config keys (camelCase, as in broker.conf)."""
        changes, explicit = {}, set(self.explicit)
        for k, v in values.items():
            if k in self.KEYS and v is not None:
                attr, conv = self.KEYS[k]
                try:
                    changes[attr] = conv(v)
                except _Ignored:   # MixAll.properties2Object drops a value it cannot parse: the default stays
                    continue
                explicit.add(attr)
        return replace(self, **changes, explicit=frozenset(explicit))

    @classmethod
    def from_file(cls, path) -> "StoreConfig":
        """broker.conf as the broker reads it (rmqctl.brokerconf), or JSON with the same keys."""
        from rmqctl.brokerconf import read_broker_config

        return cls().with_values(read_broker_config(path))


def infer(config: StoreConfig, root: Path) -> StoreConfig:
    """Fill in sizes that were not given from the files present (the broker requires equal sizes)."""
    changes = {}
    if "commitlog_file_size" not in config.explicit:
        size = _first_file_size(root / "commitlog", digits=20)
        if size:
            changes["commitlog_file_size"] = size
    if "cq_file_size" not in config.explicit:
        size = _cq_file_size(root / "consumequeue")
        if size:
            changes["cq_file_size"] = size
    if "hash_slot_num" not in config.explicit and "index_num" not in config.explicit:
        size = _first_file_size(root / "index", digits=17)
        if size and size != ix.file_size(ix.DEFAULT_HASH_SLOT_NUM, ix.DEFAULT_INDEX_NUM) and (size - 40) % 84 == 0:
            slots = (size - 40) // 84   # the broker's default ratio: maxIndexNum = 4 * maxHashSlotNum
            changes.update(hash_slot_num=slots, index_num=4 * slots)
    if "enable_cq_ext" not in config.explicit or "cq_ext_file_size" not in config.explicit:
        size = _cq_file_size(root / "consumequeue_ext", unit=1)
        if size:     # ext files exist: the broker that wrote them had enableConsumeQueueExt on
            if "enable_cq_ext" not in config.explicit:
                changes["enable_cq_ext"] = True
            if "cq_ext_file_size" not in config.explicit:
                changes["cq_ext_file_size"] = size
    return replace(config, **changes) if changes else config


def _first_file_size(d: Path, digits: int) -> int | None:
    try:
        names = sorted(n for n in os.listdir(d) if len(n) == digits and n.isdigit())
    except OSError:
        return None
    sizes = [os.stat(d / n).st_size for n in names[:3]]
    sizes = [s for s in sizes if s > 0]
    return max(sizes) if sizes else None


def _cq_file_size(d: Path, unit: int = cq.UNIT_SIZE) -> int | None:
    """Largest CQ file among the first few queues (every CQ file has the same mapped size)."""
    best = 0
    try:
        for ti, topic in enumerate(sorted(os.listdir(d))):
            if ti > 8:
                break
            for q in os.listdir(d / topic):
                for n in os.listdir(d / topic / q)[:2]:
                    best = max(best, os.stat(d / topic / q / n).st_size)
    except OSError:
        pass
    return best if best and best % unit == 0 else None
