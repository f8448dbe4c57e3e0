"""A real Spark standalone cluster on 127.0.0.1 (one master, two workers, each its own process, started
from the pyspark install): stats and export through --master spark://... over two stores at once give
the same results as the embedded local engine."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oracle_helpers import fixture_dirs
from spark_fixtures import spark  # noqa: F401 - session fixture

pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, text: str, proc, timeout=90):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    seen = path.read_text(errors='replace')[-3000:] if path.exists() else ''
    raise AssertionError(f"{text!r} not seen in {path}:\n{seen}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import pyspark

    home = Path(pyspark.__file__).parent
    tmp = tmp_path_factory.mktemp("cluster")
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(tmp / "work"),
               SPARK_LOG_DIR=str(tmp), PYSPARK_PYTHON=sys.executable)
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs = []

    def start(name, *args):
        log = tmp / f"{name}.log"
        p = subprocess.Popen([str(home / "bin" / "spark-class"), *args], stdout=open(log, "wb"),
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
        procs.append(p)
        return p, log

    try:
        m, mlog = start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                        "--webui-port", str(_free_port()))
        _wait_for(mlog, "I have been elected leader", m)
        for i in range(2):
            w, wlog = start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                            "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port()),
                            "--work-dir", str(tmp / f"work{i}"))
            _wait_for(wlog, "Successfully registered with master", w)
        yield url
    finally:
        for p in procs:                  # only the processes this fixture started, by their group id
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def _run(*args):
    r = subprocess.run([sys.executable, "-m", "rmqctl", *args], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, NO_COLOR="1", COLUMNS="120"))
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_standalone_cluster_equals_local(cluster, cli, spark, tmp_path):
    fx = [p for p in fixture_dirs() if p.name in ("basic-multifile-v5", "crash-multifile-v4")]
    assert len(fx) == 2
    stores = [f"{p.name}={p / 'store'}" for p in fx]
    remote = json.loads(_run("stats", *stores, "--master", cluster, "--json", "--split-size", "8192"))
    code, out, err = cli("stats", *stores, "--json")          # the in-process local[2] session
    assert code == 0, err
    local = json.loads(out)
    for r in (remote, local):
        r.pop("scan")
    assert remote == local
    assert remote["totals"]["messages"] > 100
    # export through the cluster == export through local, row for row
    import pyarrow.parquet as pq

    _run("export", *stores, "--master", cluster, "--out", str(tmp_path / "remote"), "--json")
    code, out, err = cli("export", *stores, "--out", str(tmp_path / "local"), "--json")
    assert code == 0, err

    def rows(d):
        t = pq.read_table(str(d)).to_pylist()
        return sorted((r["store"], r["physical_offset"], r["topic"], r["body"], tuple(sorted(r["properties"])))
                      for r in t)

    a, b = rows(tmp_path / "remote"), rows(tmp_path / "local")
    assert a == b and len(a) == remote["totals"]["messages"]
