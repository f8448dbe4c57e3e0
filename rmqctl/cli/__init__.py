"""The command-line layer: options -> library call -> render. Subcommands load lazily so that
`rmqctl --help` imports neither numpy nor pyspark."""
from __future__ import annotations

import errno
import importlib
import os
import sys

import click

from rmqctl import __version__
from rmqctl.cli import mqadmin
from rmqctl.errors import RmqError
from rmqctl.status import EXIT_CODES_DOC, INTERRUPTED, Exit

# name -> (module, attribute, one-line help shown by `rmqctl --help` without importing the module)
COMMANDS = {
    "dump": ("rmqctl.cli.dump_cmd", "dump", "Print any store file (or summarise a store) as text or JSON Lines."),
    "verify": ("rmqctl.cli.verify_cmd", "verify", "Check a store's integrity, read-only; cron friendly."),
    "recover": ("rmqctl.cli.recover_cmd", "recover",
                "Offline abnormal recovery after an unclean shutdown, with backup."),
    "rebuild": ("rmqctl.cli.recover_cmd", "rebuild", "Regenerate consume queues or index files from the commitlog."),
    "undo": ("rmqctl.cli.undo_cmd", "undo", "Restore what a previous repair changed, bit-exact."),
    "query": ("rmqctl.cli.query_cmd", "query", "Find messages by offset, message id, key, unique key or time."),
    "config": ("rmqctl.cli.config_cmd", "config", "Read and edit store/config/*.json the way the broker does."),
    "stats": ("rmqctl.cli.spark_cmd", "stats", "Per topic/queue statistics over one or more stores (Spark)."),
    "export": ("rmqctl.cli.spark_cmd", "export", "Export messages to Parquet or JSON Lines (Spark)."),
    "diff": ("rmqctl.cli.diff_cmd", "diff", "Compare two replicas (master/slave, backups): common prefix, verdict."),
    "reclaim": ("rmqctl.cli.reclaim_cmd", "reclaim",
                "Free disk space: expire consumed commitlog files like the broker."),
    "replay": ("rmqctl.cli.replay_cmd", "replay", "Send exported messages back into a running cluster (gRPC proxy)."),
    "quarantine": ("rmqctl.cli.quarantine_cmd", "quarantine",
                   "List and prune the repair journals in rmqctl-quarantine/."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        spec = COMMANDS.get(name)
        if spec is None:
            return None
        module, attr, _ = spec
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:  # a command not built yet, or a missing extra
            err = str(exc)

            @click.command(name, help=spec[2], context_settings={"ignore_unknown_options": True})
            @click.argument("args", nargs=-1, type=click.UNPROCESSED)
            def unavailable(args):
                raise RmqError(f"command '{name}' is not available: {err}")

            return unavailable

    def resolve_command(self, ctx, args):
        from rmqctl.cli.mqadmin import translate   # mqadmin verbs (queryMsgByKey...) -> rmqctl commands

        return super().resolve_command(ctx, translate(args))

    def format_commands(self, ctx, formatter):
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=EXIT_CODES_DOC + "\n\n" + mqadmin.help_table())
@click.version_option(__version__, prog_name="rmqctl")
@click.option("-v", "--verbose", count=True, help="More diagnostics on stderr (-vv: tracebacks).")
@click.pass_context
def cli(ctx, verbose):
    """Offline inspection and repair of Apache RocketMQ broker store directories.

    \b
    Example:
      rmqctl dump fixtures/stores/basic-multifile-v5/store
      rmqctl verify /data/rocketmq/store && echo clean
    """
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    if verbose >= 2:
        os.environ["RMQCTL_DEBUG"] = "1"


def main(argv=None) -> None:
    """Console entry point: maps every outcome to the documented exit codes."""
    from rmqctl.terminal import SafeStdout, StdoutClosed, stdout_to_devnull

    # One BLAS thread per process, set before numpy loads: rmqctl's few matrix-vector products are small, and
    # `-j N` forks N workers, each of which would otherwise start a thread per core and contend for them.
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    real = sys.stdout
    sys.stdout = SafeStdout(real)
    code = run(argv)
    try:
        sys.stdout.flush()  # flush here, not at interpreter exit, so a closed pipe maps to exit 0
    except StdoutClosed:
        code = Exit.OK
    except (BrokenPipeError, OSError):
        stdout_to_devnull(real)
    sys.exit(int(code))


def run(argv=None) -> int:
    from rmqctl.terminal import StdoutClosed, escape

    try:
        from rmqctl.kernels import check_env

        check_env()     # RMQCTL_KERNEL: an unknown value is a usage error before anything runs
        rv = cli.main(args=argv, prog_name="rmqctl", standalone_mode=False)
        if isinstance(rv, int):
            return rv
        return Exit.OK
    except StdoutClosed:
        return Exit.OK
    except click.exceptions.Exit as e:
        return e.exit_code
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else Exit.FAILED
    except click.ClickException as e:
        e.show()
        return Exit.USAGE
    except (click.exceptions.Abort, KeyboardInterrupt):
        sys.stderr.write("rmqctl: interrupted\n")
        return INTERRUPTED
    except BrokenPipeError:
        _stdout_gone()
        return Exit.OK
    except RmqError as e:
        if not _flush_quietly():
            return Exit.OK
        sys.stderr.write(f"rmqctl: {escape(e)}\n")
        return e.exit_code
    except OSError as e:
        if e.errno == errno.EPIPE:
            _stdout_gone()
            return Exit.OK
        if not _flush_quietly():
            return Exit.OK
        where = f"{e.filename}: " if e.filename else ""
        sys.stderr.write(f"rmqctl: {escape(where)}{escape(e.strerror or e)}\n")
        return Exit.FAILED
    except MemoryError:
        sys.stderr.write("rmqctl: out of memory\n")
        return Exit.FAILED
    except Exception as e:  # noqa: BLE001 - the last line of defence: one line, documented code
        if os.environ.get("RMQCTL_DEBUG"):
            import traceback

            traceback.print_exc()
        sys.stderr.write(f"rmqctl: internal error: {type(e).__name__}: {escape(e)}\n")
        return Exit.FAILED


def _stdout_gone():
    from rmqctl.terminal import stdout_to_devnull

    stdout_to_devnull(getattr(sys.stdout, "_inner", sys.stdout))


def _flush_quietly() -> bool:
    """Flush stdout before an error line; False when stdout turned out to be a closed pipe."""
    from rmqctl.terminal import StdoutClosed

    try:
        sys.stdout.flush()
    except StdoutClosed:
        return False
    except (BrokenPipeError, OSError):
        _stdout_gone()
        return False
    return True
