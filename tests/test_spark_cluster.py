"""A real Spark standalone cluster on 127.0.0.1 (one master, two workers, each its own process, started
from the pyspark install) and a real HDFS (tests/minihdfs): stats and export through --master spark://...
over two local stores given by relative path and one store on HDFS give the same results as the embedded
local engine, with nothing of rmqctl installed in the workers' interpreter (the driver ships it)."""
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

pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster, pytest.mark.hdfs]


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
               SPARK_LOG_DIR=str(tmp), PYSPARK_PYTHON=sys.executable,
               SPARK_LOCAL_DIRS=str(tmp / "local"))   # the executors' scratch (blockmgr-*), not the system's /tmp
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


def _run(*args, cwd=None, env=None, code=0):
    r = subprocess.run([sys.executable, "-m", "rmqctl", *args], capture_output=True, text=True, timeout=600,
                       cwd=cwd, env=dict(os.environ, NO_COLOR="1", COLUMNS="120", **(env or {})))
    assert r.returncode == code, r.stdout[-2000:] + r.stderr[-3000:]
    return r.stdout


def _bare_python(tmp: Path) -> str:
    """A worker interpreter without rmqctl or any of its dependencies: a fresh venv (same Python as the
    driver) holding only what Spark's Arrow path needs on a worker, numpy and pyarrow (linked from
    this environment)."""
    import numpy
    import pyarrow

    venv = tmp / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for mod in (numpy, pyarrow):
        pkg = Path(mod.__file__).parent
        for p in [pkg, pkg.with_name(pkg.name + ".libs")]:
            if p.exists():
                (site / p.name).symlink_to(p)
    return py


def test_standalone_cluster_equals_local(cluster, cli, spark, tmp_path):
    """Two stores by relative path and one on a real HDFS (MiniDFSCluster), read by a standalone cluster
    whose workers' interpreter has nothing of rmqctl: stats and export equal the in-process engine's."""
    from minihdfs.server import MiniHdfs
    from oracle_helpers import STORES

    fx = [p for p in fixture_dirs() if p.name in ("basic-multifile-v5", "crash-multifile-v4", "basic-multifile-v4")]
    assert len(fx) == 3
    bare = _bare_python(tmp_path)
    env_bare = dict(os.environ, PYTHONPATH="", PYTHONNOUSERSITE="1")
    for mod, ok in (("rmqctl", False), ("construct", False), ("dateutil", False), ("numpy", True), ("pyarrow", True)):
        r = subprocess.run([bare, "-c", f"import {mod}"], capture_output=True, env=env_bare, cwd=tmp_path)
        assert (r.returncode == 0) == ok, (mod, r.stderr[-500:])
    with MiniHdfs(tmp_path / "hdfs") as h:
        hdfs_store = f"{h.rpc}/stores/{fx[2].name}/store"
        assert h.upload(fx[2] / "store", f"/stores/{fx[2].name}/store") > 0
        env = {"PYSPARK_PYTHON": bare, "PYTHONNOUSERSITE": "1", "RMQCTL_WEBHDFS_ADDRESS": h.http}
        # relative paths, resolved against the driver's folder (the executors run in their own)
        stores = [f"{p.name}={p.name}/store" for p in fx[:2]] + [f"{fx[2].name}={hdfs_store}"]
        remote = json.loads(_run("stats", *stores, "--master", cluster, "--json", "--split-size", "8192",
                                 cwd=STORES, env=env))
        code, out, err = cli("stats", *[f"{p.name}={p / 'store'}" for p in fx], "--json")   # in-process local[2]
        assert code == 0, err
        local = json.loads(out)
        for r in (remote, local):
            r.pop("scan")
        assert remote == local
        assert remote["totals"]["messages"] > 100
        assert {q["store"] for q in local["queues"]} == {p.name for p in fx}
        # export through the cluster into HDFS (Spark's own writers) == export through local, row for row
        _run("export", *stores, "--master", cluster, "--out", f"{h.rpc}/out", "--json", cwd=STORES, env=env)
        code, out, err = cli("export", *[f"{p.name}={p / 'store'}" for p in fx], "--out", str(tmp_path / "local"),
                             "--json")
        assert code == 0, err

        def key(r):
            return (r["store"], r["physical_offset"], r["topic"], bytes(r["body"]) if r["body"] is not None else None,
                    tuple(sorted(dict(r["properties"]))))

        import pyarrow.parquet as pq

        a = sorted(key(r.asDict()) for r in spark.read.parquet(f"{h.rpc}/out").collect())
        b = sorted(key(r) for r in pq.read_table(str(tmp_path / "local")).to_pylist())
        assert a == b and len(a) == remote["totals"]["messages"]
        # verify --engine spark on a relative path: no false findings (executors run in another folder)
        _run("verify", f"{fx[0].name}/store", "--engine", "spark", "--master", cluster, cwd=STORES, env=env)
