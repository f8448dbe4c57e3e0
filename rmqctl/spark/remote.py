"""Remote stores read by byte range, never whole files: the executor side of `hdfs://`, `webhdfs://`
(and, when fsspec is installed, its other schemes) for the Spark engine. No pyspark here.

Readers: `open_reader(uri, opts)` gives an object with `size` and `pread(pos, n) -> bytes` (at most
n bytes at pos), like os.pread on a local file:

* file:// or a plain path: os.pread;
* webhdfs://host:port/path (the NameNode's HTTP address) and hdfs://host:port/path, mapped to WebHDFS
  (pure urllib, no extra dependency): `GET /webhdfs/v1/path?op=OPEN&offset=&length=`, the NameNode
  redirecting to a DataNode. The HTTP address of an hdfs:// NameNode comes from the Spark conf
  `spark.rmqctl.webhdfs.address` or the env RMQCTL_WEBHDFS_ADDRESS (host:port), else host:9870
  (Hadoop 3's default dfs.namenode.http-address). The user is HADOOP_USER_NAME, else the login name;
* any other scheme through fsspec when it is installed (s3://, gcs://...), else a usage error.

A remote split is read as a *staged range*: the task copies [start, end + tail) of its file in windows
of at most WINDOW bytes (8 MiB) into a local temporary file (Spark's local dir) at the same offsets --
a hole before `start`, and the file simply ends at end + tail -- then runs the unchanged pread kernel
over it. `tail` covers the records the walk reads past the range end (the landing record and the one
before it: 2 x maxMessageSize + 64 KiB). A record that is not wholly staged reads short, so the kernel
never accepts it (its chain needs every byte of a record); the walk stops there, the stage is extended
and the walk goes on from that record: the result never depends on the tail. Executor memory is therefore bounded by the
window, not the split: Python holds one window of bytes while copying plus the kernel's own window and
the Arrow batches of one window; the split's bytes sit on local disk (page cache).
"""
from __future__ import annotations

import getpass
import json
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace

MB = 1024 * 1024
WINDOW = 8 * MB
DEFAULT_MAX_MESSAGE = 4 * MB     # the broker's maxMessageSize default
WEBHDFS_DEFAULT_PORT = 9870
TIMEOUT = 60
LOCAL_SCHEMES = ("", "file")


class RemoteError(OSError):
    """A remote read failed: one line naming the URI and what the server said."""


def is_remote(uri: str) -> bool:
    return urllib.parse.urlparse(uri).scheme not in LOCAL_SCHEMES


def supported(uri: str) -> bool:
    scheme = urllib.parse.urlparse(uri).scheme
    if scheme in LOCAL_SCHEMES + ("hdfs", "webhdfs", "swebhdfs"):
        return True
    try:
        import fsspec  # noqa: F401
    except ImportError:
        return False
    return True


def webhdfs_address(spark=None) -> str | None:
    """The NameNode HTTP address for hdfs:// URIs: Spark conf, then env (driver side)."""
    if spark is not None:
        v = spark.sparkContext.getConf().get("spark.rmqctl.webhdfs.address", None)
        if v:
            return v
    return os.environ.get("RMQCTL_WEBHDFS_ADDRESS") or None


def _http_url(uri: str, opts: dict | None, op: str, **params) -> str:
    u = urllib.parse.urlparse(uri)
    if u.scheme in ("webhdfs", "swebhdfs"):
        base = f"{'https' if u.scheme == 'swebhdfs' else 'http'}://{u.netloc}"
    else:   # hdfs://
        addr = (opts or {}).get("webhdfs") or os.environ.get("RMQCTL_WEBHDFS_ADDRESS")
        if not addr:
            addr = f"{u.hostname}:{WEBHDFS_DEFAULT_PORT}"
        base = addr if "://" in addr else "http://" + addr
    q = {"op": op, "user.name": os.environ.get("HADOOP_USER_NAME") or getpass.getuser(), **params}
    return f"{base.rstrip('/')}/webhdfs/v1{urllib.parse.quote(u.path or '/')}?{urllib.parse.urlencode(q)}"


def _get(url: str, uri: str) -> bytes | None:
    """GET (following the NameNode's redirect to a DataNode); None on 404."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        msg = e.read()[:2000].decode("utf-8", "replace")
        try:
            msg = json.loads(msg)["RemoteException"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = msg.strip().splitlines()[0] if msg.strip() else e.reason
        raise RemoteError(f"{uri}: WebHDFS answered {e.code}: {msg}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise RemoteError(f"{uri}: WebHDFS not reachable at {url.split('/webhdfs/')[0]} ({reason})") from None


class LocalReader:
    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size

    def pread(self, pos: int, n: int) -> bytes:
        return os.pread(self.fd, n, pos)

    def close(self):
        os.close(self.fd)


class WebHdfsReader:
    def __init__(self, uri: str, opts: dict | None = None, size: int | None = None):
        self.uri, self.opts = uri, opts
        if size is None:
            st = file_status(uri, opts)
            if st is None:
                raise RemoteError(f"{uri}: no such file")
            size = st["length"]
        self.size = size

    def pread(self, pos: int, n: int) -> bytes:
        n = max(0, min(n, self.size - pos))
        if n == 0:
            return b""
        data = _get(_http_url(self.uri, self.opts, "OPEN", offset=pos, length=n), self.uri)
        if data is None:
            raise RemoteError(f"{self.uri}: no such file")
        return data

    def close(self):
        pass


class FsspecReader:
    def __init__(self, uri: str, opts: dict | None = None, size: int | None = None):
        import fsspec

        self.uri = uri
        self.fs, self.path = fsspec.core.url_to_fs(uri)
        self.size = self.fs.size(self.path) if size is None else size

    def pread(self, pos: int, n: int) -> bytes:
        n = max(0, min(n, self.size - pos))
        return self.fs.cat_file(self.path, start=pos, end=pos + n) if n else b""

    def close(self):
        pass


def open_reader(uri: str, opts: dict | None = None, size: int | None = None):
    u = urllib.parse.urlparse(uri)
    if u.scheme in LOCAL_SCHEMES:
        return LocalReader(u.path if u.scheme else uri)
    if u.scheme in ("hdfs", "webhdfs", "swebhdfs"):
        return WebHdfsReader(uri, opts, size)
    return FsspecReader(uri, opts, size)


def file_status(uri: str, opts: dict | None = None) -> dict | None:
    """{"length", "type"} of a remote path, None when it does not exist."""
    u = urllib.parse.urlparse(uri)
    if u.scheme in ("hdfs", "webhdfs", "swebhdfs"):
        data = _get(_http_url(uri, opts, "GETFILESTATUS"), uri)
        if data is None:
            return None
        st = json.loads(data)["FileStatus"]
        return {"length": int(st["length"]), "type": st["type"]}
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri)
    if not fs.exists(path):
        return None
    info = fs.info(path)
    return {"length": int(info.get("size") or 0), "type": "DIRECTORY" if info["type"] == "directory" else "FILE"}


def list_dir(uri: str, opts: dict | None = None) -> list[tuple[str, str, int]] | None:
    """[(uri, name, length)] of the files in a remote directory; None when it does not exist."""
    u = urllib.parse.urlparse(uri)
    base = uri.rstrip("/")
    if u.scheme in ("hdfs", "webhdfs", "swebhdfs"):
        data = _get(_http_url(uri, opts, "LISTSTATUS"), uri)
        if data is None:
            return None
        out = []
        for st in json.loads(data)["FileStatuses"]["FileStatus"]:
            if st["type"] == "FILE":
                out.append((f"{base}/{st['pathSuffix']}", st["pathSuffix"], int(st["length"])))
        return out
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri)
    if not fs.isdir(path):
        return None
    out = []
    for info in fs.ls(path, detail=True):
        if info["type"] == "file":
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            out.append((f"{base}/{name}", name, int(info.get("size") or 0)))
    return out


def read_small(uri: str, opts: dict | None = None, limit: int = 64 * MB) -> bytes | None:
    """A small remote file (config JSON) whole; None when missing."""
    st = file_status(uri, opts)
    if st is None or st["type"] != "FILE":
        return None
    r = open_reader(uri, opts, st["length"])
    try:
        return r.pread(0, min(st["length"], limit))
    finally:
        r.close()


def list_commitlog(uri: str, opts: dict | None = None) -> list[tuple[str, int, int]] | None:
    """The commitlog files of a remote store [(uri, file start, size)] in offset order; None when the
    store (its commitlog directory) does not exist."""
    from rmqctl.formats import OFFSET_NAME

    entries = list_dir(uri.rstrip("/") + "/commitlog", opts)
    if entries is None:
        return None
    files = [(u, int(name), size) for u, name, size in entries if OFFSET_NAME.match(name)]
    return sorted(files, key=lambda f: f[1])


def data_extent(reader, size: int, page: int = 4096) -> int:
    """plan.data_extent over a reader (a binary search on all-zero pages: ~log2(size/4 KiB) reads)."""
    from rmqctl.spark.plan import zero_tail_start

    return zero_tail_start(lambda p: reader.pread(p, page), size, page)


def extent(opts: dict | None):
    """extent(uri, size) for plan.plan_local: data_extent of a remote file through a reader."""
    def fn(uri: str, size: int) -> int:
        reader = open_reader(uri, opts, size)
        try:
            return data_extent(reader, size)
        finally:
            reader.close()

    return fn


# --- executor side: a split through a staged range ------------------------------------------

def _scratch_dir() -> str:
    d = (os.environ.get("SPARK_LOCAL_DIRS") or "").split(",")[0]
    return d if d and os.path.isdir(d) else tempfile.gettempdir()


class Stage:
    """A local copy of a byte range of one remote file at its own offsets: a hole before the range, and
    the file ends where the range does (reads past it come back short, never as zeros)."""

    def __init__(self, reader, size: int):
        self.reader, self.size = reader, size
        fd, self.path = tempfile.mkstemp(prefix="rmqctl-range-", dir=_scratch_dir())
        self.fd = fd
        self.lo = self.hi = 0          # the staged range [lo, hi)
        self.bytes = 0                 # bytes fetched

    def fill(self, lo: int, hi: int) -> None:
        """Stage [lo, hi) (clipped to the file), fetching only what is not staged yet."""
        hi = min(hi, self.size)
        if self.hi > self.lo:
            if lo >= self.lo:
                lo = max(lo, self.hi)
            # the walk only moves forward: a range before lo is never asked for again
        pos = lo
        while pos < hi:
            data = self.reader.pread(pos, min(WINDOW, hi - pos))
            if not data:
                raise RemoteError(f"{getattr(self.reader, 'uri', '?')}: short read at {pos}")
            os.pwrite(self.fd, data, pos)
            self.bytes += len(data)
            pos += len(data)
            del data
        if self.hi <= self.lo:
            self.lo = lo
        self.hi = max(self.hi, hi)

    def int32_at(self, pos: int) -> int:
        b = self.reader.pread(pos, 4)
        return int.from_bytes(b, "big", signed=True) if len(b) == 4 else 0

    def close(self):
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except OSError:
            pass


def ranged(split, opts: dict, run):
    """Run `run(local_split)` -- a generator over a local split (split_arrow, walk_split) whose return
    value is a SplitStatus or (SplitStatus, rows) -- over the staged range of a remote split. Yields
    what run yields; returns what run returns, as if it had read the remote file itself."""
    from rmqctl.scan import MAX_RECORD_SIZE
    from rmqctl.spark.plan import CROSSED, SplitStatus

    reader = open_reader(split.path, opts.get("remote"), split.file_size)
    stage = Stage(reader, split.file_size)
    tail = opts.get("stage_tail") or 2 * int(opts.get("max_message_size") or DEFAULT_MAX_MESSAGE) + 64 * 1024
    try:
        stage.fill(split.start, split.end + tail)
        local = replace(split, path=stage.path, mode="pread")
        first, emitted, rows = None, 0, 0
        while True:
            ret = yield from run(local)
            st, r = (ret if isinstance(ret, tuple) else (ret, None))
            if first is None:
                first = st.first
            emitted += st.emitted
            rows += r or 0
            if st.kind != CROSSED and stage.hi < split.file_size:
                need = stage.int32_at(st.end_pos)
                need = need if 8 <= need <= MAX_RECORD_SIZE else 8
                if st.end_pos + need > stage.hi:
                    # the walk stopped where real bytes were not staged: stage more, go on from there
                    stage.fill(stage.hi, st.end_pos + need + tail)
                    local = replace(local, start=st.end_pos, first=True)
                    continue
            out = SplitStatus(split.id, first, st.end_pos, st.kind, emitted,
                              (st.detail or "").replace(stage.path, split.path))
            return (out, rows) if isinstance(ret, tuple) else out
    finally:
        stage.close()
        reader.close()


# --- driver side ------------------------------------------------------------------------------

def driver_opts(spark=None) -> dict:
    """What executors need to reach remote stores (shipped in the task options)."""
    return {"webhdfs": webhdfs_address(spark)}


def open_store(uri: str, opts: dict | None = None):
    """Driver side: (commitlog files [(uri, start, size)], consumerOffset.json bytes or None) of a remote
    store; one-line errors (IOFailure: unreachable, UsageError: no such store or scheme)."""
    from rmqctl.errors import IOFailure, UsageError

    if not supported(uri):
        scheme = urllib.parse.urlparse(uri).scheme
        raise UsageError(f"{uri}: no byte-range reader for {scheme}:// (hdfs://, webhdfs://, file:// or paths; "
                         "other schemes need fsspec installed)")
    try:
        files = list_commitlog(uri, opts)
        if files is None:
            raise UsageError(f"{uri}: not a store (no commitlog directory)")
        offsets = read_small(uri.rstrip("/") + "/config/consumerOffset.json", opts)
    except RemoteError as e:
        raise IOFailure(str(e)) from None
    return files, offsets


# --- the output side of export ----------------------------------------------------------------

def check_shared_out(spark, path: str) -> None:
    """Executors write export part files under a local --out path themselves: on a cluster that path
    must be the same shared folder on every executor. Checked with a marker file the driver writes and
    one task per core looks for; a usage error in one line when any does not see it. No-op on local[*]."""
    import uuid

    from rmqctl.errors import UsageError

    sc = spark.sparkContext
    if sc.master.startswith("local"):
        return
    d = path
    while not os.path.isdir(d):
        d = os.path.dirname(d) or "."
    marker = os.path.join(os.path.abspath(d), f"_rmqctl_probe_{uuid.uuid4().hex}")
    open(marker, "wb").close()
    try:
        n = max(2, sc.defaultParallelism)
        missing = sc.parallelize(range(n), n).map(lambda _: os.path.exists(marker)).filter(lambda ok: not ok).count()
    finally:
        os.unlink(marker)
    if missing:
        raise UsageError(f"--out {path}: not the same folder on the executors (they write the part files): give a "
                         "shared path or a Hadoop URI such as hdfs://namenode:8020/path")
