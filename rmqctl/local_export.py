"""`rmqctl export --engine local`: the export rows written in this process, without Spark.

The rows are the default engine's (rmqctl.spark.dataset.local_batches: the batch kernel over the store's
commitlog, or over the messages a DLedger log wraps), with the export schema; one part file:
part-00000.parquet (pyarrow) or part-00000.json (JSON Lines laid out as Spark's JSON writer does: binary as
base64, null fields kept), then _SUCCESS. Local paths only.
"""
from __future__ import annotations

import base64
import json
import os

from rmqctl.errors import UsageError


def export_local(refs, out: str, fmt: str = "parquet", flt=None, *, config=None, check_crc=True, body=True,
                 overwrite: bool = False) -> dict:
    from rmqctl.salvage import prepare_out
    from rmqctl.spark.batches import arrow_schema
    from rmqctl.spark.dataset import local_batches, message_columns

    if "://" in out and not out.startswith("file://"):
        raise UsageError("--engine local writes to a local directory (use --engine spark for URIs)")
    local = os.path.abspath(out.removeprefix("file://"))
    if os.path.exists(local) and os.listdir(local) and not overwrite:
        raise UsageError("output directory exists and is not empty (use --overwrite)", path=local)
    from rmqctl.engine_records import engine_reading
    from rmqctl.store.layout import Store

    for ref in refs:          # refuse an unreadable store before the output directory is touched
        with engine_reading(ref.local):
            Store.open(ref.local, config, rocksdb=True)
    cols = message_columns(None, bool(body))
    schema = arrow_schema(cols)
    batches = [(ref, local_batches(ref.local, name=ref.name, config=config, flt=flt, body=body, columns=None,
                                   check_crc=check_crc)) for ref in refs]
    out_dir = prepare_out(local, overwrite)
    rows = 0
    if fmt == "parquet":
        import pyarrow.parquet as pq

        path = os.path.join(out_dir, "part-00000.parquet")
        w = pq.ParquetWriter(path, schema, compression="snappy")
        try:
            for _ref, gen in batches:
                for rb in gen:
                    w.write_batch(rb)
                    rows += rb.num_rows
        finally:
            w.close()
    else:
        path = os.path.join(out_dir, "part-00000.json")
        with open(path, "w", encoding="utf-8") as f:
            for _ref, gen in batches:
                for rb in gen:
                    for d in rb.to_pylist():
                        f.write(json.dumps(_jsonable(d), ensure_ascii=False, separators=(",", ":")) + "\n")
                        rows += 1
    open(os.path.join(out_dir, "_SUCCESS"), "wb").close()
    return {"out": out, "format": fmt, "messages": rows, "files": [path]}


def _jsonable(d: dict) -> dict:
    for k, v in d.items():
        if isinstance(v, (bytes, bytearray)):
            d[k] = base64.b64encode(bytes(v)).decode("ascii")
        elif k == "properties" and isinstance(v, list):
            d[k] = dict(v)
    return d
