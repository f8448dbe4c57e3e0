"""`rmqctl export`: the messages DataFrame written as Parquet or JSON Lines (Spark's writers), readable
by pandas/pyarrow, DuckDB and Spark. Filters run on the executors before rows are built."""
from __future__ import annotations

import datetime as dt
import os

from rmqctl.errors import UsageError

FORMATS = ("parquet", "jsonl")


def parse_time(text: str | None) -> int | None:
    """ms since the epoch, or ISO 8601 (UTC unless an offset is given): 2024-05-01T10:00, 2024-05-01."""
    if text is None:
        return None
    t = text.strip()
    if t.lstrip("-").isdigit():
        return int(t)
    try:
        d = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"bad time {text!r}: give ms since the epoch or ISO 8601 (2024-05-01T10:00:00Z)")
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.timezone.utc)
    return int(d.timestamp() * 1000)


def export(ds, out: str, fmt: str = "parquet", flt=None, *, overwrite: bool = False,
           partition_by: tuple = (), files: int | None = None) -> dict:
    """Write the (filtered) messages; returns {"out", "format", "messages", "files"}."""
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}")
    local_out = out[len("file://"):] if out.startswith("file://") else (out if "://" not in out else None)
    if local_out is not None and os.path.exists(local_out) and os.listdir(local_out) and not overwrite:
        raise UsageError("output directory exists and is not empty (use --overwrite)", path=local_out)

    def action(ds):
        df = ds.messages(flt)
        if files:
            df = df.coalesce(files)
        w = df.write.mode("overwrite" if (overwrite or ds.runs > 1) else "errorifexists")
        if partition_by:
            w = w.partitionBy(*partition_by)
        target = out if "://" in out else "file://" + os.path.abspath(out)
        if fmt == "parquet":
            w.parquet(target)
        else:
            w.option("ignoreNullFields", "false").json(target)

    ds.run(action)
    written = []
    if local_out is not None:
        for root, _, names in os.walk(local_out):
            written.extend(os.path.join(root, n) for n in names
                           if not n.startswith((".", "_")) and (n.endswith(".parquet") or n.endswith(".json")))
    return {"out": out, "format": fmt, "messages": ds.rows, "files": sorted(written)}
