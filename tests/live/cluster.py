"""A live Apache RocketMQ 5.3.3 cluster on 127.0.0.1 for tests: a name server and a proxy in local mode (the
proxy runs the broker in its own JVM), from the Maven Central artifacts of tests/live/pom.xml (Java 17).

    with Cluster(tmp_path, topics={"TopicA": 4}, groups=("G",)) as c:
        c.grpc_endpoint   # "127.0.0.1:PORT" for the 5.x clients

Topics are declared in the broker's config/topics.json before it starts (what `updateTopic` would persist).
Every process is started in its own process group and killed by its id when the block ends.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROBE_TOPIC = "LiveProbe"
CLASSPATH = HERE / "target" / "classpath.txt"
JAVA_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
             "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.lang=ALL-UNNAMED",
             "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
             "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
             "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED"]


def classpath() -> str:
    """The cluster's classpath (built once with Maven: offline first, then from Maven Central)."""
    if not CLASSPATH.is_file() or CLASSPATH.stat().st_mtime < (HERE / "pom.xml").stat().st_mtime:
        base = ["mvn", "-q", "-B", "-f", str(HERE / "pom.xml"), "dependency:build-classpath",
                f"-Dmdep.outputFile={CLASSPATH}"]
        r = subprocess.run(base[:1] + ["-o"] + base[1:], capture_output=True, text=True)
        if r.returncode != 0:
            r = subprocess.run(base, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"mvn could not build the live cluster classpath:\n{r.stdout[-3000:]}{r.stderr[-2000:]}")
    return CLASSPATH.read_text().strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


class Cluster:
    def __init__(self, workdir: Path, topics: dict[str, int], groups: tuple = (), start_timeout: float = 120):
        self.dir = Path(workdir)
        self.topics = topics
        self.groups = groups
        self.start_timeout = start_timeout
        self.procs: list[subprocess.Popen] = []

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *a):
        self.stop()

    def _java(self, name: str, main: str, *args: str) -> subprocess.Popen:
        home = self.dir / "home"
        log = open(self.dir / f"{name}.log", "wb")
        env = dict(os.environ, ROCKETMQ_HOME=str(home))
        p = subprocess.Popen(["java", *JAVA_OPTS, f"-Drocketmq.home.dir={home}", f"-Duser.home={home}",
                              "-cp", self.cp, main, *args], cwd=self.dir, stdout=log, stderr=subprocess.STDOUT,
                             env=env, start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def _wait_port(self, port: int, proc: subprocess.Popen, name: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not _listening(port):
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}): {self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not listen on {port} in {self.start_timeout} s: {self.log_tail(name)}")
            time.sleep(0.3)

    def log_tail(self, name: str) -> str:
        p = self.dir / f"{name}.log"
        return p.read_text(errors="replace")[-2000:] if p.exists() else ""

    def start(self) -> None:
        self.cp = classpath()
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "home").mkdir(exist_ok=True)
        self.ns_port, self.broker_port, self.grpc_port, self.remoting_port = (free_port() for _ in range(4))
        store = self.dir / "store"
        (store / "config").mkdir(parents=True, exist_ok=True)
        self.topics = dict(self.topics, **{PROBE_TOPIC: 1})
        table = {t: {"topicName": t, "readQueueNums": n, "writeQueueNums": n, "perm": 6,
                     "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False, "attributes": {}}
                 for t, n in self.topics.items()}
        (store / "config" / "topics.json").write_text(json.dumps(
            {"topicConfigTable": table, "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 1}}))
        # consumer groups that start at offset 0 of every queue (a new pop group would start at the max)
        offsets = {f"{t}@{g}": {q: 0 for q in range(n)} for g in self.groups for t, n in self.topics.items()}
        (store / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": offsets}))
        (self.dir / "namesrv.conf").write_text(f"listenPort={self.ns_port}\n")
        ns = f"127.0.0.1:{self.ns_port}"
        (self.dir / "broker.conf").write_text("\n".join([
            "brokerClusterName=LiveCluster", "brokerName=live-a", "brokerId=0", "brokerIP1=127.0.0.1",
            f"listenPort={self.broker_port}", f"namesrvAddr={ns}", f"storePathRootDir={store}",
            f"storePathCommitLog={store / 'commitlog'}", "mappedFileSizeCommitLog=16777216",
            "autoCreateTopicEnable=false", "autoCreateSubscriptionGroup=true", ""]))
        (self.dir / "proxy.json").write_text(json.dumps({
            "rocketMQClusterName": "LiveCluster", "grpcServerPort": self.grpc_port,
            "remotingListenPort": self.remoting_port, "namesrvAddr": ns}))
        p = self._java("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(self.dir / "namesrv.conf"))
        self._wait_port(self.ns_port, p, "namesrv")
        p = self._java("proxy", "org.apache.rocketmq.proxy.ProxyStartup", "-pm", "local",
                       "-bc", str(self.dir / "broker.conf"), "-pc", str(self.dir / "proxy.json"), "-n", ns)
        self._wait_port(self.grpc_port, p, "proxy")
        self._wait_routes(p)

    def _wait_routes(self, proxy: subprocess.Popen) -> None:
        """Until a message to the probe topic is stored: the broker has registered its routes with the name
        server and the proxy serves them (the gRPC port opens before that)."""
        from rocketmq import ClientConfiguration, Credentials, Message, Producer

        producer = Producer(ClientConfiguration(self.grpc_endpoint, Credentials()))
        producer.startup()
        try:
            deadline, last = time.monotonic() + self.start_timeout, None
            while time.monotonic() < deadline:
                if proxy.poll() is not None:
                    raise RuntimeError(f"proxy exited ({proxy.returncode}): {self.log_tail('proxy')}")
                m = Message()
                m.topic, m.body = PROBE_TOPIC, b"probe"
                try:
                    producer.send(m)
                    return
                except Exception as e:  # noqa: BLE001 - the client raises bare Exceptions
                    last = e
                    time.sleep(0.5)
            raise RuntimeError(f"no route to {PROBE_TOPIC} in {self.start_timeout} s: {last}")
        finally:
            producer.shutdown()

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)     # the group we started (start_new_session)
                except ProcessLookupError:
                    pass
            p.wait(timeout=30)
        self.procs.clear()
