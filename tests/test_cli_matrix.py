"""The CLI matrix: every read-only command and output mode, on every fixture store and every
real-world file, through the installed console script, three ways: stdout piped, stdout on a
pseudo-terminal, stdout piped into a reader that closes after the first line.

Asserted everywhere: the exit code is the expected one (fixtures: 0, or 4 for verify where the store
has an abort file; real-world files: derived from the --json run's own content -- trailer problems,
verify findings, config copy states -- and the text modes must agree with it); no traceback and no
"internal error"; --json output parses line by line; only printable text, \\n and \\t reach stdout
(on the terminal with output post-processing off, so a raw CR would show); a closed pipe exits 0.
"""
from __future__ import annotations

import json
import os
import pty
import re
import resource
import select
import subprocess
import sys
import tempfile
import time
import tty
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import FIXTURES, real_world_files

RMQCTL = Path(sys.executable).parent / "rmqctl"
STORES = sorted((FIXTURES / "stores").glob("*/store"))
ROOT_MARKERS = ("commitlog", "consumequeue", "checkpoint", "config", "index")
TIMEOUT = 120
THREADS = 3
BATCH = 64          # paths per dump process
# Anything but printable text, \n and \t: C0, DEL, C1, Unicode line separators and bidi controls.
# Internal fault/rule/spec ids (F10, R13, §7.7) never reach a user.
INTERNAL_ID = re.compile(r"\((?:[^()]*[ ,;])?[FR]\d{1,2}\b|\b(?:faults|F|R)\s?\d{1,2}[,;)]|§\s?\d")
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# Piped --json is exact JSON: C0 is always escaped there, DEL/C1 may stand inside strings.
RAW_C0 = re.compile("[\x00-\x08\x0b-\x1f]")


@dataclass
class Case:
    name: str
    args: list
    json: bool = False
    expect: int | None = None          # fixed expectation; None = derived (see _derive)
    derive: str = ""                   # how to derive from a --json run: dump|verify|config|query
    twin: str = ""                     # text case: must exit like this --json case
    must_contain: str = ""             # --json: some line must hold this
    prom: str = ""                     # --prometheus file to check


@dataclass
class Result:
    rc: int
    out: bytes
    err: bytes
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def _env(tty_mode: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "RMQCTL_DEBUG")}
    env["COLUMNS"] = "100"
    if tty_mode:
        env["TERM"] = "xterm-256color"
    return env


def run_pipe(args) -> Result:
    t = time.monotonic()
    p = subprocess.run([str(RMQCTL), *map(str, args)], stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=TIMEOUT, env=_env(False))
    return Result(p.returncode, p.stdout, p.stderr, time.monotonic() - t)


def run_pty(args) -> Result:
    """stdout and stderr each on a pseudo-terminal in raw mode (no \\n -> \\r\\n), read to EOF."""
    t = time.monotonic()
    mo, so = pty.openpty()
    me, se = pty.openpty()
    for fd in (so, se):
        tty.setraw(fd)
    try:
        p = subprocess.Popen([str(RMQCTL), *map(str, args)], stdin=subprocess.DEVNULL, stdout=so, stderr=se,
                             env=_env(True), close_fds=True)
    finally:
        os.close(so)
        os.close(se)
    bufs = {mo: bytearray(), me: bytearray()}
    live = {mo, me}
    deadline = time.monotonic() + TIMEOUT
    try:
        while live:
            left = deadline - time.monotonic()
            if left <= 0:
                p.kill()
                raise AssertionError(f"timeout on a terminal: rmqctl {' '.join(map(str, args))}")
            ready, _, _ = select.select(list(live), [], [], min(left, 1.0))
            for fd in ready:
                try:
                    data = os.read(fd, 1 << 16)
                except OSError:           # EIO: the slave side is closed
                    data = b""
                if data:
                    bufs[fd] += data
                else:
                    live.discard(fd)
            if not ready and p.poll() is not None and not live:
                break
        rc = p.wait(timeout=TIMEOUT)
    finally:
        os.close(mo)
        os.close(me)
    return Result(rc, bytes(bufs[mo]), bytes(bufs[me]), time.monotonic() - t)


def run_closed(args) -> Result:
    """stdout into a reader that reads one line and closes the pipe (`| head -1`)."""
    t = time.monotonic()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen([str(RMQCTL), *map(str, args)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=err, env=_env(False))
        first = p.stdout.readline()
        p.stdout.close()
        rc = p.wait(timeout=TIMEOUT)
        err.seek(0)
        return Result(rc, first, err.read(), time.monotonic() - t)


# --- the plan --------------------------------------------------------------------------------------------
def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file() and not p.is_symlink())


def _batches(paths):
    paths = list(paths)
    for i in range(0, len(paths), BATCH):
        yield paths[i:i + BATCH]


def _pick_message(store: Path):
    """A message to query for: the first one in the first commitlog file, preferring one with keys."""
    from rmqctl import dumping
    from rmqctl.render import offset_msg_id

    files = sorted(p for p in (store / "commitlog").glob("*") if p.is_file() and p.name.isdigit())
    for f in files[:1]:
        first = None
        try:
            for tag, r in dumping.commitlog_file(f):
                if tag != "message":
                    break
                first = first or r
                if r.properties.get("KEYS") and r.properties.get("UNIQ_KEY"):
                    return r, offset_msg_id(r.store_host_raw, r.store_port, r.physical_offset)
        except Exception:  # noqa: BLE001 - a damaged file: take what was read
            pass
        if first is not None:
            return first, offset_msg_id(first.store_host_raw, first.store_port, first.physical_offset)
    return None, None


QUERY_MODES = ("msgid", "queue", "time", "key", "uniq")


def _query_cases(tag: str, store: Path, expect, n: int) -> list[Case]:
    """--phys-offset as JSON and text on every store, and one more mode in turn (every mode meets
    several stores; the text rendering is the same for all modes)."""
    r, msg_id = _pick_message(store)
    if r is None:
        return []
    p = str(r.physical_offset)
    modes = {"phys": ["--phys-offset", p], "msgid": ["--msg-id", msg_id],
             "queue": ["--topic", r.topic, "--queue", str(r.queue_id), "--offset", str(r.queue_offset)],
             "time": ["--topic", r.topic, "--queue", str(r.queue_id), "--time", str(r.store_timestamp)]}
    if r.properties.get("KEYS"):
        modes["key"] = ["--topic", r.topic, "--key", r.properties["KEYS"].split(" ")[0]]
    if r.properties.get("UNIQ_KEY"):
        modes["uniq"] = ["--topic", r.topic, "--uniq-key", r.properties["UNIQ_KEY"]]
    extra = [m for m in QUERY_MODES if m in modes]
    cases = []
    for m in ["phys", extra[n % len(extra)]]:
        j = f"{tag} query {m} --json"
        cases.append(Case(j, ["query", store, *modes[m], "--json"], json=True, expect=expect,
                          derive="" if expect is not None else "query", must_contain=f'"physical_offset":{p},'))
        if m == "phys":
            cases.append(Case(f"{tag} query {m}", ["query", store, *modes[m]], twin=j))
    return cases


def _config_cases(tag: str, root: Path, expect, n: int) -> list[Case]:
    """status (loads every file) as JSON and text, and show on one file, as text or JSON in turn."""
    cdir = root / "config"
    if not cdir.is_dir():
        return []
    j = f"{tag} config status --json"
    cases = [Case(j, ["config", "status", root, "--json"], json=True, expect=expect,
                  derive="" if expect is not None else "config"),
             Case(f"{tag} config status", ["config", "status", root], twin=j)]
    names = sorted({p.name[:-4] if p.name.endswith(".bak") else p.name for p in cdir.iterdir() if p.is_file()})
    if names:
        name = names[n % len(names)]
        target = cdir / name if (cdir / name).exists() else cdir / (name + ".bak")
        js = f"{tag} config show {name} --json"
        cases.append(Case(js, ["config", "show", target, "--json"], json=True, expect=expect,
                          derive="" if expect is not None else "config"))
        if n % 2:
            cases.append(Case(f"{tag} config show {name}", ["config", "show", target], twin=js))
    return cases


def _dump_cases(tag: str, paths, expect) -> list[Case]:
    out = []
    for i, chunk in enumerate(_batches(paths)):
        j = f"{tag} dump #{i} --json"
        out.append(Case(j, ["dump", *chunk, "--json"], json=True, expect=expect,
                        derive="" if expect is not None else "dump"))
        out.append(Case(f"{tag} dump #{i}", ["dump", *chunk], twin=j))
    return out


def _store_cases(tag: str, root: Path, files, *, fixture: bool, tmp: Path, n: int) -> list[Case]:
    cases = []
    prom = tmp / (re.sub(r"\W", "_", tag) + ".prom")
    verify_expect = (4 if (root / "abort").exists() else 0) if fixture else None
    fixed = 0 if fixture else None
    # one batch: the store root (summary), the commitlog as a directory, every other file by name
    cl = root / "commitlog"
    is_root = any((root / m).exists() for m in ROOT_MARKERS)
    paths = ([root] if is_root else []) + ([cl] if cl.is_dir() else []) + [f for f in files if cl not in f.parents]
    cases += _dump_cases(tag, paths, fixed)
    if not is_root:
        return cases
    vj = f"{tag} verify --json"
    cases += [Case(vj, ["verify", root, "--json", "--prometheus", prom], json=True, expect=verify_expect,
                   derive="verify", prom=str(prom)),
              Case(f"{tag} verify", ["verify", root], twin=vj)]
    if fixture:
        cases.append(Case(f"{tag} verify --summary", ["verify", root, "--summary"], twin=vj))
    cases += _query_cases(tag, root, fixed, n)
    cases += _config_cases(tag, root, fixed, n)
    if cl.is_dir():     # the in-process engine; JSON and text in turn (about 2 s each)
        a = ["stats", "--engine", "local", root]
        cases.append(Case(f"{tag} stats --json", a + ["--json"], json=True, expect=0) if n % 2 else
                     Case(f"{tag} stats", a, expect=0))
    return cases


def _real_world_roots() -> dict[Path, list[Path]]:
    """Real-world files grouped by the store root they belong to (the nearest ancestor that looks
    like one), else by their directory."""
    groups: dict[Path, list[Path]] = {}
    for f in real_world_files():
        root = next((d for d in f.parents if any((d / m).exists() for m in ROOT_MARKERS)), f.parent)
        groups.setdefault(root, []).append(f)
    return groups


def plan(tmp: Path) -> list[Case]:
    cases = []
    for n, s in enumerate(STORES):
        cases += _store_cases(s.parent.name, s, _files(s), fixture=True, tmp=tmp, n=n)
    groups = sorted(_real_world_roots().items())
    top = Path(os.path.commonpath([str(r) for r, _ in groups])) if groups else Path()
    for n, (root, files) in enumerate(groups):
        cases += _store_cases(f"real-world {root.relative_to(top)}", root, files, fixture=False, tmp=tmp, n=n)
    return cases


# --- judging ---------------------------------------------------------------------------------------------
def _json_lines(out: bytes) -> list:
    return [json.loads(line) for line in out.decode("utf-8").splitlines() if line.strip()]


def _error_lines(err: bytes) -> list[str]:
    return [ln for ln in err.decode("utf-8", "replace").splitlines()
            if ln.startswith("rmqctl: ") and not ln.startswith("rmqctl: warning:")]


def _derive(c: Case, r: Result) -> int:
    """The exit code a --json run must have, from what it printed (not from its exit code)."""
    if c.expect is not None:
        return c.expect
    docs = _json_lines(r.out)
    if c.derive == "dump":
        damaged = any(d.get("kind") == "trailer" and d.get("problem") for d in docs) or bool(_error_lines(r.err))
        return 4 if damaged else 0
    if c.derive == "verify":
        counts = docs[0]["counts"]
        return 4 if counts.get("error", 0) + counts.get("warning", 0) else 0
    if c.derive == "config":
        if not docs:        # a copy neither the broker nor rmqctl can use: one error line
            return 4 if _error_lines(r.err) else 0
        good = all(d["used"] == "main" and d["main"]["status"] == "ok" for d in docs)
        return 0 if good else 4
    if c.derive == "query":   # 4 only with damage met on the way, which stderr names
        return 4 if r.rc == 4 and r.err.strip() else 0
    raise AssertionError(c.derive)


def _problems(c: Case, r: Result, expect: int, mode: str) -> list[str]:
    p = []
    label = f"[{mode}] {c.name}: rmqctl {' '.join(map(str, c.args))}"
    if r.rc != expect:
        p.append(f"{label}: exit {r.rc}, expected {expect}; stderr: {r.err[-300:]!r}")
    both = r.out + r.err
    if b"Traceback" in both or b"internal error" in both:
        p.append(f"{label}: traceback/internal error: {r.err[-300:]!r}")
    try:
        text = r.out.decode("utf-8")
    except UnicodeDecodeError as e:
        p.append(f"{label}: stdout is not UTF-8: {e}")
        text = r.out.decode("utf-8", "replace")
    m = (RAW_C0 if c.json and mode != "pty" else RAW_CONTROL).search(text)
    if m:
        p.append(f"{label}: raw control {m.group()!r} on stdout near {text[max(0, m.start() - 40):m.end() + 10]!r}")
    ids = INTERNAL_ID.search(r.out.decode("utf-8", "replace") + r.err.decode("utf-8", "replace"))
    if ids:
        p.append(f"{label}: internal id {ids.group()!r} in user-facing text")
    if mode == "pty" and b"[progress." in r.err:
        p.append(f"{label}: rich markup printed literally on stderr: {r.err[-200:]!r}")
    if c.json and mode != "closed":
        try:
            docs = _json_lines(r.out)
        except ValueError as e:
            p.append(f"{label}: --json output does not parse: {e}")
        else:
            if c.must_contain and not any(c.must_contain in json.dumps(d, separators=(",", ":")) for d in docs):
                p.append(f"{label}: expected a result holding {c.must_contain}")
    return p


def _cpu() -> str:
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    return f" (CPU of all child processes so far: {cpu.ru_utime + cpu.ru_stime:.1f} s)"


def _run_all(fn, cases):
    with ThreadPoolExecutor(THREADS) as ex:
        return list(ex.map(lambda c: fn(c.args), cases))


@pytest.fixture(scope="module")
def piped(tmp_path_factory):
    """Every case run with stdout piped (--json cases first: they give the text cases' expectations)."""
    assert RMQCTL.is_file(), f"console script not installed at {RMQCTL}"
    assert STORES and real_world_files(), "fixture stores and the real-world corpus must be there"
    tmp = tmp_path_factory.mktemp("matrix")
    cases = plan(tmp)
    t = time.monotonic()
    results = dict(zip((c.name for c in cases), _run_all(run_pipe, cases)))
    expect = {}
    for c in cases:
        if c.json:
            expect[c.name] = _derive(c, results[c.name])
    for c in cases:
        if not c.json:
            expect[c.name] = c.expect if c.expect is not None else expect[c.twin]
    return cases, results, expect, time.monotonic() - t


def test_matrix_piped(piped):
    cases, results, expect, secs = piped
    names = [c.name for c in cases]
    assert len(set(names)) == len(names)
    problems = []
    for c in cases:
        problems += _problems(c, results[c.name], expect[c.name], "pipe")
        if c.prom:
            body = Path(c.prom).read_text()
            if "rmqctl" not in body:
                problems.append(f"{c.name}: --prometheus file holds no rmqctl metric")
    # the matrix really covers both verdicts and all output modes
    assert {expect[c.name] for c in cases} >= {0, 4}
    print(f"\nCLI matrix, piped: {len(cases)} runs in {secs:.1f} s{_cpu()}")
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} problems)"


def test_matrix_terminal(piped):
    cases, _, expect, _ = piped
    # the text modes (what an operator reads), and dump --json (data straight from the files)
    cases = [c for c in cases if not c.json or c.args[0] == "dump"]
    t = time.monotonic()
    results = _run_all(run_pty, cases)
    problems = []
    for c, r in zip(cases, results):
        problems += _problems(c, r, expect[c.name], "pty")
    print(f"\nCLI matrix, terminal: {len(cases)} runs in {time.monotonic() - t:.1f} s{_cpu()}")
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} problems)"


def test_matrix_closed_pipe(piped):
    cases, results, expect, _ = piped
    # only runs that print more than one line can meet a closed pipe
    multi = [c for c in cases if results[c.name].out.count(b"\n") > 1]
    t = time.monotonic()
    closed = _run_all(run_closed, multi)
    problems = []
    for c, r in zip(multi, closed):
        # exit 0 once the pipe is closed; a run that finished first keeps its own code
        problems += _problems(c, r, 0 if r.rc == 0 else expect[c.name], "closed")
    print(f"\nCLI matrix, closed pipe: {len(multi)} runs in {time.monotonic() - t:.1f} s{_cpu()}")
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} problems)"


def test_closed_pipe_20_of_20():
    """`dump --json COMMITLOG | head -1`, 20 times: exit 0 every time (the output is far larger than
    the pipe's buffer, so rmqctl is still writing when the reader goes)."""
    target = FIXTURES / "stores" / "bodies-v5" / "store" / "commitlog"
    args = ["dump", target, "--json", "--body", "hex"]
    full = run_pipe(args)
    assert full.rc == 0 and len(full.out) > 2 * 65536, (full.rc, len(full.out))   # > 2 pipe buffers
    codes = [run_closed(args) for _ in range(20)]
    assert all(len(r.out) > 0 and r.out.endswith(b"\n") for r in codes)
    assert [r.rc for r in codes] == [0] * 20, [(r.rc, r.err[-200:]) for r in codes if r.rc]
    assert not any(r.err for r in codes), [r.err for r in codes if r.err][:3]
