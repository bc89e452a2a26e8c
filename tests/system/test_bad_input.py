"""Bad input everywhere it can arrive, beyond what test_registry_contract.py and test_server*.py cover:

- every metric script, for each argument its registry entry declares, refuses a wrong value with exit 2
  and one line (never a traceback);
- the collector takes 10,000 generated requests (payloads, bytes, content types, tokens) with tokens
  configured: never a 5xx, and its stored counts move only by what an accepted batch carried;
- server.py under waitress gets a fixed corpus over real sockets (wrong content types, broken HTTP,
  bodies over every limit, token shapes): never a 5xx, it stays up, it stores only the valid batches;
- no token, right or wrong, appears in a line the collector or the headless client writes.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from collector_payloads import ours, records_of
from helpers import PYTHON, ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from payload_strategies import json_values, mutated_batches, valid_batches
from server_fixtures import ServerProcess

import config

pytestmark = pytest.mark.slow   # `make test-quick` leaves it out

# --- metric scripts ----------------------------------------------------------------------------------
# The contract test already sends these to every script; the cases here are per declared argument.
CONTRACT_CASES = [["--pid", "abc"], ["--no-such-option"], ["0"], ["1", "-3"]]


def bad_argvs(spec: config.MetricSpec) -> list[list[str]]:
    cases = []
    positionals = [a for a in spec.args if a.flag is None]
    for arg in spec.args:
        if arg.flag is None:
            continue
        if arg.type in ("int", "float"):
            cases += [[arg.flag, "abc"], [arg.flag, "1e400x"], [arg.flag]]
            if arg.type == "int":
                cases.append([arg.flag, "1.5"])
        elif arg.type == "choice":
            cases += [[arg.flag, "no-such-choice"], [arg.flag]]
        elif arg.type == "flag":
            cases.append([f"{arg.flag}=yes"])
    if positionals:
        cases += [["abc"], ["-1"], ["1", "abc"], ["1", "0"], ["1", "2", "3"]]
    cases += [["--json=1"], ["--pid=", "1"] if any(a.flag == "--pid" for a in spec.args) else ["-"]]
    return [c for c in cases if c not in CONTRACT_CASES]


def run_script(spec: config.MetricSpec, argv: list[str]) -> tuple[list[str], subprocess.CompletedProcess]:
    # --validate-args: a case the script wrongly accepts exits 0 at once instead of starting to trace
    result = subprocess.run([sys.executable, spec.path, *argv, "--validate-args"], capture_output=True, text=True,
                            timeout=60)
    return argv, result


@pytest.mark.parametrize("spec", config.METRICS, ids=[s.name for s in config.METRICS])
def test_every_declared_argument_refuses_bad_values_with_one_line(spec):
    cases = bad_argvs(spec)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda argv: run_script(spec, argv), cases))
    problems = []
    for argv, result in results:
        lines = result.stderr.strip().splitlines()
        if result.returncode != 2 or len(lines) != 1 or "error" not in lines[0] or "Traceback" in result.stderr:
            problems.append(f"{spec.name} {' '.join(argv)}: exit {result.returncode}, stderr {result.stderr[-300:]!r}")
    assert not problems, "\n".join(problems)
    assert len(cases) >= 5


# --- the collector: 10,000 generated requests ----------------------------------------------------------
TOKEN = "lab-token-7a41c9e0d2b8"
WRONG_TOKENS = ["lab-token-7a41c9e0d2b9", "", "Bearer", TOKEN + " ", TOKEN.upper()]


@pytest.fixture(scope="module")
def token_app(tmp_path_factory):
    from collector import create_app
    from collector.state import EXTENSION

    app = create_app({"db_url": f"sqlite:///{tmp_path_factory.mktemp('fuzz')}/collector.db", "tokens": {TOKEN: "lab"},
                      "max_body": 256 * 1024})
    app.config["TESTING"] = True
    yield app
    app.extensions[EXTENSION].store.close()


def totals(app) -> tuple[int, int]:
    from collector.state import EXTENSION

    return app.extensions[EXTENSION].store.totals()


auth_headers = st.sampled_from(["right", "right-query", "none", "wrong", "scheme", "wrong-query-right-header"])
content_types = st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded",
                                 "multipart/form-data; boundary=x", "application/json; charset=latin-1", None])
bodies = (valid_batches() | mutated_batches() | json_values).map(lambda p: (p, json.dumps(p).encode())) \
    | st.binary(max_size=2000).map(lambda b: (None, b))


def request_for(auth: str, body: bytes, content_type: str | None, compress: bool) -> tuple[str, dict, bytes]:
    headers = {"Content-Type": content_type} if content_type else {}
    path = "/data"
    if auth in ("right", "wrong-query-right-header"):
        headers["Authorization"] = f"Bearer {TOKEN}"
    if auth == "wrong-query-right-header":
        path += f"?token={WRONG_TOKENS[0]}"
    if auth == "right-query":
        path += f"?token={TOKEN}"
    if auth == "wrong":
        headers["Authorization"] = f"Bearer {WRONG_TOKENS[0]}"
    if auth == "scheme":
        headers["Authorization"] = f"Basic {TOKEN}"
    if compress:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    return path, headers, body


@pytest.mark.timeout(900)
@settings(max_examples=10_000, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(payload=bodies, auth=auth_headers, content_type=content_types, compress=st.booleans())
def test_10000_generated_requests_never_5xx_and_store_only_valid_batches(token_app, payload, auth, content_type,
                                                                         compress):
    parsed, body = payload
    path, headers, data = request_for(auth, body, content_type, compress)
    before = totals(token_app)
    reply = token_app.test_client().post(path, data=data, headers=headers)
    answer = reply.get_json()
    after = totals(token_app)
    assert reply.status_code < 500, answer
    assert answer and answer["status"] == ("ok" if reply.status_code == 200 else "error")
    if auth not in ("right", "right-query", "wrong-query-right-header"):
        assert reply.status_code == 401 and after == before
    elif reply.status_code == 200 and not answer["duplicate"]:
        assert after == (before[0] + 1, before[1] + len(records_of(parsed)))
    else:
        assert reply.status_code in (200, 400, 413, 415) and after == before


# --- server.py over real sockets: a fixed corpus ------------------------------------------------------
MAX_BODY = 64 * 1024


def raw_http(port: int, request: bytes, timeout: float = 10) -> int | None:
    """Send bytes as they are, return the status code of the answer (None when the server just closes)."""
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(request)       # the server may answer and close before it has read everything
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            while chunk := s.recv(65536):
                data += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    if not data.startswith(b"HTTP/1."):
        return None
    return int(data.split(b" ", 2)[1])


def post_raw(body: bytes, headers: str = "Content-Type: application/json\r\n") -> bytes:
    return (f"POST /data HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n{headers}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def test_fixed_corpus_over_real_http_never_5xx_server_stays_up(tmp_path):
    log_file = tmp_path / "server_data.log"
    server = ServerProcess("--db", str(tmp_path / "lab.db"), "--token", TOKEN, "--log-file", str(log_file),
                           "--max-body", str(MAX_BODY), output=str(tmp_path / "server.out"))
    url, auth = server.url, {"Authorization": f"Bearer {TOKEN}"}
    valid_sent = 0
    statuses: dict[str, int | None] = {}

    def post(name: str, payload=None, *, data=None, headers=None, params=None, valid=False) -> None:
        nonlocal valid_sent
        reply = requests.post(url + "/data", json=payload, data=data, headers=headers, params=params, timeout=60)
        statuses[name] = reply.status_code
        assert reply.status_code < 500, (name, reply.text[:300])
        if reply.status_code >= 400 and "(generated by collector)" not in reply.text:
            # waitress refuses broken HTTP itself, in plain text; everything the app answers is JSON
            assert reply.json()["status"] == "error", name
        if reply.status_code == 200:
            assert valid, f"{name} was accepted"
            valid_sent += not reply.json()["duplicate"]

    try:
        # wrong content types around a valid batch: stored (the body is what counts) or refused, never 5xx
        for ct in ("text/plain", "application/x-www-form-urlencoded", "application/xml", "", "image/png"):
            post(f"content-type {ct!r}", data=json.dumps(ours(len(statuses))).encode(),
                 headers={**auth, "Content-Type": ct}, valid=True)
        reply = requests.post(url + "/data", files={"file": ("b.json", json.dumps(ours(99)))}, headers=auth, timeout=30)
        assert reply.status_code == 415 and reply.json()["reason"] == "bad_content_type"  # what a web form sends
        # malformed bodies that need real HTTP or exact bytes
        for name, body in [("BOM", b"\xef\xbb\xbf" + json.dumps(ours(50)).encode()),
                           ("UTF-16", json.dumps(ours(51)).encode("utf-16")),
                           ("NUL bytes", b"\x00" * 5000),
                           ("huge number", b'{"sequence": ' + b"9" * 60_000 + b"}"),
                           ("truncated", json.dumps(ours(52)).encode()[:-7]),
                           ("two documents", json.dumps(ours(53)).encode() * 2)]:
            post(name, data=body, headers={**auth, "Content-Type": "application/json"})
        for name, encoding in [("gzip twice", "gzip, gzip"), ("deflate", "deflate"), ("garbage encoding", "\x7f")]:
            post(name, data=gzip.compress(json.dumps(ours(54)).encode()), headers={**auth, "Content-Encoding": encoding})
        # over every limit: the app's (MAX_BODY), and waitress's own (64 MiB here) before the app sees it
        post("over max-body", data=b"x" * (MAX_BODY + 1), headers=auth)
        assert statuses["over max-body"] == 413
        statuses["over waitress limit"] = raw_http(server.port, post_raw(b"{" + b" " * (65 * 2**20) + b"}"), 60)
        assert statuses["over waitress limit"] in (413, None)
        # broken HTTP: a body shorter than its Content-Length, a bad length, garbage request lines
        body = json.dumps(ours(60)).encode()
        short = post_raw(body).replace(f"Content-Length: {len(body)}".encode(), f"Content-Length: {len(body) + 500}".encode())
        for name, raw in [("short body", short),
                          ("negative length", post_raw(body).replace(f"Content-Length: {len(body)}".encode(),
                                                                      b"Content-Length: -5")),
                          ("garbage request line", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 100),
                          ("header without colon", b"POST /data HTTP/1.1\r\nHost x\r\n\r\n"),
                          ("8 KB header", post_raw(body, "X-Pad: " + "a" * 8192 + "\r\n"))]:
            statuses[name] = raw_http(server.port, raw)
            assert statuses[name] is None or statuses[name] < 500, (name, statuses[name])
        valid_sent += statuses["8 KB header"] == 200
        # token shapes: header, query, both; only the right token in the right place is accepted
        for name, headers, params in [("no token", {}, None),
                                      ("Bearer only", {"Authorization": "Bearer"}, None),
                                      ("Bearer empty", {"Authorization": "Bearer "}, None),
                                      ("Basic scheme", {"Authorization": f"Basic {TOKEN}"}, None),
                                      ("token with suffix", {"Authorization": f"Bearer {TOKEN}x"}, None),
                                      ("8 KB token", {"Authorization": "Bearer " + "t" * 8000}, None),
                                      ("non-ASCII token", {"Authorization": "Bearer tok\xe9n".encode("latin-1")}, None),
                                      ("wrong query token", {}, {"token": WRONG_TOKENS[0]}),
                                      ("right query, wrong header", {"Authorization": "Bearer nope"}, {"token": TOKEN})]:
            post(name, ours(70 + len(statuses)), headers=headers, params=params)
            assert statuses[name] == 401, (name, statuses[name])
        post("right query token", ours(90), params={"token": TOKEN}, valid=True)
        assert statuses["right query token"] == 200

        assert requests.get(url + "/healthz", timeout=5).status_code == 200      # still up
        streams = requests.get(url + "/api/streams", headers=auth, timeout=10).json()["streams"]
        assert sum(s["batches"] for s in streams) == valid_sent
    finally:
        status, out = server.stop()
    assert status == 0 and "Traceback" not in out
    logged = out + log_file.read_text()
    for token in (TOKEN, WRONG_TOKENS[0], "t" * 8000):
        assert token not in logged, "a token reached the log"


# --- the headless client never logs its token ---------------------------------------------------------------
@pytest.mark.bpf
@pytest.mark.parametrize("which", ["wrong", "right"])
def test_headless_client_never_logs_its_token(tmp_path, which):
    server = ServerProcess("--db", str(tmp_path / "lab.db"), "--token", TOKEN, output=str(tmp_path / "server.out"))
    token = TOKEN if which == "right" else WRONG_TOKENS[0]
    try:
        env = {**os.environ, "PROFILER_TOKEN": token}
        client = subprocess.run([PYTHON, os.path.join(ROOT, "main_app.py"), "--headless", "--metric", "sysnest",
                                 "--arg", "sysnest.interval=0.5", "--duration", "4", "--progress", "1",
                                 "--server", server.url, "--state-dir", str(tmp_path / "state")],
                                capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        stored = sum(s["batches"] for s in requests.get(server.url + "/api/streams", timeout=10,
                                                        headers={"Authorization": f"Bearer {TOKEN}"}).json()["streams"])
    finally:
        _, out = server.stop()
    assert client.returncode == 0, client.stderr[-2000:]
    if which == "right":
        assert stored > 0
    else:
        assert stored == 0 and "401" in client.stdout + client.stderr   # the client says why, without the token
    for text in (client.stdout, client.stderr, out):
        assert token not in text
