"""Profiles handed on to fleet backends, checked against each backend's documented contract by a local
receiver that decodes what arrives (neither Grafana Pyroscope nor an OpenTelemetry Collector can be
installed here): GET /api/profile/otlp and the OTLP/HTTP push decode with the `opentelemetry-proto`
package's own classes into the posted stacks and counts; the Pyroscope push carries /ingest's
documented query (name with labels, from/until, format, units, sampleRate) and a folded or multipart
pprof body holding the same stacks; a receiver that fails twice is retried with the failures counted
(/metrics, the overview), a 4xx is not retried, a receiver that is down leaves ingest as it was, and a
full queue drops and counts. Every window's records are pushed once: the profiles that arrive sum to
exactly what was posted."""

from __future__ import annotations

import email.utils
import json
import os
import time

import pytest
from collector_payloads import envelope, ours, prometheus_samples
from helpers import ROOT
from pprof_decode import decode
from push_receivers import (
    Receiver,
    decode_folded,
    decode_otlp,
    multipart_files,
    resource_attributes,
)
from server_fixtures import free_port
from stack_posts import cpuprofile_stacks

import server
from collector import create_app, profiles, settings
from collector import pusher as pusher_module
from collector.profiles import range_profile
from collector.push_targets import Push, parse_targets
from collector.pusher import Pusher, retry_after_s
from collector.state import EXTENSION, PUSH_EXTENSION

T0 = 1_750_000_000.0
KEY = "host=lab-pc-01&run_id=run-a&source=cpuprofile"
KERNEL = "asm_sysvec_apic_timer_interrupt"
# quick enough for a test: a window every 0.2 s, ending 1 s before now (a batch is stored by then)
FAST = {"interval_s": 0.2, "delay_s": 1.0, "backoff_s": 0.05, "timeout_s": 5}
# Pyroscope's documented /ingest query parameters
INGEST_PARAMS = {"name", "from", "until", "format", "sampleRate", "spyName", "units", "aggregationType"}


def post_stacks(client, sequence: int, ts: float, host: str = "lab-pc-01", frequency_hz: int = 99) -> None:
    """cpuprofile's stack records of one interval (hot_0..hot_2: 30, 31, 32 samples) and its summary."""
    summary = envelope("cpuprofile", ts, 1, "summary", samples=93, frequency_hz=frequency_hz)
    answer = client.post("/data", json=ours(sequence, host=host, source="cpuprofile",
                                            records=[*cpuprofile_stacks(ts), summary]))
    assert answer.status_code == 200, answer.get_json()


def expected_names(intervals: int) -> dict[tuple[str, ...], int]:
    """(comm, function names root first) -> samples, for `intervals` posts of post_stacks."""
    return {("work", "main", "work", f"hot_{n}", KERNEL): (30 + n) * intervals for n in range(3)}


def summed(parts: list[dict]) -> dict:
    total: dict = {}
    for part in parts:
        for key, value in part.items():
            total[key] = total.get(key, 0) + value
    return total


@pytest.fixture
def push_app(tmp_path):
    """push_app(*targets) -> a collector app on SQLite pushing to them (its threads stopped afterwards)."""
    apps = []

    def make(*targets: dict):
        app = create_app({"db_url": f"sqlite:///{tmp_path}/collector.db", "push_targets": list(targets)})
        app.config["TESTING"] = True
        apps.append(app)
        return app

    yield make
    for app in apps:
        if app.extensions[PUSH_EXTENSION]:
            app.extensions[PUSH_EXTENSION].stop()
        app.extensions[EXTENSION].store.close()


@pytest.fixture
def receiver():
    receivers = []

    def make(statuses: tuple[int, ...] = ()) -> Receiver:
        receivers.append(Receiver(statuses))
        return receivers[-1]

    yield make
    for r in receivers:
        r.close()


def test_otlp_download_decodes_into_the_posted_stacks(collector_client):
    for i in range(3):
        post_stacks(collector_client, i, T0 + i)
    answer = collector_client.get(f"/api/profile/otlp?{KEY}&range=run")
    assert answer.status_code == 200 and answer.mimetype == "application/x-protobuf"
    assert answer.headers["X-Profile-Records"] == "9"
    stacks, request = decode_otlp(answer.data)
    assert stacks == expected_names(3)
    assert resource_attributes(request) == {"service.name": "ebpf-profiler", "host.name": "lab-pc-01",
                                            "ebpf_profiler.metric": "cpuprofile", "ebpf_profiler.run_id": "run-a"}
    d = request.dictionary
    profile = request.resource_profiles[0].scope_profiles[0].profiles[0]
    assert (d.string_table[profile.sample_type.type_strindex], d.string_table[profile.sample_type.unit_strindex]) \
        == ("samples", "count")
    assert profile.time_unix_nano == T0 * 1e9 and profile.duration_nano == 2e9
    assert d.string_table[profile.period_type.type_strindex] == "cpu" and profile.period == round(1e9 / 99)
    # a kernel frame's location says so, and maps to the kernel; a user frame maps to its module
    kinds = {}
    for location in d.location_table[1:]:
        name = d.string_table[d.function_table[location.lines[0].function_index].name_strindex]
        attribute = d.attribute_table[location.attribute_indices[0]]
        kinds[name] = (attribute.value.string_value, d.string_table[d.mapping_table[location.mapping_index].filename_strindex])
    assert kinds[KERNEL] == ("kernel", "[kernel.kallsyms]") and kinds["hot_1"] == ("native", "work")


def test_otlp_download_refuses_a_bad_query(collector_client):
    post_stacks(collector_client, 0, T0)
    for query in ("&format=folded", "&sourc=x", "&since=yesterday"):
        answer = collector_client.get(f"/api/profile/otlp?{KEY}{query}")
        assert answer.status_code == 400 and answer.get_json()["reason"] == "bad_query", query
    missing = collector_client.get("/api/profile/otlp?host=nobody&run_id=r&source=cpuprofile")
    assert missing.status_code == 404 and missing.get_json()["reason"] == "not_found"


def test_otlp_push_reaches_the_receiver_once_per_record(push_app, receiver):
    otel = receiver()
    app = push_app({"kind": "otlp", "url": otel.url, "headers": {"Authorization": "Bearer otel-key"}, **FAST})
    client = app.test_client()
    for i in range(3):
        post_stacks(client, i, time.time())
        time.sleep(0.15)
    want = expected_names(3)
    got = otel.wait_for(lambda rs: summed([decode_otlp(r.body)[0] for r in rs]) == want)
    for r in got:
        assert r.path == "/v1development/profiles" and r.headers["content-type"] == "application/x-protobuf"
        assert r.headers["authorization"] == "Bearer otel-key"
        _stacks, request = decode_otlp(r.body)
        assert resource_attributes(request)["host.name"] == "lab-pc-01"
        profile = request.resource_profiles[0].scope_profiles[0].profiles[0]
        assert profile.duration_nano > 0
    time.sleep(0.5)  # later windows push nothing more: no record twice
    assert summed([decode_otlp(r.body)[0] for r in otel.received]) == want


def test_pyroscope_folded_push_follows_the_ingest_contract(push_app, receiver):
    pyroscope = receiver()
    app = push_app({"kind": "pyroscope", "url": pyroscope.url + "/", "app": "lab",
                    "headers": {"X-Scope-OrgID": "lab-1"}, **FAST})
    client = app.test_client()
    posted_at = []
    for i in range(2):
        posted_at.append(time.time())
        post_stacks(client, i, posted_at[-1])
    want = {("work", "main [work]", "work [work]", f"hot_{n} [work]", KERNEL + "_[k]"): (30 + n) * 2 for n in range(3)}
    got = pyroscope.wait_for(lambda rs: summed([decode_folded(r.body.decode()) for r in rs]) == want)
    for r in got:
        assert r.path == "/ingest" and set(r.query) <= INGEST_PARAMS, r.query
        assert r.query["name"] == "lab.cpuprofile{host=lab-pc-01,run_id=run-a}"
        assert (r.query["format"], r.query["units"], r.query["sampleRate"]) == ("folded", "samples", "99")
        assert r.query["from"].isdigit() and r.query["until"].isdigit()
        assert int(r.query["from"]) < int(r.query["until"])
        assert r.headers["x-scope-orgid"] == "lab-1" and r.headers["content-type"].startswith("text/plain")
    # every record's time lies inside the window of a request
    assert all(any(int(r.query["from"]) <= t <= int(r.query["until"]) for r in got) for t in posted_at)


def test_pyroscope_pprof_push_is_a_multipart_profile_with_its_sample_type(push_app, receiver, profile_pb2):
    pyroscope = receiver()
    app = push_app({"kind": "pyroscope", "url": pyroscope.url, "format": "pprof", "app": "lab", **FAST})
    post_stacks(app.test_client(), 0, time.time())
    want = {(("work", ""), ("main", "work"), ("work", "work"), (f"hot_{n}", "work"), (KERNEL, "[kernel.kallsyms]")):
            30 + n for n in range(3)}
    got = pyroscope.wait_for(lambda rs: summed([decode(profile_pb2, multipart_files(r)["profile"])[0]
                                                for r in rs]) == want)
    for r in got:
        assert r.query["format"] == "pprof" and r.query["name"] == "lab{host=lab-pc-01,run_id=run-a}"
        assert r.headers["content-type"].startswith("multipart/form-data")
        files = multipart_files(r)
        _stacks, _strings, types = decode(profile_pb2, files["profile"])
        config = json.loads(files["sample_type_config"])
        assert types == [("samples", "count")]
        assert config == {"samples": {"units": "samples", "aggregation": "sum", "display-name": "cpuprofile",
                                      "sampled": False}}


def push_counts(client) -> dict[str, float]:
    return {k: v for k, v in prometheus_samples(client.get("/metrics").get_data(as_text=True)).items()
            if k.startswith("collector_push_")}


def test_failures_are_retried_with_backoff_and_counted(push_app, receiver):
    flaky, strict = receiver((503, 503)), receiver((400,))
    app = push_app({"kind": "otlp", "name": "otel", "url": flaky.url, **FAST},
                   {"kind": "pyroscope", "name": "strict", "url": strict.url, **FAST})
    client = app.test_client()
    post_stacks(client, 0, time.time())
    flaky.wait_for(lambda rs: summed([decode_otlp(r.body)[0] for r in rs]) == expected_names(1))
    deadline = time.monotonic() + 5
    while push_counts(client).get('collector_push_profiles_abandoned_total{target="strict",kind="pyroscope"}') != 1:
        assert time.monotonic() < deadline, push_counts(client)
        time.sleep(0.05)
    counts = push_counts(client)
    otel, refused = '{target="otel",kind="otlp"}', '{target="strict",kind="pyroscope"}'
    assert flaky.answered[:3] == [503, 503, 200]
    assert counts["collector_push_failures_total" + otel] == 2 and counts["collector_push_retries_total" + otel] == 2
    assert counts["collector_push_profiles_sent_total" + otel] == 1
    assert counts["collector_push_profiles_abandoned_total" + otel] == 0
    assert counts["collector_push_last_success_timestamp_seconds" + otel] > 0
    # a 400 is the backend refusing the profile: not tried again
    assert strict.answered == [400] and counts["collector_push_retries_total" + refused] == 0
    assert counts["collector_push_failures_total" + refused] == 1
    page = client.get("/", headers={"Accept": "text/html"}).get_data(as_text=True)
    assert 'id="pushes"' in page and 'data-target="otel"' in page and "HTTP 400" in page


def test_a_target_that_is_down_leaves_ingest_alone(push_app):
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    app = push_app({"kind": "pyroscope", "name": "down", "url": down, **FAST, "retries": 1})
    client = app.test_client()
    for i in range(5):
        post_stacks(client, i, time.time())
        time.sleep(0.1)
    streams = client.get("/api/streams").get_json()["streams"]
    assert [(s["batches"], s["records"]) for s in streams] == [(5, 20)]
    label = '{target="down",kind="pyroscope"}'
    deadline = time.monotonic() + 8
    while push_counts(client).get("collector_push_profiles_abandoned_total" + label, 0) < 1:
        assert time.monotonic() < deadline, push_counts(client)
        time.sleep(0.05)
    counts = push_counts(client)
    assert counts["collector_push_failures_total" + label] >= 2 and counts["collector_push_retries_total" + label] >= 1
    assert counts["collector_push_profiles_sent_total" + label] == 0
    assert counts["collector_push_last_success_timestamp_seconds" + label] == 0
    post_stacks(client, 5, time.time())  # still taking batches
    assert client.get("/api/streams").get_json()["streams"][0]["batches"] == 6


def test_a_full_queue_drops_and_counts(push_app, monkeypatch):
    """Once the queue is full, the window's other streams are not read at all (each counted dropped)."""
    now = [T0 - 10]
    app = push_app()
    client = app.test_client()
    for i, host in enumerate(("pc-1", "pc-2", "pc-3")):
        post_stacks(client, 0, T0 + i, host=host)
    read = []
    monkeypatch.setattr(pusher_module, "range_profile", lambda store, host, *a, **kw: read.append(host)
                        or range_profile(store, host, *a, **kw))
    target = parse_targets([{"kind": "otlp", "url": "http://127.0.0.1:9", "queue": 1, "delay_s": 0}])
    pusher = Pusher(app.extensions[EXTENSION].store, target, clock=lambda: now[0])  # not started: no sender
    now[0] = T0 + 10
    pusher.push_now()
    (stats,) = pusher.stats()
    assert (stats.queued, stats.dropped, stats.windows) == (1, 2, 1)
    assert len(read) == 1, read
    pusher.push_now()  # the next window holds no new record: nothing more
    assert pusher.stats()[0].dropped == 2
    pusher.stop()
    assert pusher.stats()[0].abandoned == 1  # what was still queued


def test_a_push_that_raises_is_a_counted_failure_and_the_sender_goes_on(push_app, receiver, caplog):
    """A request that cannot be made (a header value outside Latin-1, given past the config's check):
    http.client raises UnicodeEncodeError, not a RequestException. It is a failure, abandoned at once and
    logged with its traceback; the sender thread goes on to the next profile."""
    got = receiver()
    (target,) = parse_targets([{"kind": "otlp", "url": got.url, **FAST}])
    pusher = Pusher(push_app().extensions[EXTENSION].store, (target,))
    pushes = pusher._targets[0].queue
    pushes.put(Push(("pc-1", "run-a", "cpuprofile"), T0, T0 + 1, got.url, {}, {"Authorization": "Bearer €1x"}, b"a"))
    pushes.put(Push(("pc-2", "run-a", "cpuprofile"), T0, T0 + 1, got.url, {}, {"Authorization": "Bearer 1x"}, b"b"))
    pusher.start()
    try:
        (delivered,) = got.wait_for(lambda rs: len(rs) == 1)
        assert delivered.body == b"b" and delivered.headers["authorization"] == "Bearer 1x"
        deadline = time.monotonic() + 10   # counted once the answer is back, after the receiver noted it
        while pusher.stats()[0].sent == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        (stats,) = pusher.stats()
        assert (stats.sent, stats.failures, stats.abandoned, stats.retries) == (1, 1, 1, 0)
        assert stats.last_error.startswith("UnicodeEncodeError")
        assert any(r.exc_info and r.exc_info[0] is UnicodeEncodeError for r in caplog.records)
    finally:
        pusher.stop()


def test_a_window_after_an_outage_is_capped_and_a_stream_that_fails_stalls_no_other(push_app, monkeypatch):
    """A window is max_window_s at most: after the database was away, its older part is skipped and
    counted in seconds, not read as one window cut to its newest records unsaid; a profile cut so is
    counted as truncated; a stream whose profile cannot be made is a read error and the others go."""
    now = [T0 - 1000]
    app = push_app()
    client = app.test_client()
    for i, host in enumerate(("pc-1", "pc-2", "pc-3")):
        post_stacks(client, 0, T0 - 500 + i, host=host)     # before the cap: skipped
        post_stacks(client, 1, T0 - 50 + i, host=host)      # in the last max_window_s
    store = app.extensions[EXTENSION].store
    (target,) = parse_targets([{"kind": "otlp", "url": "http://127.0.0.1:9", "delay_s": 0, "max_window_s": 100}])
    pusher = Pusher(store, (target,), clock=lambda: now[0])
    real_streams = store.streams
    monkeypatch.setattr(store, "streams", lambda: 1 / 0)     # the database away for the outage
    now[0] = T0 - 600
    pusher.push_now()
    now[0] = T0
    pusher.push_now()
    assert (pusher.stats()[0].read_errors, pusher.stats()[0].windows) == (2, 0)
    monkeypatch.setattr(store, "streams", real_streams)
    monkeypatch.setattr(profiles, "MAX_RECORDS", 2)     # pc-1's window holds 3 stack records
    real = range_profile

    def failing(store, host, *args, **kwargs):
        if host == "pc-2":
            raise ValueError("a stream that cannot be read")
        return real(store, host, *args, **kwargs)

    monkeypatch.setattr(pusher_module, "range_profile", failing)
    pusher.push_now()
    (stats,) = pusher.stats()
    assert (stats.windows, stats.queued, stats.read_errors, stats.truncated) == (1, 2, 3, 2)
    assert stats.skipped_s == pytest.approx(1000 - 100)
    queued = [pusher._targets[0].queue.get_nowait() for _ in range(2)]
    assert sorted(p.stream[0] for p in queued) == ["pc-1", "pc-3"]
    assert {(p.since, p.until) for p in queued} == {(T0 - 100, T0)}
    assert "pc-2" in stats.last_error and "ValueError" in stats.last_error


def test_a_retry_after_longer_than_the_backoff_is_waited_for_whole(push_app):
    """docs/collector.md: a failed try is tried again after the backoff, or after the answer's Retry-After
    when that is longer; backoff_max_s caps the backoff only. Retry-After may also be an HTTP-date."""
    (target,) = parse_targets([{"kind": "otlp", "url": "http://127.0.0.1:9", "backoff_s": 0.5,
                                "backoff_max_s": 1, "retries": 1}])
    pusher = Pusher(push_app().extensions[EXTENSION].store, (target,))
    waits = []
    pusher._stop.wait = lambda seconds: waits.append(seconds) or True   # note the wait, then stop

    class Busy:  # a session whose every answer is 503 with this Retry-After
        def __init__(self, retry_after: str) -> None:
            self.headers, self.status_code, self.text = {"Retry-After": retry_after}, 503, ""

        def post(self, *args, **kwargs):
            return self

    in_a_while = email.utils.formatdate(time.time() + 300, usegmt=True)
    for retry_after in ("120", in_a_while, "", "soon"):
        pusher._deliver(pusher._targets[0], Busy(retry_after), Push(("pc-1", "run-a", "cpuprofile"), T0, T0 + 1,
                                                                     target.url, {}, {}, b"x"))
    assert waits[0] == 120 and 290 < waits[1] <= 300 and waits[2:] == [0.5, 0.5]
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", time.time()) == 0.0   # a date passed: at once


@pytest.mark.parametrize(("targets", "message"), [
    ([{"kind": "graphite", "url": "http://x"}], "kind must be one of pyroscope, otlp"),
    ([{"kind": "otlp", "url": "ftp://x"}], "url must be an http:// or https:// address"),
    ([{"kind": "otlp", "url": "http://x", "format": "folded"}], "format must be one of protobuf"),
    ([{"kind": "pyroscope", "url": "http://x", "interval_s": 0}], "interval_s must be a number > 0"),
    ([{"kind": "pyroscope", "url": "http://x", "retries": 1.5}], "retries must be a whole number >= 0"),
    ([{"kind": "pyroscope", "url": "http://x", "interval_s": 60, "max_window_s": 30}],
     "max_window_s must be at least interval_s"),
    ([{"kind": "pyroscope", "url": "http://x", "sources": "cpuprofile"}], "sources must be a list of names"),
    ([{"kind": "pyroscope", "url": "http://x", "headers": {"Bad Header": "v"}}], "header 'Bad Header'"),
    ([{"kind": "otlp", "url": "http://x", "headers": {"Authorization": "Bearer €1x"}}],
     "header 'Authorization' must be a header name with a printable Latin-1 value"),
    ([{"kind": "pyroscope", "url": "http://x", "intervl_s": 5}], "unknown key(s): intervl_s"),
    ([{"kind": "otlp", "url": "http://x"}, {"kind": "otlp", "url": "http://y", "name": "otlp-1"}],
     "target name(s) used twice: otlp-1"),
    ({"kind": "otlp"}, "must be a list of targets"),
])
def test_a_bad_push_config_is_refused_with_its_reason(targets, message):
    with pytest.raises(ValueError, match="^.*" + message.replace("(", r"\(").replace(")", r"\)")):
        parse_targets(targets)


def test_push_config_urls_get_the_documented_paths():
    pyroscope, otlp, given = parse_targets([{"kind": "pyroscope", "url": "http://pyro:4040"},
                                            {"kind": "otlp", "url": "https://otel:4318/"},
                                            {"kind": "otlp", "url": "http://gw/otlp/profiles"}])
    assert (pyroscope.url, pyroscope.format, pyroscope.name) == ("http://pyro:4040/ingest", "folded", "pyroscope-1")
    assert otlp.url == "https://otel:4318/v1development/profiles" and given.url == "http://gw/otlp/profiles"


def test_server_refuses_a_bad_push_config_in_one_line(tmp_path, capsys):
    config = tmp_path / "push.json"
    config.write_text('[{"kind": "otlp", "url": "http://otel:4318", "queue": 0}]')
    with pytest.raises(SystemExit) as exited:
        server.parse_args(["--push-config", str(config)])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"server.py: error: {config}: push target 'otlp-1': queue must be a whole number > 0")


def test_the_documented_example_config_parses():
    with open(os.path.join(ROOT, "docs", "push-config.example.json")) as f:
        pyroscope, otel = parse_targets(json.load(f))
    assert (pyroscope.url, pyroscope.sources, pyroscope.format) == (
        "http://pyroscope.lab:4040/ingest", ("cpuprofile", "offcpu"), "folded")
    assert (otel.url, otel.hosts, otel.format) == (
        "http://otel-collector.lab:4318/v1development/profiles", ("lab-pc-01", "lab-pc-02"), "protobuf")


def test_gunicorn_reads_the_push_config_from_the_environment(tmp_path, monkeypatch):
    config = tmp_path / "push.json"
    config.write_text('{"targets": [{"kind": "otlp", "url": "http://otel:4318", "name": "otel"}]}')
    monkeypatch.setenv("COLLECTOR_PUSH_CONFIG", str(config))
    (target,) = settings.from_mapping(None).push_targets
    assert (target.name, target.url) == ("otel", "http://otel:4318/v1development/profiles")
    config.write_text("[{")
    with pytest.raises(ValueError, match="not valid JSON"):
        settings.from_mapping(None)
