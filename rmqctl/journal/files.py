"""The file operations the journal is built on: durable writes (tmp, fsync, rename, fsync the directory),
streamed sha256 of file ranges and checked copies in 1 MiB pieces (flat memory on GiB segment files),
and the kill-test hook. Layout of the quarantine folder: rmqctl.journal.core."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from rmqctl.errors import ProblemsFound
from rmqctl.store import ownership as OWN

QUARANTINE = "rmqctl-quarantine"


JOURNAL = "journal.jsonl"


_KILL_STEP = [0]


def kill_point(label: str = "") -> None:
    """Test hook: RMQCTL_TEST_KILL_AFTER=N makes the process die (like kill -9) after the N-th
    journaled action of this run. Costs one dict lookup when unset."""
    n = os.environ.get("RMQCTL_TEST_KILL_AFTER")
    if not n:
        return
    _KILL_STEP[0] += 1
    if _KILL_STEP[0] >= int(n):
        os._exit(137)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file_durably(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """tmp beside the target, fsync, os.replace, fsync the directory. Never leaves a partial target."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
    try:
        try:
            OWN.keep(tmp, path)
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(path.parent)


def _unlink_quietly(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _read(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _read_range(path: Path, offset: int, length: int) -> bytes | None:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(length)
    except FileNotFoundError:
        return None


# Undo works on GiB segment files: everything below reads and copies in CHUNK pieces (flat memory).
CHUNK = 1 << 20


def _chunks(fd: int, offset: int, length: int | None):
    """pread the range [offset, offset+length) (to EOF when length is None) in CHUNK pieces."""
    pos = offset
    while length is None or pos < offset + length:
        want = CHUNK if length is None else min(CHUNK, offset + length - pos)
        data = os.pread(fd, want, pos)
        if not data:
            return
        yield data
        pos += len(data)


def hash_range(path: Path, offset: int = 0, length: int | None = None, prefix: int | None = None):
    """Streamed sha256 of a file range: (hex of what is there, hex of its first `prefix` bytes, bytes
    read); (None, None, 0) when the file does not exist."""
    from rmqctl.store.files import open_read

    try:
        fd = open_read(path)   # a FIFO put in a file's place must not block undo
    except FileNotFoundError:
        return None, None, 0
    try:
        h, hp, n = hashlib.sha256(), None, 0
        for data in _chunks(fd, offset, length):
            if prefix is not None and hp is None and n + len(data) >= prefix:
                h.update(data[:prefix - n])
                hp = h.copy()
                h.update(data[prefix - n:])
            else:
                h.update(data)
            n += len(data)
        if prefix is not None and hp is None:
            hp = h.copy()
        return h.hexdigest(), (hp.hexdigest() if hp is not None else None), n
    finally:
        os.close(fd)


def file_sha256(path: Path) -> str | None:
    return hash_range(path)[0]


def _write_all(fd: int, data, pos: int | None = None) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view) if pos is None else os.pwrite(fd, view, pos)
        view = view[n:]
        if pos is not None:
            pos += n


def copy_checked(src: Path, dst_fd: int, dst_pos: int | None, expect_sha: str | None) -> int:
    """Copy the whole of `src` into dst_fd (at dst_pos, or the current position) in CHUNK pieces,
    hashing as it goes; ProblemsFound when the hash is not `expect_sha` (checked before the caller
    makes the copy visible). Returns the bytes copied."""
    fd = os.open(src, os.O_RDONLY)
    try:
        h, n = hashlib.sha256(), 0
        for data in _chunks(fd, 0, None):
            h.update(data)
            _write_all(dst_fd, data, None if dst_pos is None else dst_pos + n)
            n += len(data)
    finally:
        os.close(fd)
    if expect_sha is not None and h.hexdigest() != expect_sha:
        raise ProblemsFound("saved copy does not match its recorded sha256", path=src)
    return n


def verify_saved(src: Path, expect_sha: str | None) -> None:
    if expect_sha is not None and hash_range(src)[0] != expect_sha:
        raise ProblemsFound("saved copy does not match its recorded sha256", path=src)


def restore_file_durably(path: Path, saved: Path, expect_sha: str, *, mode: int | None = None) -> None:
    """Put a saved copy back at `path`, checked against its sha256 first. On the same file system the
    saved file itself is renamed back (no copy, no space needed: recover saves hard links); else it is
    streamed into a tmp beside the target, fsynced and renamed."""
    path = Path(path)
    verify_saved(saved, expect_sha)
    try:
        same_fs = os.stat(saved).st_dev == os.stat(path.parent).st_dev
    except FileNotFoundError:
        same_fs = False
    if same_fs:
        fsync_file(saved)
        os.replace(saved, path)
        fsync_dir(path.parent)
        return
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
    try:
        try:
            copy_checked(saved, fd, None, expect_sha)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_file(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_ACTIONS = {"replace_file", "create_file", "delete_file", "truncate_file", "write_range", "create_dir"}
