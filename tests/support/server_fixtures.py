"""Fixtures for the collector tests (imported by conftest.py): a private PostgreSQL cluster for the
session, made with the distro's binaries in a temp dir on a unix socket (no system service), a fresh
database per test on SQLite or PostgreSQL, and the app built on it; plus server.py run as a process.
In CI a missing PostgreSQL fails."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests
from helpers import PYTHON, ROOT

IN_CI = bool(os.environ.get("CI"))
DB_KINDS = ("sqlite", "postgresql")
_db_numbers = itertools.count(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVER = os.path.join(ROOT, "server.py")


class ServerProcess:
    """`python server.py --port <free> ARGS` running until stop(); ready once /healthz answers."""

    def __init__(self, *args: str, port: int | None = None, output: str | None = None) -> None:
        """port: reuse one (a restart); output: a file for the server's stdout and stderr, for runs
        that log more than a pipe holds (one line per batch)."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.output = output
        sink = open(output, "a") if output else subprocess.PIPE  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen([PYTHON, SERVER, "--port", str(self.port), *args], cwd=ROOT,
                                     stdout=sink, stderr=subprocess.STDOUT if output else subprocess.PIPE, text=True)
        if output:
            sink.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = open(output).read() if output else self.proc.stderr.read()
                raise AssertionError(f"server.py exited {self.proc.returncode}: {err[-2000:]}")
            try:
                if requests.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError("server.py did not answer /healthz within 30 s")

    def stop(self) -> tuple[int, str]:
        """Ctrl-C, as an instructor would; (exit status, stderr — the output file's text if it has one)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if self.output:
            with open(self.output) as f:
                err = f.read()
        return self.proc.returncode, err

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown code runs."""
        self.proc.kill()
        self.proc.communicate()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, SERVER, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def _pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


@dataclass
class PgCluster:
    socket_dir: str
    port: int

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def create_database(self) -> str:
        import psycopg

        name = f"collector_t{os.getpid()}_{next(_db_numbers)}"
        with psycopg.connect(host=self.socket_dir, port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _as_postgres(argv: list[str]) -> list[str]:
    # initdb refuses to run as root; the cluster's files belong to the distro's postgres user
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def private_pg_cluster(durable: bool = False) -> Iterator[PgCluster]:
    """A throwaway PostgreSQL cluster in a temp dir, on a unix socket only. durable=False turns fsync and
    synchronous commits off (tests); the benchmark keeps PostgreSQL's defaults. RuntimeError if it
    cannot start (no PostgreSQL installed, initdb or pg_ctl failing)."""
    bindir = _pg_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (scripts/apt-packages.txt lists postgresql; run make setup)")
    base = tempfile.mkdtemp(prefix="collector-pg-")
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    data, log = os.path.join(base, "data"), os.path.join(base, "server.log")
    port = free_port()
    run = dict(check=True, capture_output=True, text=True, timeout=120)
    try:
        subprocess.run(_as_postgres([f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                                     "--locale=C", "--no-sync"]), **run)
        options = f"-k {base} -p {port} -c listen_addresses='' -c max_connections=200"
        if not durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        subprocess.run(_as_postgres([f"{bindir}/pg_ctl", "-D", data, "-l", log, "-o", options, "-w", "-t", "60",
                                     "start"]), **run)
    except subprocess.CalledProcessError as e:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"could not start a private PostgreSQL: {e.stderr.strip()[-500:]}") from None
    try:
        yield PgCluster(base, port)
    finally:
        subprocess.run(_as_postgres([f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"]),
                       capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_cluster():
    if _pg_bin() is None and not IN_CI:
        pytest.skip("PostgreSQL is not installed (scripts/apt-packages.txt lists postgresql; run make setup)")
    cluster = private_pg_cluster()
    try:
        started = cluster.__enter__()
    except RuntimeError as e:
        pytest.fail(str(e))
    try:
        yield started
    finally:
        cluster.__exit__(None, None, None)


# PostgreSQL takes a second a test to set up: slow, so `make test-quick` runs the SQLite half
@pytest.fixture(params=[pytest.param(kind, marks=pytest.mark.slow) if kind == "postgresql" else kind for kind in DB_KINDS])
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A fresh, empty database: an SQLite file, or a new database in the private PostgreSQL cluster."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/collector.db"
    return request.getfixturevalue("pg_cluster").create_database()


@pytest.fixture
def make_collector(db_url: str):
    """make_collector(**settings) -> a collector app on this test's database (closed afterwards)."""
    from collector import create_app
    from collector.state import EXTENSION

    apps = []

    def make(**settings):
        settings.setdefault("db_url", db_url)
        app = create_app(settings)
        app.config["TESTING"] = True
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.extensions[EXTENSION].store.close()


@pytest.fixture
def collector_app(make_collector):
    return make_collector()


@pytest.fixture
def collector_client(collector_app):
    return collector_app.test_client()
