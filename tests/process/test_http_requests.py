"""Request validation of the HTTP adapter, as pure functions (§17.31–§17.34, §17.50)."""

from __future__ import annotations

import pytest

from hermes_actors.adapters.http_requests import (
    MAX_WAIT,
    RequestError,
    check_bearer,
    decode_json_body,
    decode_path,
    parse_content_length,
    parse_count,
    parse_message,
    parse_outbox_query,
    parse_query,
)
from hermes_actors.model.events import MessageType

SERVED = ("webhook", "api_server")


def _refused(fn, *args, **kwargs) -> RequestError:
    with pytest.raises(RequestError) as info:
        fn(*args, **kwargs)
    return info.value


class TestParseMessage:
    """A message body becomes an ``InboundMessage``, or a 422 naming the field."""

    def test_minimal_body_takes_the_defaults(self):
        msg = parse_message({"chat_id": "42", "text": "hi"}, platforms=SERVED)
        assert (msg.platform, msg.chat_id, msg.text, msg.chat_type) == ("webhook", "42", "hi",
                                                                        "dm")
        event = msg.to_event()
        assert event.source.platform == "webhook" and event.text == "hi"
        assert event.message_type is MessageType.TEXT and not event.internal

    def test_every_optional_field_reaches_the_event(self):
        msg = parse_message({
            "chat_id": "c", "text": "hi", "platform": "API_SERVER", "chat_type": "Group",
            "user_id": "u", "user_name": "Ann", "thread_id": "t", "chat_name": "Team",
            "message_id": "m1", "media_urls": ["http://x/a.png"], "message_type": "photo",
            "something_else": {"ignored": True},
        }, platforms=SERVED)  # fmt: skip
        source = msg.to_event().source
        assert (source.platform, source.chat_type, source.user_id, source.user_name,
                source.thread_id, source.chat_name, source.message_id) == (
            "api_server", "group", "u", "Ann", "t", "Team", "m1")
        assert msg.to_event().media_urls == ("http://x/a.png",)
        assert msg.to_event().message_type is MessageType.PHOTO

    def test_optional_fields_given_as_null_take_the_defaults(self):
        # a client that serialises every field it did not set as null (as many do)
        msg = parse_message({
            "chat_id": "42", "text": "hi", "platform": None, "chat_type": None,
            "user_id": None, "user_name": None, "thread_id": None, "chat_name": None,
            "message_id": None, "media_urls": None, "message_type": None,
        }, platforms=SERVED)  # fmt: skip
        assert msg == parse_message({"chat_id": "42", "text": "hi"}, platforms=SERVED)

    @pytest.mark.parametrize(("value", "expected"), [(42, "42"), (-100123, "-100123"),
                                                     (7.0, "7"), (" x ", "x")])
    def test_numeric_ids_are_coerced(self, value, expected):
        msg = parse_message({"chat_id": value, "user_id": value, "thread_id": value,
                             "text": "hi"}, platforms=SERVED)
        assert msg.chat_id == msg.user_id == msg.thread_id == expected

    def test_empty_text_is_fine_with_media(self):
        msg = parse_message({"chat_id": 1, "text": "", "media_urls": ["u"]}, platforms=SERVED)
        assert msg.text == "" and msg.media_urls == ("u",)

    @pytest.mark.parametrize(("body", "fragment"), [
        ({"text": "hi"}, "missing required field 'chat_id'"),
        ({"chat_id": None, "text": "hi"}, "missing required field 'chat_id'"),
        ({"chat_id": "  ", "text": "hi"}, "'chat_id' must not be empty"),
        ({"chat_id": "1"}, "missing required field 'text'"),
        ({"chat_id": "1", "text": "   "}, "must not be empty"),
        ({"chat_id": "1", "text": ["hi"]}, "'text' must be a string, not an array"),
        ({"chat_id": 1.5, "text": "hi"}, "'chat_id' must be a string or an integer"),
        ({"chat_id": False, "text": "hi"}, "not a boolean"),
        ({"chat_id": {"a": 1}, "text": "hi"}, "not an object"),
        ({"chat_id": "a\nb", "text": "hi"}, "control characters"),
        ({"chat_id": "x" * 300, "text": "hi"}, "longer than 256"),
        ({"chat_id": "1", "text": "hi", "user_name": 5}, "'user_name' must be a string"),
        ({"chat_id": "1", "text": "hi", "platform": "telegram"}, "not served"),
        ({"chat_id": "1", "text": "hi", "platform": "martian"}, "not served"),
        ({"chat_id": "1", "text": "hi", "platform": 3}, "'platform' must be a string"),
        ({"chat_id": "1", "text": "hi", "chat_type": "room"}, "'chat_type' must be one of"),
        ({"chat_id": "1", "text": "hi", "media_urls": [1]}, "'media_urls' must be a list"),
        ({"chat_id": "1", "text": "hi", "message_type": "command"}, "'message_type'"),
    ])
    def test_invalid_fields_are_422(self, body, fragment):
        error = _refused(parse_message, body, platforms=SERVED)
        assert error.status == 422 and fragment in error.message


class TestDecodeBody:
    """The body must be UTF-8 JSON holding an object; anything else is a 400."""

    def test_object(self):
        assert decode_json_body('{"a": "é"}'.encode()) == {"a": "é"}

    @pytest.mark.parametrize(("raw", "fragment"), [
        (b"\xff{}", "not valid UTF-8"), (b"", "empty"), (b"{nope", "malformed JSON"),
        (b"[1, 2]", "not an array"), (b'"text"', "not a string"), (b"null", "not null"),
        (b"[" * 100000, "JSON"),
        (b'{"chat_id": ' + b"9" * 5000 + b', "text": "x"}', "malformed JSON"),
    ])
    def test_unreadable_bodies_are_400(self, raw, fragment):
        error = _refused(decode_json_body, raw)
        assert error.status == 400 and fragment in error.message


class TestTransport:
    """Content-Length, bearer token and path are checked before anything is read."""

    def test_content_length(self):
        assert parse_content_length(None, 10) is None
        assert parse_content_length("", 10) is None
        assert parse_content_length("10", 10) == 10
        assert _refused(parse_content_length, "11", 10).status == 413
        assert _refused(parse_content_length, "-1", 10).status == 400
        assert _refused(parse_content_length, "ten", 10).status == 400

    def test_bearer(self):
        check_bearer(None, None)
        check_bearer("Bearer abc", "abc")
        check_bearer("bearer  abc ", "abc")
        # a WSGI server hands the header over as its bytes decoded as latin-1 (PEP 3333)
        wire = "Bearer pässwörd€".encode().decode("latin-1")
        check_bearer(wire, "pässwörd€")
        assert _refused(check_bearer, wire, "pässwörd").status == 401
        for header in (None, "", "Bearer", "Basic abc", "Bearer abd"):
            error = _refused(check_bearer, header, "abc")
            assert error.status == 401
            assert dict(error.headers)["WWW-Authenticate"].startswith("Bearer")

    def test_path_is_decoded_as_utf8(self):
        assert decode_path("/v1/sessions/agent:main:webhook:dm:é".encode().decode("latin-1")) \
            == "/v1/sessions/agent:main:webhook:dm:é"
        assert _refused(decode_path, "/v1/\xff").status == 400


class TestOutboxQuery:
    """``chat_id`` is required, ``after`` is a cursor or ``latest``, ``wait`` is clamped."""

    def test_defaults(self):
        query = parse_outbox_query("chat_id=42", platforms=SERVED)
        assert (query.platform, query.chat_id, query.after, query.wait, query.limit) == (
            "webhook", "42", 0, 0.0, 100)

    def test_wait_is_clamped_to_60(self):
        assert parse_outbox_query("chat_id=1&wait=1000", platforms=SERVED).wait == MAX_WAIT == 60

    def test_latest_and_cursor(self):
        assert parse_outbox_query("chat_id=1&after=latest", platforms=SERVED).after is None
        assert parse_outbox_query("chat_id=1&after=17&after=18", platforms=SERVED).after == 18

    @pytest.mark.parametrize(("query", "fragment"), [
        ("", "chat_id"), ("chat_id=1&after=x", "after"), ("chat_id=1&after=-2", "after"),
        ("chat_id=1&wait=-1", "wait"), ("chat_id=1&wait=nan", "wait"),
        ("chat_id=1&limit=0", "limit"), ("chat_id=1&platform=slack", "not served"),
    ])
    def test_invalid_queries_are_422(self, query, fragment):
        error = _refused(parse_outbox_query, query, platforms=SERVED)
        assert error.status == 422 and fragment in error.message

    def test_query_must_be_utf8(self):
        assert _refused(parse_query, "chat_id=%ff").status == 400

    def test_count_bounds(self):
        assert parse_count({"tail": "0"}, "tail", default=20, minimum=0) == 0
        assert parse_count({}, "tail", default=20, minimum=0) == 20
        assert _refused(parse_count, {"limit": "1001"}).status == 422


class TestNoDelay:
    """Answers are sent at once: accepted connections run with ``TCP_NODELAY`` (gevent
    writes headers and body separately; with Nagle's algorithm each answer on a kept-alive
    connection waited for the client's delayed acknowledgement)."""

    def test_no_delay_on_a_tcp_socket(self):
        import socket

        from hermes_actors.adapters.http import no_delay

        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        conn, _ = listener.accept()
        try:
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
            no_delay(conn)
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            left, right = socket.socketpair()  # not TCP: nothing to set, no error
            no_delay(left)
            left.close()
            right.close()
        finally:
            for s in (conn, client, listener):
                s.close()

    def test_the_server_sets_it_on_every_connection(self, tmp_path):
        import subprocess
        import sys

        script = """
from gevent import monkey; monkey.patch_all()
import http.client, socket, sys
from hermes_actors.adapters import http as api

seen = []
real = api.no_delay
def recording(sock):
    real(sock)
    seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
api.no_delay = recording

def app(environ, start_response):
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]

server = api.make_server(app, "127.0.0.1", 0)
server.start()
conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
for _ in range(2):
    conn.request("GET", "/")
    assert conn.getresponse().read() == b"ok"
server.stop()
print(seen)
"""
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "[1]"  # one kept-alive connection, set once
