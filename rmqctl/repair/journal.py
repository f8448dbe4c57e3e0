"""Moved to ``rmqctl.journal`` (core, files, undo); this name stays so existing imports keep working.

Monkeypatch the module that defines a name (``rmqctl.journal.undo.free_space``): names bound here are copies.
"""
from rmqctl.journal.core import *  # noqa: F403
from rmqctl.journal.files import (  # noqa: F401  (private helpers some callers use)
    _ACTIONS, _KILL_STEP, _chunks, _read, _read_range, _unlink_quietly, _write_all,
)
from rmqctl.journal.undo import _abs, _apply, _torn  # noqa: F401
