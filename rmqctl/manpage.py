"""Generate man pages (roff) from the click app: rmqctl(1) and one page per command.

`python -m rmqctl.manpage man/` writes them; `--check` exits 1 if the committed pages are stale
(CI runs it). Output is deterministic: no dates, sorted commands.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from rmqctl import __version__
from rmqctl.status import EXIT_CODES_DOC


def _esc(text: str) -> str:
    out = []
    for line in text.replace("\\", "\\\\").splitlines():
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line.replace("-", "\\-"))
    return "\n".join(out)


def _help_text(cmd: click.Command) -> str:
    import inspect

    text = inspect.cleandoc(cmd.help or "").replace("\b\n", "").replace("\b", "")
    return text.strip()


def _options(cmd: click.Command, ctx: click.Context) -> list[str]:
    rows = []
    for p in cmd.get_params(ctx):
        rec = p.get_help_record(ctx)
        if rec:
            rows.append(f".TP\n.B {_esc(rec[0])}\n{_esc(rec[1])}")
    return rows


def _page(name: str, cmd: click.Command, ctx: click.Context, section_extra: str = "") -> str:
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    title = name.upper()
    parts = [f'.TH {title} 1 "" "rmqctl {__version__}" "rmqctl manual"', ".SH NAME",
             f"{_esc(name)} \\- {_esc(cmd.get_short_help_str(80))}", ".SH SYNOPSIS",
             f".B {_esc(name.replace('-', ' '))}\n{_esc(usage)}", ".SH DESCRIPTION", ".nf",
             _esc(_help_text(cmd)), ".fi"]
    opts = _options(cmd, ctx)
    if opts:
        parts += [".SH OPTIONS", *opts]
    if isinstance(cmd, click.Group):
        parts += [".SH COMMANDS"]
        for sub in sorted(cmd.list_commands(ctx)):
            c = cmd.get_command(ctx, sub)
            parts += [f".TP\n.B {_esc(sub)}\n{_esc(c.get_short_help_str(100))}"]
    parts += [".SH EXIT STATUS", ".nf", _esc(EXIT_CODES_DOC.replace("\b\n", "")), ".fi"]
    if section_extra:
        parts.append(section_extra)
    return "\n".join(parts) + "\n"


def _files_section() -> str:
    from rmqctl.explain import explain_kind
    from rmqctl.formats import KINDS

    body = "\n\n".join(explain_kind(k) for k in KINDS)
    return ".SH FILES\nThe store layout, from the schemas rmqctl reads (field docs of formats/):\n.nf\n" + _esc(body) + "\n.fi"


def pages() -> dict[str, str]:
    from rmqctl.cli import cli

    # the same settings a real invocation gets (children inherit them), so the pages do not depend on
    # what ran before in this process (click caches a command's help option after first use)
    root_ctx = click.Context(cli, info_name="rmqctl", **cli.context_settings)
    out = {"rmqctl.1": _page("rmqctl", cli, root_ctx, _files_section() + "\n.SH SEE ALSO\n" + ", ".join(
        f"rmqctl\\-{n}(1)" for n in sorted(cli.list_commands(root_ctx))))}

    def walk(prefix: str, group: click.Command, parent_ctx: click.Context):
        for name in sorted(group.list_commands(parent_ctx)):
            cmd = group.get_command(parent_ctx, name)
            full = f"{prefix}-{name}"
            ctx = click.Context(cmd, info_name=full.replace("-", " "), parent=parent_ctx)
            out[f"{full}.1"] = _page(full, cmd, ctx)
            if isinstance(cmd, click.Group):
                walk(full, cmd, ctx)

    walk("rmqctl", cli, root_ctx)
    return out


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    target = Path(args[0] if args else "man")
    stale = []
    want = pages()
    for name, text in want.items():
        p = target / name
        if check:
            if not p.exists() or p.read_text() != text:
                stale.append(name)
        else:
            target.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    extra = sorted(p.name for p in target.glob("*.1") if p.name not in want) if target.is_dir() else []
    if check and (stale or extra):
        print(f"man pages are stale: {', '.join(stale + extra)}; run: python -m rmqctl.manpage man/",
              file=sys.stderr)
        return 1
    if not check:
        for name in extra:
            (target / name).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
