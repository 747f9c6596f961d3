"""``OpenAIAgent`` against a fake chat-completions server: request, reply, errors, interrupts."""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import psutil
import pytest

from hermes_actors.agents import openai as openai_module
from hermes_actors.agents.base import Agent, TurnResult
from hermes_actors.agents.openai import (
    OpenAIAgent,
    OpenAIAgentError,
    OpenAIAgentTimeout,
    build_messages,
    chat_completions_url,
    parse_completion,
)
from hermes_actors.testing import wait_until

from .conftest import make_request
from .fake_chat import completion

HISTORY = [
    {"role": "user", "content": "what is 2+2?", "timestamp": 1.0},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "calc"}]},
    {"role": "tool", "content": "4", "tool_name": "calc"},
    {"role": "assistant", "content": "4"},
    {"role": "system", "content": "[delegation task completed] done"},
]


class TestRequest:
    """The agent POSTs model, messages and the bearer key to ``<base_url>/chat/completions``."""

    def test_is_an_agent(self, chat_server):
        """OpenAIAgent satisfies the Agent protocol."""
        assert isinstance(OpenAIAgent(chat_server.base_url, "m"), Agent)

    def test_request_shape(self, chat_server):
        """System prompt, mapped history and the user message go out with model and key."""
        agent = OpenAIAgent(chat_server.base_url, "qwen2.5-7b", api_key="sk-test", timeout=10)
        agent.run_turn(make_request("and 3+3?", history=HISTORY))
        (seen,) = chat_server.seen
        assert seen.path == "/v1/chat/completions"
        assert seen.headers["authorization"] == "Bearer sk-test"
        assert seen.headers["content-type"] == "application/json"
        assert seen.body == {
            "model": "qwen2.5-7b",
            "stream": False,
            "messages": [
                {"role": "system", "content": "You are a test."},
                {"role": "user", "content": "what is 2+2?"},
                {"role": "assistant", "content": "4"},
                {"role": "system", "content": "[delegation task completed] done"},
                {"role": "user", "content": "and 3+3?"},
            ],
        }

    def test_no_key_no_authorization(self, chat_server):
        """Without an API key no Authorization header is sent."""
        OpenAIAgent(chat_server.base_url, "m", timeout=10).run_turn(make_request())
        assert "authorization" not in chat_server.seen[0].headers

    def test_connection_is_kept_alive_and_released(self, chat_server):
        """Turns reuse one connection until ``release_clients`` drops it."""
        agent = OpenAIAgent(chat_server.base_url, "m", timeout=10)
        for _ in range(2):
            agent.run_turn(make_request())
        agent.release_clients()
        agent.run_turn(make_request())
        first, second, third = (seen.peer for seen in chat_server.seen)
        assert first == second != third

    def test_stale_kept_connection_is_replaced(self, chat_server):
        """A kept connection the server closed meanwhile is replaced, and the turn succeeds."""
        chat_server.state.drop_after_response = True
        agent = OpenAIAgent(chat_server.base_url, "m", timeout=10)
        agent.run_turn(make_request())
        assert agent.run_turn(make_request()).reply == "hello from the model"
        assert len(chat_server.seen) == 2


class TestResponse:
    """The first choice's content is the reply; usage maps to the runtime's counters."""

    def test_reply_and_usage(self, chat_server):
        """Content and token counts come back as a completed TurnResult."""
        chat_server.respond(200, completion("four", prompt_tokens=30, completion_tokens=2))
        result = OpenAIAgent(chat_server.base_url, "m", timeout=10).run_turn(make_request())
        assert result == TurnResult("four", "completed",
                                    {"input_tokens": 30, "prompt_tokens": 30,
                                     "output_tokens": 2})

    def test_http_500_raises(self, chat_server):
        """An error status raises with the status and the server's error message."""
        chat_server.respond(500, {"error": {"message": "model not loaded"}})
        agent = OpenAIAgent(chat_server.base_url, "m", timeout=10)
        with pytest.raises(OpenAIAgentError, match="HTTP 500.*model not loaded"):
            agent.run_turn(make_request())

    def test_malformed_json_raises(self, chat_server):
        """A body that is not JSON raises OpenAIAgentError."""
        chat_server.respond(200, b"<html>oops</html>")
        agent = OpenAIAgent(chat_server.base_url, "m", timeout=10)
        with pytest.raises(OpenAIAgentError, match="malformed response"):
            agent.run_turn(make_request())

    def test_agent_still_works_after_an_error(self, chat_server):
        """A failed turn leaves the agent usable for the next one."""
        chat_server.respond(500, b"")
        agent = OpenAIAgent(chat_server.base_url, "m", timeout=10)
        with pytest.raises(OpenAIAgentError, match="empty body"):
            agent.run_turn(make_request())
        assert agent.run_turn(make_request()).status == "completed"

    def test_a_body_cut_short_does_not_spoil_the_next_turn(self):
        """A response that ends before its Content-Length (the server closed early) fails
        its own turn only: the next turn gets a new connection and its answer, not
        ``ResponseNotReady`` from reusing the unfinished one."""
        good = json.dumps(completion("fine")).encode()
        answers = [b'HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{"choices"',
                   b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(good), good)]
        listener = socket.create_server(("127.0.0.1", 0))

        def answer(conn: socket.socket) -> None:
            with conn, conn.makefile("rb") as reader:
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                reader.read(length)
                conn.sendall(answers.pop(0))
                # The server ends its side, but the socket stays open (as a proxy's may):
                # a request sent on it still goes out.
                conn.shutdown(socket.SHUT_WR)
                while reader.read(4096):
                    pass

        def serve() -> None:
            while answers:
                conn, _ = listener.accept()
                threading.Thread(target=answer, args=(conn,), daemon=True).start()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with listener:
            agent = OpenAIAgent(f"http://127.0.0.1:{listener.getsockname()[1]}/v1", "m",
                                timeout=10)
            with pytest.raises(OpenAIAgentError, match="malformed response"):
                agent.run_turn(make_request())
            assert agent.run_turn(make_request()).reply == "fine"
            agent.close()

    def test_connection_refused_raises(self):
        """A server that is not there is an OpenAIAgentError naming the URL."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        agent = OpenAIAgent(f"http://127.0.0.1:{port}/v1", "m", timeout=5)
        with pytest.raises(OpenAIAgentError, match=f"127.0.0.1:{port}"):
            agent.run_turn(make_request())

    @pytest.mark.parametrize(("body", "match"), [
        ({"choices": []}, "no 'choices'"),
        ({"error": "rate limited"}, "rate limited"),
        ({"choices": [{"text": "legacy"}]}, "message' is missing"),
        ({"choices": [{"message": {"content": 5}}]}, "not text"),
        ([1, 2], "not a JSON object"),
    ])
    def test_malformed_bodies_raise(self, body, match):
        """Each malformed 200 body raises with a message saying what is wrong."""
        with pytest.raises(OpenAIAgentError, match=match):
            parse_completion(200, "OK", json.dumps(body).encode())

    def test_null_content_is_no_reply(self):
        """A null content (e.g. only tool calls) is a completed turn without a reply."""
        result = parse_completion(200, "OK", json.dumps(completion(None)).encode())
        assert result.reply is None and result.status == "completed"


class TestInterrupt:
    """``interrupt`` from another thread ends an in-flight request promptly."""

    def test_interrupt_while_server_holds_request(self, chat_server, worker):
        """The held request is abandoned at once and run_turn returns interrupted."""
        chat_server.state.hold = True
        agent = OpenAIAgent(chat_server.base_url, "m", timeout=60)
        future = worker.submit(agent.run_turn, make_request())
        assert chat_server.state.received.wait(10)
        t0 = time.monotonic()
        agent.interrupt("/stop")
        assert future.result(timeout=5) == TurnResult(None, "interrupted")
        assert time.monotonic() - t0 < 2

    def test_next_turn_after_interrupt_completes(self, chat_server, worker):
        """After an interrupted turn the next turn opens a fresh connection and completes."""
        chat_server.state.hold = True
        agent = OpenAIAgent(chat_server.base_url, "m", timeout=60)
        future = worker.submit(agent.run_turn, make_request())
        assert chat_server.state.received.wait(10)
        agent.interrupt()
        assert future.result(timeout=5).status == "interrupted"
        chat_server.state.hold = False
        chat_server.state.release.set()
        assert agent.run_turn(make_request()).status == "completed"

    def test_interrupt_while_connecting(self, monkeypatch, worker):
        """A server whose listen backlog is full leaves the connect hanging; an interrupt
        ends it at once, not at CONNECT_TIMEOUT."""
        monkeypatch.setattr(openai_module, "CONNECT_TIMEOUT", 60.0)
        with socket.create_server(("127.0.0.1", 0), backlog=0) as server:
            port = server.getsockname()[1]
            fillers = [_start_connect(port) for _ in range(3)]  # never accepted
            try:
                before = _connecting_to(port)
                agent = OpenAIAgent(f"http://127.0.0.1:{port}/v1", "m", timeout=60)
                future = worker.submit(agent.run_turn, make_request())
                wait_until(lambda: _connecting_to(port) > before, message="the connection attempt")
                t0 = time.monotonic()
                agent.interrupt("/stop")
                assert future.result(timeout=10) == TurnResult(None, "interrupted")
                assert time.monotonic() - t0 < 2
            finally:
                for filler in fillers:
                    filler.close()

    def test_interrupt_during_the_tls_handshake(self, monkeypatch, worker):
        """A server that takes the connection but never answers the TLS hello is
        interrupted too."""
        monkeypatch.setattr(openai_module, "CONNECT_TIMEOUT", 60.0)
        with socket.create_server(("127.0.0.1", 0)) as server:
            server.settimeout(10)
            port = server.getsockname()[1]
            agent = OpenAIAgent(f"https://127.0.0.1:{port}/v1", "m", timeout=60)
            future = worker.submit(agent.run_turn, make_request())
            conn, _ = server.accept()
            with conn:
                conn.settimeout(10)
                assert conn.recv(1) == b"\x16"  # the client hello: in the handshake now
                t0 = time.monotonic()
                agent.interrupt("/stop")
                assert future.result(timeout=10) == TurnResult(None, "interrupted")
                assert time.monotonic() - t0 < 2

    def test_timeout_raises(self, chat_server):
        """A server slower than the timeout makes the turn raise OpenAIAgentTimeout."""
        chat_server.state.hold = True
        agent = OpenAIAgent(chat_server.base_url, "m", timeout=0.3)
        with pytest.raises(OpenAIAgentTimeout, match="agent.timeout"):
            agent.run_turn(make_request())


def _start_connect(port: int) -> socket.socket:
    """A connection to ``port`` started without waiting for it."""
    sock = socket.socket()
    sock.setblocking(False)
    sock.connect_ex(("127.0.0.1", port))
    return sock


def _connecting_to(port: int) -> int:
    """How many of this process's TCP connections to ``port`` wait for the server's SYN-ACK."""
    return sum(1 for conn in psutil.Process().net_connections("tcp")
               if conn.raddr and conn.raddr.port == port
               and conn.status == psutil.CONN_SYN_SENT)


class TestUrlRule:
    """``base_url`` is the API root; a bare host means ``/v1``."""

    @pytest.mark.parametrize(("base_url", "expected"), [
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1/chat/completions"),
        ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1/chat/completions"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1/chat/completions"),
        ("http://localhost:11434/", "http://localhost:11434/v1/chat/completions"),
        ("https://api.example.com/openai/v1", "https://api.example.com/openai/v1/chat/completions"),
        ("https://x.test/v1/chat/completions", "https://x.test/v1/chat/completions"),
        ("https://x.test/v1?api-version=2", "https://x.test/v1/chat/completions?api-version=2"),
    ])
    def test_urls(self, base_url, expected):
        """Each base URL form maps to its chat-completions URL."""
        assert chat_completions_url(base_url).geturl() == expected

    @pytest.mark.parametrize("base_url", ["localhost:8080", "ftp://x/v1", "", "http:///v1"])
    def test_rejects_non_http(self, base_url):
        """A URL without an http(s) scheme and host is refused."""
        with pytest.raises(ValueError, match="http"):
            chat_completions_url(base_url)

    @pytest.mark.parametrize("base_url", ["http://127.0.0.1:80800/v1", "https://h:-1",
                                          "http://h:port/v1"])
    def test_rejects_a_bad_port(self, base_url):
        """A port that is not a number from 0 to 65535 is refused, naming the URL."""
        with pytest.raises(ValueError, match="[Pp]ort.*" + re.escape(repr(base_url))):
            chat_completions_url(base_url)


class TestMessages:
    """History mapping: tool traffic skipped, same-role runs joined, media as attachments."""

    def test_consecutive_roles_are_joined(self):
        """Two user messages in a row (a failed turn) become one."""
        history = [{"role": "user", "content": "first"}]
        messages = build_messages(make_request("second", history=history, system_prompt=""))
        assert messages == [{"role": "user", "content": "first\n\nsecond"}]

    def test_media_urls_are_attachment_lines(self):
        """Media URLs follow the text as ``[attachment: <url>]`` lines."""
        request = make_request("look", media_urls=("https://x/a.jpg", "https://x/b.jpg"))
        assert build_messages(request)[-1] == {
            "role": "user",
            "content": "look\n\n[attachment: https://x/a.jpg]\n[attachment: https://x/b.jpg]",
        }
