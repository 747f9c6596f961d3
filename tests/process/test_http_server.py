"""The HTTP server's limits (issue 37 §1): a connection cap, a deadline for the whole request
head, an idle limit for kept-alive connections.

The server runs in a child process (gevent, patched, as ``hermes-actors run`` serves it); the
clients here are plain sockets driven by one ``selectors`` loop with deadlines: nothing
sleeps and hopes.
"""

from __future__ import annotations

import http.client
import selectors
import socket
import subprocess
import sys
import time

import pytest

from hermes_actors.config import load_config
from hermes_actors.errors import ConfigError

_SERVER = """
from gevent import monkey; monkey.patch_all()
from hermes_actors.adapters.http import make_server

def app(environ, start_response):
    start_response("200 OK", [("Content-Length", "2"), ("Content-Type", "text/plain")])
    return [b"ok"]

server = make_server(app, "127.0.0.1", 0, **{kwargs})
server.start()
print(server.server_port, flush=True)
server.serve_forever()  # until the test terminates it
"""


@pytest.fixture
def serve():
    """``serve(**make_server_kwargs)`` → the port of a server in a child process."""
    children: list[subprocess.Popen] = []

    def start(**kwargs) -> int:
        child = subprocess.Popen([sys.executable, "-c", _SERVER.format(kwargs=repr(kwargs))],
                                 stdout=subprocess.PIPE, text=True)
        children.append(child)
        line = child.stdout.readline()
        assert line.strip().isdigit(), f"the server did not start: {line!r}"
        return int(line)

    yield start
    for child in children:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _get(port: int, timeout: float = 10.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/")
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _closed_within(sock: socket.socket, seconds: float) -> bytes | None:
    """What ``sock`` received until the server closed it, or ``None`` if still open after
    ``seconds``."""
    sock.settimeout(seconds)
    received = b""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            chunk = sock.recv(4096)
            if not chunk:
                return received
            received += chunk
    except TimeoutError:
        return None
    except ConnectionError:
        return received
    return None


class TestHeaderDeadline:
    def test_dribbling_clients_are_dropped_while_a_normal_client_is_answered(self, serve):
        header_timeout, clients, dribble_every = 1.5, 200, 0.1
        # Each read may wait 5 s: the dribblers send far more often than that, so only the
        # deadline on the whole head can end them.
        port = serve(header_timeout=header_timeout, socket_timeout=5.0)
        selector = selectors.DefaultSelector()
        opened: dict[socket.socket, float] = {}
        answers: dict[socket.socket, bytes] = {}
        closed_after: dict[socket.socket, float] = {}
        try:
            for _ in range(clients):
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                opened[sock] = time.monotonic()
                sock.sendall(b"GET / HTTP/1.1\r\n")
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ)
                answers[sock] = b""
            # A normal client is answered while all of them hold their connections.
            assert _get(port) == (200, b"ok")
            assert not closed_after, "a dribbler was dropped before the normal client"

            deadline = time.monotonic() + header_timeout + 20.0
            next_dribble = 0.0
            line = 0
            while len(closed_after) < clients and time.monotonic() < deadline:
                now = time.monotonic()
                if now >= next_dribble:
                    line += 1
                    for sock in opened:
                        if sock not in closed_after:
                            try:
                                sock.send(b"X-Dribble-%d: x\r\n" % line)
                            except OSError:
                                pass  # closed: the read below sees it
                    next_dribble = now + dribble_every
                for key, _ in selector.select(timeout=max(0.0, next_dribble - now)):
                    sock = key.fileobj
                    try:
                        chunk = sock.recv(4096)
                    except BlockingIOError:
                        continue
                    except ConnectionError:
                        chunk = b""
                    if chunk:
                        answers[sock] += chunk
                        continue
                    closed_after[sock] = time.monotonic() - opened[sock]
                    selector.unregister(sock)
            assert len(closed_after) == clients, (
                f"{clients - len(closed_after)} dribbling connections still open after "
                f"{line} header lines")
            assert min(closed_after.values()) >= header_timeout - 0.05
            timed_out = [a for a in answers.values() if a.startswith(b"HTTP/1.1 408")]
            assert len(timed_out) == clients, {a[:40] for a in answers.values()}
            assert b"not received within 1.5 s" in timed_out[0]
        finally:
            selector.close()
            for sock in opened:
                sock.close()

    def test_a_client_that_sends_nothing_is_closed(self, serve):
        port = serve(header_timeout=0.3, socket_timeout=30.0)
        with socket.create_connection(("127.0.0.1", port)) as silent:
            answer = _closed_within(silent, 20.0)
        assert answer is not None and answer.startswith(b"HTTP/1.1 408")

    def test_the_deadline_ends_with_the_head(self, serve):
        """A request whose head came in time is not cut off by the deadline afterwards."""
        port = serve(header_timeout=0.5, keepalive_timeout=30.0, socket_timeout=30.0)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            for _ in range(3):  # kept alive across requests, each with its own deadline
                conn.request("GET", "/")
                assert conn.getresponse().read() == b"ok"
        finally:
            conn.close()


class TestKeepAliveIdle:
    def test_an_idle_kept_alive_connection_is_closed(self, serve):
        port = serve(keepalive_timeout=0.3, socket_timeout=30.0)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = _closed_within(sock, 20.0)
        assert answer is not None and answer.startswith(b"HTTP/1.1 200")
        assert answer.endswith(b"ok")  # one answer, then closed for idleness


class TestConnectionCap:
    def test_connections_beyond_the_cap_wait_for_a_slot(self, serve):
        port = serve(max_connections=5, header_timeout=60.0, socket_timeout=60.0)
        holders = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        try:
            for sock in holders:  # each is served (it has a handler): the pool is full
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                sock.settimeout(10)
                assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            waiting = socket.create_connection(("127.0.0.1", port), timeout=10)
            waiting.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            waiting.settimeout(0.5)
            with pytest.raises(TimeoutError):
                waiting.recv(4096)  # not accepted while five connections are open
            holders.pop().close()
            answer = _closed_within(waiting, 10.0)
            assert answer is not None and answer.startswith(b"HTTP/1.1 200")
            waiting.close()
        finally:
            for sock in holders:
                sock.close()


class TestConfig:
    def test_defaults(self):
        http = load_config({}, env={}).http
        assert (http.max_connections, http.header_timeout, http.keepalive_timeout) == (
            1000, 10.0, 15.0)

    def test_environment_override(self):
        http = load_config({}, env={"HERMES_HTTP_MAX_CONNECTIONS": "50"}).http
        assert http.max_connections == 50

    @pytest.mark.parametrize("key, value", [
        ("max_connections", 0), ("max_connections", 1.5), ("max_connections", "many"),
        ("header_timeout", 0), ("header_timeout", -1), ("keepalive_timeout", "soon"),
    ])
    def test_invalid_values_name_the_key(self, key, value):
        with pytest.raises(ConfigError, match=f"http.{key}"):
            load_config({"http": {key: value}}, env={})


def test_the_gevent_hooks_the_server_relies_on_exist():
    """The handler overrides gevent's ``read_requestline``, ``read_request`` and
    ``_handle_client_error`` (the head's deadline and its 408): if a gevent release renames
    them, this fails here rather than the deadline silently not applying."""
    import inspect

    from gevent.pywsgi import WSGIHandler

    for name in ("handle", "read_requestline", "read_request", "_handle_client_error"):
        assert callable(getattr(WSGIHandler, name, None)), name
    source = inspect.getsource(WSGIHandler.handle_one_request)
    assert "self.read_requestline()" in source and "self._handle_client_error(" in source
