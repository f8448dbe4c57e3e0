"""Fuzzing rmqctl with hostile store files.

Every file kind is mutated (bit flips, truncations, zero runs, garbage, huge length fields, deep
JSON, wrong JSON types, swapped kinds, links, FIFOs, empty files) inside a scratch copy of a fixture
store, and the read commands are run on it. A case fails when a command prints an internal error or
a traceback, hangs, exits outside {0, 1, 2, 4, 8}, or misses damage that matters (a flipped byte
covered by a body CRC, a damaged consume-queue field, a damaged config key).

In-process (``Fuzzer(...).run_case(n)``, used by tests/test_fuzz.py) or, for long runs, child
processes of 20 cases each under an address-space cap, with a per-command alarm and a per-child
timeout (the summary's max RSS is the largest child's)::

    python -m tests.fuzz --minutes 30 [--seed N] [--lenient config]

Cases are generated from (seed, case number) alone: ``--seed S --case N`` replays one.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORES = ROOT / "fixtures" / "stores"
EXITS = {0, 1, 2, 4, 8}
BASES = ("basic-multifile-v5", "crash-multifile-v4", "batch-v5", "delay-levels-v4")
CONFIG_NAMES = ("topics.json", "consumerOffset.json", "delayOffset.json", "subscriptionGroup.json",
                "consumerFilter.json", "topics.json.bak", "consumerOffset.json.bak")
# a damaged key the broker's fastjson would ignore (its table then starts EMPTY)
CONFIG_TABLES = {"topics.json": "topicConfigTable", "consumerOffset.json": "offsetTable",
                 "delayOffset.json": "offsetTable", "subscriptionGroup.json": "subscriptionGroupTable"}


class Hang(BaseException):   # not an Exception: run()'s last line of defence must not swallow it
    pass


@dataclass
class Case:
    seed: int
    n: int
    kind: str
    mutation: str
    rel: str                      # the mutated path, relative to the store root
    expect: str | None = None     # "crc" | "cq" | "config": damage verify must report
    base: str = ""


@dataclass
class Outcome:
    case: Case
    problems: list = field(default_factory=list)   # what went wrong (empty = pass)
    codes: dict = field(default_factory=dict)       # command -> exit code
    rss_kb: int = 0
    seconds: float = 0.0
    injected: bool = True        # the file really differs from what it was
    missed: bool = False         # case.expect damage not reported by verify


# --- the corpus ------------------------------------------------------------------------------------

def _first(d: Path, pattern: str = "*") -> Path | None:
    c = sorted(p for p in d.glob(pattern) if p.is_file())
    return c[0] if c else None


def _real_world_samples() -> dict:
    """kind -> a few real files written by real brokers (config JSON, timerwheel, timercheck...)."""
    try:
        sys.path.insert(0, str(ROOT / "tests"))
        from conftest import real_world_files
    except Exception:  # noqa: BLE001 - the corpus is optional input, fixtures alone still fuzz every kind
        return {}
    finally:
        if sys.path and sys.path[0] == str(ROOT / "tests"):
            sys.path.pop(0)
    out = defaultdict(list)
    for p in real_world_files():
        name = p.name
        if name in CONFIG_NAMES and p.stat().st_size < 256 * 1024:
            out[name].append(p)
        elif name in ("timercheck", "timerwheel", "checkpoint", "abort", "lock"):
            out[name].append(p)
    return out


def _synthetic(kind: str, rng: random.Random) -> bytes:
    """Plausible content for kinds the fixtures lack."""
    if kind == "consumequeue_ext":            # CqExtUnit: short size, long filterBitMapSize... (cheap stand-in)
        units = []
        for i in range(rng.randint(1, 40)):
            bm = bytes(rng.randint(0, 255) for _ in range(rng.choice((0, 8, 16))))
            units.append(struct.pack(">hqq", 20 + len(bm), rng.randint(0, 1 << 40), i) + bm)
        return b"".join(units).ljust(4096, b"\0")
    if kind == "batchconsumequeue":           # 46-byte units: offset, size, tagsCode, storeTime, base, batch, ...
        out = b""
        off = 0
        for i in range(rng.randint(1, 50)):
            out += struct.pack(">qiqqqhii", off, 200, 0, 1700000000000 + i, i * 4, 4, 0, 0)
            off += 200
        return out.ljust(46 * 64, b"\0")
    if kind == "timerlog":                     # 52-byte units
        out = b"".join(struct.pack(">iqqiqii", 52, i - 1, i * 100, 1, 1700000000000, 0, 0).ljust(52, b"\0")
                       for i in range(rng.randint(1, 60)))
        return out.ljust(52 * 128, b"\0")
    if kind == "timerwheel":
        return bytes(32 * 4096)
    if kind == "timercheck":
        return struct.pack(">7q", 1700000000000, 0, 0, 0, 0, 0, 0)
    if kind == "compaction_position":
        return b'{"queueOffsetMap":{"TopicA_0":3,"TopicB_1":7}}'
    if kind == "consumerFilter.json":
        return b'{"filterDataByTopic":{}}'
    if kind == "subscriptionGroup.json":
        return (b'{"subscriptionGroupTable":{"G1":{"groupName":"G1","consumeEnable":true,"retryQueueNums":1,'
                b'"retryMaxTimes":16,"brokerId":0,"whichBrokerWhenConsumeSlowly":1}},'
                b'"dataVersion":{"timestamp":1700000000000,"counter":1}}')
    if kind == "topics.json":
        return (b'{"topicConfigTable":{"TopicA":{"topicName":"TopicA","readQueueNums":4,"writeQueueNums":4,'
                b'"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}},'
                b'"dataVersion":{"timestamp":1700000000000,"counter":1}}')
    if kind == "consumerOffset.json":
        return b'{"offsetTable":{"TopicA@G1":{0:3,1:4}}}'
    if kind == "delayOffset.json":
        return b'{"offsetTable":{1:0,2:5}}'
    return bytes(rng.randint(0, 255) for _ in range(64))


# Kinds: (kind, how to find/place the file in a base store)
KINDS = ("commitlog", "consumequeue", "consumequeue_ext", "batchconsumequeue", "index", "checkpoint", "abort",
         "lock", "timerlog", "timerwheel", "timercheck", "compaction_position", "compaction_log", "config")
BINARY_MUTATIONS = ("bitflip", "truncate", "zero_run", "garbage", "append_garbage", "huge_len", "swap_kind",
                    "empty", "fifo", "link_dev_zero", "link_urandom", "link_outside", "link_dangling",
                    "crc_byte", "cq_field")
JSON_MUTATIONS = ("bitflip", "truncate", "garbage", "deep_json", "wrong_type", "bad_key", "empty", "fifo",
                  "link_dev_zero", "link_outside", "huge_number", "swap_kind")


class Fuzzer:
    """Owns a scratch directory with one copy of each base store; each case mutates one file, runs
    the commands, then puts the file back."""

    def __init__(self, seed: int = 1, work: Path | None = None, *, subprocess_mode: bool = False,
                 case_timeout: float = 20.0, mem_mb: int = 1024, only: tuple = (), exclude: tuple = (),
                 lenient: tuple = ()):
        self.seed = seed
        self.lenient = lenient   # expectations whose miss is counted, not failed (work pending elsewhere)
        self.only, self.exclude = only, exclude   # mutation names
        self.work = Path(work or tempfile.mkdtemp(prefix="rmqctl-fuzz-"))
        self.own_work = work is None
        self.subprocess_mode = subprocess_mode
        self.case_timeout = case_timeout
        self.mem_mb = mem_mb
        self.real = _real_world_samples()
        self.stores = {}
        for b in BASES:
            dst = self.work / b
            if not dst.exists():
                shutil.copytree(STORES / b / "store", dst, symlinks=True)
            self.stores[b] = dst
        self.outside = self.work / "outside.bin"
        self.outside.write_bytes(b"not a store file\n" * 64)

    def close(self):
        if self.own_work:
            shutil.rmtree(self.work, ignore_errors=True)

    # -- cases --------------------------------------------------------------------------------------
    def case(self, n: int) -> Case:
        rng = random.Random(f"{self.seed}:{n}")
        kind = KINDS[n % len(KINDS)]
        base = BASES[(n // len(KINDS)) % len(BASES)]
        muts = JSON_MUTATIONS if kind in ("config", "compaction_position") else BINARY_MUTATIONS
        muts = [m for m in muts if m not in self.exclude]
        mutation = rng.choice(muts)
        if self.only:
            mutation = self.only[n % len(self.only)]
            kind = {"crc_byte": "commitlog", "cq_field": "consumequeue", "bad_key": "config",
                    "deep_json": kind if kind in ("config", "compaction_position") else "config"}.get(mutation, kind)
        if mutation == "crc_byte" and kind != "commitlog":
            mutation = "bitflip"
        if mutation == "cq_field" and kind != "consumequeue":
            mutation = "bitflip"
        rel = self._target(kind, base, rng)
        expect = {"crc_byte": "crc", "cq_field": "cq", "bad_key": "config"}.get(mutation)
        if mutation == "bad_key" and self.only:   # a file whose table key the broker needs
            rel = "config/" + rng.choice(sorted(CONFIG_TABLES))
        if expect == "config" and not any(rel.endswith(k) for k in CONFIG_TABLES):
            expect = None
        return Case(self.seed, n, kind, mutation, rel, expect, base)

    def _target(self, kind: str, base: str, rng: random.Random) -> str:
        root = self.stores[base]
        if kind == "commitlog":
            return "commitlog/" + rng.choice(sorted(os.listdir(root / "commitlog")))
        if kind == "consumequeue":
            t = rng.choice(sorted(os.listdir(root / "consumequeue")))
            q = rng.choice(sorted(os.listdir(root / "consumequeue" / t)))
            return f"consumequeue/{t}/{q}/" + sorted(os.listdir(root / "consumequeue" / t / q))[0]
        if kind == "index":
            names = sorted(os.listdir(root / "index")) if (root / "index").is_dir() else []
            return "index/" + (rng.choice(names) if names else "20240101000000000")
        if kind == "consumequeue_ext":
            return "consumequeue_ext/TopicA/0/" + "0" * 20
        if kind == "batchconsumequeue":
            return "batchconsumequeue/TopicB/0/" + "0" * 20
        if kind == "timerlog":
            return "timerlog/" + "0" * 20
        if kind == "timercheck":
            return "config/timercheck"
        if kind == "compaction_position":
            return "compaction/position-checkpoint"
        if kind == "compaction_log":
            return "compaction/compactionLog/TopicA/0/" + "0" * 20
        if kind == "config":
            return "config/" + rng.choice(CONFIG_NAMES)
        return kind   # checkpoint, abort, lock, timerwheel

    # -- mutation -----------------------------------------------------------------------------------
    def _original(self, case: Case, rng: random.Random) -> bytes:
        p = self.stores[case.base] / case.rel
        if os.path.isfile(p) and not os.path.islink(p):
            return p.read_bytes()
        name = Path(case.rel).name
        reals = self.real.get(name) or self.real.get(name.replace(".bak", ""))
        if reals:
            return rng.choice(reals).read_bytes()
        kind = name if case.kind == "config" else case.kind
        if case.kind == "compaction_log":   # a commitlog file (the one being mutated may be gone)
            src = self.stores[case.base] / "commitlog"
            names = sorted(n for n in os.listdir(src) if os.path.isfile(src / n) and not os.path.islink(src / n))
            return (src / names[0]).read_bytes() if names else _synthetic("timerlog", rng)
        if case.kind == "abort":
            return b""
        if case.kind == "lock":
            return b"1234"
        return _synthetic(kind.replace(".bak", ""), rng)

    def apply(self, case: Case):
        """Mutate the case's file in place; returns an undo callable."""
        rng = random.Random(f"{self.seed}:{case.n}:m")
        p = self.stores[case.base] / case.rel
        saved = None
        if os.path.lexists(p) and os.path.isfile(p) and not os.path.islink(p):
            saved = p.read_bytes()
        created_dirs = []
        d = p.parent
        while not d.exists():
            created_dirs.append(d)
            d = d.parent
        data = self._original(case, rng)
        p.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(p):
            os.unlink(p)
        self._mutate(case, p, bytearray(data), rng)
        self.injected = not (os.path.isfile(p) and not os.path.islink(p) and p.read_bytes() == data)

        def undo():
            if os.path.lexists(p):
                os.unlink(p)
            if saved is not None:
                p.write_bytes(saved)
            for dd in created_dirs:
                shutil.rmtree(dd, ignore_errors=True)
            q = self.stores[case.base] / "rmqctl-quarantine"
            if q.exists():
                shutil.rmtree(q, ignore_errors=True)
        return undo

    def _mutate(self, case: Case, p: Path, data: bytearray, rng: random.Random) -> None:
        m = case.mutation
        n = len(data)
        if m == "fifo":
            os.mkfifo(p)
            return
        if m in ("link_dev_zero", "link_urandom"):
            os.symlink("/dev/zero" if m == "link_dev_zero" else "/dev/urandom", p)
            return
        if m == "link_outside":
            os.symlink(self.outside, p)
            return
        if m == "link_dangling":
            os.symlink(self.work / "no-such-file", p)
            return
        if m == "empty":
            data = bytearray()
        elif m == "bitflip" and n:
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(min(n, 1 << 16))
                data[i] ^= 1 << rng.randrange(8)
        elif m == "truncate":
            data = data[:rng.randrange(n + 1)] if n else data
        elif m == "zero_run" and n:
            a = rng.randrange(n)
            data[a:a + rng.randint(1, 4096)] = bytes(min(n - a, 4096))[:len(data[a:a + 4096])]
            data = data[:n]
        elif m == "garbage" and n:
            a = rng.randrange(n)
            k = min(n - a, rng.randint(1, 512))
            data[a:a + k] = bytes(rng.randint(0, 255) for _ in range(k))
        elif m == "append_garbage":
            data += bytes(rng.randint(0, 255) for _ in range(rng.choice((1, 20, 4096))))
        elif m == "huge_len" and n >= 8:
            val = rng.choice((b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00",
                              b"\x7f\xff\xff\xff\xff\xff\xff\xff", b"\x00\x00\x00\x00"))
            a = rng.randrange(0, max(1, min(n - len(val), 8192)) + 1) // 4 * 4
            data[a:a + len(val)] = val
            data = data[:n]
        elif m == "swap_kind":
            other = rng.choice([k for k in KINDS if k != case.kind])
            data = bytearray(self._original(Case(case.seed, case.n, other, "", self._target(other, case.base, rng),
                                                 base=case.base), rng))
        elif m == "deep_json":
            depth = rng.choice((600, 2000, 20000))
            inner = rng.choice(("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth))
            data = bytearray(b'{"offsetTable":' + inner.encode() + b"}")
        elif m == "wrong_type":
            key = CONFIG_TABLES.get(Path(case.rel).name.replace(".bak", ""), "queueOffsetMap")
            val = rng.choice(("5", '"x"', "[]", "null", "true", "[1,2]", '{"a":"b"}', "1e999"))
            data = bytearray(f'{{"{key}":{val}}}'.encode())
        elif m == "bad_key":
            key = CONFIG_TABLES.get(Path(case.rel).name.replace(".bak", ""))
            if key and key.encode() in data:
                i = data.index(key.encode()) + len(key) - 1
                data[i] = ord("X") if data[i] != ord("X") else ord("Y")
            elif n:
                data[rng.randrange(n)] ^= 0x20
        elif m == "huge_number":
            key = CONFIG_TABLES.get(Path(case.rel).name.replace(".bak", ""), "queueOffsetMap")
            num = rng.choice(("9" * 40, "-9" * 20, "1e308", "0x7fffffff", "-0"))
            data = bytearray(f'{{"{key}":{{"A@B":{{0:{num}}},"TopicA_0":{num}}}}}'.encode())
        elif m == "crc_byte":
            self._flip_body(p, data, rng, case)
        elif m == "cq_field":
            self._flip_cq(data, rng, case)
        p.write_bytes(bytes(data))

    def _flip_body(self, p: Path, data: bytearray, rng: random.Random, case: Case) -> None:
        from rmqctl.scan import FileWalk

        bodies = []
        fd = os.open(_tmpwrite(data, self.work), os.O_RDONLY)
        try:
            for r in FileWalk(fd, int(p.name), len(data), 0, check_crc=False, check_phys=False, path=str(p)):
                if r.body_length > 0:
                    bodies.append((r.offset - int(p.name) + (r.body_rel - r.rel), r.body_length))
        finally:
            os.close(fd)
        if not bodies:
            case.expect = None
            return
        off, length = rng.choice(bodies)
        data[off + rng.randrange(length)] ^= 1 << rng.randrange(8)

    def _flip_cq(self, data: bytearray, rng: random.Random, case: Case) -> None:
        units = [i for i in range(len(data) // 20) if any(data[i * 20:i * 20 + 20])]
        if not units:
            case.expect = None
            return
        u = rng.choice(units)
        # physical offset (bytes 0-7) or size (8-11): low bytes, so the value stays plausible
        data[u * 20 + rng.choice((5, 6, 7, 10, 11))] ^= 1 << rng.randrange(8)

    # -- running ------------------------------------------------------------------------------------
    def commands(self, case: Case) -> list[list[str]]:
        root = str(self.stores[case.base])
        f = str(self.stores[case.base] / case.rel)
        cmds = [["dump", f], ["dump", "--json", f], ["verify", "--json", root]]
        if case.kind in ("commitlog", "consumequeue", "index", "checkpoint", "config"):
            cmds.append(["verify", f])
        if case.kind in ("config", "timercheck"):
            cmds.append(["config", "status", root])
        if case.kind in ("consumequeue", "index") and case.n % 3 == 0:
            cmds.append(["query", root, "--topic", "TopicA", "--queue", "0", "--offset", "0", "--count", "3"]
                        if case.kind == "consumequeue" else ["query", root, "--topic", "TopicA", "--key", "k1"])
        if case.kind == "commitlog" and case.n % 3 == 0:
            cmds.append(["query", root, "--phys-offset", "0"])
        if case.kind in ("commitlog", "consumequeue", "index", "checkpoint", "config") and case.n % 4 == 1:
            # the repairs' planning reads every file the read commands do, and more (nothing is written)
            cmds.append([["recover", "--dry-run", "--json", root], ["rebuild", "cq", "--dry-run", "--json", root],
                         ["rebuild", "index", "--dry-run", "--json", root]][case.n // 4 % 3])
        return cmds

    def run_case(self, n: int) -> Outcome:
        case = self.case(n)
        out = Outcome(case)
        t0 = time.time()
        undo = self.apply(case)
        out.injected = self.injected
        try:
            for cmd in self.commands(case):
                code, stdout, stderr = (self._run_sub if self.subprocess_mode else self._run_inproc)(cmd)
                name = " ".join(c for c in cmd[:2] if c.startswith("-") or os.sep not in c)
                out.codes[name] = code
                if code == "hang":
                    out.problems.append(f"hang (> {self.case_timeout}s): rmqctl {' '.join(cmd)}")
                    continue
                if code == "memory":
                    out.problems.append(f"memory cap ({self.mem_mb} MB) exceeded: rmqctl {' '.join(cmd)}")
                    continue
                if code not in EXITS:
                    out.problems.append(f"exit {code}: rmqctl {' '.join(cmd)}: {stderr.strip()[-300:]}")
                if "internal error" in stderr or "Traceback" in stderr:
                    out.problems.append(f"internal error: rmqctl {' '.join(cmd)}: {stderr.strip()[-500:]}")
                if cmd[0] == "verify" and cmd[-1] == str(self.stores[case.base]) and case.expect and code == 0:
                    out.missed = True
                    if case.expect not in self.lenient:
                        out.problems.append(f"missed damage ({case.expect}): rmqctl {' '.join(cmd)} exited 0")
        finally:
            undo()
        out.seconds = time.time() - t0
        return out

    def _run_inproc(self, cmd):
        from rmqctl.cli import run

        o, e = _Tail(), _Tail()   # bounded: the harness must not hold a long dump in memory

        def alarm(signum, frame):
            raise Hang()

        old = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, self.case_timeout)
        try:
            with redirect_stdout(o), redirect_stderr(e):
                code = run(list(cmd))
        except Hang:
            code = "hang"
        except SystemExit as x:
            code = x.code if isinstance(x.code, int) else 8
        except BaseException as x:  # noqa: BLE001 - anything escaping run() is a finding
            import traceback

            e.write("Traceback (escaped run()): " + "".join(traceback.format_exception(x)))
            code = 8
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        return code, o.getvalue(), e.getvalue()

    def _run_sub(self, cmd):
        cap = self.mem_mb * 1024 * 1024

        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

        env = dict(os.environ, NO_COLOR="1", COLUMNS="120", PYTHONPATH=str(ROOT))
        try:
            r = subprocess.run([sys.executable, "-m", "rmqctl", *cmd], capture_output=True, text=True,
                               timeout=self.case_timeout, env=env, preexec_fn=limit, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "hang", "", ""
        if "out of memory" in r.stderr or "MemoryError" in r.stderr:
            return "memory", r.stdout, r.stderr
        return r.returncode, r.stdout[-2000:], r.stderr


class _Tail(io.StringIO):
    """A text sink that keeps only the last 64 KiB written (enough for stderr's one-line errors)."""

    def write(self, text):
        n = super().write(text)
        if self.tell() > 1 << 17:
            keep = self.getvalue()[-(1 << 16):]
            self.seek(0)
            self.truncate()
            super().write(keep)
        return n


def _tmpwrite(data: bytes, work: Path) -> Path:
    p = work / "scan.tmp"
    p.write_bytes(bytes(data))
    return p


# --- long runs -----------------------------------------------------------------------------------

def _max_child_rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def _batch_in_child(seed, a, b, timeout, mem_mb, lenient, work) -> list[dict]:
    """Cases [a, b) in one child process (in-process there, SIGALRM per command), under an
    address-space cap; a child that dies or overruns is itself a finding."""
    cap = mem_mb * 1024 * 1024

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    cmd = [sys.executable, "-m", "tests.fuzz", "--in-process", "--seed", str(seed), "--range", str(a), str(b),
           "--timeout", str(timeout), "--work", str(work)] + [x for k in lenient for x in ("--lenient", k)]
    env = dict(os.environ, NO_COLOR="1", COLUMNS="120", PYTHONPATH=str(ROOT))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, preexec_fn=limit,
                           timeout=timeout * 6 * (b - a) + 60, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        shutil.rmtree(work, ignore_errors=True)   # the child could not undo its mutation: fresh copies
        return [{"n": a, "kind": "?", "mutation": "?", "rel": "?", "base": "?", "expect": None, "missed": False,
                 "codes": {}, "problems": [f"batch {a}..{b} overran its time: a hang the alarm did not stop"]}]
    try:
        return json.loads(r.stdout)
    except ValueError:
        shutil.rmtree(work, ignore_errors=True)
        return [{"n": a, "kind": "?", "mutation": "?", "rel": "?", "base": "?", "expect": None, "missed": False,
                 "codes": {}, "problems": [f"batch {a}..{b} died (exit {r.returncode}): {r.stderr.strip()[-400:]}"]}]


def _as_dict(o: Outcome) -> dict:
    c = o.case
    return {"n": c.n, "kind": c.kind, "mutation": c.mutation, "rel": c.rel, "base": c.base, "expect": c.expect,
            "missed": o.missed, "codes": {k: (v if isinstance(v, str) else int(v)) for k, v in o.codes.items()},
            "problems": o.problems}


def long_run(minutes: float, seed: int, start: int = 0, in_process: bool = False, timeout: float = 30.0,
             mem_mb: int = 1024, out=sys.stdout, lenient: tuple = (), batch: int = 20) -> int:
    deadline = time.time() + minutes * 60
    per_kind, per_mut, codes = Counter(), Counter(), Counter()
    expected, caught = Counter(), Counter()
    failures = []
    n = start
    work = Path(tempfile.mkdtemp(prefix="rmqctl-fuzz-"))
    fz = Fuzzer(seed, work / "inproc", case_timeout=timeout, lenient=lenient) if in_process else None
    try:
        while time.time() < deadline:
            if fz is not None:
                results = [_as_dict(fz.run_case(n))]
            else:
                results = _batch_in_child(seed, n, n + batch, timeout, mem_mb, lenient, work / "child")
            for d in results:
                per_kind[d["kind"]] += 1
                per_mut[d["mutation"]] += 1
                for k, c in d["codes"].items():
                    codes[(k, c)] += 1
                if d["expect"]:
                    expected[d["expect"]] += 1
                    caught[d["expect"]] += not d["missed"]
                if d["problems"]:
                    failures.append(d)
            n += 1 if fz is not None else batch
    finally:
        if fz is not None:
            fz.close()
        shutil.rmtree(work, ignore_errors=True)
    rss = resource.getrusage(resource.RUSAGE_SELF if in_process else resource.RUSAGE_CHILDREN).ru_maxrss
    w = out.write
    w(f"rmqctl fuzz: seed {seed}, cases {start}..{n - 1} ({n - start}), {minutes:g} min, "
      f"{'in-process' if in_process else f'child processes of {batch} cases'}, timeout {timeout:g}s per command, "
      f"cap {mem_mb} MB\n")
    w(f"max RSS of one {'process' if in_process else 'child (rmqctl + harness)'}: {rss / 1024:.1f} MB\n\n")
    w(f"{'kind':22s} {'cases':>7s}\n")
    for k in KINDS:
        w(f"{k:22s} {per_kind[k]:7d}\n")
    w(f"\n{'mutation':22s} {'cases':>7s}\n")
    for k, v in sorted(per_mut.items()):
        w(f"{k:22s} {v:7d}\n")
    w(f"\n{'damage that matters':22s} {'injected':>9s} {'reported':>9s}\n")
    for k in sorted(expected):
        w(f"{k:22s} {expected[k]:9d} {caught[k]:9d}{'  (lenient)' if k in lenient else ''}\n")
    w(f"\n{'command':22s} exit codes\n")
    by_cmd = defaultdict(dict)
    for (k, c), v in codes.items():
        by_cmd[k][c] = v
    for k in sorted(by_cmd):
        w(f"{k:22s} " + ", ".join(f"{c}: {v}" for c, v in sorted(by_cmd[k].items(), key=lambda kv: str(kv[0])))
          + "\n")
    w(f"\nfailures: {len(failures)}\n")
    # failures by mutation first, then each case (deep JSON last: one known cause, many cases)
    for k, v in sorted(Counter(d["mutation"] for d in failures).items()):
        w(f"  {k:20s} {v:6d}\n")
    failures.sort(key=lambda d: (d["mutation"] == "deep_json", d["n"]))
    for d in failures[:60]:
        w(f"  python -m tests.fuzz --in-process --seed {seed} --case {d['n']}  # {d['kind']} {d['mutation']} "
          f"{d['base']}/{d['rel']}\n")
        for p in d["problems"][:3]:
            w(f"      {p[:400]}\n")
    return 1 if failures else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--start", type=int, default=0, help="first case number")
    ap.add_argument("--case", type=int, help="replay one case (with its --seed) and print what happened")
    ap.add_argument("--in-process", action="store_true", help="run commands in this process (faster, less isolated)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per command")
    ap.add_argument("--mem-mb", type=int, default=1024, help="address-space cap per command (subprocess mode)")
    ap.add_argument("--lenient", action="append", default=[], choices=("crc", "cq", "config"),
                    help="count, do not fail, missed damage of this kind (work pending elsewhere)")
    ap.add_argument("--range", nargs=2, type=int, metavar=("A", "B"), help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.range:   # a child of a long run: cases [A, B) in-process, JSON on stdout
        fz = Fuzzer(a.seed, Path(a.work) if a.work else None, case_timeout=a.timeout, lenient=tuple(a.lenient))
        res = []
        try:
            for n in range(*a.range):
                res.append(_as_dict(fz.run_case(n)))
        finally:
            if not a.work:
                fz.close()
        sys.stdout.write(json.dumps(res))
        return 0
    if a.case is not None:
        fz = Fuzzer(a.seed, subprocess_mode=not a.in_process, case_timeout=a.timeout, mem_mb=a.mem_mb)
        try:
            o = fz.run_case(a.case)
        finally:
            fz.close()
        print(json.dumps({"case": o.case.__dict__, "codes": o.codes, "problems": o.problems}, indent=1))
        return 1 if o.problems else 0
    return long_run(a.minutes, a.seed, a.start, a.in_process, a.timeout, a.mem_mb, lenient=tuple(a.lenient))


if __name__ == "__main__":
    sys.exit(main())
