"""The HTTP API of a real ``hermes-actors run`` process (§12, §17.31–§17.34, §17.50)."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from .conftest import TOKEN


class TestMessagesAndOutbox:
    """A posted message is answered through the durable, cursor-based outbox."""

    def test_post_then_long_poll_returns_the_echo(self, shared_gateway):
        accepted = shared_gateway.post("echo-1", "hello")
        assert accepted["session_key"] == "agent:main:webhook:dm:echo-1"
        assert len(accepted["event_id"]) == 32 and accepted["queue_depth"] >= 0
        [reply] = shared_gateway.replies("echo-1", 1)
        assert reply["text"] == "echo: hello" and reply["kind"] == "reply"
        assert reply["chat_id"] == "echo-1" and reply["thread_id"] is None
        assert reply["session_key"] == accepted["session_key"]
        assert reply["cursor"] > 0 and reply["created_at"].endswith("+00:00")

    def test_waiting_poll_wakes_when_the_reply_arrives(self, shared_gateway):
        start = shared_gateway.outbox("wake", after="latest", wait=0)["cursor"]
        result: dict = {}
        poller = threading.Thread(
            target=lambda: result.update(shared_gateway.outbox("wake", after=start, wait=60))
        )
        poller.start()
        shared_gateway.post("wake", "are you there")
        poller.join(timeout=60)
        assert not poller.is_alive()
        assert [m["text"] for m in result["messages"]] == ["echo: are you there"]
        assert result["cursor"] == result["messages"][-1]["cursor"] > start

    def test_cursor_returns_only_newer_messages(self, shared_gateway):
        shared_gateway.post("cursor", "one")
        [first] = shared_gateway.replies("cursor", 1)
        shared_gateway.post("cursor", "two")
        [second] = shared_gateway.replies("cursor", 1, after=first["cursor"])
        assert second["text"] == "echo: two" and second["cursor"] > first["cursor"]
        page = shared_gateway.outbox("cursor", after=second["cursor"], wait=0)
        assert page == {"messages": [], "cursor": second["cursor"]}

    def test_empty_poll_returns_after_its_wait_with_the_cursor_unchanged(self, shared_gateway):
        assert shared_gateway.outbox("nobody", after=7, wait=0.2) == {"messages": [],
                                                                       "cursor": 7}

    def test_numeric_ids_are_coerced_to_strings(self, shared_gateway):
        accepted = shared_gateway.post(-100123, "hi", user_id=7, thread_id=99,
                                       chat_type="group")
        assert accepted["session_key"] == "agent:main:webhook:group:-100123:99"
        [reply] = shared_gateway.replies("-100123", 1)
        assert reply["thread_id"] == "99"

    def test_notices_are_labelled_as_notices(self, shared_gateway):
        shared_gateway.post("notice", "/status")
        [answer] = shared_gateway.replies("notice", 1)
        assert answer["kind"] == "notice" and "Queue depth: 0" in answer["text"]

    def test_api_server_platform_has_its_own_outbox(self, shared_gateway):
        accepted = shared_gateway.post("plat", "hi", platform="api_server")
        assert accepted["session_key"] == "agent:main:api_server:dm:plat"
        page = shared_gateway.outbox("plat", platform="api_server", wait=30)
        assert page["messages"][0]["text"] == "echo: hi"
        assert shared_gateway.outbox("plat", platform="webhook", wait=0)["messages"] == []


class TestSessions:
    """Sessions are listed and shown with their live state and transcript tail."""

    def test_show_a_session_by_percent_encoded_key(self, shared_gateway):
        key = shared_gateway.post("show", "first")["session_key"]
        shared_gateway.replies("show", 1)
        status, body = shared_gateway.session(key)
        assert status == 200
        assert body["entry"]["session_key"] == key
        assert body["running"] is False and body["queue_depth"] == 0
        assert [m["content"] for m in body["transcript_tail"]] == ["first", "echo: first"]

    def test_unknown_session_is_404(self, shared_gateway):
        status, body = shared_gateway.session("agent:main:webhook:dm:never")
        assert status == 404 and "never" in body["error"]

    def test_list_holds_the_sessions(self, shared_gateway):
        key = shared_gateway.post("listed", "x")["session_key"]
        shared_gateway.outbox("listed")  # the reply: the turn, and so the session, exists
        status, _, body = shared_gateway.request("GET", "/v1/sessions")
        assert status == 200 and body["count"] >= 1
        assert key in [entry["session_key"] for entry in body["sessions"]]


class TestHealthAndMetrics:
    """``/healthz`` is open; ``/metrics`` is Prometheus text of the live gateway."""

    def test_healthz_needs_no_token(self, shared_gateway):
        status, _, body = shared_gateway.request("GET", "/healthz", token=False)
        assert status == 200 and body == {"status": "ok"}  # (the pid is not a stranger's)
        status, _, body = shared_gateway.request("GET", "/healthz")
        assert status == 200 and body["status"] == "ok" and body["degraded"] is False
        assert body["pid"] == shared_gateway.proc.pid

    def test_metrics_expose_runtime_store_and_recovery_state(self, shared_gateway):
        shared_gateway.post("metrics", "x")
        shared_gateway.replies("metrics", 1)
        status, headers, text = shared_gateway.request("GET", "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        for name in ("hermes_up 1.0", "hermes_sessions_live", "hermes_sessions_stored",
                     "hermes_agent_cache_size", 'hermes_ledger_obligations{state="pending"}',
                     "hermes_recovery_clean_shutdown", "hermes_outbox_appended_total",
                     'hermes_http_requests_total{route="/v1/messages",status="202"}',
                     "process_resident_memory_bytes"):
            assert name in text, name


BAD_BODIES = [
    pytest.param(b'{"chat_id": "bad", "text": ', 400, "malformed JSON", id="malformed-json"),
    pytest.param(b'["chat_id", "bad"]', 400, "JSON object", id="not-an-object"),
    pytest.param(b'{"chat_id": "bad", "text": "\xff\xfe"}', 400, "UTF-8", id="invalid-utf8"),
    pytest.param(b'{"text": "hi"}', 422, "chat_id", id="missing-chat-id"),
    pytest.param(b'{"chat_id": "bad"}', 422, "'text'", id="missing-text"),
    pytest.param(b'{"chat_id": "bad", "text": ""}', 422, "must not be empty", id="empty-text"),
    pytest.param(b'{"chat_id": ["bad"], "text": "hi"}', 422, "chat_id", id="chat-id-array"),
    pytest.param(b'{"chat_id": true, "text": "hi"}', 422, "boolean", id="chat-id-bool"),
    pytest.param(b'{"chat_id": "bad", "text": 5}', 422, "'text' must be a string",
                 id="text-number"),
    pytest.param(b'{"chat_id": "bad", "text": "hi", "media_urls": "x"}', 422, "media_urls",
                 id="media-not-list"),
    pytest.param(b'{"chat_id": "bad", "text": "hi", "platform": "telegram"}', 422,
                 "not served", id="unserved-platform"),
    pytest.param(b'{"chat_id": "bad", "text": "hi", "platform": "nope"}', 422, "not served",
                 id="unknown-platform"),
    pytest.param(b'{"chat_id": "bad", "text": "hi", "chat_type": "room"}', 422, "chat_type",
                 id="bad-chat-type"),
    pytest.param(b'{"chat_id": "../etc", "text": "hi"}', 422, "'..'", id="path-traversal-id"),
    pytest.param(b'{"chat_id": "bad", "text": "hi \\ud800"}', 400, "surrogate",
                 id="lone-surrogate"),
    pytest.param(b'{"chat_id": "bad\\udfff", "text": "hi"}', 400, "surrogate",
                 id="lone-surrogate-in-an-id"),
]


class TestBadInput:
    """Bad requests get the right 4xx and a JSON error, and nothing is written."""

    @pytest.mark.parametrize(("raw", "status", "fragment"), BAD_BODIES)
    def test_bad_message_body(self, shared_gateway, raw, status, fragment):
        got, headers, body = shared_gateway.request("POST", "/v1/messages", raw=raw)
        assert got == status, body
        assert headers["content-type"].startswith("application/json")
        assert fragment in body["error"]

    def test_nothing_was_half_written(self, shared_gateway):
        for key in ("agent:main:webhook:dm:bad", "agent:main:telegram:dm:bad"):
            assert shared_gateway.session(key)[0] == 404
        assert shared_gateway.outbox("bad", wait=0)["messages"] == []

    def test_declared_body_over_the_limit_is_413_without_reading_it(self, shared_gateway):
        with socket.create_connection(("127.0.0.1", shared_gateway.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
                         b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                         b"Content-Length: 1048577\r\n\r\n")
            answer = sock.makefile("rb").read()  # the server closes: no body was read
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413") and b"too large" in body

    @pytest.mark.parametrize(("head", "error"), [
        (b"POST /v1/messages HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
         "invalid Content-Length header 'abc'"),
        (b"POST /v1/messages HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
         "invalid Content-Length header '-1'"),
        (b"GARBAGE\r\n\r\n",
         "malformed HTTP request: its request line or a header cannot be read"),
    ])
    def test_a_request_the_server_cannot_parse_is_400_with_a_json_error(
            self, shared_gateway, head, error):
        # the server's own refusal (before the application) had an empty body
        with socket.create_connection(("127.0.0.1", shared_gateway.port), timeout=30) as sock:
            sock.sendall(head)
            answer = sock.makefile("rb").read()  # closed after the answer
        status, _, body = answer.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 400"), answer
        assert b"Content-Type: application/json" in status
        assert json.loads(body) == {"error": error}

    @pytest.mark.parametrize("chunks", [b"zz\r\n{}\r\n0\r\n\r\n",  # a size that is not hex
                                        b"2\r\n{}XX0\r\n\r\n"])  # no CRLF after the data
    def test_malformed_chunked_body_is_400(self, shared_gateway, chunks):
        with socket.create_connection(("127.0.0.1", shared_gateway.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
                         b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n" + chunks)
            answer = sock.makefile("rb").read()  # closed after the answer
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), answer
        assert json.loads(body)["error"].startswith("malformed chunked request body")

    def test_chunked_body_over_the_limit_is_413(self, shared_gateway):
        def chunks():
            for _ in range(17):
                yield b"x" * 65536  # 1 MiB + 64 KiB in all

        # an iterable body without a length is sent chunked by http.client
        status, _, body = shared_gateway.request("POST", "/v1/messages", raw=chunks())
        assert status == 413 and "too large" in body["error"]

    @pytest.mark.parametrize("path", ["/v1/messages", "/v1/outbox?chat_id=x", "/v1/sessions",
                                      "/metrics", "/v1/sessions/agent%3Amain"])
    @pytest.mark.parametrize("token", [False, "wrong"], ids=["missing", "wrong"])
    def test_token_guards_every_endpoint_but_healthz(self, shared_gateway, path, token):
        method = "POST" if path == "/v1/messages" else "GET"
        body = {"chat_id": "bad", "text": "hi"} if method == "POST" else None
        status, headers, answer = shared_gateway.request(method, path, body, token=token)
        assert status == 401 and "token" in answer["error"]
        assert headers["www-authenticate"].startswith("Bearer")

    def test_wrong_method_is_405_with_allow(self, shared_gateway):
        status, headers, body = shared_gateway.request("GET", "/v1/messages")
        assert status == 405 and headers["allow"] == "POST" and "GET" in body["error"]

    def test_unknown_path_is_404(self, shared_gateway):
        status, _, body = shared_gateway.request("GET", "/v2/nothing")
        assert status == 404 and "/v2/nothing" in body["error"]

    @pytest.mark.parametrize(("query", "fragment"), [
        ("after=0", "chat_id"), ("chat_id=x&after=-1", "after"), ("chat_id=x&wait=soon", "wait"),
        ("chat_id=x&platform=telegram", "not served"),
        ("chat_id=x&after=%C2%B2", "after"),  # a digit to str.isdigit, not to int
        ("chat_id=x&limit=%C2%B2", "limit"),
        ("chat_id=x&after=99999999999999999999999", "after"),  # over 64 bits
    ])
    def test_bad_outbox_query_is_422(self, shared_gateway, query, fragment):
        status, _, body = shared_gateway.request("GET", f"/v1/outbox?{query}")
        assert status == 422 and fragment in body["error"]

    def test_wait_over_60_is_clamped_and_answers_at_once_when_messages_exist(
            self, shared_gateway):
        shared_gateway.post("clamp", "x")
        shared_gateway.replies("clamp", 1)
        page = shared_gateway.outbox("clamp", after=0, wait=100000)
        assert [m["text"] for m in page["messages"]] == ["echo: x"]


class TestTranscriptTail:
    def test_tail_zero_shows_no_messages(self, shared_gateway):
        import urllib.parse

        key = shared_gateway.post("tail-0", "hello")["session_key"]
        shared_gateway.replies("tail-0", 1)
        path = "/v1/sessions/" + urllib.parse.quote(key, safe="")
        status, _, body = shared_gateway.request("GET", path + "?tail=0")
        assert status == 200 and body["transcript_tail"] == []
        status, _, body = shared_gateway.request("GET", path + "?tail=1")
        assert [m["content"] for m in body["transcript_tail"]] == ["echo: hello"]


@pytest.fixture
def slow_gateway(start_gateway, tmp_path):
    """A gateway whose connections wait at most 0.5 s for a body (http.body_timeout)."""
    home = tmp_path / "slow"
    home.mkdir()
    (home / "config.yaml").write_text("http:\n  body_timeout: 0.5\n")
    return start_gateway(home=home)


class TestSlowClients:
    """A slow-loris body gets 408 after http.body_timeout and never stalls other requests."""

    def test_slow_body_times_out_while_others_are_served(self, slow_gateway):
        gw = slow_gateway
        slow = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
        slow.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 100\r\n\r\n{\"chat_id\"")
        status, _, body = gw.request("GET", "/healthz")
        assert status == 200, "a slow client must not block the server"
        gw.post("fast", "hello")
        answer = b""
        while b"}" not in answer:  # the head and the JSON body may come in two reads
            chunk = slow.recv(4096)
            if not chunk:
                break
            answer += chunk
        slow.close()
        head = answer.decode()
        assert head.startswith("HTTP/1.1 408"), head
        assert "not received within 0.5 s" in head

    def test_a_timed_out_body_closes_the_connection(self, slow_gateway):
        with socket.create_connection(("127.0.0.1", slow_gateway.port), timeout=30) as slow:
            slow.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: 50\r\n\r\n{")
            answer = slow.makefile("rb").read()  # returns once the server hangs up
        head = answer.partition(b"\r\n\r\n")[0]
        assert head.startswith(b"HTTP/1.1 408") and b"Connection: close" in head

    def test_a_half_sent_request_head_is_cut_off(self, slow_gateway):
        with socket.create_connection(("127.0.0.1", slow_gateway.port), timeout=30) as slow:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            answer = slow.makefile("rb").read()  # returns once the server hangs up (the
            # client's own timeout is 30 s)
        assert answer.startswith(b"HTTP/1.1 400")  # (gevent's answer to a cut head)

    def test_a_chunked_body_over_the_limit_names_its_size(self, start_gateway, tmp_path):
        gw = start_gateway()
        big = b"a" * 1_100_000
        with socket.create_connection(("127.0.0.1", gw.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n"
                         + b"%x\r\n" % len(big) + big + b"\r\n0\r\n\r\n")
            answer = sock.makefile("rb").read()
        assert answer.startswith(b"HTTP/1.1 413")
        assert b"request body too large: 1048577 bytes (limit 1048576)" in answer
