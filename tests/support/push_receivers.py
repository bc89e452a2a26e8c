"""Local stand-ins for the fleet backends the collector pushes to (neither Grafana Pyroscope nor an
OpenTelemetry Collector can be installed here): an HTTP server on a loopback port that records every
POST and answers with the statuses a test scripts, and decoders of what arrives written from the
backends' documented contracts: OTLP profiles through the `opentelemetry-proto` package's own classes,
Pyroscope's /ingest query and its folded or multipart pprof body."""

from __future__ import annotations

import email.parser
import email.policy
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import ExportProfilesServiceRequest


@dataclass
class Received:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


class Receiver:
    """Records each POST; answers the n-th with statuses[n] (200 once they run out)."""

    def __init__(self, statuses: tuple[int, ...] = ()) -> None:
        self.statuses = list(statuses)
        self.received: list[Received] = []
        self.answered: list[int] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                parts = urlsplit(self.path)
                with receiver._lock:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver.answered.append(status)
                    if status == 200:
                        receiver.received.append(Received(parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()},
                                                          {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def wait_for(self, done, timeout: float = 10.0) -> list[Received]:
        """The accepted requests once done(them) holds; AssertionError after timeout seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                got = list(self.received)
            if done(got):
                return got
            time.sleep(0.05)
        raise AssertionError(f"the receiver got {len(self.received)} accepted request(s), answers {self.answered}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def decode_otlp(body: bytes) -> tuple[dict[tuple[str, ...], int], ExportProfilesServiceRequest]:
    """({(thread name, function names root first...): value}, the request) from an OTLP export's bytes,
    read through the dictionary's indices as the format documents them (stack locations leaf first)."""
    request = ExportProfilesServiceRequest()
    request.ParseFromString(body)
    d = request.dictionary
    strings = list(d.string_table)
    assert strings[0] == "" and len(d.location_table[0].lines) == 0 and not d.stack_table[0].location_indices
    stacks: dict[tuple[str, ...], int] = {}
    for resource in request.resource_profiles:
        for scope in resource.scope_profiles:
            for profile in scope.profiles:
                for sample in profile.samples:
                    attributes = {strings[d.attribute_table[i].key_strindex]: d.attribute_table[i].value.string_value
                                  for i in sample.attribute_indices}
                    names = [strings[d.function_table[d.location_table[i].lines[0].function_index].name_strindex]
                             for i in d.stack_table[sample.stack_index].location_indices]
                    key = (attributes.get("thread.name", ""), *reversed(names))
                    stacks[key] = stacks.get(key, 0) + sum(sample.values)
    return stacks, request


def resource_attributes(request: ExportProfilesServiceRequest) -> dict[str, str]:
    return {a.key: a.value.string_value for a in request.resource_profiles[0].resource.attributes}


def decode_folded(text: str) -> dict[tuple[str, ...], int]:
    """Folded lines as Pyroscope reads them: frames joined by ';', a space, the count."""
    stacks: dict[tuple[str, ...], int] = {}
    for line in text.splitlines():
        if line.strip():
            frames, count = line.rsplit(" ", 1)
            key = tuple(frames.split(";"))
            stacks[key] = stacks.get(key, 0) + int(count)
    return stacks


def multipart_files(received: Received) -> dict[str, bytes]:
    """A multipart/form-data body's parts by field name (Pyroscope's pprof upload)."""
    head = f"Content-Type: {received.headers['content-type']}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + received.body)
    assert message.is_multipart(), received.headers["content-type"]
    return {part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
            for part in message.iter_parts()}
