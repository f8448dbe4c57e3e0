"""Checks made before a Spark session starts (no pyspark import here), and a bound on a master that
passes them but never registers the application.

- every local STORE must be a directory holding commitlog/ (stats and export read the commitlog): a
  missing path or a directory that is not a store is one usage line, exit 2, before any JVM starts;
- a spark://host:port master (HA lists spark://h1:p1,h2:p2 too) must answer Spark's RPC protocol and a
  k8s://https://host:port API server must accept a TCP connection, all within PROBE_DEADLINE_S of the
  command's start (the endpoints are probed at once, in threads, DNS included): a refused port, a
  name that does not resolve, a host that drops the SYN, a peer that accepts and stays silent, or one
  that answers like another service (an HTTP proxy's "400 Bad Request") is one line naming the URL,
  exit 8, before any JVM starts -- measured, a silent listener is reported ~6 s after the command
  starts, a refused port in under 2 s, whatever the JVM would have taken to start (28-33 s under load);
- a peer that does speak Spark's RPC protocol but never registers the application (a worker's or a
  driver's RPC port given by mistake, an incompatible master) would hold the session for Spark's own
  3 x 20 s registration retries and then print a Java stack: start_session() gives it
  REGISTER_TIMEOUT_S once the JVM is up, then ends the JVM and reports one line, exit 8. That bound
  counts from the JVM's start, not the command's: the JVM alone takes up to 33 s to start on a loaded
  machine, so any bound from the command's start would cut healthy sessions there.

The probe is one RpcRequest frame (Spark's network protocol: 8-byte frame length, type byte 3,
request id, body length, then a RequestMessage: no sender, the receiver's address and endpoint name,
a Java-serialized String) to an endpoint name that does not exist. Spark's dispatcher answers it
with an RpcFailure frame (type 5, "Could not find rmqctl-probe.") carrying our request id, and logs
nothing -- seen on standalone masters of pyspark 3.5.0 and 4.3.0 in 10-70 ms. A master with
spark.authenticate answers with an RpcFailure too ("Expected SaslMessage"), and logs it as an error. (Addressed to the
"Master" endpoint it would tell a master from a worker, but the master then logs an ERROR with a
stack for every run: not done.)
"""
from __future__ import annotations

import logging
import os
import queue
import socket
import struct
import threading
import time
from urllib.parse import urlparse

from rmqctl.errors import IOFailure, UsageError

CONNECT_TIMEOUT_S = 5.0      # TCP connect per endpoint
ANSWER_TIMEOUT_S = 5.0       # a master answers the probe in milliseconds
PROBE_DEADLINE_S = 12.0      # from the command's start: the one line is out within 15 s
MIN_PROBE_S = 3.0            # what the probe gets however late it starts
REGISTER_TIMEOUT_S = 20.0


def check_stores(refs) -> None:
    """Local STORE arguments: a directory with commitlog/ (a fresh store's empty commitlog/ is fine) or a DLedger
    commitlog (dledger-<id>/data)."""
    from pathlib import Path

    from rmqctl.store.dledger import find as find_dledger

    for r in refs:
        if r.local is None:
            continue
        root = Path(r.local)
        if not root.exists():
            raise UsageError("no such store directory", path=root)
        if not root.is_dir():
            raise UsageError("not a directory (give the store root, e.g. .../store)", path=root)
        if not (root / "commitlog").is_dir() and find_dledger(root) is None:
            if not any((root / n).exists() for n in ("consumequeue", "checkpoint", "config", "index")):
                raise UsageError("not a store directory (no commitlog/, consumequeue/, checkpoint, config/ or "
                                 "index/ here)", path=root)
            raise UsageError("no commitlog/ in this store: no messages to read (give the store root that holds "
                             "commitlog/)", path=root)


def master_endpoints(master: str) -> list[tuple[str, int]]:
    """(host, port) pairs to probe for a master URL; [] for local[N], yarn and what cannot be probed."""
    if master.startswith("spark://"):
        out = []
        for hp in master[len("spark://"):].split(","):
            host, _, port = hp.rpartition(":")
            if not host or not port.isdigit():
                raise UsageError(f"--master {master}: expected spark://host:port")
            out.append((host.strip("[]"), int(port)))
        return out
    if master.startswith("k8s://"):
        u = urlparse(master[len("k8s://"):] if "://" in master[len("k8s://"):] else "https://" + master[6:])
        if u.hostname:
            return [(u.hostname, u.port or (443 if u.scheme == "https" else 80))]
    return []


_IMPORTED = time.monotonic()


def command_elapsed() -> float:
    """Seconds since this process started (/proc: the interpreter's own start-up included); since this
    module was imported where /proc is not there."""
    try:
        with open("/proc/self/stat", "rb") as f:
            st = f.read()
        ticks = int(st[st.rindex(b")") + 2:].split()[19])      # field 22, starttime
        with open("/proc/uptime", "rb") as f:
            up = float(f.read().split()[0])
        return max(0.0, up - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


_PROBE_ID = 0x726D_7163_746C_0001          # our request id, echoed in the answer


def _utf(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def rpc_probe_frame(host: str, port: int) -> bytes:
    """One RpcRequest for the endpoint "rmqctl-probe" at host:port (module docstring)."""
    body = (b"\x00" + b"\x01" + _utf(host) + struct.pack(">i", port) + _utf("rmqctl-probe")
            + b"\xac\xed\x00\x05" + b"\x74" + _utf("rmqctl"))        # Java serialization: a String
    msg = b"\x03" + struct.pack(">qi", _PROBE_ID, len(body)) + body
    return struct.pack(">q", 8 + len(msg)) + msg


def _probe_one(host: str, port: int, spark: bool, deadline: float) -> str | None:
    """None when host:port is what the master URL says it is, else why not."""
    t0 = time.monotonic()
    try:
        s = socket.create_connection((host, port), timeout=max(0.1, min(CONNECT_TIMEOUT_S, deadline - t0)))
    except (socket.timeout, TimeoutError):
        return f"{host}:{port}: no answer to a connection in {time.monotonic() - t0:.0f} s"
    except OSError as e:
        return f"{host}:{port}: {e.strerror or e}"
    got = b""
    with s:
        if not spark:
            return None
        t1 = time.monotonic()
        try:
            s.sendall(rpc_probe_frame(host, port))
            while len(got) < 17:
                left = min(deadline, t1 + ANSWER_TIMEOUT_S) - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                s.settimeout(left)
                more = s.recv(64)
                if not more:
                    break
                got += more
            # read the rest of the answer (a few KiB: the failure's stack trace): closing with unread
            # bytes would reset the connection, which the master logs as a warning with a stack
            want = min(int.from_bytes(got[:8], "big"), 1 << 16) if len(got) >= 8 else 0
            while len(got) < want:
                s.settimeout(max(0.05, min(1.0, deadline - time.monotonic())))
                more = s.recv(want - len(got))
                if not more:
                    break
                got += more
        except (socket.timeout, TimeoutError):
            if not got:
                return (f"{host}:{port}: accepted the connection but did not answer in "
                        f"{time.monotonic() - t1:.0f} s (a Spark master answers at once)")
        except OSError:          # reset: closed as well
            pass
    if len(got) >= 17 and got[8] in (4, 5) and struct.unpack(">q", got[9:17])[0] == _PROBE_ID:
        return None             # Spark's RPC server: RpcResponse/RpcFailure for our request
    if not got or got[:1] == b"\x15":
        # closed without a word, or a TLS alert: an RPC server with authentication or TLS turned on
        # may drop a plain request like ours; left to the registration watchdog
        return None
    first = got.split(b"\r\n")[0].decode("ascii", "replace").strip()
    return f"{host}:{port}: not a Spark master (it answered {first[:40]!r})"


def probe_master(master: str | None, timeout: float | None = None) -> None:
    """Probe every endpoint of a spark:// or k8s:// master at once (module docstring); none answering
    -> IOFailure (exit 8) naming the URL and why. `timeout` bounds the answer wait (default: up to
    ANSWER_TIMEOUT_S, within PROBE_DEADLINE_S of the command's start, never under MIN_PROBE_S)."""
    if not master:
        return
    eps = master_endpoints(master)
    if not eps:
        return
    spark = master.startswith("spark://")
    budget = timeout if timeout is not None else max(MIN_PROBE_S, min(CONNECT_TIMEOUT_S + ANSWER_TIMEOUT_S,
                                                                      PROBE_DEADLINE_S - command_elapsed()))
    deadline = time.monotonic() + budget
    answers: queue.Queue = queue.Queue()
    for host, port in eps:
        threading.Thread(target=lambda h=host, p=port: answers.put(_probe_one(h, p, spark, deadline)),
                         name="rmqctl-master-probe", daemon=True).start()
    errors = []
    for _ in eps:
        try:
            why = answers.get(timeout=max(0.0, deadline - time.monotonic()) + 0.5)
        except queue.Empty:          # stuck resolving the name: the threads are daemons
            break
        if why is None:
            return
        errors.append(why)
    done = {e.split(": ")[0] for e in errors}
    errors += [f"{h}:{p}: no answer in {budget:.0f} s" for h, p in eps if f"{h}:{p}" not in done]
    raise IOFailure(f"cannot reach the Spark master {master} ({'; '.join(errors)})")


def start_session(master: str | None, *, verbose: int = 0, register_timeout: float | None = None, **kw):
    """session.get_session after probe_master, with a watchdog for spark:// masters: once our JVM is
    up, the application must be registered within `register_timeout` s (env
    RMQCTL_SPARK_REGISTER_TIMEOUT), else the JVM is ended and one line reports it (exit 8)."""
    from rmqctl.spark import session

    url = session.master_url(master)
    probe_master(url)
    if not url.startswith("spark://"):
        return session.get_session(master, verbose=verbose, **kw)
    if register_timeout is None:
        register_timeout = float(os.environ.get("RMQCTL_SPARK_REGISTER_TIMEOUT") or REGISTER_TIMEOUT_S)
    done, fired = threading.Event(), threading.Event()

    def watch():
        up = None
        while not done.wait(0.2):
            gw = session._state.get("gateway")
            if gw is None:
                continue
            up = up or time.monotonic()
            if time.monotonic() - up > register_timeout:
                fired.set()
                # py4j reports the dropped connection through the root logger (pyspark 3.5: a traceback on
                # stderr); the one line below says what happened instead
                logging.getLogger().addHandler(logging.NullHandler())
                logging.getLogger("py4j").setLevel(logging.CRITICAL)
                proc = getattr(gw, "proc", None)
                if proc is not None and proc.poll() is None:
                    proc.kill()
                return

    t = threading.Thread(target=watch, name="rmqctl-register-watchdog", daemon=True)
    t.start()
    try:
        return session.get_session(master, verbose=verbose, **kw)
    except Exception:
        if fired.is_set():
            raise IOFailure(f"the Spark master {url} accepted the connection but did not register this "
                            f"application within {register_timeout:g} s") from None
        raise
    finally:
        done.set()
