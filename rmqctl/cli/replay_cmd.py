"""rmqctl replay: exported messages sent back into a running cluster (the work is rmqctl.replay)."""
from __future__ import annotations

import re
import sys

import click

from rmqctl.cli.options import json_option
from rmqctl.errors import UsageError
from rmqctl.status import Exit


def _rate(text):
    if text is None:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(/s)?\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"--rate wants messages per second, e.g. 200/s, got {text!r}")
    return float(m.group(1))


def _endpoint(text):
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--to wants HOST:PORT (the proxy's gRPC endpoint), got {text!r}")
    return text


@click.command("replay")
@click.argument("source", metavar="FILE|DIR")
@click.option("--to", "to", required=True, metavar="HOST:PORT",
              help="The proxy's gRPC endpoint (5.x proxy, default port 8081).")
@click.option("--topic-map", multiple=True, metavar="OLD=NEW", help="Send OLD's messages to NEW (repeatable).")
@click.option("--rate", metavar="N/s", help="At most N messages per second.")
@click.option("--dry-run", is_flag=True, help="Read and check every row, count what would be sent; send nothing.")
@click.option("--resume", "resume", type=click.Path(dir_okay=False), metavar="FILE",
              help="Resume file: every message is logged (fsync'ed) before and after it is sent; a rerun with the "
                   "same file skips what was sent.")
@click.option("--in-doubt", type=click.Choice(["resend", "skip"]), default="resend", show_default=True,
              help="A message the resume file shows as being sent when the last run was killed (the broker may or "
                   "may not have it): send it again (at least once) or leave it out (at most once).")
@click.option("--timeout", type=click.IntRange(min=1), default=3, show_default=True,
              help="Seconds per request to the proxy.")
@json_option
def replay(source, to, topic_map, rate, dry_run, resume, in_doubt, timeout, as_json):
    """Send exported messages (rmqctl export / export --unconsumed, JSON Lines or Parquet, a file or an
    export directory) back into a running cluster through its proxy's gRPC endpoint, with the Apache
    RocketMQ 5.x Python client (pip install 'rmqctl[replay]').

    Sent per message: topic, tags, keys, user properties and body; the cluster gives it a new message id
    and store time. Rows of a retry or dead-letter topic go to their original topic, scheduled, PREPARED
    and ROLLBACK rows are not sent, and a message listed for several groups is sent once.

    With --resume FILE a killed run can be rerun and sends nothing that was sent. One message can be in
    doubt after a kill (logged as being sent, no answer logged): it is SENT AGAIN by default, so a consumer
    may see it twice; --in-doubt skip leaves it out instead (it may then be lost).

    Exit status: 0 all sent (or nothing to send), 4 some could not be sent (the first reasons are printed;
    rerun with the same --resume FILE to retry them), 8 could not connect, 2 bad arguments.

    \b
    Example:
      rmqctl export store --unconsumed --format jsonl --out /tmp/salvage
      rmqctl replay /tmp/salvage --to 10.0.0.7:8081 --resume /tmp/salvage.resume --rate 500/s
      rmqctl replay /tmp/salvage --to 10.0.0.7:8081 --topic-map Orders=OrdersRestored --dry-run
    """
    from rmqctl import replay as R

    tmap = R.parse_topic_map(topic_map)
    per_s = _rate(rate)
    _endpoint(to)
    R.input_files(source)
    log = R.ResumeLog(resume) if resume else None
    sender = None
    try:
        if log is not None and log.in_doubt():
            sys.stderr.write(f"rmqctl: {resume}: {log.in_doubt()} message(s) in doubt from an interrupted run: "
                             f"{'sending again' if in_doubt == 'resend' else 'skipping (--in-doubt skip)'}\n")
        if not dry_run:
            sender = R.GrpcSender(to, timeout)
        c = R.replay(R.read_rows(source), sender, log, topic_map=tmap, rate=per_s, in_doubt=in_doubt,
                     dry_run=dry_run)
    finally:
        if sender is not None:
            sender.close()
        if log is not None:
            log.close()
    if as_json:
        from rmqctl.render import emit_json

        emit_json("replay", c.as_dict() | {"dry_run": dry_run})
    else:
        from rmqctl.terminal import escape, out

        con = out()
        verb = "would send" if dry_run else "sent"
        parts = [f"{verb} {c.sent:,}", f"failed {c.failed:,}"]
        if c.already_sent:
            parts.append(f"already sent {c.already_sent:,}")
        if c.in_doubt_resent or c.in_doubt_skipped:
            parts.append(f"in doubt: resent {c.in_doubt_resent}, skipped {c.in_doubt_skipped}")
        if c.duplicates:
            parts.append(f"{c.duplicates:,} rows of messages listed twice")
        con.print(escape(f"{c.rows:,} rows: " + ", ".join(parts)))
        for why, n in sorted(c.not_sent.items()):
            con.print(escape(f"not sent: {n:,} rows: {why}"))
        for f in c.failures:
            con.print(escape(f"failed: {f}"))
    return Exit.PROBLEMS if c.failed else Exit.OK
