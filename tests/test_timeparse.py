"""The one time parser (rmqctl.timeparse) and its use by every command that takes a time."""
from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

import pytest

from rmqctl.errors import UsageError
from rmqctl.timeparse import parse_time

from conftest import FIXTURES, run_cli, writable_store

NOW = 1_800_000_000_000


def _ms(*a, tz):
    return int(dt.datetime(*a, tzinfo=tz).timestamp() * 1000)


@pytest.mark.parametrize("text,expect", [
    ("1700000000123", 1700000000123),
    ("2023-11-14T22:13:20.123Z", 1700000000123),
    ("2023-11-14T23:13:20.123+01:00", 1700000000123),
    ("2023-11-14 22:13:20.123+00:00", 1700000000123),
    ("20231114T221320Z", 1700000000000),
    ("now", NOW),
    ("-2h", NOW - 2 * 3600_000),
    ("-30m", NOW - 30 * 60_000),
    ("-7d", NOW - 7 * 86400_000),
    ("now-90s", NOW - 90_000),
    ("+1w", NOW + 7 * 86400_000),
])
def test_forms(text, expect):
    assert parse_time(text, now=NOW) == expect


def test_zoneless_forms_are_local_time_or_utc(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    try:
        sh = ZoneInfo("Asia/Shanghai")
        want = _ms(2024, 5, 1, 12, 0, 0, 250000, tz=sh)
        assert parse_time("2024-05-01#12:00:00:250") == want
        assert parse_time("2024-05-01T12:00:00.250") == want
        assert parse_time("2024-05-01 12:00:00.250") == want
        assert parse_time("2024-05-01") == _ms(2024, 5, 1, tz=sh)
        utc = _ms(2024, 5, 1, 12, 0, 0, 250000, tz=dt.timezone.utc)
        assert parse_time("2024-05-01#12:00:00:250", utc=True) == utc
        assert parse_time("2024-05-01T12:00:00.250", utc=True) == utc == want + 8 * 3600_000
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize("bad", ["", "yesterday", "2024-13-01", "2024-05-01#25:00:00:000", "-2x", "12:00"])
def test_bad_times_are_usage_errors(bad):
    with pytest.raises(UsageError) as e:
        parse_time(bad, "--begin")
    assert "--begin" in str(e.value) and "epoch milliseconds" in str(e.value)


ECHO = re.compile(r"rmqctl: (--\S+) (.*?) = (\S+Z) = (\d+) ms")


def _echoes(stderr: bytes) -> dict:
    return {m.group(1): int(m.group(4)) for m in ECHO.finditer(stderr.decode())}


@pytest.mark.spark
@pytest.mark.parametrize("tz", ["UTC", "Asia/Shanghai"])
def test_same_string_same_instant_in_every_command(tmp_path, tz):
    store = writable_store(tmp_path / "store")
    text = "2026-11-26#03:00:00:000"
    want = _ms(2026, 11, 26, 3, 0, 0, tz=ZoneInfo(tz))
    env = {"TZ": tz}
    from rmqctl.store.layout import Store

    topic = Store.open(store).queues()[0][0]

    r = run_cli("query", store, "--topic", topic, "--queue", 0, "--time", text, env=env)
    assert r.returncode in (0, 4), r.stderr
    assert _echoes(r.stderr) == {"--time": want}

    r = run_cli("config", "offsets", "reset", store, "-g", "G", "-t", topic, "--to-time", text, "-n", env=env)
    assert r.returncode == 0, r.stderr
    assert _echoes(r.stderr) == {"--to-time": want}
    by_string = r.stdout
    r = run_cli("config", "offsets", "reset", store, "-g", "G", "-t", topic, "--to-time", want, "-n", env=env)
    assert r.returncode == 0 and r.stdout == by_string

    # stats/export echo and check the window before Spark starts: an empty window is refused there
    for cmd in ("stats", "export"):
        extra = ("--out", tmp_path / "out") if cmd == "export" else ()
        r = run_cli(cmd, store, *extra, "--begin", text, "--end", text, env=env)
        assert r.returncode == 2, r.stderr
        assert _echoes(r.stderr) == {"--begin": want, "--end": want}
        assert b"--end is exclusive" in r.stderr


def test_utc_flag_overrides_local_zone(tmp_path):
    store = FIXTURES / "stores/basic-multifile-v5/store"
    r = run_cli("query", store, "--topic", "TopicA", "--queue", 0, "--time", "2024-05-01T12:00", "--utc",
                env={"TZ": "Asia/Shanghai"})
    assert _echoes(r.stderr) == {"--time": _ms(2024, 5, 1, 12, tz=dt.timezone.utc)}
    assert "read as UTC" in r.stderr.decode()
