"""Fast codecs derived from the Construct declarations, never typed a second time.

`struct_format(s)` walks a fixed-size Construct Struct and returns the equivalent `struct` format;
`numpy_dtype(s)` returns the matching big-endian numpy structured dtype (numpy imported lazily).
`field_names(s)` gives the names in order. Only the building blocks the declarations use are
supported; anything else raises, so a declaration that is not fixed-size cannot be fast-pathed by
accident.
"""
from __future__ import annotations

import functools

import construct as c


def _leaves(con, prefix=""):
    """Yield (name, struct_code, size) for every fixed leaf field of a Struct, flattening nested Structs."""
    while isinstance(con, (c.Renamed, c.Transformed)) and not isinstance(con, c.Struct):
        if isinstance(con, c.Renamed):
            con = con.subcon
        else:
            break
    if isinstance(con, c.Struct):
        for sub in con.subcons:
            name = sub.name
            inner = sub.subcon if isinstance(sub, c.Renamed) else sub
            if isinstance(inner, c.Struct):
                yield from _leaves(inner, f"{prefix}{name}.")
            else:
                yield from _leaf(inner, f"{prefix}{name}")
        return
    yield from _leaf(con, prefix.rstrip("."))


def _leaf(con, name):
    while isinstance(con, c.Renamed):
        con = con.subcon
    if isinstance(con, c.FormatField):
        if con.fmtstr[0] != ">":
            raise TypeError(f"{name}: store formats are big-endian, got {con.fmtstr!r}")
        yield name, con.fmtstr[1:], con.length
    elif isinstance(con, (c.Const,)):
        yield from _leaf(con.subcon, name)
    elif isinstance(con, c.Bytes) and isinstance(con.length, int):
        yield name, f"{con.length}s", con.length
    elif isinstance(con, (c.Validator, c.Adapter)) and not isinstance(con, c.Struct):
        yield from _leaf(con.subcon, name)
    else:
        raise TypeError(f"{name}: {type(con).__name__} is not a fixed-size field")


def field_names(con) -> list[str]:
    return [n for n, _, _ in _leaves(con)]


def struct_format(con) -> str:
    """Big-endian struct format of a fixed-size Struct, e.g. '>qiq' for a consume-queue unit."""
    return ">" + "".join(code for _, code, _ in _leaves(con))


@functools.cache
def numpy_dtype(con):
    """Big-endian numpy dtype with the same names and offsets (numpy's 'i8' is int64: use explicit sizes).
    Built once per declaration: the readers of a store of many queues ask for it per file."""
    import numpy as np

    kinds = {"b": "i1", "B": "u1", "h": "i2", "H": "u2", "i": "i4", "I": "u4", "l": "i4", "L": "u4",
             "q": "i8", "Q": "u8"}
    fields = []
    for name, code, size in _leaves(con):
        if code.endswith("s"):
            fields.append((name, f"S{size}"))
        else:
            fields.append((name, ">" + kinds[code]))
    return np.dtype(fields)
