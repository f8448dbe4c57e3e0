#!/usr/bin/env python3
"""Every figure beside its ceiling, one store, one run: bench_verify (verify vs bare CRC, 1 process and all
CPUs; vs the broker's full abnormal recovery), bench_recover (rebuild cq / rebuild index / recover vs the same
broker recovery) and bench_dump (dump --json vs the record kernel alone and the 300 MB/s goal), each printing
peak RSS per run. --kernel and --jobs go to every script (each uses them where the tree has them).

  python bench/bench_all.py --store /tmp/bench/store [--generate --count 2000000 --size 1024]
                            [--kernel numba,numpy] [--jobs 1,2]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--generate", action="store_true")
    ap.add_argument("--count", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--kernel", default="")
    ap.add_argument("--jobs", default=f"1,{os.cpu_count()}")
    ap.add_argument("--no-broker", action="store_true")
    a = ap.parse_args()
    common = ["--store", str(a.store), "--kernel", a.kernel]
    gen = ["--generate", "--count", str(a.count), "--size", str(a.size)] if a.generate else []
    runs = [["bench_verify.py", *common, "--jobs", a.jobs, *gen, *(["--no-broker"] if a.no_broker else [])],
            ["bench_dump.py", *common]]
    if not a.no_broker:
        runs.insert(1, ["bench_recover.py", *common, "--jobs", a.jobs])
    rc = 0
    for script, *args in runs:
        print(f"\n=== {script} {' '.join(args)}", flush=True)
        rc |= subprocess.run([sys.executable, str(HERE / script), *args]).returncode
    sys.exit(rc)


if __name__ == "__main__":
    main()
