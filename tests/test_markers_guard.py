"""The conftest guard: a test that starts the oracle or Spark without its marker fails, so that
`-m "not oracle and not spark_cluster"` (the minimum-versions run) really leaves them out."""
import subprocess
import sys

import pytest

from conftest import ROOT


def test_unmarked_oracle_is_refused():
    with pytest.raises(RuntimeError, match="not marked @pytest.mark.oracle"):
        subprocess.run([str(ROOT / "tests/oracle/oracle"), "v5", "--help"])


def test_unmarked_live_cluster_is_refused():
    with pytest.raises(RuntimeError, match="not marked @pytest.mark.live"):
        subprocess.run(["java", "-cp", "none", "org.apache.rocketmq.proxy.ProxyStartup", "-pm", "local"])


def test_unmarked_spark_command_is_refused():
    with pytest.raises(RuntimeError, match="not marked @pytest.mark.spark"):
        subprocess.run([sys.executable, "-m", "rmqctl", "stats", "x"])


@pytest.mark.spark
def test_marked_spark_command_runs():
    r = subprocess.run([sys.executable, "-m", "rmqctl", "stats", "--help"], capture_output=True)
    assert r.returncode == 0


def test_other_commands_and_help_run_unmarked():
    for args in (["dump", "--help"], ["stats", "--help"]):
        r = subprocess.run([sys.executable, "-m", "rmqctl", *args], capture_output=True)
        assert r.returncode == 0, args
