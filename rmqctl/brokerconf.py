"""broker.conf, read the way the broker reads it: BrokerStartup loads the file with
java.util.Properties.load(InputStream), so the bytes are ISO-8859-1 and the grammar is Properties':

  * natural lines end at \\n, \\r or \\r\\n; a line ending in an odd number of backslashes continues on
    the next one, whose leading whitespace is dropped;
  * a line whose first non-blank character is # or ! is a comment (never continued), also right after
    continuations that added nothing; blank lines and logical lines still empty at their end are skipped;
  * the key runs to the first unescaped '=', ':' or whitespace; blanks, then one '=' or ':', then
    blanks separate it from the value (trailing blanks stay in the value);
  * escapes: \\t \\n \\r \\f, \\uXXXX, and a backslash before any other character stands for that
    character; a later duplicate key wins.

A JSON object with the same keys is accepted too (and an oracle fixture manifest's "store_config").
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from rmqctl.errors import UsageError

_BLANK = " \t\f"
_SEP = "=:"
_ESC = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str):
    """Properties' LineReader: logical lines with continuations joined (escapes still in place)."""
    split = re.split(r"(\r\n|\r|\n)", text)
    lines = list(zip(split[0::2], split[1::2] + [""]))    # (content, terminator); "" = end of file
    i, n = 0, len(lines)
    while i < n:
        line, term = lines[i]
        line = line.lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts, dangling = [], False
        while True:
            bs = len(line) - len(line.rstrip("\\"))
            if bs % 2 == 0:
                parts.append(line)
                break
            parts.append(line[:-1])
            if i >= n:          # a backslash right at the end of the file
                dangling = True
                break
            raw, nterm = lines[i]
            i += 1
            # LineReader quirk: a continuation whose one-character terminator is the file's last byte still
            # yields a line, even an empty one (not after \r\n or trailing blanks)
            dangling = i >= n and raw == "" and term in ("\n", "\r")
            line, term = raw.lstrip(_BLANK), nterm
            if not any(parts) and line[:1] in ("#", "!"):
                parts = None    # nothing read yet: LineReader still takes this line for a comment
                break
        if parts is None:
            continue
        joined = "".join(parts)
        if joined or dangling:  # LineReader drops a logical line still empty at its terminator
            yield joined


def _unescape(s: str, where: str) -> str:
    out, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i >= n:
            break
        c = s[i]
        i += 1
        if c == "u":
            h = s[i:i + 4]
            if len(h) < 4 or any(ch not in "0123456789abcdefABCDEF" for ch in h):
                raise UsageError(f"malformed \\uxxxx escape \\u{h}", path=where)
            out.append(chr(int(h, 16)))
            i += 4
        else:
            out.append(_ESC.get(c, c))
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in _SEP or c in _BLANK:
            break
        i += 1
    key, j = line[:i], min(i, n)
    while j < n and line[j] in _BLANK:
        j += 1
    if j < n and line[j] in _SEP and (i >= n or line[i] in _BLANK or j == i):
        j += 1
        while j < n and line[j] in _BLANK:
            j += 1
    return key, line[j:]


def parse_properties(text: str, where: str = "broker config") -> dict[str, str]:
    """java.util.Properties.load over already decoded text."""
    props = {}
    for line in _logical_lines(text):
        k, v = _split(line)
        props[_unescape(k, where)] = _unescape(v, where)
    return props


def read_broker_config(path) -> dict:
    """The keys of a broker.conf (Properties) or JSON file; an unreadable or binary file is a usage error."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except IsADirectoryError:
        raise UsageError("broker config is a directory, not a file", path=p) from None
    except OSError as e:
        raise UsageError(f"cannot read the broker config: {e.strerror}", path=p) from None
    if b"\0" in raw:
        off = raw.index(b"\0")
        raise UsageError("not a broker.conf or JSON text file (binary data)", path=p, offset=off)
    if raw.lstrip()[:1] == b"{":
        try:
            values = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise UsageError(f"not valid JSON: {e}", path=p) from None
        if not isinstance(values, dict):
            raise UsageError("a JSON broker config must be an object", path=p)
        if isinstance(values.get("store_config"), dict):   # an oracle fixture manifest
            values = values["store_config"]
        return values
    return parse_properties(raw.decode("latin-1"), str(p))   # Properties.load(InputStream) is ISO-8859-1
