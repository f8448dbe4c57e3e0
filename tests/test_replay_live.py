"""Salvage, then replay into a live 5.3.3 broker + proxy (tests/live), SIGKILL the first run mid-way, rerun with
the same resume file, consume everything back: equal to the export (the one message a kill can leave in doubt
is sent again and may arrive twice, never missing)."""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from live.cluster import Cluster
from test_salvage import _rows, _store

from rmqctl.replay import INTERNAL, RESERVED

# messages per second in the first run: slow enough to kill it mid-way
RATE = "25/s"


def _exported(out):
    c = Counter()
    for r in _rows(out):
        p = r["properties"]
        c[(r["topic"], r["tags"], tuple(sorted(r["keys"])),
           tuple(sorted((k, v) for k, v in p.items() if k not in RESERVED and k not in INTERNAL)),
           base64.b64decode(r["body"]))] += 1
    return c


def _replay(src, endpoint, resume, *extra):
    return subprocess.Popen([sys.executable, "-m", "rmqctl", "replay", str(src), "--to", endpoint, "--resume",
                             str(resume), "--json", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, NO_COLOR="1"))


def _receive_all(endpoint, topics, want, timeout=90):
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        SimpleConsumer,
    )

    got, errors = Counter(), []
    c = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), "ReplayCheck",
                       {t: FilterExpression() for t in topics}, 3)     # long polls of 3 s
    c.startup()
    try:
        deadline = time.monotonic() + timeout
        quiet = 0
        while time.monotonic() < deadline and (sum(got.values()) < want or quiet < 1):
            try:
                ms = c.receive(32, 20)                       # invisible for 20 s until acked
            except Exception as e:      # noqa: BLE001 - settings not yet synced right after startup
                errors.append(str(e))
                time.sleep(0.5)
                continue
            quiet = 0 if ms else quiet + 1
            for m in ms:
                got[(m.topic, m.tag, tuple(sorted(m.keys)), tuple(sorted(m.properties.items())), m.body)] += 1
                c.ack(m)
    finally:
        c.shutdown()
    assert got or not errors, errors[-1]
    return got


@pytest.mark.live
def test_salvage_replay_kill_resume_consume(cli, tmp_path):
    s = _store(tmp_path, "basic-multifile", "v5")
    out = tmp_path / "salvage"
    code, o, e = cli("export", s, "--unconsumed", "--format", "jsonl", "--out", out)
    assert code == 0, e
    want = _exported(out)
    n = sum(want.values())
    assert n == 58 and len(want) == n         # every salvaged message distinct
    topics = sorted({k[0] for k in want})
    with Cluster(tmp_path / "cluster", {t: 4 for t in topics}, groups=("ReplayCheck",)) as cl:
        resume = tmp_path / "replay.resume"
        p = _replay(out, cl.grpc_endpoint, resume, "--rate", RATE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            text = resume.read_text() if resume.exists() else ""
            if text.count("\nsent\t") + text.startswith("sent\t") >= 10:
                break
            time.sleep(0.05)
        assert p.poll() is None, f"the first run ended before it could be killed: {p.communicate()}"
        p.send_signal(signal.SIGKILL)
        p.wait()
        lines = resume.read_text().splitlines()
        sent_first = sum(1 for x in lines if x.startswith("sent\t"))
        assert 10 <= sent_first < n                   # killed mid-way
        p = _replay(out, cl.grpc_endpoint, resume)
        so, se = p.communicate(timeout=300)
        assert p.returncode == 0, se
        res = json.loads(so)
        assert res["already_sent"] == sent_first and res["failed"] == 0
        assert res["sent"] == n - sent_first - res["in_doubt_skipped"]
        assert res["in_doubt_resent"] in (0, 1)
        got = _receive_all(cl.grpc_endpoint, topics, n)
    assert set(got) == set(want)
    extra = sum(got.values()) - n
    assert 0 <= extra <= res["in_doubt_resent"]      # only the in-doubt message may arrive twice
