"""Benchmark: `stats` and `export` on a >= 2 GB oracle store with Spark local[1], local[2], and the
default (non-Spark) engine -- the same batch path (rmqctl.scanvec -> Arrow) in one process: stats.compute_local,
and a pyarrow ParquetWriter for export -- beside them.

Each measurement runs in a fresh process (Spark start-up -- JVM, and one Python worker per core with
rmqctl imported -- is timed apart from the job) and
reports MB/s and messages/s over the commitlog bytes scanned, and the peak RSS of the driver
(ru_maxrss of the Python process; the JVM and Python workers are children and reported apart).

    python bench/bench_spark.py                       # uses/creates /tmp/rmqctl-bench-spark/store
    python bench/bench_spark.py --store /tmp/bench_verify/store --only stats
    python bench/bench_spark.py --json > figures.json

The store is generated with `tests/oracle/oracle v5 bench-write` when missing (never committed).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_STORE = Path("/tmp/rmqctl-bench-spark/store")


def ensure_store(path: Path, count: int, size: int) -> Path:
    if (path / "commitlog").is_dir():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(REPO / "tests/oracle/oracle"), "v5", "bench-write", "--store", str(path), "--count",
                    str(count), "--size", str(size)], check=True, stdout=subprocess.DEVNULL)
    return path


def _rss():
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    return me, kids


def _jvm_rss_mb() -> int | None:
    """Peak RSS (VmHWM) of this process's child processes (the Spark JVM), read from /proc."""
    peak = 0
    try:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/status") as f:
                    st = f.read()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in st.splitlines() if ":" in line)
            if fields.get("PPid", "").strip() == str(os.getpid()) and "VmHWM" in fields:
                peak = max(peak, int(fields["VmHWM"].split()[0]) // 1024)
    except OSError:
        return None
    return peak or None


def child(engine: str, op: str, store: str, out: str, repeat: int = 1) -> dict:
    """One measurement, in this (fresh) process: the job `repeat` times, the fastest reported."""
    t0 = time.time()
    sys.path.insert(0, str(REPO / "tests"))
    startup = 0.0
    if engine != "default":
        from rmqctl.spark.session import get_session

        spark = get_session(engine, shuffle_partitions=2)
        # Start-up = JVM up + one Python worker per core with rmqctl imported (a fixed cost per session,
        # paid once by the first job; counted here so the job time is the scan's).
        par = spark.sparkContext.defaultParallelism

        def warm(batches):
            import rmqctl.spark.batches  # noqa: F401
            import rmqctl.spark.stats  # noqa: F401

            time.sleep(0.5)                        # hold the worker so each core gets its own
            yield from batches

        spark.range(0, par, 1, par).mapInArrow(warm, "id long").count()
        startup = time.time() - t0
    times = []
    for _ in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        start = time.time()
        n, nbytes = run_job(engine, op, store, out, spark if engine != "default" else None)
        times.append(time.time() - start)
    me, kids = _rss()
    return {"engine": engine, "op": op, "messages": n, "record_bytes": nbytes, "seconds": round(min(times), 2),
            "all_seconds": [round(t, 2) for t in times], "startup_seconds": round(startup, 2),
            "driver_peak_rss_mb": me, "jvm_peak_rss_mb": _jvm_rss_mb() if engine != "default" else None}


def run_job(engine, op, store, out, spark):
    if engine == "default":
        # The default (non-Spark) engine: the same batch path (kernel -> Arrow) in this one process.
        if op == "stats":
            from rmqctl.spark import stats

            res = stats.compute_local([store])
            return res["totals"]["messages"], res["totals"]["bytes"]
        import pyarrow.parquet as pq

        from rmqctl.spark.batches import arrow_schema
        from rmqctl.spark.dataset import local_batches, message_columns

        os.makedirs(out, exist_ok=True)
        n = 0
        with pq.ParquetWriter(os.path.join(out, "part-0.parquet"), arrow_schema(message_columns(None, True)),
                              compression="snappy") as w:
            for rb in local_batches(store, body=True):
                w.write_batch(rb)
                n += rb.num_rows
        return n, None
    from rmqctl.spark.dataset import Dataset
    from rmqctl.spark.plan import parse_store_args

    ds = Dataset.open(spark, parse_store_args([store]), body=(op == "export"))
    if op == "stats":
        from rmqctl.spark import stats

        res = stats.compute(ds)
        return res["totals"]["messages"], res["totals"]["bytes"]
    from rmqctl.spark.export import export

    res = export(ds, out, "parquet", overwrite=True)
    return res["messages"], None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=DEFAULT_STORE)
    ap.add_argument("--count", type=int, default=1_800_000, help="messages when generating the store")
    ap.add_argument("--size", type=int, default=1024, help="body bytes when generating the store")
    ap.add_argument("--engines", default="default,local[1],local[2]")
    ap.add_argument("--only", choices=["stats", "export"])
    ap.add_argument("--repeat", type=int, default=1, help="run each job N times in its process, report the fastest")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=3, metavar=("ENGINE", "OP", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1], str(a.store), a.child[2], a.repeat)))
        return
    store = ensure_store(a.store, a.count, a.size)
    from rmqctl.store.layout import Store

    files = Store.open(store).commitlog.files
    from rmqctl.spark.plan import data_extent

    data = 0
    for f in files:
        fd = os.open(f.path, os.O_RDONLY)
        data += data_extent(fd, f.size)
        os.close(fd)
    rows = []
    if not a.json:
        print(f"load average before: {os.getloadavg()[0]:.2f} "
              "(2 cores shared: figures are only comparable at low load)")
    for op in ([a.only] if a.only else ["stats", "export"]):
        for engine in a.engines.split(","):
            out = tempfile.mkdtemp(prefix="rmqctl-bench-out-")
            try:
                r = subprocess.run([sys.executable, __file__, "--store", str(store), "--child", engine, op,
                                    os.path.join(out, "x"), "--repeat", str(a.repeat)], capture_output=True, text=True)
                if r.returncode:
                    raise SystemExit(f"{engine} {op} failed:\n{r.stderr[-3000:]}")
                res = json.loads(r.stdout.strip().splitlines()[-1])
            finally:
                shutil.rmtree(out, ignore_errors=True)
            res["commitlog_data_mb"] = round(data / 2**20, 1)
            res["mb_per_s"] = round(data / 2**20 / res["seconds"], 1)
            res["messages_per_s"] = round(res["messages"] / res["seconds"])
            rows.append(res)
            if not a.json:
                print(f"{op:7s} {engine:9s} {res['seconds']:8.1f} s  {res['mb_per_s']:7.1f} MB/s  "
                      f"{res['messages_per_s']:9,d} msg/s  (+{res['startup_seconds']:.1f} s start)  "
                      f"driver RSS {res['driver_peak_rss_mb']} MB, JVM {res['jvm_peak_rss_mb'] or '-'} MB  "
                      f"(runs {res['all_seconds']}, load {os.getloadavg()[0]:.2f})",
                      flush=True)
    if a.json:
        print(json.dumps({"store": str(store), "cpus": os.cpu_count(), "load_after": os.getloadavg()[0],
                          "results": rows}, indent=1))


if __name__ == "__main__":
    main()
