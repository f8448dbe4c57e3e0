"""The package list in pyproject.toml covers every package directory; man pages are current."""
import tomllib

from conftest import ROOT


def test_pyproject_lists_every_package():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = {"rmqctl." + ".".join(p.parent.relative_to(ROOT / "rmqctl").parts) if p.parent != ROOT / "rmqctl"
             else "rmqctl" for p in (ROOT / "rmqctl").rglob("__init__.py")}
    found = {f.rstrip(".") for f in found} | {"rmqctl.formats"}
    assert found <= listed, found - listed
    assert cfg["package-dir"]["rmqctl.formats"] == "formats"


def test_formats_has_no_io_and_no_cli():
    for p in (ROOT / "formats").glob("*.py"):
        text = p.read_text()
        for bad in ("import click", "import rich", "open(", "os.read", "pread"):
            assert bad not in text, f"{p.name}: {bad}"


def test_man_pages_are_current():
    from rmqctl.manpage import main

    assert main(["--check", str(ROOT / "man")]) == 0, "run: python -m rmqctl.manpage man/"


# Libraries whose private names rmqctl must not touch (they change without notice between releases).
STRICT_LIBS = ("click", "rich", "construct", "numpy", "pandas", "pyarrow", "crcmod", "isal", "pyspark", "py4j")
# pyspark's private handles to the JVM, reached through objects rather than module names
PY4J_HANDLES = {"_jvm", "_jsc", "_gateway", "_jsparkSession", "_jdf", "_active_spark_context"}


def _private_uses(path):
    import ast

    tree = ast.parse(path.read_text(), str(path))
    aliases, out = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in STRICT_LIBS:
                    aliases.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in STRICT_LIBS:
            if any(part.startswith("_") for part in node.module.split(".")) or \
                    any(a.name.startswith("_") for a in node.names):
                out.append(f"{path.name}:{node.lineno}: from {node.module} import ...")
            aliases.update(a.asname or a.name for a in node.names)      # classes too: SparkContext._gateway
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases or node.attr in PY4J_HANDLES:
                out.append(f"{path.name}:{node.lineno}: {getattr(base, 'id', '?')}....{node.attr}")
    return out


def test_no_private_names_of_libraries():
    bad = [u for d in ("rmqctl", "formats") for p in sorted((ROOT / d).rglob("*.py")) for u in _private_uses(p)]
    assert not bad, bad


def _requirements():
    import re

    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(proj["dependencies"])
    for _extra, items in proj["optional-dependencies"].items():
        reqs += [r for r in items if not r.startswith("rmqctl[")]
    out = {}
    for r in reqs:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", r)
        out[m.group(1).lower()] = [s.strip() for s in m.group(2).split(",") if s.strip()]
    return out


def test_every_dependency_has_the_tested_minimum_as_lower_bound():
    pins = {}
    for line in (ROOT / "ci/constraints-min.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    reqs = _requirements()
    assert set(pins) == set(reqs)
    for name, specs in reqs.items():
        assert f">={pins[name]}" in specs, (name, specs)


def test_all_extra_is_every_extra():
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(proj["optional-dependencies"]) - {"all"}
    assert proj["optional-dependencies"]["all"] == [f"rmqctl[{','.join(sorted(extras))}]"]
