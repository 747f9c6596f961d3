"""``send --wait`` against a small fake gateway that can drop its streams, go away and come
back on the same port (issue 36, item 5): the client reconnects from the last cursor it read,
posts again what a restart may have lost, and ends with the final answer of its own event
(exit 0 for a reply or a command's notice, 1 for a notice refusing the message or nothing in
time)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hermes_actors.cli import main
from hermes_actors.process.client import (
    GatewayClient,
    SendOptions,
    SendResult,
    is_final,
    send,
    succeeded,
)
from hermes_actors.process.sse import StreamReader
from hermes_actors.runtime.session_core import INTERRUPT_ACK, QUEUED_ACK
from hermes_actors.testing import wait_until

#: ``on_post(gateway, body, attempt)`` → ``(status, answer)``; status 0 hangs up unanswered.
OnPost = Callable[["FakeGateway", dict[str, Any], int], tuple[int, dict[str, Any]]]


def _accept(gateway: FakeGateway, body: dict[str, Any], attempt: int) -> tuple[int, dict]:
    return 202, {"session_key": "agent:main:webhook:dm:cli", "event_id": "e1",
                 "queue_depth": 0}


class FakeGateway:
    """``POST /v1/messages`` and ``GET /v1/stream`` of one conversation. Its outbox lasts
    across :meth:`stop` and :meth:`start` (durable, as the real one), on the same port."""

    def __init__(self, on_post: OnPost = _accept) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.on_post = on_post
        self.outbox: list[dict[str, Any]] = []
        #: Every post's body, and every stream request's ``(after, Last-Event-ID)``.
        self.posts: list[dict[str, Any]] = []
        self.streams: list[tuple[str | None, str | None]] = []
        self._changed = threading.Condition()
        self._server: ThreadingHTTPServer | None = None
        self._generation = 0

    # -- the test's side ----------------------------------------------------------------------

    def append(self, text: str, kind: str = "reply", in_reply_to: tuple[str, ...] = ("e1",),
               **extra: Any) -> None:
        """Write an outbox message (streams that are open read it at once)."""
        with self._changed:
            self.outbox.append({
                "cursor": len(self.outbox) + 1, "session_key": "agent:main:webhook:dm:cli",
                "chat_id": "cli", "thread_id": None, "text": text, "kind": kind,
                "created_at": "2026-01-01T00:00:00+00:00", "in_reply_to": list(in_reply_to),
                **extra,
            })
            self._changed.notify_all()

    def start(self) -> FakeGateway:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the handler's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                gateway.posts.append(body)
                status, answer = gateway.on_post(gateway, body, len(gateway.posts))
                if status == 0:  # the gateway died with the request: no answer
                    self.close_connection = True
                    return
                self._json(status, answer)

            def do_GET(self) -> None:  # noqa: N802 - the handler's name
                parsed = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parsed.query))
                last = self.headers.get("Last-Event-ID")
                gateway.streams.append((query.get("after"), last))
                gateway.stream(self, int(last) if last else None)

            def _json(self, status: int, answer: dict[str, Any]) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        """Go away: open streams end, the port refuses connections."""
        server, self._server = self._server, None
        with self._changed:
            self._generation += 1
            self._changed.notify_all()
        if server is not None:
            server.shutdown()
            server.server_close()

    # -- the stream ---------------------------------------------------------------------------

    def stream(self, handler: BaseHTTPRequestHandler, after: int | None) -> None:
        with self._changed:
            generation = self._generation
            cursor = len(self.outbox) if after is None else after
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        handler.wfile.write(f"retry: 100\nid: {cursor}\n\n".encode())
        handler.wfile.flush()
        while True:
            with self._changed:
                while self._generation == generation and len(self.outbox) <= cursor:
                    self._changed.wait(0.2)
                if self._generation != generation:
                    return  # stopped: the connection ends
                rows = self.outbox[cursor:]
            cursor = rows[-1]["cursor"]
            handler.wfile.write(b"".join(
                f"id: {row['cursor']}\nevent: message\ndata: {json.dumps(row)}\n\n".encode()
                for row in rows))
            handler.wfile.flush()


@pytest.fixture
def fake():
    gateways: list[FakeGateway] = []

    def make(on_post: OnPost = _accept) -> FakeGateway:
        gateway = FakeGateway(on_post)
        gateways.append(gateway)
        return gateway

    yield make
    for gateway in gateways:
        gateway.stop()


class Waiting:
    """``send`` with ``wait`` in a thread; ``out`` and ``note`` collect what it printed."""

    def __init__(self, url: str, text: str = "hi", timeout: float = 20.0) -> None:
        self.client = CountingClient(url)
        self.out: list[str] = []
        self.note: list[str] = []
        self.result: SendResult | None = None
        self.error: BaseException | None = None
        options = SendOptions(text, wait=True, timeout=timeout)
        self._thread = threading.Thread(target=self._run, args=(options,), daemon=True)
        self._thread.start()

    def _run(self, options: SendOptions) -> None:
        try:
            self.result = send(self.client, options, self.out.append, self.note.append)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def join(self, timeout: float = 30.0) -> SendResult:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "send did not return"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class CountingClient(GatewayClient):
    """A client that keeps the streams it opened and counts its attempts to open one."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.stream_attempts = 0
        self.readers: list[StreamReader] = []

    def stream(self, *args: Any, **kwargs: Any) -> StreamReader:
        self.stream_attempts += 1
        reader = super().stream(*args, **kwargs)
        self.readers.append(reader)
        return reader


class TestReconnect:
    """A dropped stream, a gateway away for a while: the wait goes on where it was."""

    def test_reads_on_from_the_last_cursor_after_a_restart(self, fake):
        def on_post(gateway: FakeGateway, body: dict, attempt: int) -> tuple[int, dict]:
            gateway.append(QUEUED_ACK, kind="ack", final=False)
            return _accept(gateway, body, attempt)

        gateway = fake(on_post)
        gateway.append("an old reply", in_reply_to=("e0",), final=True)  # before the wait
        gateway.start()
        waiting = Waiting(gateway.url)
        wait_until(lambda: waiting.note, message="the acknowledgement")  # read: cursor 2
        gateway.stop()
        # written while the client is away: it must see them on its return, in order
        gateway.append("a late reply to another message", in_reply_to=("e0",), final=True)
        gateway.append("still working", kind="ack", final=False)
        gateway.append("the answer", final=True)
        reader = waiting.client.readers[0]
        wait_until(lambda: reader.failed_reconnections >= 2, message="two refused reconnections")
        gateway.start()
        result = waiting.join()
        assert result.ok and result.answer is not None
        assert result.answer["cursor"] == 5
        assert waiting.out == ["the answer"]
        assert waiting.note == [QUEUED_ACK, "still working"]
        assert gateway.streams[0] == ("latest", None)
        assert gateway.streams[-1] == ("2", "2")  # from the last cursor read, both ways
        assert len(gateway.posts) == 1

    def test_waits_for_a_gateway_that_is_not_up_yet(self, fake):
        def on_post(gateway: FakeGateway, body: dict, attempt: int) -> tuple[int, dict]:
            gateway.append("echo: hi", final=True)
            return _accept(gateway, body, attempt)

        gateway = fake(on_post)
        waiting = Waiting(gateway.url)
        wait_until(lambda: waiting.client.stream_attempts >= 2,
                   message="a second attempt")  # refused meanwhile: tried again
        gateway.start()
        result = waiting.join()
        assert result.ok and waiting.out == ["echo: hi"]

    def test_a_post_lost_to_a_restart_is_posted_again_as_the_same_message(self, fake):
        def on_post(gateway: FakeGateway, body: dict, attempt: int) -> tuple[int, dict]:
            if attempt == 1:
                return 0, {}  # the gateway died before it answered
            if attempt == 2:
                return 503, {"error": "the gateway is shutting down"}
            gateway.append("echo: hi", final=True)
            return _accept(gateway, body, attempt)

        gateway = fake(on_post).start()
        result = Waiting(gateway.url).join()
        assert result.ok and len(gateway.posts) == 3
        ids = {post["message_id"] for post in gateway.posts}
        assert len(ids) == 1 and ids.pop().startswith("cli-")

    def test_a_refused_post_is_not_posted_again(self, fake):
        from hermes_actors.process.client import ClientError

        gateway = fake(lambda g, b, a: (401, {"error": "invalid bearer token"})).start()
        with pytest.raises(ClientError) as caught:
            Waiting(gateway.url).join()
        assert caught.value.refused and len(gateway.posts) == 1

    def test_no_gateway_in_the_whole_timeout(self, fake):
        from hermes_actors.process.client import ClientError

        gateway = fake()  # never started
        began = time.monotonic()
        with pytest.raises(ClientError, match="no gateway answered at"):
            Waiting(gateway.url, timeout=0.6).join()
        assert 0.6 <= time.monotonic() - began < 5


def _run(capsys, fake, text: str, messages: list[dict[str, Any]], timeout: str = "10",
         ) -> tuple[int, str, str]:
    """``hermes-actors send --wait TEXT`` (in process) against a gateway that answers the
    post with ``messages``; exit code, stdout and stderr."""
    def on_post(gateway: FakeGateway, body: dict, attempt: int) -> tuple[int, dict]:
        for message in messages:
            gateway.append(**message)
        return _accept(gateway, body, attempt)

    gateway = fake(on_post).start()
    code = main(["send", "--wait", text, "--url", gateway.url, "--timeout", timeout])
    out, err = capsys.readouterr()
    return code, out, err


FAILED = "⚠️ The agent failed to answer (RuntimeError). Send your message again, or /new to start over."


class TestExitCodes:
    """0 for a reply or a command's notice; 1 for a notice refusing a message or nothing."""

    def test_a_reply_exits_0(self, capsys, fake, tmp_path, monkeypatch):
        monkeypatch.setenv("HERMES_HOME", str(tmp_path))
        code, out, err = _run(capsys, fake, "hi", [
            {"text": QUEUED_ACK, "kind": "ack", "final": False},
            {"text": "echo: hi", "kind": "reply", "final": True},
        ])
        assert (code, out, err) == (0, "echo: hi\n", QUEUED_ACK + "\n")

    def test_a_recovered_reply_exits_0(self, capsys, fake, tmp_path, monkeypatch):
        monkeypatch.setenv("HERMES_HOME", str(tmp_path))
        code, out, _ = _run(capsys, fake, "hi", [{"text": "♻️ it", "kind": "recovered"}])
        assert (code, out) == (0, "♻️ it\n")

    def test_a_notice_answering_a_message_is_printed_and_exits_1(self, capsys, fake, tmp_path,
                                                                 monkeypatch):
        monkeypatch.setenv("HERMES_HOME", str(tmp_path))
        code, out, err = _run(capsys, fake, "hi", [
            {"text": FAILED, "kind": "notice", "final": True}])
        assert (code, out) == (1, FAILED + "\n")
        assert err == ("hermes-actors: error: no reply: the gateway answered with the notice "
                       "above\n")

    @pytest.mark.parametrize("text", ["/status", "/new", "/STOP@bot", "/help", "/reset",
                                      "/queue"])
    def test_a_notice_answering_a_command_exits_0(self, capsys, fake, tmp_path, monkeypatch,
                                                  text):
        monkeypatch.setenv("HERMES_HOME", str(tmp_path))
        code, out, err = _run(capsys, fake, text, [
            {"text": "Turn: idle", "kind": "notice", "final": True}])
        assert (code, out, err) == (0, "Turn: idle\n", "")

    def test_a_notice_answering_a_queued_prompt_exits_1(self, capsys, fake, tmp_path,
                                                        monkeypatch):
        # /queue with a prompt is an agent turn: a failure notice is no answer
        monkeypatch.setenv("HERMES_HOME", str(tmp_path))
        code, out, _ = _run(capsys, fake, "/queue do it", [
            {"text": QUEUED_ACK, "kind": "ack", "final": False},
            {"text": FAILED, "kind": "notice", "final": True}])
        assert (code, out) == (1, FAILED + "\n")

    def test_only_acknowledgements_within_the_timeout_exits_1(self, capsys, fake, tmp_path,
                                                              monkeypatch):
        monkeypatch.setenv("HERMES_HOME", str(tmp_path))
        code, out, err = _run(capsys, fake, "hi", [
            {"text": INTERRUPT_ACK, "kind": "ack", "final": False},
            {"text": "not mine", "in_reply_to": ("e0",), "final": True}], timeout="0.5")
        assert (code, out) == (1, "")
        assert err == f"{INTERRUPT_ACK}\nhermes-actors: error: no reply within 0.5s\n"

    def test_no_gateway_exits_1(self, capsys, fake, tmp_path, monkeypatch):
        monkeypatch.setenv("HERMES_HOME", str(tmp_path))
        url = fake().url  # never started
        assert main(["send", "--wait", "hi", "--url", url, "--timeout", "0.3"]) == 1
        assert capsys.readouterr().err.startswith(
            f"hermes-actors: error: no gateway answered at {url} (")


class TestFinality:
    """Which messages end the wait, and which of those succeed."""

    def test_the_final_flag_decides(self):
        assert is_final({"kind": "notice", "text": QUEUED_ACK, "final": True})
        assert not is_final({"kind": "reply", "text": "partial", "final": False})

    def test_without_the_flag_only_acknowledgements_are_not_final(self):
        assert not is_final({"kind": "ack", "text": "anything"})
        assert is_final({"kind": "notice", "text": FAILED})
        assert is_final({"kind": "reply", "text": QUEUED_ACK})  # an agent may say it too

    def test_success(self):
        assert succeeded("hi", {"kind": "reply"}) and succeeded("hi", {"kind": "recovered"})
        assert not succeeded("hi", {"kind": "notice"})
        assert succeeded("  /status", {"kind": "notice"})
        assert not succeeded("/queue prompt", {"kind": "notice"})
        assert not succeeded("/unknown", {"kind": "notice"})  # the agent's, not a command
