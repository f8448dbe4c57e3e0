"""`config show` of a metadata RocksDB (storeType=defaultRocksDB): the table in its JSON file's shape."""
from __future__ import annotations

import click

from rmqctl import fastjson
from rmqctl.status import Exit
from rmqctl.terminal import warn


def show_rocksdb(name: str, d, as_json: bool, emit) -> int:
    from rmqctl.store.rocksdb_cq import config_document, rocksdb_version

    doc, info = config_document(name, d)
    code = Exit.PROBLEMS if info["problems"] else Exit.OK
    desc = f"RocksDB {rocksdb_version(d) or ''} metadata, {info['entries']} entries".replace("  ", " ")
    if as_json:
        emit({"file": name, "path": str(d), "used": "rocksdb", "verdict": "load the RocksDB",
              "main": {"path": str(d), "status": "ok" if not info["problems"] else "bad", "size": info["size"],
                       "description": desc},
              "bak": {"path": str(d), "status": "missing", "size": None,
                      "description": "none (a RocksDB table has no .bak)"},
              "notes": [f"{d}: {p}" for p in info["problems"]], "content": doc})
        return code
    warn(f"{d}: {desc}; the broker (storeType=defaultRocksDB) loads it")
    for p in info["problems"]:
        warn(f"{d}: {p}")
    click.echo(fastjson.dumps(doc, compact=False))
    return code
