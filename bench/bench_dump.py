#!/usr/bin/env python3
"""Benchmark `rmqctl dump --json` of commitlog files beside its ceiling and its goal, in one run, the runs
alternated round by round (best of --rounds for each):

  ceiling   the record walk alone, as dump walks (rmqctl.scanvec.walk_file with body CRCs and the kernel a
            long dump loads: rmqctl.kernels.load_now), nothing rendered: what any dump built on it could reach
  dump      `rmqctl dump --json` as installed (RMQCTL_KERNEL=auto: the compiled renderer,
            rmqctl.kernels.dumpjson_nb, for files with 256 MiB or more ahead), body base64 and none
  numpy     the same with RMQCTL_KERNEL=numpy (the numpy renderer, rmqctl.dump_json_batch.Renderer)
  record    with --record: RMQCTL_DUMP_JSON=record (message_json per record: the path before both; slow)
  before    with --before TREE: `dump --json` of another checkout (e.g. main before this change), run with
            PYTHONPATH=TREE by the same interpreter
  text      with --text: `rmqctl dump` (readable lines)
Output goes to /dev/null. MB/s = commitlog bytes of records / wall s; MB/CPU-s = the same / CPU seconds
(user + sys: the figure to read on a loaded machine); peak RSS is that run's process; goal: 300 MB/s.
Needs only the rmqctl install (numpy; numba and pybase64 from the `fast` extra for the compiled renderer);
no Java.

  python bench/bench_dump.py [--store S | --root /tmp/rmqctl-bench-dump --bytes 1073741824]
                             [--rounds 3] [--record] [--text] [--before /path/to/older/checkout]
Without --store a 1 GiB commitlog of 1 KiB messages is generated (bench/gen_commitlog.py: one body repeated,
so its CRC and length columns are constant); --store takes a broker-written store (bench-write: random bodies).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import RMQCTL, commitlog_files, load_line, run_measured, warm  # noqa: E402
from gen_commitlog import build  # noqa: E402

GOAL = 300e6

_KERNEL_ONLY = """
import os, sys, json
from rmqctl import kernels
from rmqctl.scanvec import walk_file
kernels.load_now()
n = b = 0
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY)
    size = os.fstat(fd).st_size
    g = walk_file(fd, int(os.path.basename(f)), size, window=2 << 20, buf=bytearray(2 << 20))
    while True:
        try:
            bt = next(g)
        except StopIteration as e:
            b += e.value.pos
            break
        n += len(bt)
    os.close(fd)
print(json.dumps({"messages": n, "bytes": b, "kernel": kernels.name()}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, help="a store whose commitlog/ to dump (else one is generated)")
    ap.add_argument("--root", type=Path, default=Path("/tmp/rmqctl-bench-dump"))
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--rounds", type=int, default=3, help="runs of each command, alternated (best one shown)")
    ap.add_argument("--record", action="store_true", help="also the record-at-a-time renderer (slow)")
    ap.add_argument("--text", action="store_true", help="also the readable dump (slow on random bodies)")
    ap.add_argument("--before", type=Path, help="another checkout whose dump --json to run beside (PYTHONPATH)")
    ap.add_argument("--kernel", default="", help=argparse.SUPPRESS)     # older scripts' switch: ignored
    a = ap.parse_args()
    if a.store:
        target = a.store / "commitlog"
    else:
        target = a.root / "commitlog"
        if not (a.root / "info.json").exists():
            info = build(a.root, a.bytes - 4096, 1024, file_size=a.bytes)
            (a.root / "info.json").write_text(json.dumps(info))
    files = commitlog_files(target.parent)
    load0 = load_line()
    warm(files)
    runs = [("ceiling: the record walk alone", None, {}, False),
            ("dump --json (base64 bodies)", ["--json"], {}, True),
            ("dump --json --body none", ["--json", "--body", "none"], {}, True),
            ("dump --json, numpy renderer (RMQCTL_KERNEL=numpy)", ["--json"], {"RMQCTL_KERNEL": "numpy"}, True)]
    if a.record:
        runs.append(("dump --json, per record (RMQCTL_DUMP_JSON=record)", ["--json"],
                     {"RMQCTL_DUMP_JSON": "record"}, True))
    if a.before:
        runs.append((f"before: dump --json of {a.before}", ["--json"], {"PYTHONPATH": str(a.before.resolve())},
                     True))
    if a.text:
        runs.append(("dump (text)", [], {}, False))
    best: dict[str, dict] = {}
    info = None
    for _ in range(max(1, a.rounds)):
        for label, extra, env, _j in runs:
            if extra is None:
                out, err, meta = run_measured([sys.executable, "-c", _KERNEL_ONLY, *files], env)
                if meta["rc"]:
                    sys.exit(err[-2000:])
                info = json.loads(out)
            else:
                _, err, meta = run_measured([*RMQCTL, "dump", *extra, target], env, discard_stdout=True)
                if meta["rc"] not in (0, 4):
                    sys.exit(f"{label} failed ({meta['rc']}): {err[-2000:]}")
            b = best.setdefault(label, dict(meta))
            for key in ("wall", "cpu"):
                b[key] = min(b[key], meta[key])
            b["maxrss_kib"] = max(b["maxrss_kib"], meta["maxrss_kib"])
    nbytes, nmsg = info["bytes"], info["messages"]
    print(f"{target}: {nbytes / 1e9:.2f} GB of records, {nmsg} messages; walk kernel {info['kernel']}; "
          f"best of {a.rounds}, alternated; {load0} before, {load_line()} after")
    w = max(52, *(len(r[0]) for r in runs))
    print(f"{'run':{w}} {'MB/s':>6} {'MB/CPU-s':>8} {'wall s':>7} {'CPU s':>6} {'peak RSS MiB':>12}  vs")
    ceil = best[runs[0][0]]
    for label, _e, _env, is_json in runs:
        m = best[label]
        rate, crate = nbytes / m["wall"], nbytes / m["cpu"]
        vs = "" if m is ceil else (f"{rate / (nbytes / ceil['wall']):.2f}x the walk by wall, "
                                  f"{crate / (nbytes / ceil['cpu']):.2f}x by CPU s")
        if is_json:
            vs += f"; {rate / GOAL:.2f}x the 300 MB/s goal by wall, {crate / GOAL:.2f}x by CPU s"
        print(f"{label:{w}} {rate / 1e6:6.0f} {crate / 1e6:8.0f} {m['wall']:7.2f} {m['cpu']:6.2f} "
              f"{m['maxrss_kib'] / 1024:12.0f}  {vs}")


if __name__ == "__main__":
    main()
