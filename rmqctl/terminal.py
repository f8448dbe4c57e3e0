"""The one console pair: stdout is data, stderr is diagnostics. Markup is off: topic names and
properties are data, not rich markup."""
from __future__ import annotations

import os
import sys
from functools import lru_cache


def stdout_is_tty() -> bool:
    return sys.stdout.isatty()


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()


@lru_cache(maxsize=None)
def out():
    from rich.console import Console

    return Console(file=sys.stdout, markup=False, highlight=False, emoji=False, soft_wrap=True,
                   width=int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS") else None)


@lru_cache(maxsize=None)
def err():
    from rich.console import Console

    return Console(file=sys.stderr, markup=False, highlight=False, emoji=False, soft_wrap=True)


def warn(msg: str) -> None:
    sys.stderr.write(f"rmqctl: warning: {msg}\n")


def progress(total: int, description: str):
    """A rich progress bar on a terminal; a silent no-op in cron / pipes."""
    if not stderr_is_tty():
        return _NoProgress()
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    p = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
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
