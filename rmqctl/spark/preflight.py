"""Checks made before a Spark session starts (no pyspark import here), and a bound on a master that
accepts the connection but never registers the application.

- every local STORE must be a directory holding commitlog/ (stats and export read the commitlog): a
  missing path or a directory that is not a store is one usage line, exit 2, before any JVM starts;
- a spark://host:port master (HA lists spark://h1:p1,h2:p2 too) and a k8s://https://host:port API
  server must accept a TCP connection within CONNECT_TIMEOUT_S, and a spark:// one must not answer
  like another service (an HTTP proxy's "400 Bad Request"): else one line naming the URL, exit 8;
- a standalone master that accepts TCP but never answers would hold the session for Spark's own
  3 x 20 s registration retries and then print a Java stack: start_session() gives it
  REGISTER_TIMEOUT_S once the JVM is up, then ends the JVM and reports one line, exit 8.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from urllib.parse import urlparse

from rmqctl.errors import IOFailure, UsageError

CONNECT_TIMEOUT_S = 5.0
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


def probe_master(master: str | None, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """One TCP connect per endpoint of a spark:// or k8s:// master; none reachable -> IOFailure (exit 8)
    naming the URL and why, within `timeout` per endpoint."""
    if not master:
        return
    eps = master_endpoints(master)
    if not eps:
        return
    errors = []
    spark = master.startswith("spark://")
    for host, port in eps:
        try:
            with socket.create_connection((host, port), timeout=timeout) as s:
                if not spark:
                    return
                # A standalone master's RPC server closes the connection on a frame of length 0 (its
                # frame decoder wants a positive length); a proxy or another service answers with
                # bytes of its own; silence is left to the registration watchdog (start_session).
                s.settimeout(timeout)
                s.sendall(bytes(8))
                try:
                    got = s.recv(64)
                except socket.timeout:
                    return
                except OSError:           # reset: closed as well
                    return
                if not got:
                    return
                first = got.split(b"\r\n")[0].decode("ascii", "replace").strip()
                errors.append(f"{host}:{port}: not a Spark master (it answered {first[:40]!r})")
        except socket.timeout:
            errors.append(f"{host}:{port}: no answer in {timeout:g} s")
        except OSError as e:
            errors.append(f"{host}:{port}: {e.strerror or e}")
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
