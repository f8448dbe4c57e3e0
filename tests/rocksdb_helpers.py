"""Changing a RocksDB copy with the binding, for tests (a fault, a malformed value): in the SST format the broker's
RocksDB (8.4.0) reads; the binding's default format (6) makes the broker's load() fail."""
from __future__ import annotations

from pathlib import Path


def rewrite_rocksdb(dbdir: Path, fn):
    """Open the RocksDB at dbdir writable, call fn(db), close it; returns what fn returns."""
    import rocksdict

    def opts():
        o, b = rocksdict.Options(raw_mode=True), rocksdict.BlockBasedOptions()
        b.set_format_version(5)
        o.set_block_based_table_factory(b)
        return o

    names = rocksdict.Rdict.list_cf(str(dbdir))
    db = rocksdict.Rdict(str(dbdir), options=opts(), column_families={n: opts() for n in names if n != "default"})
    try:
        return fn(db)
    finally:
        db.close()
        (dbdir / "rocksdict-config.json").unlink(missing_ok=True)
