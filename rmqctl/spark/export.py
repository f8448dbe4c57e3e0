"""`rmqctl export`: the messages written as Parquet or JSON Lines, readable by pandas/pyarrow, DuckDB
and Spark. Filters run on the executors before rows are built.

Parquet to a local path (the common case): each Spark task writes its own part file with pyarrow from
the Arrow batches it decoded (part-<split>.parquet, deterministic, so a retried task overwrites its own
file) into <out>/_temporary/<run>/; once the driver has proved the scan exact the files move to <out>
and _SUCCESS is written. The message bodies never cross into the JVM, so export scales with the cores.
Other outputs (JSON Lines, Hadoop URIs, --partition-by, --files) use Spark's writers."""
from __future__ import annotations

import os

from rmqctl.errors import UsageError

FORMATS = ("parquet", "jsonl")


def export(ds, out: str, fmt: str = "parquet", flt=None, *, overwrite: bool = False,
           partition_by: tuple = (), files: int | None = None) -> dict:
    """Write the (filtered) messages; returns {"out", "format", "messages", "files"}."""
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}")
    local_out = out[len("file://"):] if out.startswith("file://") else (out if "://" not in out else None)
    if local_out is not None and os.path.exists(local_out) and os.listdir(local_out) and not overwrite:
        raise UsageError("output directory exists and is not empty (use --overwrite)", path=local_out)

    if local_out is not None:      # executors write there: on a cluster, the same folder everywhere
        from rmqctl.spark.remote import check_shared_out

        check_shared_out(ds.spark, os.path.abspath(local_out))
    target = out if "://" in out else "file://" + os.path.abspath(out)
    if fmt == "parquet" and local_out is not None and not partition_by and not files:
        return _export_parquet_direct(ds, os.path.abspath(local_out), flt, overwrite) | {"out": out}

    def action(ds):
        df = ds.messages(flt)
        if files:
            df = df.coalesce(files)
        w = df.write.mode("overwrite" if (overwrite or ds.runs > 1) else "errorifexists")
        if partition_by:
            w = w.partitionBy(*partition_by)
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


class _PartWriter:
    """Task side: one split's messages to <staging>/part-<split id>.parquet (created on the first row)."""

    def __init__(self, staging: str, split_id: int, body: bool):
        self.path = os.path.join(staging, f"part-{split_id:05d}.parquet")
        self.body, self.writer, self.rows = body, None, 0

    def add(self, rb) -> None:
        import pyarrow.parquet as pq

        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, rb.schema, compression="snappy")
        self.writer.write_batch(rb)
        self.rows += rb.num_rows

    def partials(self, store: str):
        import pyarrow as pa

        if self.writer is not None:
            self.writer.close()
        return pa.RecordBatch.from_pydict({"path": [self.path if self.rows else None], "rows": [self.rows]},
                                          schema=pa.schema([("path", pa.string()), ("rows", pa.int64())]))


def _export_parquet_direct(ds, out: str, flt, overwrite: bool) -> dict:
    import shutil

    if os.path.exists(out) and overwrite:
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)
    body = bool(ds.opts.get("body"))

    def action(ds):
        staging = os.path.join(out, "_temporary", str(ds.runs))
        shutil.rmtree(os.path.join(out, "_temporary"), ignore_errors=True)   # an earlier, inexact run
        os.makedirs(staging)
        rows = ds.reduce(flt, lambda split: _PartWriter(staging, split.id, body), "path string, rows bigint").collect()
        return staging, sorted(r.path for r in rows if r.path)

    staging, parts = ds.run(action)
    written = []
    for i, p in enumerate(parts):
        dest = os.path.join(out, f"part-{i:05d}.parquet")
        os.replace(p, dest)
        written.append(dest)
    shutil.rmtree(os.path.join(out, "_temporary"), ignore_errors=True)
    open(os.path.join(out, "_SUCCESS"), "wb").close()
    return {"out": out, "format": "parquet", "messages": ds.rows, "files": written}
