"""rmqctl replay without a cluster: rows -> messages, the resume file, in-doubt handling, dry run, usage.
The sender here is a plain recording function (the live cluster test is tests/test_replay_live.py)."""
from __future__ import annotations

import base64
import json

import pytest

from rmqctl import replay as R
from rmqctl.errors import FormatError


def _row(off, topic="T", body=b"b", **kw):
    r = {"store": "s", "topic": topic, "queue_id": 0, "queue_offset": off, "physical_offset": 100 * off,
         "transaction_type": "NOT", "tags": "tg", "keys": ["k1", "k2"],
         "properties": {"KEYS": "k1 k2", "TAGS": "tg", "UNIQ_KEY": "U", "user": "v", "WAIT": "true"},
         "body": base64.b64encode(body).decode() if body is not None else None}
    r.update(kw)
    return r


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


class Recorder:
    def __init__(self, fail_on=(), die_at=None):
        self.sent, self.fail_on, self.die_at = [], set(fail_on), die_at

    def __call__(self, it):
        if self.die_at is not None and len(self.sent) == self.die_at:
            raise KeyboardInterrupt    # the process dies while the client holds this message
        if it.key in self.fail_on:
            raise RuntimeError("broker busy")
        self.sent.append(it)
        return f"id-{len(self.sent)}"


def test_item_fields_and_topics(tmp_path):
    rows = [_row(1), _row(2, topic="%RETRY%G", properties={"RETRY_TOPIC": "Orig", "RECONSUME_TIME": "2"}),
            _row(3, topic="%DLQ%G", properties={"DLQ_ORIGIN_TOPIC": "Orig2"}), _row(4, topic="SCHEDULE_TOPIC_XXXX"),
            _row(5, transaction_type="PREPARED"), _row(1)]   # the last: the same message listed for another group
    rec = Recorder()
    c = R.replay(R.read_rows(_write(tmp_path / "a.json", rows)), rec, None, topic_map={"Orig2": "New"})
    assert [(i.topic, i.tag, i.keys, i.properties, i.body) for i in rec.sent] == [
        ("T", "tg", ["k1", "k2"], {"user": "v"}, b"b"), ("Orig", "tg", ["k1", "k2"], {}, b"b"),
        ("New", "tg", ["k1", "k2"], {}, b"b")]
    assert (c.rows, c.sent, c.failed, c.duplicates) == (6, 3, 0, 1)
    assert set(c.not_sent) == {"scheduled (delay-level) message in SCHEDULE_TOPIC_XXXX", "PREPARED transaction message"}


def test_resume_skips_sent_retries_failed(tmp_path):
    src = _write(tmp_path / "a.json", [_row(i) for i in range(1, 6)])
    log = R.ResumeLog(tmp_path / "r")
    c = R.replay(R.read_rows(src), Recorder(fail_on={"s@300"}), log)
    log.close()
    assert (c.sent, c.failed) == (4, 1)
    lines = (tmp_path / "r").read_text().splitlines()
    assert lines[:2] == ["sending\ts@100", "sent\ts@100\tid-1"] and "failed\ts@300\tbroker busy" in lines
    rec = Recorder()
    log = R.ResumeLog(tmp_path / "r")
    c = R.replay(R.read_rows(src), rec, log)
    log.close()
    assert [i.key for i in rec.sent] == ["s@300"] and (c.sent, c.already_sent, c.failed) == (1, 4, 0)


@pytest.mark.parametrize("mode", ["resend", "skip"])
def test_kill_between_sending_and_sent(tmp_path, mode):
    src = _write(tmp_path / "a.json", [_row(i) for i in range(1, 6)])
    log = R.ResumeLog(tmp_path / "r")
    with pytest.raises(KeyboardInterrupt):
        R.replay(R.read_rows(src), Recorder(die_at=2), log)
    log.close()
    assert (tmp_path / "r").read_text().splitlines()[-1] == "sending\ts@300"    # the one in doubt
    with open(tmp_path / "r", "a") as f:
        f.write("sent\ts@4")                                                   # a torn last line
    log = R.ResumeLog(tmp_path / "r")
    assert log.in_doubt() == 1 and "s@4" not in log.state
    rec = Recorder()
    c = R.replay(R.read_rows(src), rec, log, in_doubt=mode)
    log.close()
    want = ["s@300", "s@400", "s@500"] if mode == "resend" else ["s@400", "s@500"]
    assert [i.key for i in rec.sent] == want
    assert (c.in_doubt_resent, c.in_doubt_skipped) == ((1, 0) if mode == "resend" else (0, 1))
    assert not (tmp_path / "r").read_text().endswith("sent\ts@4")


def test_bad_input_one_line(tmp_path, cli):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps(_row(1)) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(FormatError, match="line 2: not JSON"):
        list(R.read_rows(bad))
    code, o, e = cli("replay", bad, "--to", "127.0.0.1:8081", "--dry-run")
    assert code == 4 and e.count("\n") == 1 and "x.json: line 2: not JSON" in e and "Traceback" not in e
    (tmp_path / "r").write_text("junk\n")
    code, o, e = cli("replay", _write(tmp_path / "a.json", [_row(1)]), "--to", "h:1", "--resume", tmp_path / "r")
    assert code == 4 and "line 1: not a resume line" in e


def test_cli_dry_run_usage_and_no_body(tmp_path, cli):
    src = _write(tmp_path / "a.json", [_row(1), _row(2, body=None), _row(3)])
    code, o, e = cli("replay", src, "--to", "127.0.0.1:8081", "--dry-run", "--json")
    res = json.loads(o)
    assert code == 4 and res["sent"] == 2 and res["failed"] == 1 and "no body" in res["failures"][0]
    assert not (tmp_path / "r").exists()
    for args, msg in ((["--to", "nohost"], "--to wants HOST:PORT"), (["--to", "h:1", "--rate", "x"], "--rate"),
                      (["--to", "h:1", "--topic-map", "A"], "--topic-map wants OLD=NEW")):
        code, o, e = cli("replay", src, *args)
        assert code == 2 and msg in e
    code, o, e = cli("replay", tmp_path / "nope", "--to", "h:1")
    assert code == 2 and "no such file" in e


def test_cli_cannot_connect_exit_8(tmp_path, cli):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                      # nothing listens there now
    code, o, e = cli("replay", _write(tmp_path / "a.json", [_row(1)]), "--to", f"127.0.0.1:{port}")
    assert code == 8 and "could not connect" in e


def test_help_says_in_doubt_is_resent(cli):
    code, o, e = cli("replay", "--help")
    assert code == 0 and "SENT AGAIN by default" in o and "--in-doubt" in o


def test_parquet_input(tmp_path, cli):
    """A salvage written as Parquet replays the same items as its JSON Lines twin."""
    from test_salvage import _store

    s = _store(tmp_path, "retry-dlq", "v5")
    for fmt in ("jsonl", "parquet"):
        code, o, e = cli("export", s, "--unconsumed", "--format", fmt, "--out", tmp_path / fmt)
        assert code == 0, e
    a, b = Recorder(), Recorder()
    R.replay(R.read_rows(tmp_path / "jsonl"), a, None)
    R.replay(R.read_rows(tmp_path / "parquet"), b, None)
    assert [vars(i) | {"where": ""} for i in a.sent] == [vars(i) | {"where": ""} for i in b.sent]
    assert len(a.sent) == 7 and {i.topic for i in a.sent} == {"OrderTopic"}
