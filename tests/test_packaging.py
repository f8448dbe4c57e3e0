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
