"""`rmqctl export --engine local`: the Parquet export without Spark -- the same batch path the Spark
tasks run (dataset.local_batches: kernel -> Arrow, same columns, same filters), written by pyarrow in
this process. One part file per store (part-00000.parquet...), or Hive-style folders with
--partition-by; _SUCCESS at the end like Spark's committer. Files are written under <out>/_temporary
first and moved into place once every store was read."""
from __future__ import annotations

import os
import shutil

from rmqctl.errors import UsageError


def export_local(refs, out: str, flt=None, *, overwrite: bool = False, partition_by: tuple = (), body=True,
                 config=None, check_crc: bool = True) -> dict:
    """refs: plan.StoreRef of local stores. Returns {"out", "format", "messages", "files"} like
    rmqctl.spark.export.export."""
    import pyarrow as pa
    import pyarrow.dataset as pds
    import pyarrow.parquet as pq

    from rmqctl.spark.batches import arrow_schema
    from rmqctl.spark.dataset import local_batches, message_columns

    dest = os.path.abspath(out[len("file://"):] if out.startswith("file://") else out)
    if os.path.exists(dest) and os.listdir(dest) and not overwrite:
        raise UsageError("output directory exists and is not empty (use --overwrite)", path=dest)
    if os.path.exists(dest) and overwrite:
        shutil.rmtree(dest)
    staging = os.path.join(dest, "_temporary", "0")
    os.makedirs(staging)
    schema = arrow_schema(message_columns(None, bool(body)))
    n = 0
    for i, ref in enumerate(refs):
        batches = local_batches(ref.local, name=ref.name, config=config, flt=flt, body=body, check_crc=check_crc)
        if partition_by:
            counted = []

            def gen(batches=batches, counted=counted):
                for rb in batches:
                    counted.append(rb.num_rows)
                    yield rb

            pds.write_dataset(pa.RecordBatchReader.from_batches(schema, gen()), staging, format="parquet",
                              partitioning=list(partition_by), partitioning_flavor="hive",
                              basename_template=f"part-{i:05d}-{{i}}.parquet",
                              existing_data_behavior="overwrite_or_ignore")
            n += sum(counted)
            continue
        writer = None
        for rb in batches:
            if writer is None:
                writer = pq.ParquetWriter(os.path.join(staging, f"part-{i:05d}.parquet"), schema, compression="snappy")
            writer.write_batch(rb)
            n += rb.num_rows
        if writer is not None:
            writer.close()
    written = []
    for root, _, names in os.walk(staging):
        for name in names:
            src = os.path.join(root, name)
            target = os.path.join(dest, os.path.relpath(src, staging))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(src, target)
            written.append(target)
    shutil.rmtree(os.path.join(dest, "_temporary"), ignore_errors=True)
    open(os.path.join(dest, "_SUCCESS"), "wb").close()
    return {"out": out, "format": "parquet", "messages": n, "files": sorted(written)}
