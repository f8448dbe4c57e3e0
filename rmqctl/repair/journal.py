"""Moved to ``rmqctl.journal.core``; this name stays so existing imports keep working.

Monkeypatch ``rmqctl.journal.core`` itself: names bound here are copies.
"""
from rmqctl.journal.core import *  # noqa: F401,F403
from rmqctl.journal.core import (  # noqa: F401  (private helpers some callers use)
    _ACTIONS, _KILL_STEP, _abs, _apply, _chunks, _read, _read_range, _torn, _unlink_quietly, _write_all,
)
