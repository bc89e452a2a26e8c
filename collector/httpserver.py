"""The collector's HTTP server: waitress, holding as many connections as the file limit allows, closing
requests that arrive too slowly, and with its request parser taught to judge a POST /data's token on
the headers, before the body. Plain waitress buffers a whole body (in a temp file past 512 KB, up
to max_request_body_size) before the app sees the request: 10 tokenless 60 MB posts held 600 MB of
temp space before their 401s. Here a refused request is answered at once, its connection closed, and
whatever it still sends is read and dropped for a moment (a lingering close: closing with unread data
would reset the connection and could destroy the 401 before the client reads it). An accepted one
reaches the app with the verdict in its environ (ingest.AUTHORIZED): it is authorized once."""

from __future__ import annotations

import resource
import socket
import time
from typing import Any
from urllib.parse import parse_qs

import orjson
from flask import Flask
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import MultiSocketServer, TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher, WSGITask
from waitress.utilities import Error

from collector import ingest
from collector.rejections import Rejected
from collector.state import ACCEPTS, EXTENSION, Collector, error_body
from collector.tokens import TOKEN_QUERY_PARAM

MAX_CONNECTIONS = 4096  # open connections at most, whatever the file limit allows
HEADERS_WITHIN_S = 10.0  # a request's headers must have arrived this long after its first byte ...
BODY_BYTES_PER_S = 16 * 1024  # ... and its body at this rate at least: slow clients cannot hold slots
IDLE_S = 30.0  # a connection with no request in progress is closed after this long
LINGER_S = 2.0  # how long a refused client's remaining body is read and dropped before closing
DRAIN_BYTES = 256 * 1024  # read at a time while lingering
# read at a time from a connection (waitress's default 8 KB took three turns of the main loop for a
# 100-record batch of 20 KB, each taking the GIL from the threads storing batches)
RECV_BYTES = 64 * 1024


class _Refusal(Error):
    """waitress's error response, as the collector's JSON error."""

    def __init__(self, rejected: Rejected) -> None:
        super().__init__(rejected.detail)
        self.code, self.reason, self.rejected = rejected.status, rejected.reason, rejected

    def to_response(self, ident: str | None = None) -> tuple[str, list[tuple[str, str]], bytes]:
        e = self.rejected
        body = orjson.dumps(error_body(e.reason, e.detail))
        headers = [("Content-Type", "application/json"), *ACCEPTS.items()]
        if e.status == 401:
            headers.append(("WWW-Authenticate", "Bearer"))
        return f"{e.status} {e.reason.replace('_', ' ').title()}", headers, body


class _GatedParser(HTTPRequestParser):
    authorized: tuple[str | None] | None = None  # a POST /data accepted on its headers: (its token's name,)

    def __init__(self, adj: Adjustments, channel: _Channel) -> None:
        super().__init__(adj)
        self._channel = channel

    def parse_header(self, header_plus: bytes) -> None:
        super().parse_header(header_plus)
        if self.command != "POST" or self.path != "/data":
            return
        collector = self._channel.server.collector
        query_token = parse_qs(self.query).get(TOKEN_QUERY_PARAM, [None])[0]
        try:
            self.authorized = (ingest.authorize(collector.settings,
                                                lambda name: self.headers.get(name.upper().replace("-", "_")),
                                                query_token),)
        except Rejected as e:
            ingest.note_rejection(collector, e, self._channel.addr[0])
            self.error, self.completed, self.expect_continue = _Refusal(e), True, False
            self._channel.refused = True


class _Task(WSGITask):
    def get_environment(self) -> dict:
        environ = super().get_environment()
        if self.request.authorized is not None:
            environ[ingest.AUTHORIZED] = self.request.authorized
        return environ

    def write(self, data: bytes) -> None:
        """An answer whose body comes whole (every JSON answer, a POST /data's acknowledgement) goes out
        with its header in one send: waitress sent them apart, and under load each send's return waited
        for the GIL behind the request threads. Any other body is written as waitress writes it."""
        if (self.complete and not self.wrote_header and data and self.has_body and not self.chunked_response
                and self.content_length == len(data)):
            self.channel.write_soon(self.build_response_header() + data)
            self.wrote_header = True
            self.content_bytes_written = len(data)
            return
        super().write(data)


class _Channel(HTTPChannel):
    task_class = _Task
    refused = False  # a request was refused on its headers: linger when closing
    _linger_until: float | None = None
    request_started = 0.0  # monotonic time of the first byte of the request being received
    _task_writing = False  # a request thread is in write_soon: it sends what it writes itself

    def parser_class(self, adj: Adjustments) -> _GatedParser:  # waitress calls self.parser_class(adj)
        self.request_started = time.monotonic()
        return _GatedParser(adj, self)

    def overdue(self, now: float) -> bool:
        """Is the request being received later than its deadline (headers, then the body at a rate)?"""
        request = self.request
        if request is None or request.completed:
            return False
        body = max(request.content_length, request.body_bytes_received) if request.headers_finished else 0
        return now > self.request_started + HEADERS_WITHIN_S + body / BODY_BYTES_PER_S

    def handle_close(self) -> None:
        if self.refused and self._linger_until is None and self.connected:
            try:
                self.socket.shutdown(socket.SHUT_WR)  # the answer is complete: the client sees EOF
            except OSError:
                return super().handle_close()
            self._linger_until = time.monotonic() + LINGER_S
            self.will_close = self.close_when_flushed = False
            return None
        return super().handle_close()

    def readable(self) -> bool:
        return True if self._linger_until is not None else super().readable()

    def writable(self) -> bool:
        if self._linger_until is not None or self._task_writing:
            return False
        return super().writable()

    def write_soon(self, data: bytes) -> int:
        """A request thread's output: waitress sends it from that thread, holding the buffer's lock. Till
        then the main loop saw the channel writable, could not take the lock, and polled again at once:
        a busy loop holding the GIL that the sending thread needed back to finish (57 turns of the loop
        per POST /data under 8 connections, 0.45 ms of the main thread's CPU a request)."""
        self._task_writing = True
        try:
            return super().write_soon(data)
        finally:
            self._task_writing = False
            if self.total_outbufs_len:  # not all sent: the main loop takes over the rest
                self.server.pull_trigger()

    def handle_read(self) -> None:
        if self._linger_until is None:
            return super().handle_read()
        try:
            data = self.socket.recv(DRAIN_BYTES)
        except OSError:
            data = b""
        if not data or time.monotonic() > self._linger_until:
            self._linger_until = None
            self.refused = False
            super().handle_close()
        return None


class _Server(TcpWSGIServer):
    channel_class = _Channel

    def __init__(self, app: Flask, **kw: Any) -> None:
        self.collector: Collector = app.extensions[EXTENSION]
        super().__init__(app, **kw)

    def maintenance(self, now: float) -> None:
        """Every cleanup_interval: waitress closes idle connections; here also a request too slow to arrive
        (a client sending a byte every 2 s kept its connection for ever) and a lingering refused one."""
        super().maintenance(now)
        mono = time.monotonic()
        for channel in list(self.active_channels.values()):
            linger = channel._linger_until
            if linger is not None and mono > linger:  # a client that sent nothing more
                channel._linger_until, channel.refused = None, False
                channel.handle_close()
            elif channel.overdue(mono):
                channel.will_close = True


def connection_limit() -> int:
    """Open connections the process can hold: its file limit (raised to the hard limit) allows each a
    socket and a temp file for its body, less a reserve for the database and logs. (waitress's default
    of 100 let 101 idle connections lock every client out.)"""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        soft = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        except (ValueError, OSError):
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(16, min(MAX_CONNECTIONS, (soft - 64) // 2))


def make_server(app: Flask, host: str, port: int, threads: int, max_body: int) -> TcpWSGIServer | MultiSocketServer:
    """The server for app on host:port (every address host resolves to); .run() serves until Ctrl-C."""
    # the body is still buffered before the app runs once the token passed: cap that too, leaving
    # room for the app's own JSON 413
    adj = Adjustments(host=host, port=port, threads=threads, ident="collector",
                      max_request_body_size=max(4 * max_body, 64 * 1024 * 1024),
                      connection_limit=connection_limit(), asyncore_use_poll=True,  # select() stops at fd 1024
                      channel_timeout=IDLE_S, cleanup_interval=1, recv_bytes=RECV_BYTES)
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    socket_map: dict = {}
    servers = [_Server(app, map=socket_map, dispatcher=dispatcher, adj=adj, sockinfo=info) for info in adj.listen]
    if len(servers) == 1:
        return servers[0]
    return MultiSocketServer(socket_map, adj, [(s.effective_host, s.effective_port) for s in servers], dispatcher)
