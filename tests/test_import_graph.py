"""The layering of docs/architecture.md, checked on the source: no import cycle between rmqctl's
packages, nor between its modules. Every import counts, also those inside functions (the lazy ones
that keep `--help` light still make one layer depend on another)."""
from __future__ import annotations

import ast
from pathlib import Path

import rmqctl

ROOT = Path(rmqctl.__file__).parent
FORMATS = ROOT.parent / "formats"          # installed as rmqctl.formats


def _modules() -> dict[str, Path]:
    mods = {}
    for base, prefix in ((ROOT, "rmqctl"), (FORMATS, "rmqctl.formats")):
        for p in base.rglob("*.py"):
            parts = list(p.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([prefix, *parts])] = p
    return mods


def _imports(name: str, path: Path, mods: dict) -> set[str]:
    """The rmqctl modules `name` imports anywhere in its body."""
    is_pkg = path.name == "__init__.py"
    here = name if is_pkg else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{pkg}.{base}" if base else pkg
            # `from pkg import mod` names a module; `from mod import name` names the module itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in mods:
                t = t.rpartition(".")[0]
            if t and t != name and t.startswith("rmqctl"):
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def _package(mod: str) -> str:
    """rmqctl.repair.recover -> rmqctl.repair; top-level modules (rmqctl.scan) stand for themselves."""
    parts = mod.split(".")
    return ".".join(parts[:2])


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package_graph(graph):
    pkgs: dict[str, set[str]] = {}
    for m, deps in graph.items():
        src = _package(m)
        pkgs.setdefault(src, set())
        for d in deps:
            # a package's parent (`rmqctl`, its __init__) is no layer of its own
            if _package(d) != src and d != "rmqctl":
                pkgs[src].add(_package(d))
    return pkgs


def _edges_between(graph, comp):
    return sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                  if _package(m) in comp and _package(d) in comp and _package(m) != _package(d))


def test_the_graph_sees_lazy_imports():
    graph = _graph()
    assert "rmqctl.formats.commitlog" in graph and "rmqctl.journal.core" in graph
    # cli/recover_cmd.py imports the repair transaction inside a function only
    assert "rmqctl.repair.transaction" in graph["rmqctl.cli.recover_cmd"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_package_cycle():
    graph = _graph()
    cycles = _cycles(_package_graph(graph))
    assert not cycles, [(c, _edges_between(graph, set(c))) for c in cycles]


def test_no_module_cycle():
    graph = {m: {d for d in deps if d != "rmqctl"} for m, deps in _graph().items()}
    assert not _cycles(graph)


def test_journal_sits_below_config_and_repair():
    graph = _graph()
    for m, deps in graph.items():
        if m.startswith("rmqctl.journal"):
            bad = {d for d in deps if _package(d) in ("rmqctl.config", "rmqctl.repair", "rmqctl.cli", "rmqctl.check")}
            assert not bad, (m, bad)
