"""The broker's store lock.

The broker opens `store/lock` read-write and takes FileChannel.tryLock(0, 1, false): on Linux an
fcntl (POSIX record) lock on byte 0. `flock` does not see it, so we test and take it with lockf.
The file's existence or content means nothing to the broker; rmqctl removes a lock file it had to
create, and names the holder (F_GETLK) so a second rmqctl is not told a broker is running.
"""
from __future__ import annotations

import errno
import fcntl
import os
import struct
from contextlib import contextmanager
from pathlib import Path

from rmqctl.errors import IOFailure, StoreLockedError

# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
_FLOCK = "hhqqi4x"


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


def holder(fd: int) -> int | None:
    """The pid holding a lock on byte 0 of the open file, or None."""
    try:
        got = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0))
    except OSError:
        return None
    l_type, _, _, _, pid = struct.unpack(_FLOCK, got)
    return pid if l_type != fcntl.F_UNLCK and pid > 0 else None


def is_rmqctl(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return any(a.endswith(b"rmqctl") or a == b"rmqctl" for a in argv[:3])


def _locked_message(fd: int) -> str:
    pid = holder(fd)
    if pid is not None and is_rmqctl(pid):
        return f"another rmqctl (pid {pid}) is changing this store; wait for it to finish"
    who = f" (pid {pid})" if pid is not None else ""
    return f"the store lock is held: a broker appears to be running on this store{who}; stop it first"


@contextmanager
def store_write_lock(store: Path, *, force: bool = False):
    """Hold the broker's own lock for the duration of a change, so a broker cannot start meanwhile.
    Raises StoreLockedError when a running broker (or another rmqctl) holds it (unless force, which
    only skips the check). A lock file that was not there is created for the duration and removed
    again, so the store is left as it was."""
    from rmqctl.store.files import check_write

    path = Path(store) / "lock"
    check_write(store, path)
    fd = None
    created = False
    try:
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                created = True
            except FileExistsError:     # someone created it meanwhile: use theirs
                fd = os.open(path, os.O_RDWR)
    except OSError as e:
        if not force:
            raise IOFailure(f"cannot open the store lock: {e.strerror}", path=path) from e
    try:
        if fd is not None:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EACCES) and not force:
                    raise StoreLockedError(_locked_message(fd), path=path) from e
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
        yield
    finally:
        if fd is not None:
            if created:
                # unlink while still holding it: a broker that opened it meanwhile fails its tryLock
                try:
                    os.unlink(path)
                except OSError:
                    pass
            os.close(fd)  # closing the fd releases the lock
