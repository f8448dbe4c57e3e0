"""Mapped-file queues: directories of fixed-size files named by their 20-digit start offset.

Listing never follows a symlink out of the store and reports anything the broker would choke on
(non-numeric names, sub-directories, symlinks) instead of skipping it silently.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rmqctl.formats import OFFSET_NAME


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
    def scan(cls, directory: Path, digits_re=OFFSET_NAME) -> "FileQueue":
        q = cls(Path(directory))
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except FileNotFoundError:
            return q
        for e in entries:
            p = Path(e.path)
            if e.is_symlink():
                q.strays.append((p, "symlink (not followed)"))
            elif e.is_dir(follow_symlinks=False):
                q.strays.append((p, "directory"))
            elif not digits_re.match(e.name):
                q.strays.append((p, "file name is not a start offset"))
            else:
                q.files.append(MappedFile(p, int(e.name), e.stat(follow_symlinks=False).st_size))
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
