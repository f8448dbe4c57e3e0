"""A real single-node HDFS for the tests: Apache Hadoop's MiniDFSCluster (NameNode + DataNode, WebHDFS
on) from Maven Central (tests/minihdfs/pom.xml), started by a tiny Java main on 127.0.0.1 and stopped
when the test is done. `build()` makes the classpath (offline first, then from Maven Central) and
compiles the main; .ci/run calls it before the suite, so a missing JDK/Maven fails loudly there."""
from __future__ import annotations

import getpass
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE / "target"
CLASSPATH = TARGET / "classpath.txt"
MAIN = TARGET / "classes" / "HdfsMain.class"
JAVA_OPTS = ["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             # Jersey 1 (WebHDFS) defines JAXB accessor classes through ClassLoader.defineClass
             "--add-opens", "java.base/java.lang=ALL-UNNAMED"]
LOG4J = ("log4j.rootLogger=WARN,c\nlog4j.appender.c=org.apache.log4j.ConsoleAppender\n"
         "log4j.appender.c.layout=org.apache.log4j.PatternLayout\n"
         "log4j.appender.c.layout.ConversionPattern=%p %c: %m%n\n")


def build() -> str:
    """The classpath (cached in target/), with HdfsMain compiled; raises with Maven's/javac's output."""
    src = HERE / "src" / "HdfsMain.java"
    if not CLASSPATH.is_file() or CLASSPATH.stat().st_mtime < (HERE / "pom.xml").stat().st_mtime:
        base = ["mvn", "-q", "-B", "-f", str(HERE / "pom.xml"), "dependency:build-classpath",
                f"-Dmdep.outputFile={CLASSPATH}"]
        r = subprocess.run(base[:1] + ["-o"] + base[1:], capture_output=True, text=True)
        if r.returncode != 0:
            r = subprocess.run(base, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"mvn could not build the HDFS classpath:\n{r.stdout[-3000:]}{r.stderr[-2000:]}")
    cp = CLASSPATH.read_text().strip()
    if not MAIN.is_file() or MAIN.stat().st_mtime < src.stat().st_mtime:
        MAIN.parent.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["javac", "-cp", cp, "-d", str(MAIN.parent), str(src)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"javac HdfsMain failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return cp


class MiniHdfs:
    """with MiniHdfs(dir) as h: h.rpc (hdfs://127.0.0.1:PORT), h.http (WebHDFS host:port), h.upload(...)."""

    def __init__(self, workdir, timeout: float = 90):
        self.dir = Path(workdir)
        self.timeout = timeout
        self.proc = None

    def __enter__(self):
        cp = build()
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "log4j.properties").write_text(LOG4J)
        self.log = self.dir / "hdfs.log"
        self.proc = subprocess.Popen(
            ["java", *JAVA_OPTS, f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
             "-cp", f"{MAIN.parent}{os.pathsep}{cp}", "HdfsMain", str(self.dir / "base")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log, "wb"), start_new_session=True)
        t0 = time.time()
        line = b""
        while time.time() - t0 < self.timeout:
            line = self.proc.stdout.readline()
            if line.startswith(b"READY") or not line:
                break
        if not line.startswith(b"READY"):
            self.stop()
            raise RuntimeError(f"HDFS did not start:\n{self.log.read_text(errors='replace')[-3000:]}")
        _, rpc, http = line.split()
        self.rpc = f"hdfs://127.0.0.1:{int(rpc)}"
        self.http = f"127.0.0.1:{int(http)}"
        return self

    def __exit__(self, *a):
        self.stop()
        return False

    def stop(self):
        p, self.proc = self.proc, None
        if p is None:
            return
        try:
            p.stdin.close()            # HdfsMain shuts the cluster down when its stdin closes
            p.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)

    def _url(self, path: str, op: str, **kw) -> str:
        q = urllib.parse.urlencode({"op": op, "user.name": getpass.getuser(), **kw})
        return f"http://{self.http}/webhdfs/v1{urllib.parse.quote(path)}?{q}"

    def put(self, path: str, data: bytes) -> None:
        """WebHDFS CREATE: the NameNode answers with a redirect to a DataNode, which takes the bytes."""
        req = urllib.request.Request(self._url(path, "CREATE", overwrite="true", noredirect="true"), method="PUT")
        with urllib.request.urlopen(req, timeout=60) as r:
            import json

            location = json.loads(r.read())["Location"]
        req = urllib.request.Request(location, data=data, method="PUT",
                                     headers={"Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(req, timeout=600) as r:
            assert r.status == 201, r.status

    def put_file(self, path: str, local_file) -> int:
        """WebHDFS CREATE of a local file, streamed (for the benchmark's 1 GiB files)."""
        import json

        size = os.path.getsize(local_file)
        req = urllib.request.Request(self._url(path, "CREATE", overwrite="true", noredirect="true"), method="PUT")
        with urllib.request.urlopen(req, timeout=60) as r:
            location = json.loads(r.read())["Location"]
        with open(local_file, "rb") as f:
            req = urllib.request.Request(location, data=f, method="PUT", headers={
                "Content-Type": "application/octet-stream", "Content-Length": str(size)})
            with urllib.request.urlopen(req, timeout=3600) as r:
                assert r.status == 201, r.status
        return size

    def upload(self, local_dir, remote_dir: str) -> int:
        """Copy a local folder (recursively) to HDFS; returns the bytes sent. Files are read in one piece
        (the test fixtures are small)."""
        n = 0
        local_dir = Path(local_dir)
        for p in sorted(local_dir.rglob("*")):
            if p.is_file() and not p.is_symlink():
                data = p.read_bytes()
                self.put(f"{remote_dir.rstrip('/')}/{p.relative_to(local_dir).as_posix()}", data)
                n += len(data)
        return n


if __name__ == "__main__":          # `python tests/minihdfs/server.py build` (.ci/run)
    if sys.argv[1:] == ["build"]:
        build()
        print("HDFS classpath + HdfsMain ready")
