"""``GET /v1/stream``: the outbox pushed as Server-Sent Events by the real process, and the
clients (``send --wait``, ``chat --url``) that read it."""

from __future__ import annotations

import http.client
import json
import logging
import socket

import pytest

from hermes_actors.adapters.http import HttpApi
from hermes_actors.adapters.outbox import Outbox
from hermes_actors.config import HttpConfig
from hermes_actors.model.source import SessionSource
from hermes_actors.process.sse import StreamReader
from hermes_actors.store import SessionStore

from .conftest import run_cli


class Sse:
    """A raw ``GET /v1/stream`` connection, read event by event (the wire format itself)."""

    def __init__(self, port: int, chat_id: str, *, after: object = "latest",
                 last_event_id: object = None) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
        self.conn.request("GET", f"/v1/stream?chat_id={chat_id}&after={after}", headers=headers)
        self.response = self.conn.getresponse()
        self.comments: list[str] = []

    def event(self) -> dict[str, str] | None:
        """The next event's fields (comments are collected); None at the end of the stream."""
        fields: dict[str, str] = {}
        while True:
            line = self.response.readline().decode("utf-8")
            if not line:
                return None
            line = line.rstrip("\n")
            if not line:
                return fields
            if line.startswith(":"):
                self.comments.append(line)
                continue
            name, _, value = line.partition(": ")
            fields[name] = value

    def message(self) -> dict:
        """The next ``message`` event's data, checked against its id."""
        fields = self.event()
        assert fields is not None and fields["event"] == "message", fields
        data = json.loads(fields["data"])
        assert int(fields["id"]) == data["cursor"]
        return data

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def streaming_gateway(start_gateway, tmp_path):
    """A gateway whose streams send keep-alives every 0.2 s and allow 2 open streams."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        json.dumps({"http": {"stream_keepalive": 0.2, "max_streams": 2}}), encoding="utf-8")
    return lambda: start_gateway("--agent", "scripted", home=home)


class TestStream:
    """Replies arrive in order as they are written; a reconnect misses nothing."""

    def test_replies_in_order_with_keep_alives(self, streaming_gateway):
        gateway = streaming_gateway()
        stream = Sse(gateway.port, "s1")
        assert stream.response.status == 200
        assert stream.response.getheader("Content-Type").startswith("text/event-stream")
        opening = stream.event()
        assert opening["retry"] == "2000" and opening["id"].isdigit()
        first = gateway.post("s1", "one")["event_id"]
        gateway.post("other", "not for this stream")
        one = stream.message()
        gateway.post("s1", "two")
        two = stream.message()
        assert [one["text"], two["text"]] == ["echo: one", "echo: two"]
        assert one["in_reply_to"] == [first] and two["cursor"] > one["cursor"]
        while not stream.comments:  # an idle stream says it is alive (every 0.2 s here)
            assert stream.event() is not None
        assert stream.comments[0] == ": keep-alive"
        stream.close()

    def test_last_event_id_resumes_after_a_disconnect_and_a_restart(self, streaming_gateway):
        gateway = streaming_gateway()
        stream = Sse(gateway.port, "s2")
        stream.event()
        gateway.post("s2", "one")
        seen = stream.message()["cursor"]
        stream.close()
        gateway.post("s2", "two")  # written while nobody listens
        gateway.replies("s2", 1, after=seen)
        again = Sse(gateway.port, "s2", last_event_id=seen)
        assert again.event()["id"] == str(seen)
        two = again.message()
        assert two["text"] == "echo: two"
        # the gateway stops: the stream ends cleanly (its last words, then the end)
        assert gateway.stop() == 0
        while again.event() is not None:  # keep-alives, then the last words, then the end
            pass
        assert again.comments[-1] == ": the gateway is stopping"
        again.close()
        restarted = streaming_gateway()
        restarted.post("s2", "three")
        restarted.replies("s2", 1, after=two["cursor"])
        resumed = Sse(restarted.port, "s2", last_event_id=two["cursor"], after=0)
        resumed.event()
        assert resumed.message()["text"] == "echo: three"  # Last-Event-ID wins over after
        resumed.close()

    def test_streams_beyond_the_limit_are_refused(self, streaming_gateway):
        gateway = streaming_gateway()
        held = [Sse(gateway.port, "s3"), Sse(gateway.port, "s3")]
        for stream in held:
            stream.event()
        status, headers, body = gateway.request("GET", "/v1/stream?chat_id=s3")
        assert status == 503 and "max_streams" in body["error"]
        assert headers["retry-after"]
        for stream in held:
            stream.close()

    @pytest.mark.parametrize("value", ["yesterday", "\u00b2", "99999999999999999999999"],
                             ids=["a-word", "a-digit-int-refuses", "over-64-bits"])
    def test_bad_last_event_id_is_422(self, streaming_gateway, value):
        # refused before the stream opens (a cursor over 64 bits used to open it, then end
        # it at its first read, and the client reconnected with it for ever)
        gateway = streaming_gateway()
        status, _, body = gateway.request("GET", "/v1/stream?chat_id=s4",
                                          headers={"Last-Event-ID": value})
        assert status == 422 and "Last-Event-ID" in body["error"]


class TestStreamSlots:
    """A slot is released when the server closes the response, however it ended."""

    def test_close_releases_and_iterating_is_not_needed(self, tmp_path):
        store = SessionStore(tmp_path / "sessions", mirror_interval=None)
        outbox = Outbox(lambda: store)

        class Gateway:
            running = True

        app = HttpApi(Gateway(), outbox, HttpConfig(max_streams=1, stream_keepalive=0.05))
        try:
            statuses: list[str] = []

            def call():
                environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/v1/stream",
                           "QUERY_STRING": "chat_id=x", "wsgi.input": None}
                return app(environ, lambda status, headers: statuses.append(status))

            body = call()
            assert call() is not None and statuses == ["200 OK", "503 Service Unavailable"]
            body.close()  # never iterated: the slot comes back all the same
            chunks = iter(call())
            assert next(chunks).startswith(b"retry: ")
            outbox.append(SessionSource("webhook", chat_id="x"), "pushed")
            assert b"event: message" in next(chunks)
            outbox.close()
            rest = list(chunks)
            assert rest[-1] == b": the gateway is stopping\n\n"
        finally:
            store.close()


class TestClientGoneMidBody:
    """A client that resets the connection while its body is read is a 400 of its own
    making: no traceback in the log, no 500 in the metrics."""

    @pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
    def test_a_reset_mid_body_is_400(self, tmp_path, caplog, chunked):
        store = SessionStore(tmp_path / "sessions", mirror_interval=None)
        outbox = Outbox(lambda: store)

        from hermes_actors.runtime.counters import IngressCounters

        class Gateway:
            running = True
            ingress = IngressCounters()

        class Reset:
            def read(self, *_):
                raise ConnectionResetError(104, "Connection reset by peer")

        app = HttpApi(Gateway(), outbox, HttpConfig())
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/v1/messages", "QUERY_STRING": "",
                   "wsgi.input": Reset()}
        environ.update({"HTTP_TRANSFER_ENCODING": "chunked"} if chunked
                       else {"CONTENT_LENGTH": "100"})
        statuses: list[str] = []
        try:
            with caplog.at_level(logging.ERROR, logger="hermes_actors"):
                body = b"".join(app(environ, lambda status, headers: statuses.append(status)))
        finally:
            outbox.close()
            store.close()
        assert statuses == ["400 Bad Request"]
        assert b"closed before the request body" in body
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class TestClients:
    """``send --wait`` and ``chat --url`` read the stream."""

    def test_send_wait_reads_the_stream(self, start_gateway):
        gateway = start_gateway()
        result = run_cli("send", "--wait", "streamed", "--chat-id", "c1", "--url", gateway.url)
        assert result.returncode == 0 and result.stdout == "echo: streamed\n", result.stderr
        gateway.stderr.expect(r"method=GET path=/v1/stream status=200")

    def test_chat_url_talks_to_a_running_gateway(self, start_gateway, tmp_path):
        gateway = start_gateway("--agent", "scripted")
        result = run_cli("chat", "--url", gateway.url, "--chat-id", "c2", "--home",
                         str(tmp_path / "unused"), stdin="hello\nsleep 0.1\n/status\n/quit\n")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[:2] == ["echo: hello", "slept 0.1"]
        assert lines[2].startswith("Session: ")
        assert not (tmp_path / "unused").exists()  # the home was not opened
        assert gateway.outbox("c2", wait=0)["messages"][0]["text"] == "echo: hello"

    def test_the_client_reconnects_across_a_restart_with_last_event_id(self, start_gateway,
                                                                       tmp_path):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = str(sock.getsockname()[1])
        gateway = start_gateway("--port", port)
        reader = StreamReader(gateway.url, "c3").open()
        try:
            gateway.post("c3", "before")
            assert reader.next(30)["text"] == "echo: before"
            assert gateway.stop() == 0
            again = start_gateway("--port", port)
            again.post("c3", "after")
            assert reader.next(30)["text"] == "echo: after"
            assert reader.connections == 2 and reader.next(0) is None  # nothing twice
        finally:
            reader.close()
