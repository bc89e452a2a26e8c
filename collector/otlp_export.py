"""OTLP profiles out of the collector: GET /api/profile/otlp answers what GET /api/profile selects (the
same query) as one OTLP ExportProfilesServiceRequest (protobuf, profile_data/otlp.py), and build()
makes the push of a stream's window to an OpenTelemetry Collector's OTLP/HTTP receiver (POST
/v1development/profiles, Content-Type application/x-protobuf). The resource names the stream:
service.name (the target's app), host.name, ebpf_profiler.metric and ebpf_profiler.run_id."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import Blueprint, Response, request

from collector.profile_api import file_name, profile_headers, requested_profile
from collector.profiles import RangeProfile
from collector.push_targets import Push, PushTarget
from profile_data.otlp import to_otlp_bytes

if TYPE_CHECKING:
    from flask.typing import ResponseReturnValue

bp = Blueprint("otlp_export", __name__)

CONTENT_TYPE = "application/x-protobuf"  # OTLP/HTTP's binary protobuf encoding
SERVICE = "ebpf-profiler"  # service.name of a download (a push names its target's app)


def resource(key: tuple[str, str, str], service: str) -> dict[str, str]:
    host, run_id, source = key
    return {"service.name": service, "host.name": host, "ebpf_profiler.metric": source, "ebpf_profiler.run_id": run_id}


def otlp_body(key: tuple[str, str, str], result: RangeProfile, since: float, until: float, service: str) -> bytes:
    return to_otlp_bytes(result.profile, resource(key, service), time_unix_nano=round(since * 1e9),
                         duration_nano=round((until - since) * 1e9), period_ns=result.period_ns)


def build(target: PushTarget, key: tuple[str, str, str], result: RangeProfile, since: float, until: float) -> Push:
    """The push of one stream's window [since, until] (unix seconds)."""
    headers = {**target.headers, "Content-Type": CONTENT_TYPE}
    return Push(key, since, until, target.url, {}, headers, body=otlp_body(key, result, since, until, target.app))


@bp.get("/api/profile/otlp")
def profile_otlp() -> ResponseReturnValue:
    wrong = request.args.get("format", "otlp") != "otlp"
    sel, result = requested_profile("format: this endpoint answers OTLP only (other formats: /api/profile)" if wrong else None)
    # a selection of several hosts or runs names them all (comma-separated; "*": any)
    stream = (",".join(sel.hosts) or "*", ",".join(sel.run_ids) or "*", sel.source)
    since, until = result.since or 0.0, result.until or 0.0
    return Response(otlp_body(stream, result, since, until, SERVICE), mimetype=CONTENT_TYPE,
                    headers={**profile_headers(result),
                             "Content-Disposition": f"attachment; filename={file_name(sel)}.otlp.pb"})
