"""The messages schema: the one definition of the columns that `rmqctl export`, the Spark data source
(`spark.read.format("rocketmq")`) and `rmqctl.spark.read_commitlog()` give, with its version and the
export layout. `rmqctl export --schema [--json]` prints it; the man page and docs/spark.md quote it.
No pyspark, no pyarrow here (the CLI prints the schema without starting anything).

Version history:
  1  the columns of rmqctl 0.x: times as bigint milliseconds only (born_timestamp, store_timestamp).
  2  born_time and store_time added as timestamp columns (UTC instants, millisecond precision), next to
     the millisecond bigints, which stay; default Parquet layout partitioned by store/topic/date.
"""
from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Column:
    name: str
    type: str          # Spark SQL type
    doc: str
    nullable: bool = False
    body: bool = False     # present only with bodies (export --body, body=True)
    since: int = 1         # schema version that added it


COLUMNS = [
    Column("store", "string", "the store's name (NAME=PATH, or the directory name; its parent's for .../NAME/store)"),
    Column("topic", "string", "TOPIC"),
    Column("queue_id", "int", "QUEUEID"),
    Column("queue_offset", "bigint", "QUEUEOFFSET (0 for PREPARED and ROLLBACK records)"),
    Column("physical_offset", "bigint", "the record's commitlog offset"),
    Column("size", "int", "TOTALSIZE: the whole record in bytes"),
    Column("magic", "string", "V1 or V2 (MAGICCODE)"),
    Column("sys_flag", "int", "SYSFLAG"),
    Column("transaction_type", "string", "NOT, PREPARED, COMMIT or ROLLBACK (SYSFLAG bits 2-3)"),
    Column("flag", "int", "FLAG (the producer's)"),
    Column("body_crc", "int", "BODYCRC as stored"),
    Column("body_crc_ok", "boolean", "the body's CRC32 equals BODYCRC; null when CRC checking was off", True),
    Column("tags", "string", "the TAGS property", True),
    Column("tags_code", "bigint", "the consume-queue tagsCode (the delivery time on SCHEDULE_TOPIC_XXXX)"),
    Column("keys", "array<string>", "the KEYS property split on single spaces (empty entries dropped)"),
    Column("uniq_key", "string", "the UNIQ_KEY property: the client's message id", True),
    Column("msg_id", "string", "the offset message id: store host, port and commitlog offset, hex"),
    Column("born_timestamp", "bigint", "BORNTIMESTAMP: ms since the epoch, the producer's clock"),
    Column("born_time", "timestamp", "BORNTIMESTAMP as a timestamp (UTC instant)", since=2),
    Column("born_host", "string", "BORNHOST as host:port"),
    Column("store_timestamp", "bigint", "STORETIMESTAMP: ms since the epoch, the broker's clock"),
    Column("store_time", "timestamp", "STORETIMESTAMP as a timestamp (UTC instant)", since=2),
    Column("store_host", "string", "STOREHOST as host:port"),
    Column("reconsume_times", "int", "RECONSUMETIMES"),
    Column("prepared_transaction_offset", "bigint", "PREPAREDTRANSACTIONOFFSET"),
    Column("body_length", "int", "BODYLENGTH as stored"),
    Column("properties", "map<string,string>", "every property (name -> value), as the broker parses them"),
    Column("body", "binary", "the body; decompressed when SYSFLAG bit 0 says compressed (zlib, lz4, zstd), "
           "as stored with --raw-body", body=True),
    Column("body_note", "string", "why a compressed body is given as stored (unknown codec, corrupt "
           "stream), else null", True, body=True),
]

# The export layout: Hive-style directories NAME=VALUE (values escaped like Spark: %XX).
DEFAULT_PARTITION_BY = ("store", "topic", "date")
PARTITION_COLUMNS = {
    "store": "string",
    "topic": "string",
    "queue_id": "int",
    "date": "date",          # the UTC calendar date of store_time (not a column of the DataFrame)
}
DERIVED = {"date": ("date", "the UTC date of store_time; a partition column of the export layout only")}


def partition_values(root, path) -> dict:
    """The Hive partition columns of an exported file, from its folders under the export's root
    (store=a/topic=T/date=2024-05-01/part-0.parquet -> {"store": "a", "topic": "T", "date": "2024-05-01"}):
    what readers that open one file at a time (rmqctl replay) add back to its rows."""
    import os
    from urllib.parse import unquote

    rel = os.path.relpath(os.path.dirname(str(path)), str(root))
    out: dict = {}
    if rel in (".", ""):
        return out
    for part in rel.split(os.sep):
        name, sep, value = part.partition("=")
        if not sep or name not in PARTITION_COLUMNS:
            continue
        v = None if value == "__HIVE_DEFAULT_PARTITION__" else unquote(value)
        if v is not None and PARTITION_COLUMNS[name] == "int":
            try:
                v = int(v)
            except ValueError:
                pass
        out[name] = v
    return out


def columns(body: bool = True) -> list[tuple[str, str]]:
    """[(name, Spark type)] of the messages DataFrame, in order."""
    return [(c.name, c.type) for c in COLUMNS if body or not c.body]


def names(body: bool = True) -> list[str]:
    return [n for n, _ in columns(body)]


def ddl(body: bool = True) -> str:
    return ", ".join(f"{n} {t}" for n, t in columns(body))


def as_dict() -> dict:
    return {
        "version": SCHEMA_VERSION,
        "columns": [{"name": c.name, "type": c.type, "nullable": c.nullable, "body_only": c.body,
                     "since_version": c.since, "doc": c.doc} for c in COLUMNS],
        "export_layout": {
            "default_partition_by": list(DEFAULT_PARTITION_BY),
            "partition_columns": {k: v for k, v in PARTITION_COLUMNS.items()},
            "derived": {k: {"type": t, "doc": d} for k, (t, d) in DERIVED.items()},
            "style": "hive (NAME=VALUE directories, values escaped as %XX like Spark)",
            "metadata_file": "_rmqctl",
        },
    }


def as_text() -> str:
    w = max(len(c.name) for c in COLUMNS)
    tw = max(len(c.type) for c in COLUMNS)
    lines = [f"messages schema version {SCHEMA_VERSION}", ""]
    for c in COLUMNS:
        flags = []
        if c.nullable:
            flags.append("nullable")
        if c.body:
            flags.append("with bodies only")
        if c.since > 1:
            flags.append(f"since v{c.since}")
        extra = f" [{', '.join(flags)}]" if flags else ""
        lines.append(f"  {c.name:<{w}}  {c.type:<{tw}}  {c.doc}{extra}")
    lines += ["", "export layout: Hive-style partitions " + "/".join(f"{p}=..." for p in DEFAULT_PARTITION_BY)
              + " by default (--partition-by to change, --partition-by none for a flat folder);",
              "  date = the UTC date of store_time (yyyy-MM-dd), a partition column only;",
              "  _rmqctl in the output folder names the schema version and where each commitlog was read to."]
    return "\n".join(lines) + "\n"
