"""`rmqctl export`: the messages written as Parquet or JSON Lines with the documented, versioned
schema (rmqctl.spark.schema), readable by pandas/pyarrow, DuckDB and Spark. Filters run on the
executors before rows are built.

Layout: Hive-style partition folders (`--partition-by`; the CLI's default for Parquet is
store/topic/date, date = the UTC date of store_time), a `_rmqctl` naming the schema version and
what each run read, `_SUCCESS` when done.

Parquet to a local path (the common case): each Spark task writes its own part files with pyarrow
from the Arrow batches it decoded (one per partition folder it meets, named after its split, so a
retried task overwrites its own files) into <out>/_temporary/<run>/; once the driver has proved the
scan exact the files move to <out>. The message bodies never cross into the JVM, so export scales
with the cores: the writer is the sink of read_commitlog's scan (rmqctl.spark.api.frame), not a
stage after its DataFrame (why: rmqctl.spark.api). Other outputs (JSON Lines, Hadoop URIs, --files)
are that DataFrame written by Spark's writers.

Incremental export (`state=`, the CLI's --from-offsets FILE): the run starts each store's commitlog
where the state file says the previous run stopped, adds its files next to the earlier ones (new
names), and at the end rewrites the state file with where this run stopped -- the offset of the
first record the sequential walk did not give (unwritten space, or the first bad record). Two runs
with messages appended in between give every message exactly once (tested).
"""
from __future__ import annotations

import json
import os

from rmqctl.errors import UsageError

FORMATS = ("parquet", "jsonl")
STATE_VERSION = 1
META_FILE = "_rmqctl"


def load_state(path: str | None) -> dict:
    """The stores of a state file ({} when there is none yet); a usage error for anything unreadable
    or a folder that does not exist (checked before Spark starts)."""
    if not path:
        return {}
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError("no such directory for the --from-offsets state file", path=folder)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        stores = d["stores"]
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"version {d.get('version')!r}")
        for v in stores.values():
            int(v["commitlog_offset"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"not an export state file ({type(e).__name__}: {e})", path=path) from e
    return stores


def read_state(path: str | None, ds) -> dict:
    """{store name: commitlog offset} from a state file (missing file: {} -- a first run)."""
    stores = load_state(path)
    for info in ds.stores:
        old = stores.get(info.ref.name)
        if old is not None and old.get("uri") not in (None, info.ref.uri):
            raise UsageError(f"the state file has store {info.ref.name!r} at {old.get('uri')}, this run reads "
                             f"{info.ref.uri} (name the stores NAME=PATH as in the first run)", path=path)
    return {name: int(v["commitlog_offset"]) for name, v in stores.items()}


def stop_offsets(ds, start: dict) -> dict:
    """{store name: offset where this (exact) run's walk stopped}: the next run starts there."""
    out = {}
    for info in ds.stores:
        name = info.ref.name
        splits = [s for s in ds.plan.splits if s.store == name]
        stop = (ds.last_summary.get(name) or {}).get("stop")
        if isinstance(stop, dict):
            out[name] = int(stop["offset"])
        elif splits:       # the last file ended with a BLANK record: the next file starts after it
            out[name] = max(s.file_start + s.file_size for s in splits)
        else:
            out[name] = int(start.get(name, 0))
        out[name] = max(out[name], int(start.get(name, 0)))
    return out


def write_state(path: str, ds, offsets: dict) -> None:
    d = {"version": STATE_VERSION, "stores": {i.ref.name: {"uri": i.ref.uri, "commitlog_offset": offsets[i.ref.name]}
                                              for i in ds.stores}}
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(d, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def _write_meta(local_out: str, fmt: str, partition_by, start: dict, stop: dict, messages: int) -> None:
    import datetime as dt

    from rmqctl.spark.schema import SCHEMA_VERSION

    path = os.path.join(local_out, META_FILE)
    runs = []
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                runs = json.load(f).get("runs", [])
        except (OSError, ValueError, AttributeError):
            runs = []
    runs.append({"finished": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "messages": messages,
                 "stores": {k: {"from_offset": int(start.get(k, 0)), "to_offset": v} for k, v in stop.items()}})
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"schema_version": SCHEMA_VERSION, "format": fmt, "partition_by": list(partition_by),
                   "runs": runs}, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


def export(ds, out: str, fmt: str = "parquet", flt=None, *, overwrite: bool = False,
           partition_by: tuple = (), files: int | None = None, state: str | None = None) -> dict:
    """Write the (filtered) messages; returns {"out", "format", "messages", "files", "offsets"}.
    state: an incremental state file (read when present, rewritten at the end); the output folder
    may then already hold earlier runs' files."""
    from rmqctl.spark import schema
    from rmqctl.spark.api import apply_from_offsets

    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}")
    bad = [p for p in partition_by if p not in schema.PARTITION_COLUMNS]
    if bad:
        raise UsageError(f"cannot partition by {bad[0]!r} (one of {', '.join(schema.PARTITION_COLUMNS)})")
    local_out = out[len("file://"):] if out.startswith("file://") else (out if "://" not in out else None)
    start = read_state(state, ds)
    append = state is not None
    if local_out is not None and os.path.exists(local_out) and os.listdir(local_out) and not overwrite and not append:
        raise UsageError("output directory exists and is not empty (use --overwrite)", path=local_out)
    apply_from_offsets(ds, start)
    cols = schema.columns(bool(ds.opts.get("body")))
    if "date" in partition_by:
        cols = cols + [("date", "date")]

    if local_out is not None:      # executors write there: on a cluster, the same folder everywhere
        from rmqctl.spark.remote import check_shared_out

        check_shared_out(ds.spark, os.path.abspath(local_out))
    target = out if "://" in out else "file://" + os.path.abspath(out)
    if fmt == "parquet" and local_out is not None and not files:
        res = _export_parquet_direct(ds, os.path.abspath(local_out), flt, overwrite and not append, cols,
                                     tuple(partition_by), append) | {"out": out}
    else:
        def action(ds):
            from rmqctl.spark.api import frame

            df = frame(ds, flt or None, columns=[c for c, _ in cols])     # read_commitlog's DataFrame
            if files:
                df = df.coalesce(files)
            mode = "append" if append else ("overwrite" if (overwrite or ds.runs > 1) else "errorifexists")
            if append and ds.runs > 1:
                raise RuntimeError("the store changed during an incremental export; run it again")
            w = df.write.mode(mode)
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
        res = {"out": out, "format": fmt, "messages": ds.rows, "files": sorted(written)}
    stop = stop_offsets(ds, start)
    if local_out is not None:
        _write_meta(os.path.abspath(local_out), fmt, partition_by, start, stop, res["messages"])
    if state is not None:
        write_state(state, ds, stop)
    return res | {"offsets": stop}


_ESCAPE = set('"#%\'*/:=?\\\x7f{[]^') | {chr(i) for i in range(32)}


def escape_path_name(v: str) -> str:
    """A Hive partition value as Spark writes it (ExternalCatalogUtils.escapePathName): %XX; a NUL too (no file
    name can hold one; a damaged topic can)."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPE else c for c in v)


def partition_dir(names, values) -> str:
    parts = []
    for n, v in zip(names, values):
        if v is None or v == "":
            v = "__HIVE_DEFAULT_PARTITION__"
        elif hasattr(v, "isoformat"):
            v = v.isoformat()
        else:
            v = escape_path_name(str(v))
        parts.append(f"{n}={v}")
    return os.path.join(*parts)


class _PartWriter:
    """Task side: one split's messages to <staging>/[PARTITION/]part-<split id>.parquet (each file
    created on its first row); `partition_by` columns go to the folder names, not the files."""

    def __init__(self, staging: str, split_id: int, partition_by: tuple = ()):
        self.staging, self.name = staging, f"part-{split_id:05d}.parquet"
        self.partition_by = partition_by
        self.writers: dict = {}
        self.files: dict = {}
        self.rows: dict = {}

    def _write(self, key, rb) -> None:
        import pyarrow.parquet as pq

        w = self.writers.get(key)
        if w is None:
            d = os.path.join(self.staging, key) if key else self.staging
            os.makedirs(d, exist_ok=True)
            # opened by Python, not by Arrow: an --out whose name is not UTF-8 is still a path Python can open
            f = self.files[key] = open(os.path.join(d, self.name), "wb")
            w = self.writers[key] = pq.ParquetWriter(f, rb.schema, compression="snappy")
            self.rows[key] = 0
        w.write_batch(rb)
        self.rows[key] += rb.num_rows

    def add(self, rb) -> None:
        if not self.partition_by:
            self._write("", rb)
            return
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        names = list(self.partition_by)
        codes, dicts = None, []
        for n in names:
            enc = pc.dictionary_encode(rb.column(rb.schema.get_field_index(n)))
            idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            idx = np.where(enc.indices.is_null().to_numpy(zero_copy_only=False), len(enc.dictionary), idx)
            dicts.append(enc.dictionary.to_pylist() + [None])
            codes = idx if codes is None else codes * (len(enc.dictionary) + 1) + idx
        keep = [i for i, n in enumerate(rb.schema.names) if n not in names]
        body = pa.RecordBatch.from_arrays([rb.column(i) for i in keep], names=[rb.schema.names[i] for i in keep])
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        cuts = np.flatnonzero(np.diff(sorted_codes)) + 1
        for a, b in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(order)]))):
            rows = order[a:b]
            first = int(rows[0])
            key = partition_dir(names, [rb.column(rb.schema.get_field_index(n))[first].as_py() for n in names])
            self._write(key, body.take(pa.array(rows)))

    def partials(self, store: str):
        import pyarrow as pa

        for w in self.writers.values():
            w.close()
        for f in self.files.values():
            f.close()
        keys = [k for k in self.writers if self.rows[k]]
        schema = pa.schema([("path", pa.string()), ("rows", pa.int64())])
        if not keys:
            return pa.RecordBatch.from_pydict({"path": [None], "rows": [0]}, schema=schema)
        return pa.RecordBatch.from_pydict({"path": [os.path.join(k, self.name) if k else self.name for k in keys],
                                           "rows": [self.rows[k] for k in keys]}, schema=schema)


def _export_parquet_direct(ds, out: str, flt, overwrite: bool, cols, partition_by: tuple, append: bool) -> dict:
    import shutil
    import time

    from rmqctl.spark.api import frame

    if os.path.exists(out) and overwrite:
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)

    def action(ds):
        staging = os.path.join(out, "_temporary", str(ds.runs))
        shutil.rmtree(os.path.join(out, "_temporary"), ignore_errors=True)   # an earlier, inexact run
        os.makedirs(staging)
        # read_commitlog's scan with the part writer as its sink, not frame().mapInArrow(writer): the
        # bodies would go into the JVM and back, 2.5x the CPU (rmqctl.spark.api)
        rows = frame(ds, flt or None, columns=[c for c, _ in cols], sink=lambda split: _PartWriter(
            staging, split.id, partition_by), sink_schema="path string, rows bigint").collect()
        return staging, sorted(r.path for r in rows if r.path)

    staging, parts = ds.run(action)
    tag = f"{time.time_ns():x}-" if append else ""       # later runs add files next to earlier ones
    written = []
    for i, rel in enumerate(parts):
        d = os.path.dirname(rel)
        dest = os.path.join(out, d, f"part-{tag}{i:05d}.parquet")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.replace(os.path.join(staging, rel), dest)
        written.append(dest)
    shutil.rmtree(os.path.join(out, "_temporary"), ignore_errors=True)
    open(os.path.join(out, "_SUCCESS"), "wb").close()
    return {"out": out, "format": "parquet", "messages": ds.rows, "files": written}
