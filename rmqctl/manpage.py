"""Generate man pages (roff) from the click app: rmqctl(1) and one page per command.

`python -m rmqctl.manpage man/` writes them; `--check` exits 1 if the committed pages are stale
(CI runs it). Output is deterministic: no dates, sorted commands.
"""
from __future__ import annotations

import inspect
import re
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

    text = (cmd.help or "").split("\f")[0]  # click's convention: what follows \f is not help
    return inspect.cleandoc(text).replace("\b\n", "").replace("\b", "").strip()


def _short_help(cmd: click.Command) -> str:
    """short_help, else the first sentence of the help (a '.' followed by a capital or the paragraph end)."""
    if cmd.short_help:
        return cmd.short_help.strip()
    para = " ".join(_help_text(cmd).split("\n\n")[0].split())
    m = re.search(r"\.(?=\s+[A-Z(])", para)
    text = para[:m.end()] if m else para
    return text if len(text) <= 110 else text[:107].rsplit(" ", 1)[0] + "..."


# Rendered from the command metadata (public attributes only) rather than through click's help
# formatter, whose output changes between click releases; the pages must not.
def _type_metavar(t: click.ParamType) -> str:
    if isinstance(t, click.Choice):
        return "[" + "|".join(str(c) for c in t.choices) + "]"
    if isinstance(t, click.Path):
        if t.file_okay and not t.dir_okay:
            return "FILE"
        return "DIRECTORY" if t.dir_okay and not t.file_okay else "PATH"
    if isinstance(t, (click.IntRange, click.FloatRange)):
        return ("INTEGER" if isinstance(t, click.IntRange) else "FLOAT") + " RANGE"
    return {"integer": "INTEGER", "float": "FLOAT", "boolean": "BOOLEAN", "filename": "FILENAME",
            "text": "TEXT"}.get(t.name, t.name.upper())


def _range_text(t: click.ParamType) -> str:
    if not isinstance(t, (click.IntRange, click.FloatRange)):
        return ""
    lo = None if t.min is None else f"{t.min}{'<' if t.min_open else '<='}"
    hi = None if t.max is None else f"{'<' if t.max_open else '<='}{t.max}"
    if lo and hi:
        return f"{lo}x{hi}"
    if lo:
        return f"x{'>' if t.min_open else '>='}{t.min}"
    return f"x{hi}" if hi else ""


def _opt_names(names: list[str]) -> str:
    return ", ".join(sorted(names, key=lambda n: len(n) - len(n.lstrip("-/"))))


def _option_row(p: click.Option) -> tuple[str, str]:
    names = _opt_names(p.opts)
    if p.secondary_opts:
        names += " / " + _opt_names(p.secondary_opts)
    if not p.is_flag and not p.count:
        names += " " + (p.metavar or _type_metavar(p.type))
    extra = []
    if p.show_default and p.default is not None and not callable(p.default):
        d = p.default
        if p.secondary_opts and isinstance(d, bool):
            d = (p.opts if d else p.secondary_opts)[-1].lstrip("-")
        elif isinstance(d, (list, tuple)):
            d = ", ".join(map(str, d))
        if d != "" and not (p.is_flag and d is False):
            extra.append(f"default: {p.show_default if isinstance(p.show_default, str) else d}")
    if _range_text(p.type):
        extra.append(_range_text(p.type))
    if p.required:
        extra.append("required")
    text = (p.help or "").strip()
    if extra:
        text = (text + "  " if text else "") + "[" + "; ".join(extra) + "]"
    return names, text


def _synopsis(cmd: click.Command) -> str:
    pieces = ["[OPTIONS]"]  # -h/--help at least
    for p in cmd.params:
        if isinstance(p, click.Argument):
            if p.metavar:  # written as the command wants it shown
                pieces.append(p.metavar)
                continue
            var = "{" + "|".join(map(str, p.type.choices)) + "}" if isinstance(p.type, click.Choice) \
                else p.name.upper()
            if not p.required:
                var = f"[{var}]"
            pieces.append(var + ("..." if p.nargs != 1 else ""))
    if isinstance(cmd, click.Group):
        pieces.append(cmd.subcommand_metavar or "COMMAND [ARGS]...")
    return " ".join(pieces)


def _options(cmd: click.Command, help_names: list[str]) -> list[str]:
    rows = [_option_row(p) for p in cmd.params if isinstance(p, click.Option) and not p.hidden]
    if help_names and cmd.add_help_option:
        rows.append((_opt_names(help_names), "Show this message and exit."))
    return [f".TP\n.B {_esc(names)}\n{_esc(text)}" for names, text in rows]


def _page(name: str, cmd: click.Command, help_names: list[str], section_extra: str = "") -> str:
    title = name.upper()
    parts = [f'.TH {title} 1 "" "rmqctl {__version__}" "rmqctl manual"', ".SH NAME",
             f"{_esc(name)} \\- {_esc(_short_help(cmd))}", ".SH SYNOPSIS",
             f".B {_esc(name.replace('-', ' '))}\n{_esc(_synopsis(cmd))}", ".SH DESCRIPTION", ".nf",
             _esc(_help_text(cmd)), ".fi"]
    opts = _options(cmd, help_names)
    if opts:
        parts += [".SH OPTIONS", *opts]
    if isinstance(cmd, click.Group):
        parts += [".SH COMMANDS"]
        ctx = click.Context(cmd)
        for sub in sorted(cmd.list_commands(ctx)):
            parts += [f".TP\n.B {_esc(sub)}\n{_esc(_short_help(cmd.get_command(ctx, sub)))}"]
    fields = _fields_section(name)
    if fields:
        parts.append(fields)
    exits = cmd.epilog if cmd.epilog and "Exit status" in cmd.epilog else EXIT_CODES_DOC
    parts += [".SH EXIT STATUS", ".nf", _esc(inspect.cleandoc(exits).replace("\b\n", "")), ".fi"]
    if section_extra:
        parts.append(section_extra)
    return "\n".join(parts) + "\n"


def _field_rows(fields: dict, prefix: str = "") -> list[str]:
    rows = []
    for fname, f in fields.items():
        kind = f["type"] + (", optional" if f.get("optional") else "")
        rows.append(f".TP\n.B {_esc(prefix + fname)}\n{_esc(kind)}: {_esc(f['doc'])}")
        if "fields" in f:
            inner = prefix + fname + ("[]." if f["type"].startswith("array") else ".")
            rows += _field_rows(f["fields"], inner)
    return rows


def _fields_section(page: str) -> str:
    """FIELDS: every field of every JSON object the command prints (from rmqctl.schemas)."""
    from rmqctl.schemas import SCHEMAS, for_page

    parts = []
    for sid in for_page(page):
        s = SCHEMAS[sid]
        shape = "JSON Lines, one object per line" if s["shape"] == "stream" else "one JSON object"
        parts.append(f".SS {_esc(sid)}\n{_esc(shape)}: {_esc(s['doc'])}.")
        if "variants" in s:
            for kind, fields in s["variants"].items():
                parts.append(f'.PP\n"kind": "{_esc(kind)}"')
                parts += _field_rows({k: v for k, v in fields.items() if k not in ("schema", "kind")})
        else:
            parts += _field_rows(s["fields"])
    if not parts:
        return ""
    return ".SH FIELDS\nWith \\-\\-json (every object starts with \"schema\"; types joined by | may vary; " \
           "optional fields are left out when they do not apply):\n" + "\n".join(parts)


def _output_section() -> str:
    from rmqctl.schemas import SCHEMAS

    text = ("Commands that stream records print JSON Lines with --json (one object per line); commands that "
            "report print one JSON object. Every object starts with \"schema\": \"rmqctl.<command>/<n>\"; <n> "
            "grows when a field changes meaning or goes away. Each command's FIELDS section documents its "
            "fields. Text output is for people: on a terminal, tables are drawn with rich; piped or redirected, "
            "tables are plain aligned text (two spaces between columns, never wrapped). Scans that run longer "
            "than 2 seconds (RMQCTL_PROGRESS_AFTER to change) draw a progress bar on stderr when it is a "
            "terminal, and nothing otherwise.\n\nSchemas: " + ", ".join(sorted(SCHEMAS)) + ".")
    return ".SH OUTPUT\n" + _esc(text)


def _files_section() -> str:
    from rmqctl.explain import explain_kind
    from rmqctl.formats import KINDS

    body = "\n\n".join(explain_kind(k) for k in KINDS)
    return (".SH FILES\nThe store layout, from the schemas rmqctl reads (field docs of formats/):\n.nf\n"
            + _esc(body) + "\n.fi")


def _extra_section(full: str) -> str:
    """Sections a command's page carries beyond its help (verify: the finding codes)."""
    if full == "rmqctl-verify":
        from rmqctl.check.codes import man_section

        return ".SH FINDING CODES\n.nf\n" + _esc(man_section()) + "\n.fi"
    if full == "rmqctl-export":
        from rmqctl.spark.schema import as_text

        return ".SH MESSAGES SCHEMA\n.nf\n" + _esc(as_text()) + "\n.fi"
    return ""


def pages() -> dict[str, str]:
    from rmqctl.cli import cli

    help_names = list(cli.context_settings.get("help_option_names", ["--help"]))  # inherited by all
    from rmqctl.cli.completion import HOWTO

    completion = ".SH SHELL COMPLETION\n.nf\n" + _esc(HOWTO) + "\n.fi\n"
    out = {"rmqctl.1": _page("rmqctl", cli, help_names, _output_section() + "\n" + completion + _files_section()
                             + "\n.SH SEE ALSO\n" + ", ".join(
        f"rmqctl\\-{n}(1)" for n in sorted(cli.list_commands(click.Context(cli)))))}

    def walk(prefix: str, group: click.Group):
        ctx = click.Context(group)
        for name in sorted(group.list_commands(ctx)):
            cmd = group.get_command(ctx, name)
            full = f"{prefix}-{name}"
            out[f"{full}.1"] = _page(full, cmd, help_names, _extra_section(full))
            if isinstance(cmd, click.Group):
                walk(full, cmd)

    walk("rmqctl", cli)
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
