"""Remote stores read by byte range: executor memory and time, on a real HDFS (tests/minihdfs).

A store of two 1 GiB commitlog files (bench/gen_commitlog.py; kept out of git, under --work) is uploaded
to a MiniDFSCluster on 127.0.0.1; `rmqctl stats` then reads it through hdfs:// (WebHDFS byte ranges,
staged per split) with local[1] and local[2], and the same store from the local disk (pread) for
comparison. Peak executor memory is the largest VmRSS seen in any Python worker process (pyspark.daemon
and its forks) under the run, sampled every 20 ms, plus their VmHWM when last seen; CPU seconds are the
user + sys of the whole command (rmqctl, the JVM, its Python workers), summed over every process seen.
`--split-sizes` runs the HDFS read once per split size (bytes, or 64M, 1G...) to show the worker peak
against its bound: at most 2 x the split size + a fixed cost (stated in bench/README.md).

    python bench/bench_spark_remote.py --work /tmp/rmqctl-bench-remote [--gib 2] [--masters local[1],local[2]]
    python bench/bench_spark_remote.py --masters local[1] --split-sizes 64M,256M,1G
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def _descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for n in os.listdir("/proc"):
        if n.isdigit():
            try:
                st = open(f"/proc/{n}/stat", "rb").read()
                kids.setdefault(int(st[st.rindex(b")") + 2:].split()[1]), []).append(int(n))
            except (OSError, ValueError, IndexError):
                continue
    out, todo = set(), [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


def _status_kb(pid: int, field: str) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _is_python_worker(pid: int) -> bool:
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return False
    return b"pyspark.daemon" in cmd or b"pyspark/worker" in cmd or b"pyspark.worker" in cmd


def measure(cmd: list[str], env: dict) -> dict:
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak = {"rss": 0, "hwm": 0, "workers": set(), "cpu": {}}
    done = threading.Event()
    tck = os.sysconf("SC_CLK_TCK")

    def sample():
        while not done.is_set():
            for pid in _descendants(p.pid) | {p.pid}:
                try:
                    st = open(f"/proc/{pid}/stat", "rb").read()
                    f = st[st.rindex(b")") + 2:].split()
                    peak["cpu"][pid] = (int(f[11]) + int(f[12])) / tck
                except (OSError, ValueError, IndexError):
                    pass
                if _is_python_worker(pid):
                    peak["workers"].add(pid)
                    peak["rss"] = max(peak["rss"], _status_kb(pid, "VmRSS"))
                    peak["hwm"] = max(peak["hwm"], _status_kb(pid, "VmHWM"))
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = p.communicate()
    done.set()
    t.join()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{err.decode()[-3000:]}")
    res = json.loads(out)
    return {"seconds": round(time.time() - t0, 1), "messages": res["totals"]["messages"],
            "worker_rss_mib": round(peak["rss"] / 1024, 1), "worker_hwm_mib": round(peak["hwm"] / 1024, 1),
            "python_workers": len(peak["workers"]), "cpu_seconds": round(sum(peak["cpu"].values()), 1)}


def _bytes(v: str) -> int:
    v = v.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(v[-1:], 1)
    return int(v[:-1] if mult > 1 else v) * mult


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/rmqctl-bench-remote"))
    ap.add_argument("--gib", type=int, default=2)
    ap.add_argument("--masters", default="local[1],local[2]")
    ap.add_argument("--split-size", type=int, default=None)
    ap.add_argument("--split-sizes", default=None, help="comma list: one HDFS run per split size (64M, 1G...)")
    ap.add_argument("--no-local", action="store_true", help="skip the local-disk (pread) rows")
    a = ap.parse_args()
    store = a.work / "store"
    if not (store / "commitlog").is_dir():
        subprocess.run([sys.executable, str(ROOT / "bench" / "gen_commitlog.py"), str(store),
                        "--bytes", str(a.gib << 30)], check=True)
    files = sorted((store / "commitlog").iterdir())
    from minihdfs.server import MiniHdfs

    with MiniHdfs(a.work / "hdfs", timeout=180) as h:
        t0 = time.time()
        sent = sum(h.put_file(f"/bench/store/commitlog/{f.name}", f) for f in files)
        print(f"uploaded {sent / (1 << 30):.2f} GiB in {time.time() - t0:.0f} s ({len(files)} files)", flush=True)
        env = dict(os.environ, RMQCTL_WEBHDFS_ADDRESS=h.http, NO_COLOR="1")
        sizes = [_bytes(x) for x in a.split_sizes.split(",")] if a.split_sizes else [a.split_size]
        rows = []
        for master in a.masters.split(","):
            for size in sizes:
                extra = ["--split-size", str(size)] if size else []
                runs = [("hdfs (ranged)", f"{h.rpc}/bench/store")]
                if not a.no_local and size == sizes[0]:
                    runs.append(("local (pread)", str(store)))
                for label, uri in runs:
                    cmd = [sys.executable, "-m", "rmqctl", "stats", f"bench={uri}", "--master", master, "--json",
                           *extra]
                    r = measure(cmd, env)
                    rows.append({"master": master, "store": label, "split_mib": round(size / 2**20) if size else None,
                                 **r})
                    print(json.dumps(rows[-1]), flush=True)
    print("\nmaster      store           split MiB  seconds  CPU s  messages   worker peak RSS MiB (VmRSS / VmHWM)")
    for r in rows:
        print(f"{r['master']:<11} {r['store']:<15} {str(r['split_mib'] or 'auto'):>9} {r['seconds']:>8} "
              f"{r['cpu_seconds']:>6} {r['messages']:>9}   {r['worker_rss_mib']:>7} / {r['worker_hwm_mib']}")


if __name__ == "__main__":
    main()
