"""The broker's JSON dialect (fastjson 1.x), read and write.

Reading (`loads`): accepts what fastjson 1.x's default parser accepts for the broker's config files --
unquoted keys (integers such as ``{0:250}`` stay Python ``int`` keys, distinct from the string key
``"0"``; identifiers such as ``{abc:1}`` become string keys), single-quoted strings, a trailing comma
before ``}``/``]``, ``/* */`` and ``//`` comments, a UTF-8 BOM, any whitespace (space, TAB, CR, LF,
FF, BS), duplicate keys (last wins), integer suffixes ``L``/``S``/``B``. It rejects what fastjson
rejects: empty or whitespace-only input, anything after the top-level value (stale trailing bytes
after a torn write, docs/faults.md), unclosed strings/comments, a missing ``:`` or ``,``. Every error is a
``FormatError`` naming the file, the *byte* offset, the JSON path where it happened, and a reason.

Values map to Python: object -> ``dict`` (key order preserved; keys ``str`` or ``int``), array ->
``list`` or ``InlineList``, string -> ``str``, integer -> ``int``, decimal -> ``JFloat`` (a float that keeps
its source text), ``true``/``false`` -> ``bool``, ``null`` -> ``None``. Numbers given as strings stay
strings here; the config layer coerces them where the broker's bean setters would.

Writing: ``dumps(doc)`` reproduces ``JSON.toJSONString(obj, true)`` byte for byte (docs/store-format.md):
a container written at indent depth d puts string-keyed entries on their own line at d+1 TABs and
closes on a new line at d TABs; integer keys are *not* preceded by a newline (``{0:1,1:2\\n\\t\\t}``);
``java.util.List`` values are one element per line, while ``Set``s and primitive arrays are inline
(``InlineList``; the reader returns ``InlineList`` for every non-empty array that had no whitespace after
``[``); empty containers are ``{}``/``[]``; null entries are omitted; no trailing newline.
``dumps(doc, compact=True)`` is the ``BrowserCompatible`` compact form of timermetrics /
transactionMetrics (no whitespace, non-ASCII as ``\\uXXXX``, ``/`` as ``\\/``, non-string keys quoted,
longs beyond +-(2^53-1) as strings).
"""
from __future__ import annotations

from rmqctl.errors import FormatError

__all__ = ["loads", "dumps", "dump_bytes", "InlineList", "JFloat", "to_plain", "FormatError", "TrailingData",
           "TooDeep", "MAX_DEPTH"]


class TrailingData(FormatError):
    """A complete JSON value followed by more bytes (docs/faults.md: ``{..}old_garbage}``).
    ``value_end`` is the byte offset just past the value, ``value`` the value itself."""

    def __init__(self, message, *, value, value_end: int, trailing: int, **kw):
        super().__init__(message, **kw)
        self.value = value
        self.value_end = value_end
        self.trailing = trailing

class TooDeep(FormatError):
    """Containers nested deeper than ``MAX_DEPTH``. The broker's fastjson (1.2.69 / 1.2.83) throws on arrays
    nested deeper than this in a config file (the broker then loads ``.bak``; tests/test_config_meaning.py);
    objects under an unknown key it skips to a few thousand levels. rmqctl stops at the same depth for both,
    which also bounds the recursion of the writers."""


MAX_DEPTH = 514

_WS = " \t\n\r\f\b"
_BOM = "\ufeff"
_IDENT_START = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_IDENT_PART = _IDENT_START | set("0123456789")
_DIGITS = set("0123456789")
_SIMPLE_ESC = {'"': '"', "\\": "\\", "/": "/", "'": "'", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
               "t": "\t", "v": "\v", "F": "\f"}


class InlineList(list):
    """An array the broker writes on one line: a ``Set`` (e.g. ``groupTopicMap`` values) or ``int[]``."""

    __slots__ = ()


class JFloat(float):
    """A decimal number; keeps the text it was read from so it re-emits unchanged."""

    text: str

    def __new__(cls, text: str):
        obj = super().__new__(cls, text.rstrip("FfDd"))
        obj.text = text.rstrip("FfDd")
        return obj


class _Parser:
    def __init__(self, text: str, path, bom: int):
        self.s = text
        self.n = len(text)
        self.i = 0
        self.path = path
        self.bom = bom
        self.stack: list = []

    # -- errors -------------------------------------------------------------------------------
    def byte_offset(self, i: int) -> int:
        return self.bom + len(self.s[:i].encode("utf-8", "surrogateescape"))

    def fail(self, reason: str, i: int | None = None):
        i = self.i if i is None else i
        field = ".".join(str(k) for k in self.stack) or None
        raise FormatError(reason, path=self.path, offset=self.byte_offset(i), field=field)

    def what(self, i: int | None = None) -> str:
        i = self.i if i is None else i
        if i >= self.n:
            return "end of file"
        c = self.s[i]
        if "\udc80" <= c <= "\udcff":
            return f"byte 0x{ord(c) - 0xdc00:02x}"
        if c.isprintable() and c != " ":
            return repr(c)
        return f"character U+{ord(c):04X}"

    # -- lexing -------------------------------------------------------------------------------
    def skip_ws(self) -> None:
        s, n = self.s, self.n
        i = self.i
        while i < n:
            c = s[i]
            if c in _WS:
                i += 1
            elif c == "/" and i + 1 < n and s[i + 1] == "*":
                end = s.find("*/", i + 2)
                if end < 0:
                    self.fail("unclosed /* comment", i)
                i = end + 2
            elif c == "/" and i + 1 < n and s[i + 1] == "/":
                end = s.find("\n", i + 2)
                i = n if end < 0 else end + 1
            else:
                break
        self.i = i

    def value(self):
        """One JSON value, iteratively (no Python recursion): containers live on ``frames`` as
        [container, pending key]; ``self.stack`` is the JSON path for error messages."""
        frames: list = []
        s = self.s
        while True:
            self.skip_ws()
            if self.i >= self.n:
                self.fail("unexpected end of file, expected a value")
            c = s[self.i]
            done = True
            if c == "{" or c == "[":
                if len(frames) >= MAX_DEPTH:
                    raise TooDeep(f"JSON nested more than {MAX_DEPTH} levels deep (fastjson gives up at this depth)",
                                  path=self.path, offset=self.byte_offset(self.i))  # the path would be 514 segments
                self.i += 1
                if c == "[":
                    inline = self.i < self.n and s[self.i] not in _WS and s[self.i] != "/"
                    v = InlineList() if inline else []
                else:
                    v = {}
                self.skip_ws()
                close = "}" if c == "{" else "]"
                if self.i < self.n and s[self.i] == close:
                    self.i += 1
                    if c == "[":
                        v = []  # empty arrays are plain lists
                else:
                    frames.append([v, None])
                    if c == "{":
                        self._next_key(frames[-1])
                    else:
                        self.stack.append(0)
                    done = False
            elif c == '"' or c == "'":
                v = self.string()
            elif c == "-" or c in _DIGITS:
                v = self.number()
            else:
                v = self._word()
            while done:
                if not frames:
                    return v
                f = frames[-1]
                cont = f[0]
                self.stack.pop()
                if isinstance(cont, dict):
                    key = f[1]
                    if key in cont:  # fastjson: the last duplicate wins (Python keeps the first position)
                        del cont[key]
                    cont[key] = v
                    self.skip_ws()
                    if self.i >= self.n:
                        self.fail("unexpected end of file inside an object (expected ',' or '}')")
                    ch = s[self.i]
                    if ch == ",":
                        self.i += 1
                        self.skip_ws()
                        if self.i < self.n and s[self.i] == "}":  # trailing comma
                            self.i += 1
                            v = frames.pop()[0]
                            continue
                        self._next_key(f)
                        done = False
                    elif ch == "}":
                        self.i += 1
                        v = frames.pop()[0]
                    else:
                        self.fail(f"expected ',' or '}}' in an object, found {self.what()}")
                else:
                    cont.append(v)
                    self.skip_ws()
                    if self.i >= self.n:
                        self.fail("unexpected end of file inside an array (expected ',' or ']')")
                    ch = s[self.i]
                    if ch == ",":
                        self.i += 1
                        self.skip_ws()
                        if self.i < self.n and s[self.i] == "]":
                            self.i += 1
                            v = frames.pop()[0]
                            continue
                        self.stack.append(len(cont))
                        done = False
                    elif ch == "]":
                        self.i += 1
                        v = frames.pop()[0]
                    else:
                        self.fail(f"expected ',' or ']' in an array, found {self.what()}")

    def _next_key(self, frame) -> None:
        self.skip_ws()
        key = self.key()
        self.skip_ws()
        if self.i >= self.n or self.s[self.i] != ":":
            self.fail(f"expected ':' after key {key!r}, found {self.what()}")
        self.i += 1
        frame[1] = key
        self.stack.append(key)

    def _word(self):
        for word, val in (("true", True), ("false", False), ("null", None)):
            if self.s.startswith(word, self.i):
                end = self.i + len(word)
                if end < self.n and self.s[end] in _IDENT_PART:
                    break
                self.i = end
                return val
        self.fail(f"unexpected {self.what()}, expected a value")

    def key(self):
        if self.i >= self.n:
            self.fail("unexpected end of file, expected a key")
        c = self.s[self.i]
        if c == '"' or c == "'":
            return self.string()
        if c == "-" or c in _DIGITS:
            start = self.i
            j = self.i + 1
            while j < self.n and self.s[j] in _DIGITS:
                j += 1
            text = self.s[start:j]
            if text == "-":
                self.fail("bad numeric key", start)
            if j < self.n and self.s[j] in _IDENT_PART | {"."}:
                self.fail(f"bad unquoted key starting {text!r}", start)
            self.i = j
            return int(text)
        if c in _IDENT_START:
            j = self.i + 1
            while j < self.n and self.s[j] in _IDENT_PART:
                j += 1
            text = self.s[self.i:j]
            self.i = j
            return text
        self.fail(f"unexpected {self.what()}, expected a key")

    def string(self) -> str:
        q = self.s[self.i]
        start = self.i
        self.i += 1
        s, n = self.s, self.n
        parts = []
        seg = self.i
        while True:
            j = self.i
            while j < n and s[j] != q and s[j] != "\\":
                j += 1
            if j >= n:
                self.fail("unclosed string", start)
            if s[j] == q:
                parts.append(s[seg:j])
                self.i = j + 1
                return "".join(parts)
            parts.append(s[seg:j])
            if j + 1 >= n:
                self.fail("unclosed string", start)
            e = s[j + 1]
            if e in _SIMPLE_ESC:
                parts.append(_SIMPLE_ESC[e])
                j += 2
            elif e == "u":
                hx = s[j + 2:j + 6]
                if len(hx) < 4 or any(ch not in "0123456789abcdefABCDEF" for ch in hx):
                    self.fail("bad \\u escape in a string", j)
                parts.append(chr(int(hx, 16)))
                j += 6
            elif e == "x":
                hx = s[j + 2:j + 4]
                if len(hx) < 2 or any(ch not in "0123456789abcdefABCDEF" for ch in hx):
                    self.fail("bad \\x escape in a string", j)
                parts.append(chr(int(hx, 16)))
                j += 4
            elif e in "01234567":
                parts.append(chr(int(e)))
                j += 2
            else:
                self.fail(f"bad escape \\{e} in a string", j)
            self.i = seg = j

    def number(self):
        s, n = self.s, self.n
        start = j = self.i
        if s[j] == "-":
            j += 1
        d0 = j
        while j < n and s[j] in _DIGITS:
            j += 1
        if j == d0:
            self.fail("bad number", start)
        is_float = False
        if j < n and s[j] == ".":
            j += 1
            d1 = j
            while j < n and s[j] in _DIGITS:
                j += 1
            if j == d1:
                self.fail("bad number: no digit after '.'", start)
            is_float = True
        if j < n and s[j] in "eE":
            j += 1
            if j < n and s[j] in "+-":
                j += 1
            d2 = j
            while j < n and s[j] in _DIGITS:
                j += 1
            if j == d2:
                self.fail("bad number: no digit in the exponent", start)
            is_float = True
        text = s[start:j]
        if j < n and s[j] in ("FfDd" if is_float else "LSB"):
            j += 1
        elif not is_float and j < n and s[j] in "FfDd":
            j += 1
            is_float = True
        self.i = j
        return JFloat(text) if is_float else int(text)


def _decode(data) -> tuple[str, int]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        bom = 0
        if raw.startswith(b"\xef\xbb\xbf"):
            raw, bom = raw[3:], 3
        return raw.decode("utf-8", "surrogateescape"), bom
    text = str(data)
    if text.startswith(_BOM):
        return text[1:], 3
    return text, 0


def loads(data, path=None):
    """Parse broker JSON (bytes or str) the way fastjson 1.x does. Raises FormatError."""
    text, bom = _decode(data)
    p = _Parser(text, path, bom)
    p.skip_ws()
    if p.i >= p.n:
        p.fail("empty file" if not text else "no JSON value (only whitespace/comments)", 0 if not text else p.i)
    v = p.value()
    vend = p.i
    p.skip_ws()
    if p.i < p.n:
        at = p.byte_offset(p.i)
        end = p.byte_offset(vend)
        total = p.bom + len(text.encode("utf-8", "surrogateescape"))
        raise TrailingData(f"{total - at} stale byte(s) after the end of the JSON value, starting {p.what()} "
                           "(a torn or non-truncating write?)", path=path, offset=at, value=v,
                           value_end=end, trailing=total - end)
    return v


# ------------------------------------------------------------------------------------------------
# writer


def _esc_pretty(s: str) -> str:
    out = []
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\b\f\n\r\t":
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif o < 0x20 or 0x7F <= o < 0xA0 or o in (0x2028, 0x2029):
            out.append("\\u%04X" % o)
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _esc_browser(s: str) -> str:
    out = []
    for ch in s:
        o = ord(ch)
        if ch in '"/\\':
            out.append("\\" + ch)
        elif ch in "\b\f\n\r\t":
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif o < 0x20:
            out.append("\\u%04X" % o)
        elif o >= 127:
            if o > 0xFFFF:  # Java strings are UTF-16: a surrogate pair, each escaped
                o -= 0x10000
                out.append("\\u%04X\\u%04X" % (0xD800 + (o >> 10), 0xDC00 + (o & 0x3FF)))
            else:
                out.append("\\u%04X" % o)
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


_JS_SAFE = 9007199254740991


def _scalar(v, compact: bool) -> str:
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, JFloat):
        return v.text
    if isinstance(v, int):
        if compact and (v > _JS_SAFE or v < -_JS_SAFE):
            return f'"{v}"'
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return _esc_browser(v) if compact else _esc_pretty(v)
    raise TypeError(f"cannot write {type(v).__name__} as broker JSON")


def _write(v, depth: int, out: list, compact: bool) -> None:
    if isinstance(v, dict):
        if not v:
            out.append("{}")
            return
        out.append("{")
        first = True
        for k, val in v.items():
            if val is None:
                continue
            if not first:
                out.append(",")
            first = False
            if isinstance(k, str):
                if not compact:
                    out.append("\n" + "\t" * (depth + 1))
                out.append((_esc_browser(k) if compact else _esc_pretty(k)) + ":")
            elif isinstance(k, bool) or not isinstance(k, int):
                raise TypeError(f"cannot write a {type(k).__name__} key as broker JSON")
            else:
                out.append((f'"{k}"' if compact else str(k)) + ":")
            _write(val, depth + 1, out, compact)
        if not compact:
            out.append("\n" + "\t" * depth)
        out.append("}")
    elif isinstance(v, list):
        if not v:
            out.append("[]")
            return
        if compact or isinstance(v, InlineList):
            out.append("[")
            for i, item in enumerate(v):
                if i:
                    out.append(",")
                _write(item, depth, out, compact)  # fastjson's CollectionCodec does not indent
            out.append("]")
            return
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            out.append("\n" + "\t" * (depth + 1))
            _write(item, depth + 1, out, compact)
        out.append("\n" + "\t" * depth + "]")
    else:
        out.append(_scalar(v, compact))


def dumps(doc, *, compact: bool = False) -> str:
    """fastjson's ``toJSONString(obj, true)`` layout, or with ``compact`` the BrowserCompatible form."""
    out: list = []
    _write(doc, 0, out, compact)
    return "".join(out)


def dump_bytes(doc, *, compact: bool = False) -> bytes:
    return dumps(doc, compact=compact).encode("utf-8", "surrogateescape")


def to_plain(v):
    """Standard-JSON-compatible structure (integer keys become strings) for ``--json`` output."""
    # plain loops, not comprehensions: one Python frame per level (documents go MAX_DEPTH deep)
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            out[str(k)] = to_plain(x)
        return out
    if isinstance(v, list):
        out = []
        for x in v:
            out.append(to_plain(x))
        return out
    if isinstance(v, JFloat):
        return float(v)
    return v
