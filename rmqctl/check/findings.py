"""The findings model of `rmqctl verify` and its renderings (text, JSON, summary, Prometheus).

A Finding names one file and one offset; checks are dotted names (`commitlog.body_crc`) so that
cron jobs can grep and Prometheus can label them. Severities:
  error    corruption or an inconsistency the broker will act on (truncate, lose, refuse to start)
  warning  not corruption, but an operator must know (abort present, lock held, .bak will be used)
  info     notes (the broker's predicted recovery, a write in progress); never change the exit code
"""
from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)


@dataclass
class Finding:
    severity: str
    check: str
    path: str
    offset: int | None
    expected: object = None
    actual: object = None
    message: str = ""

    def line(self) -> str:
        """`file: offset N: [severity: ]check: expected X, actual Y: message` (one line, no newlines)."""
        parts = [self.path]
        if self.offset is not None:
            parts.append(f"offset {self.offset}")
        if self.severity != ERROR:
            parts.append(self.severity)
        parts.append(self.check)
        ea = []
        if self.expected is not None:
            ea.append(f"expected {self.expected}")
        if self.actual is not None:
            ea.append(f"actual {self.actual}")
        if ea:
            parts.append(", ".join(ea))
        if self.message:
            parts.append(self.message)
        return ": ".join(str(p).replace("\n", " ") for p in parts)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Report:
    store: str
    findings: list[Finding] = field(default_factory=list)
    stats: dict = field(default_factory=dict)     # bytes, messages, files, seconds ...

    def add(self, severity: str, check: str, path, offset: int | None, expected=None, actual=None,
            message: str = "") -> Finding:
        f = Finding(severity, check, str(path), offset, expected, actual, message)
        self.findings.append(f)
        return f

    def extend(self, findings) -> None:
        self.findings.extend(findings)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity != INFO]

    def sorted(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (f.path, -1 if f.offset is None else f.offset, f.check))

    # -- renderings ---------------------------------------------------------------------------------
    def text_lines(self, verbose: bool = False) -> list[str]:
        return [f.line() for f in self.sorted() if verbose or f.severity != INFO]

    def to_json(self, verbose: bool = True) -> dict:
        counts = Counter(f.severity for f in self.findings)
        return {"store": self.store, "clean": not self.problems,
                "counts": {s: counts.get(s, 0) for s in SEVERITIES},
                "stats": self.stats,
                "findings": [f.to_dict() for f in self.sorted() if verbose or f.severity != INFO]}

    def summary_rows(self) -> list[tuple[str, str, int, str]]:
        """(check, severity, count, first location) per check, errors first."""
        first: dict[tuple, Finding] = {}
        counts: Counter = Counter()
        for f in self.sorted():
            k = (f.check, f.severity)
            counts[k] += 1
            first.setdefault(k, f)
        order = {s: i for i, s in enumerate(SEVERITIES)}
        rows = []
        for (check, sev), n in sorted(counts.items(), key=lambda kv: (order[kv[0][1]], kv[0][0])):
            f = first[(check, sev)]
            where = f.path + (f": offset {f.offset}" if f.offset is not None else "")
            rows.append((check, sev, n, where))
        return rows

    def prometheus(self, exit_code: int, started: float | None = None) -> str:
        """node_exporter textfile collector format."""
        def esc(s: str) -> str:
            return str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

        store = esc(self.store)
        counts = Counter((f.check, f.severity) for f in self.findings)
        out = [
            "# HELP rmqctl_verify_findings Findings of the last rmqctl verify run, by check and severity.",
            "# TYPE rmqctl_verify_findings gauge",
        ]
        for sev in SEVERITIES:
            out.append(f'rmqctl_verify_findings{{store="{store}",check="all",severity="{sev}"}} '
                       f'{sum(n for (c, s), n in counts.items() if s == sev)}')
        for (check, sev), n in sorted(counts.items()):
            out.append(f'rmqctl_verify_findings{{store="{store}",check="{esc(check)}",severity="{sev}"}} {n}')
        gauges = [
            ("rmqctl_verify_clean", "1 if the last run found no problems.", int(not self.problems)),
            ("rmqctl_verify_exit_code", "Exit code of the last run (0 clean, 4 problems, 8 could not run).",
             int(exit_code)),
            ("rmqctl_verify_bytes_scanned", "Commitlog bytes scanned.", self.stats.get("bytes", 0)),
            ("rmqctl_verify_messages_scanned", "Commitlog messages scanned.", self.stats.get("messages", 0)),
            ("rmqctl_verify_duration_seconds", "Wall time of the last run.", self.stats.get("seconds", 0)),
        ]
        if started is not None:
            gauges.append(("rmqctl_verify_last_run_timestamp_seconds", "Start of the last run (unix time).",
                           round(started, 3)))
        for name, help_, v in gauges:
            out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f'{name}{{store="{store}"}} {v}']
        return "\n".join(out) + "\n"


def write_atomically(path, text: str) -> None:
    """tmp file in the same directory, fsync, rename: node_exporter never reads half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)
