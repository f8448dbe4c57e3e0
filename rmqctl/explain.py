"""`dump --explain` and the man page FILES section: byte layouts from the Construct field docs."""
from __future__ import annotations

import importlib

from rmqctl.formats import KINDS


def _rows(con, prefix=""):
    import construct as c

    for sub in getattr(con, "subcons", []):
        name = getattr(sub, "name", None)
        if not name:
            continue
        doc = getattr(sub, "docs", "") or ""
        inner = sub.subcon if isinstance(sub, c.Renamed) else sub
        try:
            size = str(inner.sizeof())
        except Exception:  # noqa: BLE001 - variable size
            size = "4|16+4" if name.endswith("_host") else "var"
        if isinstance(inner, c.Struct):
            yield (f"{prefix}{name}", size, doc)
            yield from _rows(inner, f"{prefix}{name}.")
        else:
            yield (f"{prefix}{name}", size, doc)


def explain_kind(kind: str) -> str:
    k = KINDS[kind]
    lines = [f"{k.name}: {k.summary}"]
    if kind == "dledger_checkpoint":
        return "\n".join(lines + ["  (java.util.Properties text, key=value lines; see docs/store-format.md, DLedger)"])
    if not k.module:
        return "\n".join(lines + ["  (JSON in the broker's fastjson dialect; see rmqctl-config(1))"])
    mod = importlib.import_module(f"rmqctl.formats.{k.module}")
    for decl in k.declaration.split(","):
        con = getattr(mod, decl)
        lines.append(f"  {decl} (big-endian, signed):")
        for name, size, doc in _rows(con):
            lines.append(f"    {name:<32} {size:>4}  {doc}")
    return "\n".join(lines)
