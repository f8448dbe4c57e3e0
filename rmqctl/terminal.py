"""The one console pair: stdout is data, stderr is diagnostics. Markup is off: topic names and
properties are data, not rich markup."""
from __future__ import annotations

import errno
import os
import re
import sys
import time
from functools import lru_cache

# C0, DEL, C1, line/paragraph separators, bidi overrides: bytes from messages must not drive the terminal.
# Bytes of a file name that are not UTF-8 reach Python as lone surrogates (U+DC80..U+DCFF): shown as \xNN.
_CTRL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\udc80-\udcff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# What may still reach stdout un-escaped: \n and \t only (line structure of text, JSON, TSV).
_STRAY = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _esc(m) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named:
        return named
    n = ord(c)
    if 0xDC80 <= n <= 0xDCFF:
        n -= 0xDC00
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def escape(value) -> str:
    """A value (body, topic, key, property, path, config value) as one line of printable text:
    control characters become Python-style escapes (\\x1b, \\r, \\n). Used by every text renderer."""
    s = value if isinstance(value, str) else str(value)
    return s if _CTRL.search(s) is None else _CTRL.sub(_esc, s)


def escape_text(text: str) -> str:
    """Lines of text (a diff of a file) with their layout kept: every control character but \\n and \\t escaped."""
    return text if _STRAY.search(text) is None else _STRAY.sub(_stray, text)


def _stray(m) -> str:
    n = ord(m.group())
    # \u form for DEL/C1 and above keeps JSON output valid JSON (they only occur inside strings)
    return f"\\x{n:02x}" if n < 0x20 else f"\\u{n:04x}"


class StdoutClosed(Exception):
    """stdout is a closed pipe (`rmqctl dump F | head`): stop quietly, exit 0. Not an OSError, so that
    no library turns it into its own exit status on the way up."""


class SafeStdout:
    """sys.stdout for the console entry point: turns EPIPE into StdoutClosed and, on a terminal,
    escapes any control character a renderer let through (only \\n and \\t pass). Piped output is
    left exact (and fast): renderers escape their values, and JSON strings may hold C1 characters."""

    def __init__(self, inner):
        self._inner = inner
        self.closed_pipe = False
        try:
            self._guard = inner.isatty()
        except (AttributeError, ValueError, OSError):
            self._guard = False

    def write(self, s):
        if self._guard:
            if _STRAY.search(s) is not None:
                s = _STRAY.sub(_stray, s)
            if _ACTIVE and s:
                _ACTIVE[-1].erase()           # results never share a line with the progress bar
            if s:
                _LAST_OUT[0] = s[-1]
        try:
            return self._inner.write(s)
        except OSError as e:
            self._gone(e)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        try:
            self._inner.flush()
        except OSError as e:
            self._gone(e)

    def _gone(self, e):
        if not isinstance(e, BrokenPipeError) and e.errno not in (errno.EPIPE, errno.EINVAL):
            raise e
        self.closed_pipe = True
        stdout_to_devnull(self._inner)
        raise StdoutClosed() from None

    def __getattr__(self, name):
        return getattr(self._inner, name)


def stdout_to_devnull(stream=None) -> None:
    """Point fd 1 at /dev/null so that the interpreter's final flush of buffered output cannot fail."""
    stream = stream or sys.stdout
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def stdout_is_tty() -> bool:
    return sys.stdout.isatty()


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()


@lru_cache(maxsize=None)
def out():
    from rich.console import Console

    # color_system=None: no escape sequences at all on stdout (tables stay plain box drawing)
    return Console(file=sys.stdout, markup=False, highlight=False, emoji=False, soft_wrap=True, color_system=None,
                   width=int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS") else None)


@lru_cache(maxsize=None)
def err():
    from rich.console import Console

    return Console(file=sys.stderr, markup=False, highlight=False, emoji=False, soft_wrap=True)


def warn(msg: str) -> None:
    sys.stderr.write(f"rmqctl: warning: {escape(msg)}\n")


def progress(total: int, description: str, unit: str = "B"):
    """A progress bar on stderr (bytes, bytes/s, ETA) for a scan of `total` bytes (or items): only when
    stderr is a terminal, and only once the scan has run RMQCTL_PROGRESS_AFTER seconds (default 2), so
    quick runs, cron and pipes see nothing. Plain text (no markup); erased before anything is written
    to stdout or stderr on the same terminal and when the scan ends, so it never covers results."""
    if not stderr_is_tty():
        return _NoProgress()
    try:
        after = float(os.environ.get("RMQCTL_PROGRESS_AFTER", "2"))
    except ValueError:
        after = 2.0
    return _Bar(max(int(total), 1), description, after, unit)


class _NoProgress:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def advance(self, n: int) -> None:
        pass


_ACTIVE: list = []          # the bar being shown (at most one)


def _human(n: float, unit: str = "B") -> str:
    """1234567 -> "1.2 MB" (unit "B"); other units: "1.2 M steps"."""
    for prefix in ("", "k", "M", "G", "T"):
        if abs(n) < 1000 or prefix == "T":
            if unit == "B":
                return f"{n:.0f} B" if not prefix else f"{n:.1f} {prefix}B"
            return f"{n:.0f} {unit}" if not prefix else f"{n:.1f} {prefix} {unit}"
        n /= 1000
    return f"{n:.1f}"


def _clock(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class _StderrProxy:
    """sys.stderr while a bar is shown: every diagnostic first erases the bar."""

    def __init__(self, inner, bar):
        self._inner, self._bar = inner, bar

    def write(self, s):
        self._bar.erase()
        return self._inner.write(s)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Bar:
    REDRAW = 0.2

    def __init__(self, total, description, after, unit="B"):
        import threading

        self.total, self.description, self.after, self.unit = total, description, after, unit
        self.done = 0
        self.shown = False
        self._lock = threading.Lock()
        self._next = 0.0

    def __enter__(self):
        self._stream = sys.stderr
        self.start = time.monotonic()
        self._next = self.start + self.after
        _ACTIVE.append(self)
        sys.stderr = _StderrProxy(self._stream, self)
        return self

    def __exit__(self, *a):
        self.erase()
        if _ACTIVE and _ACTIVE[-1] is self:
            _ACTIVE.pop()
        if isinstance(sys.stderr, _StderrProxy) and sys.stderr._bar is self:
            sys.stderr = self._stream
        return False

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now >= self._next:
            self._draw(now)

    def _draw(self, now: float) -> None:
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._next = now + self.REDRAW
            if not _at_line_start():
                return          # a result line is half written on this terminal: do not draw into it
            sys.stdout.flush()
            self._stream.write("\r" + self.line(now) + "\x1b[K")
            self._stream.flush()
            self.shown = True
        except (OSError, ValueError):
            pass
        finally:
            self._lock.release()

    def line(self, now: float) -> str:
        import shutil

        width = shutil.get_terminal_size((80, 24)).columns
        done = min(self.done, self.total)
        elapsed = max(now - self.start, 1e-6)
        rate = done / elapsed
        eta = _clock((self.total - done) / rate) if rate > 0 else "-:--:--"
        u = self.unit
        tail = (f" {100 * done / self.total:3.0f}% {_human(done, u)}/{_human(self.total, u)}"
                f" {_human(rate, u)}/s ETA {eta}")
        head = escape(self.description)
        room = width - 1 - len(head) - len(tail) - 1
        bar = ""
        if room >= 10:
            fill = int(room * done / self.total)
            bar = " " + "#" * fill + "-" * (room - fill)
        return (head + bar + tail)[:max(width - 1, 1)]

    def erase(self) -> None:
        if not self.shown:
            return
        with self._lock:
            if self.shown:
                try:
                    self._stream.write("\r\x1b[K")
                    self._stream.flush()
                except (OSError, ValueError):
                    pass
                self.shown = False


_LAST_OUT = ["\n"]       # the last character written to stdout (SafeStdout keeps it)


def _at_line_start() -> bool:
    return _LAST_OUT[0] == "\n"
