#!/bin/bash
# -j scaling of verify, rebuild and recover on a many-core machine, in one go: the bare-CRC ceilings by 1..N
# processes, each command by -j 1..N, and where the wall time of -j 1 and -j N goes (bench/phases.py).
# Made for a lent machine with no network and no Java (no broker rows): run from the checkout, with rmqctl's
# dependencies importable (PYTHONPATH) and python3 holding numpy and numba.
#
#   BYTES=17179869184 JOBS=1,2,4,8,16 REPEAT=1 OUT=/tmp/scaling bash bench/scaling.sh
#
# BYTES: the generated store's commitlog (default 16 GiB: about 4 minutes on 16 cores); STORE: where (generated
# when missing); KERNELS: RMQCTL_KERNEL values to compare (default: the tree's choice). Every log goes to $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/scaling-out}; mkdir -p "$OUT"
BYTES=${BYTES:-17179869184}; JOBS=${JOBS:-1,2,4,8,$(nproc)}; REPEAT=${REPEAT:-1}; KERNELS=${KERNELS:-}
STORE=${STORE:-/tmp/scaling/store}; PY=${PY:-python3}; N=${JOBS##*,}
exec > >(tee "$OUT/log.txt") 2>&1
timed() { local s; s=$($PY -c 'import time;print(time.time())'); "$@"; local rc=$?
  $PY -c "import sys,time;print(f'## {time.time()-float(sys.argv[1]):.2f} s, exit {sys.argv[2]}:', *sys.argv[3:])" "$s" $rc "$@"; }

# a pip install has .pyc files; an image whose packages lack them would compile them in every process
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/rmqctl-pycache}
unset PYTHONDONTWRITEBYTECODE
if ! $PY -c 'import rmqctl.formats' 2>/dev/null; then
  # a checkout that is not installed: run a copy laid out as the installed package is (rmqctl.formats)
  T=/tmp/rmqctl-scaling-tree; rm -rf "$T"; mkdir -p "$T"; cp -r rmqctl formats bench "$T"/
  ln -s ../formats "$T/rmqctl/formats"; cd "$T"; export PYTHONPATH="$T${PYTHONPATH:+:$PYTHONPATH}"
fi
$PY - <<'EOF' || exit 3
import os, sys, numpy, numba, llvmlite
print(sys.version.split()[0], "numpy", numpy.__version__, "numba", numba.__version__, "llvmlite", llvmlite.__version__,
      "cpus", os.cpu_count())
for m in ("isal", "pybase64"):
    try:
        print(m, __import__(m).__version__)
    except ImportError:
        print(m, "missing")
EOF
grep -m1 'model name' /proc/cpuinfo; uname -r; free -g | head -2; df -h /tmp | tail -1; uptime
$PY -m compileall -q -j 0 rmqctl formats "$($PY -c 'import numba,os;print(os.path.dirname(numba.__file__))')" \
    "$($PY -c 'import numpy,os;print(os.path.dirname(numpy.__file__))')" >/dev/null

# the compile cache, filled once (the first process compiles every kernel)
W=/tmp/scaling-warm/store
rm -rf "$W"; timed $PY bench/gen_commitlog.py "$W" --bytes 100000000
for j in 1 2; do
  $PY -m rmqctl rebuild cq "$W" --include-deleted-topics -j $j --json >/dev/null
  $PY -m rmqctl rebuild index "$W" -j $j --json >/dev/null
  $PY -m rmqctl verify "$W" -j $j --json >/dev/null
  touch "$W/abort"; $PY -m rmqctl recover "$W" -j $j --json >/dev/null
done

if [ ! -d "$STORE/commitlog" ]; then
  timed $PY bench/gen_commitlog.py "$STORE" --bytes "$BYTES"
  timed $PY -m rmqctl rebuild cq "$STORE" --include-deleted-topics -j "$N" --json >/dev/null
  timed $PY -m rmqctl rebuild index "$STORE" -j "$N" --json >/dev/null
fi
du -sh "$STORE"/*
timed $PY bench/bench_verify.py --store "$STORE" --no-broker --jobs "$JOBS" --repeat "$REPEAT" --kernel "$KERNELS" \
  | tee "$OUT/verify.txt"
timed $PY bench/phases.py --log "$OUT/phases-verify-1.txt" verify --json -j 1 "$STORE"
timed $PY bench/phases.py --log "$OUT/phases-verify-$N.txt" verify --json -j "$N" "$STORE"
timed $PY bench/phases.py --what repair --log "$OUT/phases-index-$N.txt" rebuild index --dry-run --json -j "$N" "$STORE"
RJOBS=$(printf '%s\n' 1 4 "$N" | awk -v n="$N" '$1 <= n' | sort -nu | paste -sd,)
timed $PY bench/bench_recover.py --store "$STORE" --no-broker --jobs "$RJOBS" --repeat "$REPEAT" --kernel "$KERNELS" \
  --only cq,index,recover | tee "$OUT/recover.txt"
uptime
