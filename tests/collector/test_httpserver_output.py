"""collector/httpserver.py's output path: an answer whose body comes whole leaves in one write with its
header; while a request thread sends what it writes, the main loop leaves the channel alone (it used to
spin on it); what that thread could not send is then the main loop's, sent at once rather than when the
request ends."""

from __future__ import annotations

import socket
import threading
import time

from server_fixtures import free_port

from collector import create_app, httpserver
from collector.state import EXTENSION

CHUNK = 8 * 2**20  # far more than a socket's send buffer: the request thread cannot send it all
HOLD_S = 3.0  # how long the request keeps running after writing it


def _serve(tmp_path):
    app = create_app({"db_url": f"sqlite:///{tmp_path / 'c.db'}"})

    @app.get("/big")
    def big():
        def body():
            yield b"x" * CHUNK
            time.sleep(HOLD_S)
            yield b"end"
        return app.response_class(body(), mimetype="application/octet-stream")

    @app.get("/small")
    def small():
        return {"ok": True}

    port = free_port()
    server = httpserver.make_server(app, "127.0.0.1", port, 4, 1024 * 1024)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    return port, server, app


def _get(port: int, path: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return sock


def test_a_body_the_socket_cannot_take_at_once_arrives_while_the_request_runs(tmp_path):
    port, server, app = _serve(tmp_path)
    try:
        sock = _get(port, "/big")
        time.sleep(0.5)  # the request thread wrote its chunk and sent what the socket took
        started, received = time.monotonic(), b""
        while len(received) < CHUNK:
            data = sock.recv(1 << 20)
            assert data, "connection closed early"
            received += data
        # the rest was sent by the main loop, not held until the request finished
        assert time.monotonic() - started < HOLD_S - 1.0
        while not received.endswith(b"end\r\n0\r\n\r\n"):  # chunked: the last chunk, then the empty one
            data = sock.recv(1 << 16)
            assert data, "connection closed early"
            received += data
        sock.close()
        head, _, payload = received.partition(b"\r\n\r\n")
        assert b"200 OK" in head and payload.count(b"x") == CHUNK
    finally:
        server.close()
        app.extensions[EXTENSION].store.close()



def test_a_whole_answer_goes_out_in_one_write_a_streamed_one_as_it_comes(tmp_path, monkeypatch):
    writes: list[bytes] = []
    real = httpserver._Channel.write_soon

    def write_soon(self, data):
        writes.append(bytes(data))
        return real(self, data)

    monkeypatch.setattr(httpserver._Channel, "write_soon", write_soon)
    port, server, app = _serve(tmp_path)
    try:
        sock = _get(port, "/small")
        received = b""
        while b"}" not in received:
            data = sock.recv(1 << 16)
            assert data, "connection closed early"
            received += data
        sock.close()
        # the header and its JSON body in one write, byte for byte what the client read
        assert len(writes) == 1 and writes[0] == received
        head, _, body = received.partition(b"\r\n\r\n")
        assert b"200 OK" in head and b"Content-Length: %d" % len(body) in head and body.strip() == b'{"ok":true}'
        writes.clear()
        sock = _get(port, "/big")  # a generator's body: the header first, then each chunk as it comes
        time.sleep(0.5)
        assert writes[0].startswith(b"HTTP/1.1 200 OK") and writes[0].endswith(b"\r\n\r\n")
        sock.close()
    finally:
        server.close()
        app.extensions[EXTENSION].store.close()
