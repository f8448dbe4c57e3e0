"""Spark through the console script as a user runs it: by its absolute path from a shell whose PATH
has no venv (pipx-style), and the rmqctl-spark-* temp folder gone at exit, after an error and after
Ctrl-C. Slow (each test starts a JVM)."""
from __future__ import annotations

import pytest
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import FIXTURES
from test_cli_matrix import RMQCTL

pytestmark = pytest.mark.spark

STORE = FIXTURES / "stores" / "basic-multifile-v5" / "store"


def _bare_env(tmp: Path) -> dict:
    """No venv on PATH, no PYSPARK_* or VIRTUAL_ENV, a private temp folder to look for leftovers in: TMPDIR
    (Python's) and the JVM's default java.io.tmpdir (where Spark makes spark-*, artifacts-*, blockmgr-* unless told
    otherwise; Java ignores TMPDIR)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK_", "SPARK_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if Path(p).is_dir())
    env["TMPDIR"] = str(tmp)
    env["JAVA_TOOL_OPTIONS"] = f'"-Djava.io.tmpdir={tmp}"'     # quoted: the folder's name has a blank
    env["COLUMNS"] = "100"
    return env


def _temp(tmp_path: Path) -> Path:
    """The private temp folder, named with a blank (JVM options are split at blanks unless quoted)."""
    t = tmp_path / "temp folder"
    t.mkdir()
    return t


def _leftovers(tmp: Path) -> list:
    """Whatever is in the private temp folder."""
    return sorted(p.name for p in tmp.iterdir())


def test_stats_by_absolute_path_without_the_venv_on_path(tmp_path):
    tmp = _temp(tmp_path)
    env = _bare_env(tmp)
    assert str(RMQCTL.parent) not in env["PATH"].split(os.pathsep)
    local = subprocess.run([str(RMQCTL), "stats", "--engine", "local", STORE, "--json"], capture_output=True,
                           timeout=120, env=env)
    assert local.returncode == 0, local.stderr
    r = subprocess.run([str(RMQCTL), "stats", STORE, "--json", "--master", "local[1]"], capture_output=True,
                       timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    got, want = json.loads(r.stdout), json.loads(local.stdout)
    assert got["totals"] == want["totals"] and got["totals"]["messages"] > 0
    assert _leftovers(tmp) == []


def test_temp_folder_removed_after_an_error(tmp_path):
    tmp = _temp(tmp_path)
    env = _bare_env(tmp)
    out = tmp_path / "exists"
    out.mkdir()
    (out / "keep").write_text("x")
    r = subprocess.run([str(RMQCTL), "export", STORE, "--out", out, "--master", "local[1]"], capture_output=True,
                       timeout=300, env=env)
    assert r.returncode not in (0, 1), r.stderr          # refused: the output directory exists
    assert b"Traceback" not in r.stderr and b"internal error" not in r.stderr
    assert (out / "keep").exists()
    assert _leftovers(tmp) == []


def test_temp_folder_removed_after_ctrl_c(tmp_path):
    tmp = _temp(tmp_path)
    env = _bare_env(tmp)
    p = subprocess.Popen([str(RMQCTL), "stats", STORE, "--master", "local[1]"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 240
    while not _leftovers(tmp) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert _leftovers(tmp), "the Spark session never created its folder"   # the state to clean up exists
    time.sleep(1.0)                      # well inside the JVM start-up
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode in (130, 0), err[-2000:]         # 0 only if the job finished before the signal
    assert b"Traceback" not in err
    assert _leftovers(tmp) == []
    deadline = time.monotonic() + 20        # and no JVM of that run outlives it
    while _processes_with(str(tmp)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with(str(tmp)) == []


def _processes_with(tmpdir: str) -> list:
    """Processes whose environment holds TMPDIR=tmpdir (the rmqctl run under test and its children)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if f"TMPDIR={tmpdir}".encode() in (d / "environ").read_bytes().split(b"\0"):
                    out.append(int(d.name))
            except OSError:
                continue
    return out
