"""Topics (topics.json, ``topicConfigTable``): list, create, update queue numbers / perm, delete.

New entries are written with the fields TopicConfig's getters produce, in the broker's (sorted)
order; ``attributes`` only in 5.x files. Defaults are mqadmin updateTopic's: 8 read / 8 write
queues, perm 6 (read+write). Every change bumps ``dataVersion`` like the broker does.
"""
from __future__ import annotations

import re
from pathlib import Path

from rmqctl.config.files import as_int, delete_entry, looks_v5, next_version, top_table
from rmqctl.errors import UsageError

NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
MAX_LEN = 127
PERM_BITS = {1: "inherit", 2: "write", 4: "read"}


def validate_name(name: str, what: str = "topic") -> None:
    if not name or not NAME.match(name):
        raise UsageError(f"illegal {what} name {name!r}: allowed characters are %|a-zA-Z0-9_-")
    if len(name) > MAX_LEN:
        raise UsageError(f"{what} name is longer than {MAX_LEN} characters")


def perm_text(perm) -> str:
    try:
        p = as_int(perm)
    except Exception:  # noqa: BLE001
        return str(perm)
    return ("R" if p & 4 else "-") + ("W" if p & 2 else "-") + ("X" if p & 1 else "-")


def table(doc: dict) -> dict:
    return top_table(doc, "topicConfigTable")


def rows(doc: dict) -> list[dict]:
    out = []
    for name, tc in table(doc).items():
        if not isinstance(tc, dict):
            continue
        out.append({"topic": str(name), "readQueueNums": tc.get("readQueueNums"),
                    "writeQueueNums": tc.get("writeQueueNums"), "perm": tc.get("perm"),
                    "order": tc.get("order"), "topicSysFlag": tc.get("topicSysFlag"),
                    "attributes": tc.get("attributes") or {}})
    return out


def _check(read, write, perm):
    for v, what in ((read, "read queue number"), (write, "write queue number")):
        if v is not None and not 0 <= v <= 1024:
            raise UsageError(f"{what} {v} out of range 0..1024")
    if perm is not None and not 0 <= perm <= 7:
        raise UsageError(f"perm {perm} out of range 0..7 (4 read, 2 write, 1 inherit)")


def create(doc: dict, name: str, *, read: int = 8, write: int = 8, perm: int = 6, order: bool = False,
           attributes: dict | None = None) -> dict:
    validate_name(name)
    _check(read, write, perm)
    t = table(doc)
    if name in t:
        raise UsageError(f"topic {name!r} already exists (use `config topics update`)")
    v5 = looks_v5(doc, "topicConfigTable", "attributes")
    tc: dict = {}
    if v5 or attributes:
        tc["attributes"] = dict(attributes or {})
    tc.update({"order": order, "perm": perm, "readQueueNums": read, "topicFilterType": "SINGLE_TAG",
               "topicName": name, "topicSysFlag": 0, "writeQueueNums": write})
    t[name] = tc
    next_version(doc)
    return tc


def update(doc: dict, name: str, *, read: int | None = None, write: int | None = None, perm: int | None = None,
           order: bool | None = None) -> dict:
    """Returns {field: (old, new)} for what changed."""
    _check(read, write, perm)
    tc = table(doc).get(name)
    if not isinstance(tc, dict):
        raise UsageError(f"no topic {name!r} in topics.json")
    changes = {}
    for field, val in (("readQueueNums", read), ("writeQueueNums", write), ("perm", perm), ("order", order)):
        if val is not None and tc.get(field) != val:
            changes[field] = (tc.get(field), val)
            tc[field] = val
    if changes:
        next_version(doc)
    return changes


def delete(doc: dict, name: str) -> dict:
    return delete_entry(doc, "topicConfigTable", name, f"topic {name!r} in topics.json")


def compaction_topics(root: Path) -> set | None:
    """Topics whose attribute cleanup.policy is COMPACTION in config/topics.json (None: no readable topics.json)."""
    from rmqctl.config import files as cfgfiles

    cdir = Path(root) / "config"
    if not (cdir / "topics.json").exists() and not (cdir / "topics.json.bak").exists():
        return None
    try:
        loaded = cfgfiles.load(Path(root), "topics")
    except Exception:   # noqa: BLE001 - unreadable: the caller says so
        return None
    doc = loaded.doc if loaded.ok else None
    table = doc.get("topicConfigTable") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        return None
    out = set()
    for name, tc in table.items():
        attrs = tc.get("attributes") if isinstance(tc, dict) else None
        if isinstance(attrs, dict) and attrs.get("cleanup.policy") == "COMPACTION":
            out.add(name)
    return out


def batch_topics(store) -> frozenset:
    """Topics whose queues are batch consume queues: queue.type=BatchCQ in the config/topics.json the broker
    would load (main, else .bak), plus every directory under batchconsumequeue/ (the broker loads those as
    batch queues whatever the config says, or refuses to start when the config disagrees)."""
    from rmqctl.store.batchcq import DIR

    out = {t for t, _ in store.queues(DIR)}
    out |= configured_batch_topics(store.root)
    return frozenset(out)


def configured_batch_topics(root) -> set:
    return {t for t, v in (queue_types(root) or {}).items() if v == "BatchCQ"}


def queue_types(root) -> dict | None:
    """{topic: queue.type} of the config/topics.json the broker would load (main, else .bak; {} when it starts
    with no topics); None when that cannot be told (unreadable, not decodable, a linked config/)."""
    from rmqctl.config import files as CF
    from rmqctl.errors import RmqError

    try:
        if (Path(root) / "config").is_symlink():
            return None
        loaded = CF.load(Path(root), "topics")
    except (RmqError, OSError, ValueError):
        return None
    if not loaded.ok:
        return {} if loaded.verdict == CF.EMPTY else None
    table = loaded.doc.get("topicConfigTable") if isinstance(loaded.doc, dict) else None
    if not isinstance(table, dict):
        return {}
    out = {}
    for name, tc in table.items():
        attrs = tc.get("attributes") if isinstance(tc, dict) else None
        out[name] = str(attrs.get("queue.type", "")) if isinstance(attrs, dict) else ""
    return out
