"""User-facing text (messages, findings, help) carries no internal fault/rule ids ("(F10)", "R17", "§7.7"):
they mean nothing to an operator. Docstrings and comments may keep them."""
from __future__ import annotations

import ast
import re

from conftest import ROOT

IDS = re.compile(r"\b[FR]\d{1,2}\b|§|faults(\.md)? [RF]\d")


def _docstring_nodes(tree):
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            b = node.body
            if b and isinstance(b[0], ast.Expr) and isinstance(b[0].value, ast.Constant):
                out.add(id(b[0].value))
    return out


def test_no_internal_ids_in_string_literals():
    hits = []
    files = sorted((ROOT / "rmqctl").rglob("*.py"))
    assert len(files) > 30
    for p in files:
        tree = ast.parse(p.read_text())
        docs = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and IDS.search(node.value):
                hits.append(f"{p.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not hits, "\n".join(hits)


def test_no_internal_ids_in_help(cli):
    import click

    from rmqctl.cli import cli as root

    def walk(cmd, path):
        yield path, cmd
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                yield from walk(cmd.get_command(ctx, name), [*path, name])

    seen = 0
    for path, _ in walk(root, []):
        code, out, err = cli(*path, "--help")
        assert code == 0, (path, err)
        assert not IDS.search(out), (path, IDS.search(out).group(0))
        seen += 1
    assert seen > 20
