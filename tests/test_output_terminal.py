"""Text output on a pipe and on a terminal (the installed console script on a real pseudo-terminal).

Piped, a table is plain aligned text: no box drawing, never wrapped, one row per line, a 167-character
topic whole on its line. On a terminal, rich draws the table and folds a long name inside its cell
(never cut). The progress bar: on a terminal only, only after RMQCTL_PROGRESS_AFTER seconds, with
bytes/s and an ETA, plain text, and erased before results reach the same terminal."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORES = ROOT / "fixtures" / "stores"
LONG = STORES / "long-topic-v2-v5" / "store"
BASIC = STORES / "basic-multifile-v4" / "store"
RMQCTL = Path(sys.executable).parent / "rmqctl"
BOX = re.compile("[\u2500-\u257f]")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "RMQCTL_PROGRESS_AFTER")}
    env["TERM"] = "xterm-256color"
    env.update(extra)
    return env


def long_topic() -> str:
    names = [p.name for p in (LONG / "consumequeue").iterdir()]
    t = max(names, key=len)
    assert len(t) == 167, (len(t), t)        # the fixture still holds what this test is about
    return t


def piped(*args, **env) -> tuple[int, str, str]:
    p = subprocess.run([str(RMQCTL), *map(str, args)], capture_output=True, text=True, timeout=120, check=False,
                       env=_env(**env), stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def on_pty(*args, cols: int = 80, stderr_piped: bool = False, **env) -> tuple[int, bytes, bytes]:
    """stdout and stderr on ONE pseudo-terminal (as in an operator's shell), or stderr piped."""
    mo, so = pty.openpty()
    fcntl.ioctl(so, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    p = subprocess.Popen([str(RMQCTL), *map(str, args)], stdin=subprocess.DEVNULL, stdout=so,
                         stderr=subprocess.PIPE if stderr_piped else so, env=_env(**env), close_fds=True)
    os.close(so)
    buf = bytearray()
    deadline = time.monotonic() + 120
    # poll, not select(): in a full run this process may hold descriptors above FD_SETSIZE
    poller = select.poll()
    poller.register(mo, select.POLLIN)
    try:
        while time.monotonic() < deadline:
            if not poller.poll(1000):
                if p.poll() is not None:
                    break
                continue
            try:
                data = os.read(mo, 1 << 16)
            except OSError:            # EIO: every writer closed the terminal
                break
            if not data:
                break
            buf += data
    finally:
        os.close(mo)
    err = p.stderr.read() if stderr_piped else b""
    return p.wait(timeout=30), bytes(buf), err


def screen(raw: bytes, cols: int = 80) -> list[str]:
    """What a terminal shows at the end: \\r, \\n, erase-to-end-of-line and autowrap at `cols`."""
    lines, row, col = [[]], 0, 0
    text = raw.decode("utf-8", errors="replace")
    i = 0
    while i < len(text):
        c = text[i]
        if text.startswith("\x1b[K", i):
            del lines[row][col:]
            i += 3
            continue
        if c == "\x1b":
            m = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]").match(text, i)
            assert m, repr(text[i:i + 10])
            i = m.end()
            continue
        if c == "\r":
            col = 0
        elif c == "\n":
            row += 1
            if row == len(lines):
                lines.append([])
        else:
            if col >= cols:
                row, col = row + 1, 0
                if row == len(lines):
                    lines.append([])
            line = lines[row]
            line.extend(" " * (col + 1 - len(line)))
            line[col] = c
            col += 1
        i += 1
    return ["".join(x).rstrip() for x in lines]


# --- tables -------------------------------------------------------------------------------------------------

def test_piped_tables_are_plain_unwrapped_text():
    topic = long_topic()
    for args in (["dump", LONG], ["stats", "--engine", "local", LONG], ["diff", LONG, BASIC]):
        code, out, err = piped(*args, COLUMNS="80")
        assert code in (0, 4), (args, err)
        assert not BOX.search(out), (args, out[:300])
        rows = [ln for ln in out.splitlines() if ln.startswith(topic)]
        assert rows, (args, out[:500])
        assert all(len(ln) > 167 for ln in rows)
        assert "\u2026" not in out
    # a table row: the topic, then its columns on the same line
    _, out, _ = piped("dump", LONG)
    row = next(ln for ln in out.splitlines() if ln.startswith(topic))
    assert row.split()[1:] == ["0", "1", "0", "3"], row      # queue, files, min offset, max offset
    header = next(ln for ln in out.splitlines() if ln.startswith("topic "))
    assert header.index("queue") > 167 and header.split() == ["topic", "queue", "files", "min", "offset", "max",
                                                              "offset"]


def test_verify_summary_piped_is_tsv():
    code, out, _ = piped("verify", "--summary", "-v", BASIC)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "check\tseverity\tcount\tfirst_at"
    assert lines[1].startswith("recovery.predicted\tinfo\t1\t")
    assert lines[-1].startswith("# messages=141 ") and lines[-1].endswith(" clean=yes")


def test_terminal_tables_are_rich_and_fold_long_names():
    topic = long_topic()
    for args in (["dump", LONG], ["stats", "--engine", "local", LONG]):
        code, raw, _ = on_pty(*args, cols=80)
        assert code == 0, args
        text = raw.decode()
        assert BOX.search(text) and "\u2026" not in text, args
        lines = screen(raw, 80)
        assert max(map(len, lines)) <= 80, args
        # the first column's cell, line after line, holds the whole topic
        cells = [ln.split("\u2502")[1].strip() for ln in lines if ln.startswith("\u2502")]
        assert topic in "".join(cells), args


# --- progress -----------------------------------------------------------------------------------------------

def _scan_store(tmp: Path) -> Path:
    """basic-multifile without consume queues: `query --offset` falls back to a commitlog scan that prints
    what it finds while it scans."""
    s = tmp / "store"
    shutil.copytree(BASIC, s)
    shutil.rmtree(s / "consumequeue")
    for p in [s, *s.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return s


def test_progress_bar_on_a_terminal_never_covers_results(tmp_path):
    store = _scan_store(tmp_path)
    args = ["query", store, "-t", "TopicC", "--queue", "0", "--offset", "0", "--count", "100", "--body", "none"]
    code, want, _ = piped(*args)
    assert code == 0 and want.count("@") == 50
    code, raw, _ = on_pty(*args, cols=200, RMQCTL_PROGRESS_AFTER="0")
    assert code == 0
    text = raw.decode()
    assert "scanning the commitlog" in text and "B/s" in text and "ETA" in text, text[:400]   # the bar was drawn
    assert "[progress" not in text and "[/" not in text and "[bold" not in text               # no markup
    shown = screen(raw, 200)
    assert not any("ETA" in ln for ln in shown), shown                                       # erased at the end
    results = [ln for ln in want.splitlines() if ln.strip()]
    it = iter(shown)
    for ln in results:                     # every result line intact, in order, none drawn over
        assert any(s == ln for s in it), ln


def test_progress_bar_waits_and_stays_off_pipes(tmp_path):
    store = _scan_store(tmp_path)
    args = ["query", store, "-t", "TopicC", "--queue", "0", "--offset", "0", "--count", "100", "--body", "none"]
    _, raw, _ = on_pty(*args, cols=100)                      # default: only after 2 s; this scan is quicker
    assert b"ETA" not in raw
    _, raw, err = on_pty(*args, cols=100, stderr_piped=True, RMQCTL_PROGRESS_AFTER="0")
    assert b"ETA" not in raw and b"ETA" not in err and b"\x1b" not in err
    code, out, err = piped(*args, RMQCTL_PROGRESS_AFTER="0")
    assert code == 0 and "ETA" not in err and "\x1b" not in err + out


def test_progress_bar_for_verify_on_a_terminal():
    code, raw, _ = on_pty("verify", "-v", BASIC, cols=100, RMQCTL_PROGRESS_AFTER="0")
    assert code == 0
    text = raw.decode()
    assert "verify" in text and "B/s" in text and "ETA" in text
    shown = screen(raw, 100)
    assert not any("ETA" in ln for ln in shown)
    assert any(ln.startswith("rmqctl: verify: 141 messages") for ln in shown), shown
