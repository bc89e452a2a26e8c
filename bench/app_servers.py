"""The real servers bench/app_cost.py measures the profiler against, each started by the bench on
loopback and driven by its standard load generator:

- PostgreSQL: a private cluster (tests/support/server_fixtures.private_pg_cluster, with PostgreSQL's
  own defaults: fsync and synchronous commit on) on a unix socket, `pgbench -i -s SCALE` once, then
  `pgbench -c 2 -j 2 -T SECONDS`, select-only (-S) or the default TPC-B-like read-write mix; latency
  from pgbench's per-transaction log (-l, one transaction in LOG_SAMPLING).
- nginx: a private configuration in a temp dir serving one small static file on 127.0.0.1, driven by
  `wrk -t 2 -c WRK_CONNECTIONS --latency`.

A load's result: {"per_s": transactions or requests a second, "p99_ms": the 99th percentile latency}.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import harness  # noqa: F401 - puts tests/support (server_fixtures) on sys.path
import stats
from server_fixtures import PgCluster, free_port
from stats import BenchError

PG_CLIENTS = 2
LOG_SAMPLING = 0.1       # pgbench logs one transaction in ten: 10^4-10^5 latencies a round, its writes a tenth
WRK_CONNECTIONS = 16
PAGE_BYTES = 1024


class PgBench:
    """pgbench against a running private cluster (server_fixtures.PgCluster)."""

    def __init__(self, cluster: PgCluster, workdir: str) -> None:
        self.cluster, self.workdir = cluster, workdir
        self.binary = shutil.which("pgbench")
        if not self.binary:
            raise BenchError("pgbench is not installed (scripts/apt-packages.txt lists postgresql; run make setup)")
        self.rounds = 0

    def _argv(self, *args: str) -> list[str]:
        return [self.binary, "-h", self.cluster.socket_dir, "-p", str(self.cluster.port), "-U", "postgres", *args,
                "postgres"]

    def init(self, scale: int) -> None:
        out = subprocess.run(self._argv("-i", "-q", "-s", str(scale)), capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise BenchError(f"pgbench -i failed: {out.stderr.strip()[-300:]}")

    def run(self, seconds: float, select_only: bool) -> dict:
        """One load; BenchError when pgbench fails or reports no rate."""
        self.rounds += 1
        prefix = os.path.join(self.workdir, f"pgbench{self.rounds}")
        args = ["-S"] if select_only else []
        args += ["-c", str(PG_CLIENTS), "-j", str(PG_CLIENTS), "-T", f"{seconds:g}", "-l",
                 f"--sampling-rate={LOG_SAMPLING}", f"--log-prefix={prefix}"]
        try:
            out = subprocess.run(self._argv(*args), capture_output=True, text=True, timeout=seconds + 120)
            logs = glob.glob(prefix + ".*")
            latencies = pgbench_latencies_ms(logs)
        finally:
            for path in glob.glob(prefix + ".*"):
                os.unlink(path)
        if out.returncode != 0:
            raise BenchError(f"pgbench failed: {out.stderr.strip()[-300:]}")
        rate = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out.stdout)
        if not rate or not latencies:
            raise BenchError(f"pgbench reported no rate or logged no transaction: {out.stdout.strip()[-300:]}")
        return {"per_s": float(rate.group(1)), "p99_ms": round(stats.percentile(latencies, 99), 3)}


def pgbench_latencies_ms(paths: list[str]) -> list[float]:
    """Each logged transaction's latency in ms from pgbench -l files, whose lines are `client_id
    transaction_no time script_no time_epoch time_us`, time in microseconds."""
    out = []
    for path in paths:
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[2].isdigit():
                    out.append(int(fields[2]) / 1000)
    return out


NGINX_CONF = """daemon off;
master_process on;
worker_processes {workers};
user nobody nogroup;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    default_type text/html;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;
    }}
}}
"""


class Nginx:
    """nginx with a private configuration and prefix in a temp dir, serving index.html (PAGE_BYTES) on
    127.0.0.1:port until stop(). The access log is off: at tens of thousands of requests a second it
    would write gigabytes over a run."""

    def __init__(self, workers: int = 2) -> None:
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(binary):
            raise BenchError("nginx is not installed (scripts/apt-packages.txt lists it; run make setup)")
        self.dir = tempfile.mkdtemp(prefix="bench-nginx-")
        os.chmod(self.dir, 0o755)            # the workers run as nobody and read www/ below it
        os.makedirs(os.path.join(self.dir, "www"))
        with open(os.path.join(self.dir, "www", "index.html"), "w") as f:
            f.write("x" * PAGE_BYTES)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/index.html"
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(workers=workers, dir=self.dir, port=self.port))
        self.proc = subprocess.Popen([binary, "-p", self.dir, "-c", conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 30
        while not _listening(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read() if self.proc.poll() is not None else "not listening after 30 s"
                self.stop()
                raise BenchError(f"nginx did not start: {err.strip()[-300:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)      # graceful: the workers finish and exit
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Nginx:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def wrk_load(url: str, seconds: float) -> dict:
    """wrk -t 2 against url for `seconds`; BenchError when it fails or a request did."""
    binary = shutil.which("wrk")
    if not binary:
        raise BenchError("wrk is not installed (scripts/apt-packages.txt lists it; run make setup)")
    out = subprocess.run([binary, "-t", "2", "-c", str(WRK_CONNECTIONS), "-d", f"{seconds:g}s", "--latency", url],
                         capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise BenchError(f"wrk failed: {out.stderr.strip()[-300:]}")
    return parse_wrk(out.stdout)


_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def parse_wrk(text: str) -> dict:
    """Requests/s and the 99 % latency (ms) from wrk --latency's report; BenchError when errors or
    non-2xx answers are reported (a rate of failures is no throughput)."""
    rate = re.search(r"Requests/sec:\s+([\d.]+)", text)
    p99 = re.search(r"^\s*99%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    if not rate or not p99:
        raise BenchError(f"wrk's report has no rate or 99% latency: {text.strip()[-300:]}")
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors = re.search(r"Socket errors: (.*)", text)
    if bad or errors:
        raise BenchError(f"wrk saw failed requests: {(bad or errors).group(0)}")
    return {"per_s": float(rate.group(1)), "p99_ms": round(float(p99.group(1)) * _UNIT_MS[p99.group(2)], 3)}
