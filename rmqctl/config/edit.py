"""Paths into a config document: ``offsetTable.TopicTest@GroupA.0``.

Segments are separated by ``.``; a segment in double quotes (``"a.b"``) is a string key taken
literally. Inside an object, an all-digit segment names the integer key (``{0:113085}``) when the
object has integer keys or is empty, otherwise the string key; inside an array it is the index.
Topic and group names cannot contain ``.`` (the broker allows ``[%|a-zA-Z0-9_-]``), so the plain form
covers every broker-written key.
"""
from __future__ import annotations

import re

from rmqctl import fastjson
from rmqctl.errors import UsageError

_SEG = re.compile(r'"((?:[^"\\]|\\.)*)"|([^.]+)')


def split_path(path: str) -> list:
    """Split into segments: ``str`` for quoted (always string keys), ``_Raw`` for plain ones."""
    if path in ("", "."):
        return []
    out, i = [], 0
    while i < len(path):
        m = _SEG.match(path, i)
        if not m:
            raise UsageError(f"bad path {path!r} at character {i}")
        out.append(m.group(1).replace('\\"', '"') if m.group(1) is not None else _Raw(m.group(2)))
        i = m.end()
        if i < len(path):
            if path[i] != ".":
                raise UsageError(f"bad path {path!r} at character {i}")
            i += 1
            if i == len(path):
                raise UsageError(f"bad path {path!r}: ends with '.'")
    return out


class _Raw(str):
    pass


def _is_int(s: str) -> bool:
    return bool(re.fullmatch(r"-?\d+", s))


def _key(container, seg, *, creating: bool = False):
    """The actual key of ``seg`` in a dict (int or str)."""
    if not isinstance(seg, _Raw):
        return str(seg)
    if _is_int(seg):
        n = int(seg)
        if n in container:
            return n
        if seg in container:
            return str(seg)
        if not container or any(isinstance(k, int) for k in container):
            return n
        return str(seg)
    return str(seg)


def _child(node, seg, where: str):
    if isinstance(node, dict):
        k = _key(node, seg)
        if k not in node:
            raise UsageError(f"no key {seg!s} at {where or '(top)'}")
        return k, node[k]
    if isinstance(node, list):
        if not _is_int(seg):
            raise UsageError(f"{where or '(top)'} is an array; expected an index, got {seg!s}")
        i = int(seg)
        if not -len(node) <= i < len(node):
            raise UsageError(f"index {i} out of range at {where or '(top)'} ({len(node)} elements)")
        return i, node[i]
    raise UsageError(f"{where or '(top)'} is a {type(node).__name__}, not an object or array")


def get(doc, path: str):
    node, where = doc, ""
    for seg in split_path(path):
        _, node = _child(node, seg, where)
        where = f"{where}.{seg}" if where else str(seg)
    return node


def parse_value(text: str, *, old=None, as_string: bool = False):
    """VALUE on the command line: broker JSON (``5``, ``true``, ``{0:1}``, ``"x"``); a bare word that is
    not JSON becomes a string, and so does anything replacing an existing string value."""
    if as_string or isinstance(old, str):
        return text
    try:
        return fastjson.loads(text, "VALUE")
    except fastjson.FormatError:
        if re.fullmatch(r"[A-Za-z_%|][\w%|@.:/-]*", text):
            return text
        raise


def set_(doc, path: str, value, *, create: bool = True):
    """Set ``path`` to ``value`` in place; returns the previous value (None when created)."""
    segs = split_path(path)
    if not segs:
        raise UsageError("cannot replace the whole document; give a path")
    node, where = doc, ""
    for seg in segs[:-1]:
        if isinstance(node, dict) and _key(node, seg) not in node and create:
            node[_key(node, seg, creating=True)] = {}
        _, node = _child(node, seg, where)
        where = f"{where}.{seg}" if where else str(seg)
    last = segs[-1]
    if isinstance(node, dict):
        k = _key(node, last, creating=True)
        old = node.get(k)
        if k not in node and not create:
            raise UsageError(f"no key {last!s} at {where or '(top)'}")
        node[k] = value
        return old
    if isinstance(node, list):
        i, old = _child(node, last, where)
        node[i] = value
        return old
    raise UsageError(f"{where or '(top)'} is a {type(node).__name__}, not an object or array")


def delete(doc, path: str):
    segs = split_path(path)
    if not segs:
        raise UsageError("cannot delete the whole document")
    node, where = doc, ""
    for seg in segs[:-1]:
        _, node = _child(node, seg, where)
        where = f"{where}.{seg}" if where else str(seg)
    k, old = _child(node, segs[-1], where)
    del node[k]
    return old


# topics.json / subscriptionGroup.json entries the broker would never write half-filled
_ENTRY_TABLES = {"topics": ("topicConfigTable", "topic", "config topics create"),
                 "subscriptionGroup": ("subscriptionGroupTable", "group", "config groups create")}


def fill_new_entry(kind: str, doc: dict, path: str, value) -> str | None:
    """`config set` on a topic or group that does not exist yet: create the whole entry with the fields the
    broker fills (as `config topics create` / `config groups create` do), so that the set that follows
    changes one field of a complete entry instead of leaving {"perm": 6} with no topicName. Returns a note
    for the output, None when nothing was created."""
    if kind not in _ENTRY_TABLES:
        return None
    table_key, what, cmd = _ENTRY_TABLES[kind]
    segs = split_path(path)
    if len(segs) < 2 or segs[0] != table_key or not isinstance(doc.get(table_key, {}), dict):
        return None
    name = str(segs[1])
    if name in doc.get(table_key, {}):
        return None
    if len(segs) == 2 and not isinstance(value, dict):
        raise UsageError(f"a {what} entry is an object; create {what} {name!r} with `rmqctl {cmd}`")
    if kind == "topics":
        from rmqctl.config import topics as tp

        tp.create(doc, name)
    else:
        from rmqctl.config import groups as gp

        gp.create(doc, name, {})
    if len(segs) == 2:      # a whole object: its fields over the broker's defaults
        entry = doc[table_key][name]
        entry.update(value)
        value.clear()
        value.update(entry)
    return f"created {what} {name} with the broker's defaults (as `rmqctl {cmd}`), then set {path}"
