"""Upload tokens and the collector's settings: file formats, refusals, header and URL forms, and
configuration from the environment (for gunicorn)."""

from __future__ import annotations

import pytest

from collector import settings, tokens


def test_tokens_file_lines_and_json(tmp_path):
    lines = tmp_path / "tokens.txt"
    lines.write_text("# lab 3\nalice  tok-a-111\n\npc-07 tok-b-222\n")
    assert tokens.load_tokens(None, str(lines)) == {"tok-a-111": "alice", "tok-b-222": "pc-07"}
    as_json = tmp_path / "tokens.json"
    as_json.write_text('{"alice": "tok-a-111", "bob": "tok-c-333"}')
    assert tokens.load_tokens("single-tok", str(as_json)) == {"tok-a-111": "alice", "tok-c-333": "bob",
                                                              "single-tok": "token"}


@pytest.mark.parametrize("text,message", [
    ("alice\n", "expected 'name token'"),
    ("alice a b\n", "expected 'name token'"),
    ("alice same\nbob same\n", "same token"),
    ('{"alice": 5}', "map names to tokens"),
    ("{not json", "not valid JSON"),
    ("# only a comment\n", "no tokens"),
    ('{"al ice": "tok"}', "no spaces"),
])
def test_bad_tokens_files_say_why(tmp_path, text, message):
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        tokens.load_tokens(None, str(path))


def test_authenticate_header_and_url_forms():
    known = {"tok-a-111": "alice", "tok-b-222": "bob"}
    assert tokens.authenticate("Bearer tok-b-222", None, known) == "bob"
    assert tokens.authenticate("bearer  tok-a-111 ", None, known) == "alice"
    assert tokens.authenticate(None, "tok-a-111", known) == "alice"
    for header, query in (("Bearer wrong", None), ("Basic tok-a-111", None), (None, None), ("Bearer ", ""),
                          ("Bearer tok-a-11", None), ("Bearer tok-a-1111", None)):
        assert tokens.authenticate(header, query, known) is None


def test_settings_from_environment(monkeypatch, tmp_path):
    path = tmp_path / "tokens.txt"
    path.write_text("alice tok-a-111\n")
    monkeypatch.setenv("COLLECTOR_DB", "postgresql://lab@db/lab")
    monkeypatch.setenv("COLLECTOR_TOKENS_FILE", str(path))
    monkeypatch.setenv("COLLECTOR_MAX_BODY", "65536")
    got = settings.from_mapping(None)
    assert (got.db_url, got.tokens, got.max_body) == ("postgresql+psycopg://lab@db/lab", {"tok-a-111": "alice"}, 65536)


def test_settings_refuse_unknown_keys_and_tiny_limits():
    with pytest.raises(ValueError, match="unknown collector setting"):
        settings.from_mapping({"db": "x"})
    with pytest.raises(ValueError, match="max_body"):
        settings.from_mapping({"max_body": 10})
    assert settings.from_mapping({"db_url": "lab.db"}).db_url.startswith("sqlite:////")


def test_create_app_from_environment(monkeypatch, tmp_path):
    from collector import create_app

    monkeypatch.setenv("COLLECTOR_DB", str(tmp_path / "env.db"))
    monkeypatch.setenv("COLLECTOR_TOKEN", "env-token-1")
    client = create_app().test_client()
    assert client.get("/healthz").get_json()["auth"] is True
    assert client.post("/data", json={}).status_code == 401
