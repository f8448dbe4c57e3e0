"""Shared option decorators."""
from __future__ import annotations

from pathlib import Path

import click

from rmqctl.render import BODY_MODES


def json_option(f):
    return click.option("--json", "as_json", is_flag=True,
                        help="JSON Lines on stdout (one object per record; fields: FIELDS in the man page).")(f)


def report_json_option(f):
    return click.option("--json", "as_json", is_flag=True,
                        help="One JSON object on stdout (fields: FIELDS in the man page).")(f)


def body_option(f):
    f = click.option("--raw-body", is_flag=True,
                     help="Show compressed bodies (SYSFLAG 0x1: zlib, lz4, zstd) as stored instead of "
                          "decompressed.")(f)
    return click.option("--body", type=click.Choice(BODY_MODES), default=None,
                        help="How to print message bodies [default: text on a terminal, base64 with --json].")(f)


def utc_option(f):
    return click.option("--utc", is_flag=True,
                        help="Read times written without a zone as UTC [default: the machine's local time, "
                             "like mqadmin; TZ changes it].")(f)


def resolve_time(what: str, text, utc: bool = False):
    """The one time parser (rmqctl.timeparse), echoing the resolved instant on stderr; None stays None."""
    if text is None:
        return None
    import sys

    from rmqctl.timeparse import describe, parse_time

    ms = parse_time(text, what, utc=utc)
    sys.stderr.write(f"rmqctl: {describe(what, text, ms)}\n")
    return int(ms)   # a plain int from here on (Spark filters are pickled to executors)


def default_jobs(store) -> int:
    """-j's default for the whole-store commitlog passes (verify, rebuild, recover): the machine's cores, up
    to 2, on stores over 256 MiB (below that, starting processes costs more than it saves); else 1."""
    import os

    total = sum(f.size for f in store.commitlog.files)
    return min(2, os.cpu_count() or 1) if total > 256 * 1024 * 1024 else 1


def jobs_option(f):
    return click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
                        help="Processes for the commitlog walk; the files written are the same whatever N "
                             "[default: up to 2 on stores over 256 MiB, as verify].")(f)


def store_config_options(f):
    """Broker settings that are not stored in the files (sizes, delay levels)."""
    f = click.option("--broker-config", type=click.Path(dir_okay=False, exists=True),
                     envvar="RMQCTL_BROKER_CONFIG",
                     help="broker.conf (read like java.util.Properties) or JSON with mappedFileSizeCommitLog, "
                          "mappedFileSizeConsumeQueue (rounded up to whole 20-byte units, as the broker does; "
                          "mapedFileSize... before 4.5.2), "
                          "maxHashSlotNum, maxIndexNum, messageDelayLevel. Sizes not given are inferred from the "
                          "files. [env RMQCTL_BROKER_CONFIG]")(f)
    f = click.option("--index-slots", type=click.IntRange(min=1, max=2**31 - 1), default=None,
                     help="maxHashSlotNum of the index files [default 5000000 or inferred].")(f)
    f = click.option("--index-items", type=click.IntRange(min=1, max=2**31 - 1), default=None,
                     help="maxIndexNum of the index files [default 20000000 or inferred].")(f)
    return f


def build_store_config(broker_config, index_slots, index_items):
    from rmqctl.store.config import StoreConfig

    cfg = StoreConfig.from_file(broker_config) if broker_config else StoreConfig()
    values = {}
    if index_slots:
        values["maxHashSlotNum"] = index_slots
    if index_items:
        values["maxIndexNum"] = index_items
    return cfg.with_values(values)


def require_store(path) -> Path:
    """PATH must be a store root: rmqctl.store.layout.require_store (imported when used: --help stays light)."""
    from rmqctl.store.layout import require_store as check

    return check(path)
