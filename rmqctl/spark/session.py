"""Starting Spark for rmqctl: embedded `local[*]` by default, a real cluster with --master URL or
SPARK_MASTER, no web UI, and Spark's console noise hidden unless -v.

Quiet mode: the JVM is launched by us (pyspark.java_gateway.launch_gateway with popen_kwargs) so its
stderr -- log4j banners, JDK warnings, Python worker tracebacks in local mode -- goes to a log file
instead of the operator's terminal; log4j itself is set to ERROR. With -v the JVM inherits stderr and
logs at WARN. Nothing here is imported on the quick path (dump, query, config, --help).
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile

from rmqctl.errors import IOFailure, UsageError

_LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{{1}}: %m%n
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = error
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
"""

_state: dict = {}

SPARK_EXTRA = ("pyspark", "pyarrow", "pandas", "py4j")
INSTALL_HINT = "pip install 'rmqctl[spark]'"


@contextlib.contextmanager
def spark_extra_required(what: str):
    """A missing pyspark/pyarrow becomes one usage line telling what to install, not a traceback."""
    try:
        yield
    except ImportError as e:
        name = (e.name or "").split(".")[0]
        if name not in SPARK_EXTRA:
            raise
        raise UsageError(f"{what} needs the Spark extra ({name} is not installed): {INSTALL_HINT}") from None


def _temp_dir() -> str:
    """This process's rmqctl-spark-* folder (log4j config, JVM log, Spark scratch), removed at exit."""
    d = _state.get("dir")
    if d is None:
        d = _state["dir"] = tempfile.mkdtemp(prefix="rmqctl-spark-")
        atexit.register(_remove_temp_dir)   # registered first, so it runs after the session is stopped
    return d


def _remove_temp_dir() -> None:
    # The session is stopped by now (or never finished starting: Ctrl-C): end our JVM first, so that
    # it cannot write into the folder after it is gone.
    proc = getattr(_state.pop("gateway", None), "proc", None)
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(Exception):
            proc.kill()
            proc.wait(timeout=10)
    d = _state.pop("dir", None)
    for h in _state.pop("handles", []):
        with contextlib.suppress(OSError):
            h.close()
    if d:
        shutil.rmtree(d, ignore_errors=True)


def master_url(master: str | None = None) -> str:
    """--master wins, then SPARK_MASTER, then embedded local[*]."""
    m = master or os.environ.get("SPARK_MASTER") or "local[*]"
    if not (m.startswith("local") or "://" in m or m in ("yarn",)):
        raise UsageError(f"--master {m!r}: expected local[N], spark://host:port, yarn, k8s://...")
    return m


def _log4j_file(level: str) -> str:
    d = _temp_dir()
    path = os.path.join(d, f"log4j2-{level}.properties")
    with open(path, "w") as f:
        f.write(_LOG4J.format(level=level))
    return path


def _jvm_opt(opt: str) -> str:
    """One JVM option for Spark's extraJavaOptions, which Spark splits at blanks unless quoted (a TMPDIR with a
    space in it)."""
    return '"' + opt.replace("\\", "\\\\").replace('"', '\\"') + '"'


def get_session(master: str | None = None, *, verbose: int = 0, app_name: str = "rmqctl",
                shuffle_partitions: int | None = None, conf: dict | None = None):
    """A SparkSession (reused within the process). Returns the session; log_path() names the JVM log."""
    import warnings

    with spark_extra_required("the Spark engine"):
        from pyspark import SparkConf, SparkContext
        from pyspark.sql import SparkSession

    # pyspark's pandas version check warns on pandas 3 at every Arrow use; the paths rmqctl takes
    # (mapInArrow, toArrow) do not go through pandas -- not the operator's concern.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    # py4j reports a Ctrl-C during a JVM call with logging.exception, which gives a root logger without handlers a
    # stderr one: a traceback above rmqctl's one "interrupted" line. A handler that drops it prevents that (rmqctl
    # itself logs nothing through the root logger); -vv keeps it.
    root = logging.getLogger()
    if not root.handlers and verbose < 2:
        root.addHandler(logging.NullHandler())
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    url = master_url(master)
    local = url.startswith("local")
    # pyspark 4 starts its workers with PYSPARK_PYTHON (spark.pyspark.python is not enough): the
    # interpreter running rmqctl, also when the console script is run without its venv on PATH. On a
    # cluster an operator's PYSPARK_PYTHON names the workers' interpreter (rmqctl is shipped to it).
    worker_python = os.environ.get("PYSPARK_PYTHON") if not local else None
    worker_python = worker_python or sys.executable
    os.environ["PYSPARK_PYTHON"] = worker_python
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    level = "warn" if verbose else "error"
    log4j = _log4j_file(level)
    java_opts = " ".join(_jvm_opt(f"-D{k}.configurationFile=file:{log4j}") for k in ("log4j2", "log4j"))
    # our JVM (the driver, in every mode) is killed at exit (_remove_temp_dir), so Spark's shutdown hooks never
    # delete what it made under java.io.tmpdir (spark-*, artifacts-*, blockmgr-*): made in our folder, it goes too
    driver_opts = f"{java_opts} {_jvm_opt(f'-Djava.io.tmpdir={_temp_dir()}')}"
    c = SparkConf().setAppName(app_name).setMaster(url)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",   # our own progress bar on a TTY instead
        "spark.driver.extraJavaOptions": driver_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.sql.shuffle.partitions": str(shuffle_partitions or 4),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # local: executors run the CLI's interpreter and sys.path; a cluster: rmqctl is shipped (ship.py)
        "spark.pyspark.python": worker_python,
        "spark.pyspark.driver.python": sys.executable,
    }
    if local:
        settings["spark.executorEnv.PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    if local:
        settings["spark.local.dir"] = _temp_dir()   # Spark's scratch goes with our folder at exit
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    elif url.startswith("spark://127.0.0.1") or url.startswith("spark://localhost"):
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings.update(conf or {})
    for k, v in settings.items():
        c.set(k, v)
    popen_kwargs = {}
    if not verbose:
        log_path = os.path.join(_state["dir"], "spark.log")
        _state["log"] = log_path
        handles = [open(log_path, "ab"), open(log_path, "ab")]
        _state.setdefault("handles", []).extend(handles)
        popen_kwargs = {"stderr": handles[0], "stdout": handles[1]}
    try:
        from pyspark.java_gateway import launch_gateway

        if "gateway" not in _state:     # our own JVM, launched once per process
            before = _children()
            try:
                gateway = _state["gateway"] = launch_gateway(c, popen_kwargs=popen_kwargs)
            except BaseException:
                # Ctrl-C or a failure while the JVM starts: pyspark makes it ignore SIGINT and has not handed
                # it to us yet; left alone it would outlive us for good (its gateway thread keeps it up)
                for pid in _children() - before:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                raise
            sc = SparkContext(conf=c, gateway=gateway)
        else:
            sc = SparkContext.getOrCreate(c)
    except Exception as e:  # noqa: BLE001 - the JVM did not start: one line, with the log's last line
        # (the log's folder is removed at exit)
        raise IOFailure(f"could not start Spark ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
                        + (f"; JVM log says: {_last_line(_state['log'])}" if _state.get("log") else "")) from e
    sc.setLogLevel(level.upper())
    if not local:
        from rmqctl.spark.ship import build_zip

        _state["shipped"] = build_zip(_temp_dir())
        sc.addPyFile(_state["shipped"])
    spark = SparkSession(sc)
    atexit.register(_stop_quietly, spark)
    return spark


def _children() -> set:
    """Our child processes' pids (from /proc; empty where there is none)."""
    me, out = os.getpid(), set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for n in names:
        if n.isdigit():
            try:
                with open(f"/proc/{n}/stat", "rb") as f:
                    st = f.read()
                if int(st[st.rindex(b")") + 2:].split()[1]) == me:
                    out.add(int(n))
            except (OSError, ValueError, IndexError):
                continue
    return out


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            lines = [ln for ln in f.read()[-4096:].decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1].strip() if lines else "(empty)"


def log_path() -> str | None:
    return _state.get("log")


def _stop_quietly(spark) -> None:
    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - at exit nothing useful can be done
        pass
