"""Journal actions for GiB-sized store files, on top of rmqctl.journal.core.

core.py copies whatever it saves through memory, which is right for config files and wrong for a
1 GiB commitlog segment or a 400 MB index file. These helpers write the same entry kinds (so
`rmqctl undo` needs nothing new) but save bytes without holding them in memory:

* delete_file / replace_file save the old content as a HARD LINK inside the quarantine folder (same
  file system, no copy, no extra space); a copy is made only where links are not possible;
* write_range streams the overwritten range into the quarantine in 1 MiB chunks.

Order of every action: (1) journal entry fsynced, (2) old bytes saved, (3) the change. A kill between
(1) and (2) leaves an entry whose saved file is missing while the target is still untouched: undo
finds the target as it was and skips it. The next op rolls a killed one back before it starts.

Replacement files are built in the op's ``staging/`` folder (never inside commitlog/ or consumequeue/:
the broker refuses to start on a foreign file name there) and renamed over the target.
"""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
from pathlib import Path

from rmqctl.journal import core as J
from rmqctl.journal.core import kill_point  # noqa: F401  (re-exported for callers)
from rmqctl.store import ownership as OWN

CHUNK = 1 << 20


def sha256_file(path, start: int = 0, length: int | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(start)
        left = length
        while left is None or left > 0:
            data = f.read(CHUNK if left is None else min(CHUNK, left))
            if not data:
                break
            h.update(data)
            if left is not None:
                left -= len(data)
    return h.hexdigest()


def sha256_zeros(n: int) -> str:
    h = hashlib.sha256()
    z = bytes(min(CHUNK, n))
    while n > 0:
        k = min(CHUNK, n)
        h.update(z[:k])
        n -= k
    return h.hexdigest()


# --- low-level helpers ----------------------------------------------------------------------------


def _copy_range(src: Path, offset: int, length: int, dst: Path) -> None:
    """Bounded copy of a file range into a new file, fsynced."""
    fd = os.open(src, os.O_RDONLY)
    try:
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            OWN.like_parent(dst, fd=out)
            for data in J._chunks(fd, offset, length):
                J._write_all(out, data)
            os.fsync(out)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    J.fsync_dir(dst.parent)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        shutil.copyfile(src, dst, follow_symlinks=False)
        OWN.like_file(dst, os.stat(src))
        with open(dst, "rb+") as f:
            os.fsync(f.fileno())
    J.fsync_dir(dst.parent)


def _next_saved(j: J.Journal, path: Path) -> str:
    j.seq += 1
    return f"files/{j.seq:04d}-{Path(path).name}"


fsync_file = J.fsync_file


# --- actions --------------------------------------------------------------------------------------

def delete_file(j: J.Journal, path, *, sha: str | None = None) -> dict:
    """Quarantine a whole file (hard link) and remove it from the store."""
    path = Path(path)
    st = os.lstat(path)
    saved = _next_saved(j, path)
    entry = {"kind": "delete_file", "path": j._rel(path), "saved": saved,
             "sha256_before": sha or sha256_file(path), "size_before": st.st_size, **OWN.stat_fields(st)}
    j._append({"seq": j.seq, **entry})
    _link_or_copy(path, j.dir / saved)
    os.unlink(path)
    J.fsync_dir(path.parent)
    return entry


def install_file(j: J.Journal, path, staged: Path) -> dict:
    """Put a file built in staging at `path` (atomic rename), quarantining the old one if present."""
    path, staged = Path(path), Path(staged)
    new_sha = sha256_file(staged)
    new_size = staged.stat().st_size
    if path.exists():
        st = os.lstat(path)
        OWN.like_file(staged, st)
        fsync_file(staged)
        saved = _next_saved(j, path)
        entry = {"kind": "replace_file", "path": j._rel(path), "saved": saved,
                 "sha256_before": sha256_file(path), "size_before": st.st_size,
                 "sha256_after": new_sha, "size_after": new_size, **OWN.stat_fields(st)}
        j._append({"seq": j.seq, **entry})
        _link_or_copy(path, j.dir / saved)
    else:
        j.make_dirs(path.parent)
        OWN.keep(staged, path)
        fsync_file(staged)
        j.seq += 1
        entry = {"kind": "create_file", "path": j._rel(path), "sha256_after": new_sha, "size_after": new_size}
        j._append({"seq": j.seq, **entry})
    os.replace(staged, path)
    J.fsync_dir(path.parent)
    return entry


def write_range(j: J.Journal, path, offset: int, data: bytes | None = None, *, zeros: int = 0) -> dict:
    """Overwrite [offset, offset+len) in place (data, or `zeros` zero bytes), saving the old bytes
    first by streaming them into the quarantine."""
    path = Path(path)
    length = len(data) if data is not None else zeros
    saved = _next_saved(j, path)
    # stream the old bytes out, hashing as we go
    h = hashlib.sha256()
    old_len = 0
    fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    try:
        out = os.open(j.dir / saved, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            OWN.like_parent(j.dir / saved, fd=out)
            pos = offset
            while pos < offset + length:
                chunk = os.pread(fd, min(CHUNK, offset + length - pos), pos)
                if not chunk:
                    break
                h.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
                old_len += len(chunk)
                pos += len(chunk)
            os.fsync(out)
        finally:
            os.close(out)
        J.fsync_dir(j.dir / "files")
        entry = {"kind": "write_range", "path": j._rel(path), "offset": offset, "length": length,
                 "old_length": old_len, "saved": saved, "sha256_before": h.hexdigest(),
                 "sha256_after": J.sha256(data) if data is not None else sha256_zeros(length)}
        j._append({"seq": j.seq, **entry})
        if data is not None:
            view, pos = memoryview(data), offset
            while view:
                n = os.pwrite(fd, view, pos)
                view, pos = view[n:], pos + n
        else:
            z = bytes(min(CHUNK, length))
            pos = offset
            while pos < offset + length:
                pos += os.pwrite(fd, z[:min(CHUNK, offset + length - pos)], pos)
        os.fsync(fd)
    finally:
        os.close(fd)
    return entry


