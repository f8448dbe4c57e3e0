"""The broker's store lock.

The broker opens `store/lock` read-write and takes FileChannel.tryLock(0, 1, false): on Linux an
fcntl (POSIX record) lock on byte 0. `flock` does not see it, so we test and take it with lockf.
The file's existence or content means nothing.
"""
from __future__ import annotations

import errno
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from rmqctl.errors import IOFailure, StoreLockedError


def lock_state(store: Path) -> str:
    """'absent' (no lock file), 'free', or 'held' (a running process holds byte 0). Read-only probe:
    a read lock test through F_GETLK semantics would need the fd open for reading only; lockf with
    LOCK_SH needs read access, which is all we open."""
    path = Path(store) / "lock"
    if not path.exists():
        return "absent"
    from rmqctl.store.files import open_read

    try:
        fd = open_read(path, store)   # a FIFO in lock's place would block a plain open
    except OSError as e:
        raise IOFailure(e.strerror or str(e), path=path) from e
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                return "held"
            raise
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
        return "free"
    finally:
        os.close(fd)


@contextmanager
def store_write_lock(store: Path, *, force: bool = False):
    """Hold the broker's own lock for the duration of a change, so a broker cannot start meanwhile.
    Raises StoreLockedError when a running broker holds it (unless force, which only skips the check)."""
    from rmqctl.store.files import check_write

    path = Path(store) / "lock"
    check_write(store, path)
    fd = None
    try:
        # Opening with O_CREAT is what the broker itself does; the file is harmless.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        if not force:
            raise IOFailure(f"cannot open the store lock: {e.strerror}", path=path) from e
    try:
        if fd is not None:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EACCES) and not force:
                    raise StoreLockedError(
                        "the store lock is held: a broker appears to be running on this store; stop it first",
                        path=path) from e
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing the fd releases the lock
