"""Error kinds. Every error renders as one line naming the file, the offset and the field."""
from __future__ import annotations

from rmqctl.status import Exit


class RmqError(Exception):
    """Base of all errors rmqctl reports to the operator (never with a traceback)."""

    exit_code = Exit.FAILED

    def __init__(self, message: str, *, path=None, offset: int | None = None, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = None if path is None else str(path)
        self.offset = offset
        self.field = field

    def __str__(self) -> str:
        parts = []
        if self.path:
            parts.append(self.path)
        if self.offset is not None:
            parts.append(f"offset {self.offset}")
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)


class FormatError(RmqError):
    """Bytes that are not what the file kind says (corrupt, truncated, wrong kind)."""

    exit_code = Exit.PROBLEMS


class UsageError(RmqError):
    exit_code = Exit.USAGE


class StoreLockedError(RmqError):
    """A running broker holds the store lock."""

    exit_code = Exit.FAILED


class UnsupportedStoreError(RmqError):
    """DLedger, RocksDB consume queues/metadata, multi-path commitlog: detected, not misread."""

    exit_code = Exit.FAILED


class IOFailure(RmqError):
    exit_code = Exit.FAILED


class ProblemsFound(RmqError):
    """A command finished and found problems it did not fix (verify, config with both copies broken)."""

    exit_code = Exit.PROBLEMS
