"""Moved to ``rmqctl.journal.ops``; this name stays so existing imports keep working."""
from rmqctl.journal.ops import *  # noqa: F401,F403
from rmqctl.journal.ops import _copy_range, _link_or_copy, _next_saved  # noqa: F401
