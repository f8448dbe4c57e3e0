"""Mapped-file queues, and the one place that decides which store paths rmqctl may open or change.

Policy (docs/files-policy.md): regular files only; a symlink is followed for reading only when its
target resolves inside the store root; nothing is ever written through a symlink; FIFOs, sockets
and devices are refused before opening (lstat/stat, then an O_NONBLOCK open re-checked with fstat).
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from rmqctl.errors import IOFailure
from rmqctl.formats import OFFSET_NAME

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"))


def kind_of(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


# bytes one write call carries: on Linux 6.18 (ext4) single writes of 4 MiB and more into the page cache ran at
# 0.7-1 GB/s where the same bytes in 1-2 MiB calls ran at 4.5-6 GB/s (measured; the cause is the kernel's)
WRITE_CALL_BYTES = 1 << 20


def write_all(fd: int, views: list, pos: int) -> None:
    """Write the byte arrays one after the other at pos, WRITE_CALL_BYTES (and IOV_MAX arrays) a call at most,
    retrying short writes."""
    limit = min(1024, os.sysconf("SC_IOV_MAX"))
    group, size = [], 0
    for v in views:
        v = memoryview(v).cast("B")
        for a in range(0, len(v), WRITE_CALL_BYTES):
            piece = v[a:a + WRITE_CALL_BYTES]
            if group and (size + len(piece) > WRITE_CALL_BYTES or len(group) == limit):
                pos = _write_group(fd, group, pos)
                group, size = [], 0
            group.append(piece)
            size += len(piece)
    if group:
        _write_group(fd, group, pos)


def _write_group(fd: int, group: list, pos: int) -> int:
    while group:
        n = os.pwritev(fd, group, pos)
        if n <= 0 and any(len(v) for v in group):
            raise OSError(errno.EIO, "a write took no bytes")
        pos += n
        while group and n >= len(group[0]):
            n -= len(group[0])
            group.pop(0)
        if group and n:
            group[0] = group[0][n:]
    return pos


def unnameable(path) -> bool:
    """A path no file can have: a NUL byte in it (a damaged topic name turned into a queue directory)."""
    return "\0" in os.fspath(path)


def inside(path, root) -> bool:
    """Does ``path`` (links resolved) lie inside ``root`` (links resolved)? Never for an unnameable path."""
    if unnameable(path):
        return False
    if _plainly_below(os.fspath(path), os.fspath(root)):
        return True
    r = os.path.realpath(root)
    p = os.path.realpath(path)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def _plainly_below(p: str, r: str) -> bool:
    """``p`` is spelled as ``r`` plus names, none of them '..' and none a symlink: then it resolves inside
    ``r`` whatever ``r`` resolves to (a few lstat calls instead of resolving both paths from /)."""
    r = r.rstrip(os.sep)
    if not r or not p.startswith(r + os.sep):
        return False
    parts = p[len(r) + 1:].split(os.sep)
    if any(n in ("..", ".") for n in parts):
        return False
    cur = r
    for n in parts:
        if not n:
            continue
        cur += os.sep + n
        try:
            if stat.S_ISLNK(os.lstat(cur).st_mode):
                return False
        except OSError:
            return False
    return True


def store_root_of(path) -> Path | None:
    """The store root above ``path``, found without resolving links (so a link out of the store
    cannot move the root with it); None outside any store."""
    p = Path(os.path.abspath(path))
    for cand in [p, *p.parents]:
        if os.path.isdir(cand / "commitlog") or os.path.lexists(cand / "checkpoint"):
            return cand
    return None


def check_named(path) -> None:
    """A path the operator named on the command line: refused (IOFailure, one line) when it leads out
    of its store through a link, or is neither a directory nor a regular file. Never opens it."""
    root = store_root_of(Path(path).parent)
    if root is not None and not inside(path, root):
        raise IOFailure(f"leads through a symlink to {os.path.realpath(path)}, outside the store: not followed",
                        path=path)
    if not os.path.isdir(path):
        check_read(path, root)


def read_refusal(path, root=None) -> str | None:
    """Why ``path`` must not be opened for reading (None when it may): a symlink whose target lies
    outside ``root``, a dangling link, a non-regular file. ``root`` None: the caller already vetted
    the path's links (a walker, or a file the operator named), only the target's kind is checked.
    Never opens the path, so a FIFO cannot block."""
    if unnameable(path):
        return "a NUL byte in the name: no such file can exist"
    if root is not None and not inside(path, root):   # a linked directory on the way counts too
        return f"symlink to {os.path.realpath(path)}, outside the store: not followed"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return e.strerror or str(e)
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)
        except OSError:
            return f"dangling symlink to {os.path.realpath(path)}: not followed"
    if not stat.S_ISREG(st.st_mode):
        return f"{kind_of(st.st_mode)}, not a regular file: not opened"
    return None


def check_read(path, root=None) -> None:
    why = read_refusal(path, root)
    if why:
        raise IOFailure(why, path=path)


_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)   # a FIFO cannot block


def open_read(path, root=None) -> int:
    """An O_RDONLY fd on a regular file, or IOFailure naming the file (one line). ``root``: the store
    root links may point into (see ``read_refusal``). FileNotFoundError passes through."""
    check_read(path, root)
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise IOFailure(e.strerror or str(e), path=path) from e
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):   # swapped between the check and the open
        os.close(fd)
        raise IOFailure(f"{kind_of(st.st_mode)}, not a regular file: not opened", path=path)
    return fd


def open_plain(path) -> int | None:
    """An O_RDONLY fd on ``path`` when it is a regular file and no link (the caller judged its directory): the
    kind checked by ``lstat`` before the open and by ``fstat`` after it, the open with O_NOFOLLOW; -1 when it is
    missing or was swapped in between; None when it is anything else (a link, a FIFO): judge it with
    ``open_read`` and a root."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        fd = os.open(path, _READ_FLAGS | getattr(os, "O_NOFOLLOW", 0))
    except (OSError, ValueError):   # ValueError: a NUL byte in the name, no such file
        return -1
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return -1
    return fd


def read_bytes(path, root=None, limit: int | None = None) -> bytes:
    """The file's bytes (at most ``limit``), read through ``open_read``."""
    fd = open_read(path, root)
    try:
        size = os.fstat(fd).st_size
        want = size if limit is None else min(size, limit)
        chunks, got = [], 0
        while got < want:
            b = os.read(fd, min(want - got, 1 << 24))
            if not b:
                break
            chunks.append(b)
            got += len(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_refusal(root, path) -> str | None:
    """Why rmqctl must not create, replace, truncate or delete ``path`` under store ``root``: any
    component below the root (the file itself included) is a symlink, a component is not a directory,
    or the file exists and is not a regular file. The root itself may be a link (the operator named it)."""
    if unnameable(path):
        return "a NUL byte in the name: no such file can be made"
    root = Path(root)
    path = Path(path)
    try:
        rel = path.relative_to(root)
    except ValueError:
        if not inside(path, root):
            return "outside the store: not written"
        return None
    if ".." in rel.parts:
        return "a '..' in the path leads out of its directory: not written"
    cur = root
    parts = rel.parts
    for i, part in enumerate(parts):
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return None
        except OSError as e:
            return e.strerror or str(e)
        if stat.S_ISLNK(st.st_mode):
            where = "" if cur == path else f" ({cur.relative_to(root)} is a symlink)"
            return f"symlink{where} to {os.path.realpath(cur)}: rmqctl never writes through a symlink"
        last = i == len(parts) - 1
        if not last and not stat.S_ISDIR(st.st_mode):
            return f"{cur.relative_to(root)} is {kind_of(st.st_mode)}, not a directory"
        if last and not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            return f"{kind_of(st.st_mode)}, not a regular file: not changed"
    return None


def check_writes(root, paths) -> None:
    for p in paths:
        check_write(root, p)


def check_write(root, path) -> None:
    """Refuse (IOFailure, exit 8) before anything is changed; see ``write_refusal``."""
    why = write_refusal(root, path)
    if why:
        raise IOFailure(f"refused: {why}", path=path)


@dataclass(frozen=True)
class MappedFile:
    path: Path
    start: int      # start offset from the name
    size: int       # actual size on disk

    @property
    def name(self) -> str:
        return self.path.name


@dataclass
class FileQueue:
    directory: Path
    files: list[MappedFile] = field(default_factory=list)
    strays: list[tuple[Path, str]] = field(default_factory=list)   # (path, why the broker would object)

    @classmethod
    def scan(cls, directory: Path, digits_re=OFFSET_NAME, root=None, judged: bool = False) -> "FileQueue":
        """``root``: the store root; a symlinked file whose target lies inside it is read like a file.
        Without it no symlink is followed. Anything else odd becomes a stray with the reason. ``judged``: the
        caller knows the directory lies inside ``root`` (the store's listing reached it through no link)."""
        q = cls(directory if isinstance(directory, Path) else Path(directory))    # Path(a Path) parses it again
        # a file that is no link lies where its directory does: the links of the path are resolved once per
        # directory, not per file (a queue directory of a store of many queues is a dozen lstat calls deep)
        dir_inside = root is None or judged or inside(directory, root)
        if not dir_inside and os.path.islink(directory):
            q.strays.append((q.directory, f"symlink to {os.path.realpath(directory)}, outside the store: "
                                          "not followed"))
            return q
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return q
        for e in entries:
            p = q.directory / e.name
            if e.is_dir(follow_symlinks=False):
                q.strays.append((p, "directory"))
                continue
            if e.is_symlink():
                why = "symlink (not followed)" if root is None else read_refusal(p, root)
                size = None if why else os.stat(p).st_size
            else:
                st = e.stat(follow_symlinks=False)
                why = (None if stat.S_ISREG(st.st_mode) else f"{kind_of(st.st_mode)}, not a regular file: not opened") \
                    if dir_inside else read_refusal(p, root)
                size = st.st_size
            if why:
                q.strays.append((p, why))
            elif not digits_re.match(e.name):
                q.strays.append((p, "file name is not a start offset"))
            else:
                q.files.append(MappedFile(p, int(e.name), size))
        q.files.sort(key=lambda f: f.start)
        return q

    @property
    def min_offset(self) -> int:
        """MappedFileQueue.getMinOffset: the first file's start, -1 when there is no file."""
        return self.files[0].start if self.files else -1

    def file_for(self, offset: int, file_size: int) -> MappedFile | None:
        """The file holding an absolute offset (by name range [start, start+file_size))."""
        lo, hi = 0, len(self.files) - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            f = self.files[mid]
            if offset < f.start:
                hi = mid - 1
            elif offset >= f.start + file_size:
                lo = mid + 1
            else:
                return f
        return None


def offset_name(offset: int) -> str:
    """UtilAll.offset2FileName: 20 digits, zero padded."""
    return f"{offset:020d}"
