"""The one way a command prints a table on stdout.

On a terminal: a rich table (box drawing, the terminal's width; long names fold onto the next line of
their cell, never cut). Anywhere else (a pipe, a file, cron mail): plain aligned text, columns
separated by two spaces, no box drawing and no width limit, so a line is never wrapped and
`awk`/`cut` see one row per line. Every value is data: escaped (terminal.escape), never markup.
"""
from __future__ import annotations

import sys

from rmqctl.terminal import escape, stdout_is_tty


def _cell(v) -> str:
    return "" if v is None else escape(v)


def print_table(headers, rows, *, title: str | None = None, right=(), no_wrap=(), tsv: bool = False) -> None:
    """headers: column names; rows: sequences of values (None prints empty); right: the indexes or
    names of right-justified (numeric) columns; no_wrap: columns rich must not fold (timestamps);
    tsv: piped, print tab-separated values (no title) instead of aligned text (for scripts that
    already read a command's TSV)."""
    headers = list(headers)
    right = {h if isinstance(h, int) else headers.index(h) for h in right}
    no_wrap = {h if isinstance(h, int) else headers.index(h) for h in no_wrap}
    rows = [[_cell(v) for v in r] for r in rows]
    if stdout_is_tty():
        from rich.table import Table

        from rmqctl.terminal import out

        t = Table(title=None if title is None else escape(title), title_justify="left")
        for i, h in enumerate(headers):
            t.add_column(escape(h), justify="right" if i in right else "left", overflow="fold",
                         no_wrap=i in no_wrap)
        for r in rows:
            t.add_row(*r)
        out().print(t)
        return
    if tsv:
        sys.stdout.write("".join("\t".join(r) + "\n" for r in [[escape(h) for h in headers], *rows]))
        return
    sys.stdout.write(plain_table(headers, rows, title=title, right=right))


def plain_table(headers, rows, *, title: str | None = None, right=()) -> str:
    """The piped form: an optional title line, a header line, one line per row; trailing blanks cut."""
    headers = [escape(h) for h in headers]
    rows = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(vals):
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(vals, widths))).rstrip() + "\n"

    out = [] if title is None else [escape(title) + "\n"]
    out.append(line(headers))
    out += [line(r) for r in rows]
    return "".join(out)
