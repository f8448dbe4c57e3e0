"""The one console pair: stdout is data, stderr is diagnostics. Markup is off: topic names and
properties are data, not rich markup."""
from __future__ import annotations

import errno
import os
import re
import sys
from functools import lru_cache

# C0, DEL, C1, line/paragraph separators, bidi overrides: bytes from messages must not drive the terminal.
_CTRL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# What may still reach stdout un-escaped: \n and \t only (line structure of text, JSON, TSV).
_STRAY = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _esc(m) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named:
        return named
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def escape(value) -> str:
    """A value (body, topic, key, property, path, config value) as one line of printable text:
    control characters become Python-style escapes (\\x1b, \\r, \\n). Used by every text renderer."""
    s = value if isinstance(value, str) else str(value)
    return s if _CTRL.search(s) is None else _CTRL.sub(_esc, s)


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
        if self._guard and _STRAY.search(s) is not None:
            s = _STRAY.sub(_stray, s)
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


def progress(total: int, description: str):
    """A rich progress bar on a terminal; a silent no-op in cron / pipes."""
    if not stderr_is_tty():
        return _NoProgress()
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    # A column object: a format string would go through the console's (disabled) markup and print its tag.
    p = Progress(TextColumn("{task.description}", style="progress.description", markup=False), BarColumn(), DownloadColumn(),
                 TransferSpeedColumn(), TimeRemainingColumn(), console=err(), transient=True)
    return _RichProgress(p, total, description)


class _NoProgress:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def advance(self, n: int) -> None:
        pass


class _RichProgress:
    def __init__(self, p, total, description):
        self.p, self.total, self.description = p, total, description

    def __enter__(self):
        self.p.__enter__()
        self.task = self.p.add_task(self.description, total=self.total)
        return self

    def __exit__(self, *a):
        return self.p.__exit__(*a)

    def advance(self, n: int) -> None:
        self.p.advance(self.task, n)
