"""Saved sessions (monitor/session.py): what the writer is given comes back from the reader record for
record, in order, per metric; a file that is not a session is refused with one line naming the line."""

import json

import pytest

from monitor.session import SessionError, SessionWriter, read_session


def records(metric: str, n: int, start: int = 0) -> list[dict]:
    return [{"metric": metric, "kind": "summary", "interval": i, "ts": 1000.0 + i, "value": i}
            for i in range(start, start + n)]


def test_written_batches_read_back_record_for_record(tmp_path):
    path = str(tmp_path / "s.ndjson")
    writer = SessionWriter(path)
    sent = []
    for i in range(50):
        batch = records("sysnest", 7, 7 * i) + records("pagefault", 3, 3 * i)
        writer.write(batch)
        sent += batch
    writer.close()
    assert writer.written == len(sent) and writer.error == ""
    by_metric, skipped = read_session(path, ["sysnest", "pagefault"])
    assert skipped == 0
    assert by_metric["sysnest"] == [r for r in sent if r["metric"] == "sysnest"]
    assert by_metric["pagefault"] == [r for r in sent if r["metric"] == "pagefault"]
    with open(path) as f:
        assert [json.loads(line) for line in f] == sent        # plain NDJSON, in arrival order


def test_the_apps_note_records_are_part_of_a_session(tmp_path):
    """A run the overhead budget changed opens with its note, where the change happened."""
    path = tmp_path / "s.ndjson"
    note = {"metric": "sysnest", "kind": "note", "interval": 1, "ts": 1001.5, "action": "stop", "text": "stopped"}
    path.write_text("".join(json.dumps(r) + "\n" for r in [*records("sysnest", 2), note]))
    by_metric, skipped = read_session(str(path), ["sysnest"])
    assert by_metric["sysnest"][-1] == note and skipped == 0


def test_records_of_metrics_this_app_lacks_are_counted_not_shown(tmp_path):
    path = tmp_path / "s.ndjson"
    path.write_text("".join(json.dumps(r) + "\n" for r in records("sysnest", 2) + records("future", 3)))
    by_metric, skipped = read_session(str(path), ["sysnest"])
    assert list(by_metric) == ["sysnest"] and skipped == 3


@pytest.mark.parametrize("content, message", [
    ('{"metric": "sysnest", "kind": "summary"}\nnot json\n', "line 2 is not JSON"),
    ('{"metric": "sysnest", "kind": "weird"}\n', "line 1 is not a metric's record"),
    ('[1, 2]\n', "line 1 is not a metric's record"),
    ("", "no records of any known metric"),
])
def test_a_file_that_is_not_a_session_is_one_line(tmp_path, content, message):
    path = tmp_path / "bad.ndjson"
    path.write_text(content)
    with pytest.raises(SessionError) as e:
        read_session(str(path), ["sysnest"])
    assert str(e.value) == f"{path}: {message}"


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(SessionError, match="^cannot open .*: No such file or directory$"):
        read_session(str(tmp_path / "nope"), ["sysnest"])
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SessionError, match="not a text file|not JSON"):
        read_session(str(binary), ["sysnest"])


def test_an_unwritable_path_fails_at_once(tmp_path):
    with pytest.raises(OSError):
        SessionWriter(str(tmp_path / "no such dir" / "s.ndjson"))
