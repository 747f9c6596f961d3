"""The HTTP adapter's WSGI application called directly (issue 37 §1): what it logs and what
``/healthz`` tells whom; the warning of a server open to other machines without a token."""

from __future__ import annotations

import io
import json
import logging
import os
from types import SimpleNamespace

import pytest

from hermes_actors.adapters.http import HttpApi
from hermes_actors.adapters.http_requests import log_field
from hermes_actors.process.standalone import open_bind_warning

TOKEN = "t0ken"


class _Gateway:
    running = True
    store = SimpleNamespace(degraded=False, node_id="node-7")


def _api(token: str | None) -> HttpApi:
    settings = SimpleNamespace(token=token, max_body=1024, platforms=("webhook",))
    return HttpApi(_Gateway(), outbox=None, settings=settings)


def _call(api: HttpApi, path: str, *, method: str = "GET",
          authorization: str | None = None) -> tuple[str, dict]:
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "",
               "wsgi.input": io.BytesIO(b"")}
    if authorization is not None:
        environ["HTTP_AUTHORIZATION"] = authorization
    seen: list[str] = []
    body = b"".join(api(environ, lambda status, headers: seen.append(status)))
    return seen[0], json.loads(body)


class TestAccessLog:
    def test_a_newline_in_the_path_cannot_start_a_log_line(self, caplog):
        api = _api(None)
        # gevent hands the path over percent-decoded: "%0A" arrives as a newline
        forged = "/v1/x\nmethod=FORGED path=/v1/messages status=202 ms=1.0"
        with caplog.at_level(logging.INFO, logger="hermes_actors.http.access"):
            _call(api, forged)
            _call(api, "/v1/\r\x1b[31mred\u2028x", method="GE\nT")
        first, second = (r.getMessage() for r in caplog.records)
        for line in (first, second):  # one line of exactly the four fields
            assert line.isprintable(), line
            assert [field.partition("=")[0] for field in line.split(" ")] == [
                "method", "path", "status", "ms"], line
        assert first.startswith(r"method=GET path=/v1/x\nmethod=FORGED\x20path=/v1/messages"
                                r"\x20status=202\x20ms=1.0 status=404 ms=")
        assert second.startswith(r"method=GE\nT path=/v1/\r\x1b[31mred\u2028x status=404 ")

    @pytest.mark.parametrize("raw, logged", [
        ("/v1/outbox", "/v1/outbox"),
        ("/v1/sessions/agent:main:webhook:dm:42", "/v1/sessions/agent:main:webhook:dm:42"),
        ("a b", r"a\x20b"), ('a"b', r"a\"b"), ("a\\n", r"a\\n"), ("\t\x00\x7f", r"\t\x00\x7f"),
        ("caf\u00e9", "caf\u00e9"), ("\U000e0001", r"\U000e0001"), (None, "None"),
    ])
    def test_log_field(self, raw, logged):
        assert log_field(raw) == logged


class TestHealthz:
    def test_with_a_token_a_stranger_learns_only_the_status(self):
        api = _api(TOKEN)
        for authorization in (None, "Bearer wrong", "Basic x"):
            assert _call(api, "/healthz", authorization=authorization) == (
                "200 OK", {"status": "ok"})

    def test_with_the_token_it_answers_in_full(self):
        status, body = _call(_api(TOKEN), "/healthz", authorization=f"Bearer {TOKEN}")
        assert status == "200 OK"
        assert body == {"status": "ok", "pid": os.getpid(), "degraded": False,
                        "node_id": "node-7"}

    def test_without_a_token_configured_it_answers_in_full(self):
        _, body = _call(_api(None), "/healthz")
        assert body["pid"] == os.getpid() and body["node_id"] == "node-7"

    def test_a_stopping_gateway_says_so_to_anyone(self):
        api = _api(TOKEN)
        api.accepting = False
        assert _call(api, "/healthz") == ("503 Service Unavailable", {"status": "stopping"})


class TestOpenBindWarning:
    @pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "192.168.0.5", "fe80::1%eth0",
                                      "::ffff:10.0.0.1"])
    def test_beyond_loopback_without_a_token(self, host):
        warning = open_bind_warning(host, None)
        assert warning is not None and "\n" not in warning
        assert f"host={host}" in warning and "anyone who can reach it" in warning
        assert "http.token" in warning

    @pytest.mark.parametrize("host, token", [
        ("127.0.0.1", None), ("127.0.0.2", None), ("::1", None), ("localhost", None),
        ("::ffff:127.0.0.1", None), ("0.0.0.0", TOKEN), ("::", TOKEN),
    ])
    def test_none_on_loopback_or_with_a_token(self, host, token):
        assert open_bind_warning(host, token) is None

    def test_the_process_logs_it_once_at_start(self, start_gateway):
        gateway = start_gateway("--host", "0.0.0.0")
        assert gateway.stop() == 0
        lines = [line for line in gateway.stderr.text().splitlines()
                 if "event=unauthenticated_bind" in line]
        assert len(lines) == 1 and " WARNING " in lines[0], lines

    def test_not_on_loopback(self, start_gateway):
        gateway = start_gateway()
        assert gateway.stop() == 0
        assert "event=unauthenticated_bind" not in gateway.stderr.text()


class TestSessionTail:
    def test_only_the_tail_is_read(self):
        calls: list[tuple] = []

        class Store:
            degraded, node_id = False, "n"

            def load_transcript(self, *args, **kwargs):
                raise AssertionError("the whole transcript was read for its tail")

            def load_transcript_tail(self, session_id, limit):
                calls.append((session_id, limit))
                return [{"role": "user", "content": f"m{n}"} for n in range(limit)]

        class Gateway(_Gateway):
            store = Store()

            def session_entry(self, key):
                return SimpleNamespace(session_id="sid-1", to_dict=lambda: {"key": key})

            def session_statistics(self, key):
                return None

        settings = SimpleNamespace(token=None, max_body=1024, platforms=("webhook",))
        api = HttpApi(Gateway(), outbox=None, settings=settings)
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/v1/sessions/k", "QUERY_STRING": "",
                   "wsgi.input": io.BytesIO(b"")}
        body = json.loads(b"".join(api(environ, lambda status, headers: None)))
        assert calls == [("sid-1", 20)] and len(body["transcript_tail"]) == 20
        environ["QUERY_STRING"] = "tail=3"
        body = json.loads(b"".join(api(environ, lambda status, headers: None)))
        assert calls[-1] == ("sid-1", 3) and len(body["transcript_tail"]) == 3
        environ["QUERY_STRING"] = "tail=0"
        body = json.loads(b"".join(api(environ, lambda status, headers: None)))
        assert len(calls) == 2 and body["transcript_tail"] == []
