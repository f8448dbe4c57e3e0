"""`rmqctl export` in this process, without Spark (--engine local, or auto below the size where Spark pays).

The rows are the Spark engine's (rmqctl.spark.dataset.local_batches: the batch kernel over the store's
commitlog, or over the messages a DLedger log wraps) in the same versioned schema (rmqctl.spark.schema), the
same filters. Parquet is laid out as the Spark export lays it out (Hive folders, store=/topic=/date= by default,
through the same part writer), written under <out>/_temporary first and moved into place once every store was
read; JSON Lines is one flat part file laid out as Spark's JSON writer does (binary as base64, null fields
kept). _SUCCESS at the end. Local paths only.
"""
from __future__ import annotations

import base64
import json
import os
import shutil

from rmqctl.errors import UsageError


def export_local(refs, out: str, fmt: str = "parquet", flt=None, *, config=None, check_crc=True, body=True,
                 overwrite: bool = False, partition_by: tuple = ()) -> dict:
    """refs: plan.StoreRef of local stores. Returns {"out", "format", "messages", "files"} like
    rmqctl.spark.export.export."""
    from rmqctl.engine_records import engine_reading
    from rmqctl.salvage import prepare_out
    from rmqctl.spark import schema as S
    from rmqctl.spark.batches import arrow_schema
    from rmqctl.spark.dataset import local_batches, message_columns
    from rmqctl.store.layout import Store

    if "://" in out and not out.startswith("file://"):
        raise UsageError("--engine local writes to a local directory (use --engine spark for URIs)")
    bad = [p for p in partition_by if p not in S.PARTITION_COLUMNS]
    if bad:
        raise UsageError(f"cannot partition by {bad[0]!r} (one of {', '.join(S.PARTITION_COLUMNS)})")
    if partition_by and fmt != "parquet":
        raise UsageError("--partition-by with JSON Lines needs --engine spark")
    local = os.path.abspath(out.removeprefix("file://"))
    if os.path.exists(local) and os.listdir(local) and not overwrite:
        raise UsageError("output directory exists and is not empty (use --overwrite)", path=local)
    for ref in refs:          # refuse an unreadable store before the output directory is touched
        with engine_reading(ref.local):
            Store.open(ref.local, config, rocksdb=True)
    cols = S.columns(bool(body)) + ([("date", "date")] if "date" in partition_by else [])
    names = [n for n, _ in cols]
    out_dir = prepare_out(local, overwrite)
    rows, written = 0, []

    def batches(ref):
        return local_batches(ref.local, name=ref.name, config=config, flt=flt, body=body, columns=names,
                             check_crc=check_crc)

    if fmt == "parquet":
        from rmqctl.spark.export import _PartWriter

        staging = os.path.join(out_dir, "_temporary", "0")
        for i, ref in enumerate(refs):
            w = _PartWriter(staging, i, tuple(partition_by))
            for rb in batches(ref):
                w.add(rb)
                rows += rb.num_rows
            w.partials(ref.name)        # closes its files
        for root, _, files in os.walk(staging):
            for n in files:
                src = os.path.join(root, n)
                dest = os.path.join(out_dir, os.path.relpath(src, staging))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                os.replace(src, dest)
                written.append(dest)
        shutil.rmtree(os.path.join(out_dir, "_temporary"), ignore_errors=True)
    else:
        schema = arrow_schema(message_columns(names, bool(body)))
        path = os.path.join(out_dir, "part-00000.json")
        with open(path, "w", encoding="utf-8") as f:
            for ref in refs:
                for rb in batches(ref):
                    assert rb.schema.names == schema.names
                    for d in rb.to_pylist():
                        f.write(json.dumps(_jsonable(d), ensure_ascii=False, separators=(",", ":")) + "\n")
                        rows += 1
        written.append(path)
    open(os.path.join(out_dir, "_SUCCESS"), "wb").close()
    return {"out": out, "format": fmt, "messages": rows, "files": sorted(written)}


def _jsonable(d: dict) -> dict:
    for k, v in d.items():
        if isinstance(v, (bytes, bytearray)):
            d[k] = base64.b64encode(bytes(v)).decode("ascii")
        elif k == "properties" and isinstance(v, list):
            d[k] = dict(v)
        elif hasattr(v, "isoformat"):       # timestamps as Spark's JSON writer prints them (UTC, ms)
            d[k] = v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z"
    return d
