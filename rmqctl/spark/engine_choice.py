"""Which engine runs `stats` / `export` (--engine auto|local|spark), and why `rebuild` has no Spark
engine. No pyspark import here: the choice is made before any JVM starts.

auto: the in-process engine (the same batch kernel and aggregation, in this process) for local stores
whose commitlog data is below AUTO_SPARK_BYTES; Spark above it, for any store given as a Hadoop URI
(hdfs://, s3a://...), and whenever a master is given (--master or SPARK_MASTER). The threshold is where
local[*] Spark, session start-up included, starts to beat the in-process engine on a 2-core machine
(bench/bench_spark.py on a generated 2.06 GiB store): start-up alone is 10-16 s idle and 77-134 s under
load, and on 2 cores local[2] scans at most ~2x the one-core rate (README: 466 -> 896 MB/s), so the
break-even is size/466 = 13 s + size/896 (MB/s), ~12 GiB idle, and none under load (at load 15 the 2 GiB
stats took 26 s in process, 77 + 60 s on local[2]). RMQCTL_AUTO_SPARK_BYTES overrides it.
"""
from __future__ import annotations

import os

from rmqctl.errors import UsageError

ENGINES = ("auto", "local", "spark")
AUTO_SPARK_BYTES = 12 << 30          # measured crossover, see the module docstring


def auto_threshold() -> int:
    v = os.environ.get("RMQCTL_AUTO_SPARK_BYTES")
    if v:
        try:
            return int(v)
        except ValueError:
            raise UsageError(f"RMQCTL_AUTO_SPARK_BYTES={v!r}: expected a number of bytes") from None
    return AUTO_SPARK_BYTES


def commitlog_data_bytes(store_path) -> int:
    """Bytes of written data in a local store's commitlog files (pre-allocated zero tails not counted,
    estimated cheaply by plan.data_extent); 0 when there is no commitlog."""
    from pathlib import Path

    from rmqctl.spark.plan import data_extent

    total = 0
    d = Path(store_path) / "commitlog"
    try:
        files = [p for p in d.iterdir() if p.is_file() and p.name.isdigit()]
    except OSError:
        return 0
    for p in files:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            total += data_extent(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
    return total


def choose(engine: str, master: str | None, refs, *, local_ok: bool = True, why_not_local: str = "") -> str:
    """'local' or 'spark' for --engine ENGINE. refs: the parsed STORE arguments (plan.StoreRef).
    local_ok=False: the in-process engine cannot do what was asked (why_not_local says what)."""
    remote = [r.uri for r in refs if r.local is None]
    if engine == "local":
        if remote:
            raise UsageError(f"{remote[0]}: --engine local reads local paths only (use --engine spark)")
        if not local_ok:
            raise UsageError(f"--engine local {why_not_local}; use --engine spark")
        return "local"
    if engine == "spark" or master or remote or not local_ok:
        return "spark"
    total = sum(commitlog_data_bytes(r.local) for r in refs)
    return "spark" if total >= auto_threshold() else "local"


def refuse_spark_rebuild(engine: str | None, master: str | None) -> None:
    """`rebuild --engine spark` was removed: on one machine the in-process rebuild (-j N for more
    cores) is faster than Spark's start-up alone, and the files must be written where the store is."""
    if engine == "spark" or master:
        raise UsageError("rebuild has no Spark engine any more: the in-process rebuild is faster than a Spark "
                         "session takes to start; use `rmqctl rebuild -j N` to use more cores")
