"""``http``: the shipped path: ``POST /v1/messages`` to a reply read by a long-poll
``GET /v1/outbox``, through the real HTTP adapter, as turns/s and p99 latency.

The gateway runs as ``hermes-actors run`` does: the gevent WSGI server of
:mod:`hermes_actors.adapters.http` on loopback, outbox adapters for the served platforms, the
echo agent. Clients are closed loops, one keep-alive connection each (like an HTTP chat
client): POST a message, then long-poll the chat's outbox after the cursor it last saw until
the reply naming the message's event id (``in_reply_to``) arrives, then send the next. The
latency runs from the POST to the moment the client has read the reply. The clients run in
the same process as the gateway (as the in-process baseline's submitters do), so the figure
includes the client side of HTTP; a real client on another machine would cost the gateway
less.

Baseline, same run, same sessions x messages and concurrency: ``Gateway.submit`` in-process,
each reply taken from an in-memory adapter (latency: submit to send).
"""

from __future__ import annotations

import http.client
import json
import queue
import socket
import threading
import time
import urllib.parse
from typing import Any

from benchmarks.report import figure
from benchmarks.util import Progress, RecordingAdapter, make_gateway, percentile, scratch_dir

__all__ = ["run"]

#: ``(sessions, messages per session, concurrent clients)``.
FULL = (1_000, 3, 32)
QUICK = (100, 2, 8)


def _http_path(home, sessions: int, messages: int, clients: int,
               progress: Progress) -> tuple[float, list[float]]:
    from hermes_actors import EchoAgent, load_config
    from hermes_actors.adapters.http import HttpApi, make_server
    from hermes_actors.adapters.outbox import Outbox, OutboxAdapter

    config = load_config({}, env={})
    outbox = Outbox()
    gw = make_gateway(home, adapters=[OutboxAdapter(p, outbox) for p in config.http.platforms],
                      agent_factory=lambda _ctx: EchoAgent())
    outbox.bind(lambda: gw.store)
    server = make_server(HttpApi(gw, outbox, config.http), "127.0.0.1", 0)
    server.start()
    port = server.server_port
    ready: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    latencies: list[float] = []
    left = [messages] * sessions
    done = threading.Event()
    total = sessions * messages

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.connect()  # as curl and browsers do: no Nagle delay on a request's two writes
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cursors: dict[int, int] = {}
        while True:
            n = ready.get()
            if n is None:
                conn.close()
                return
            chat = f"c{n}"
            began = time.perf_counter()
            body = json.dumps({"chat_id": chat, "text": f"message of {n}"})
            conn.request("POST", "/v1/messages", body, {"Content-Type": "application/json"})
            answer = conn.getresponse()
            event_id = json.loads(answer.read())["event_id"]
            after = cursors.get(n, 0)
            while True:
                query = urllib.parse.urlencode({"chat_id": chat, "after": after, "wait": 30})
                conn.request("GET", f"/v1/outbox?{query}")
                page = json.loads(conn.getresponse().read())
                after = page["cursor"]
                if any(event_id in m["in_reply_to"] for m in page["messages"]):
                    break
            cursors[n] = after
            latencies.append(time.perf_counter() - began)
            left[n] -= 1
            if left[n] > 0:
                ready.put(n)
            if len(latencies) >= total:
                done.set()

    for n in range(sessions):
        ready.put(n)
    started = time.perf_counter()
    workers = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    try:
        for w in workers:
            w.start()
        while not done.wait(0.5):
            progress.update(f"http: {len(latencies):,}/{total:,} turns")
        elapsed = time.perf_counter() - started
        for _ in workers:
            ready.put(None)
    finally:
        server.stop(timeout=5)
        outbox.close()
        gw.stop(drain_timeout=10)
    return total / elapsed, sorted(latencies)


def _in_process(home, sessions: int, messages: int, clients: int,
                progress: Progress) -> tuple[float, list[float]]:
    from hermes_actors import EchoAgent, MessageEvent, SessionSource

    sources = [SessionSource("webhook", chat_id=f"c{n}") for n in range(sessions)]
    index = {src.chat_id: n for n, src in enumerate(sources)}
    submitted: dict[int, float] = {}
    left = [messages] * sessions
    latencies: list[float] = []
    ready: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    done = threading.Event()
    total = sessions * messages

    def on_sent(target, text, t) -> None:
        if not text.startswith("echo: "):
            return
        n = index[target.chat_id]
        latencies.append(t - submitted.pop(n))
        left[n] -= 1
        if left[n] > 0:
            ready.put(n)
        if len(latencies) >= total:
            done.set()

    adapter = RecordingAdapter("webhook", on_sent)
    gw = make_gateway(home, adapters=[adapter], agent_factory=lambda _ctx: EchoAgent())

    def submitter() -> None:
        while True:
            n = ready.get()
            if n is None:
                return
            submitted[n] = time.perf_counter()
            gw.submit(MessageEvent(source=sources[n], text=f"message of {n}"))

    for n in range(sessions):
        ready.put(n)
    started = time.perf_counter()
    workers = [threading.Thread(target=submitter, daemon=True) for _ in range(clients)]
    try:
        for w in workers:
            w.start()
        while not done.wait(0.5):
            progress.update(f"in-process: {len(latencies):,}/{total:,} turns")
        elapsed = time.perf_counter() - started
        for _ in workers:
            ready.put(None)
    finally:
        gw.stop(drain_timeout=10)
    return total / elapsed, sorted(latencies)


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """The HTTP path and its in-process baseline; figures for the report (information)."""
    sessions, messages, clients = QUICK if quick else FULL
    with scratch_dir(workdir, "http") as base:
        progress.update(f"HTTP path: {sessions:,} sessions x {messages}, {clients} clients",
                        force=True)
        http_rate, http_lat = _http_path(base / "http", sessions, messages, clients, progress)
        progress.update("in-process baseline", force=True)
        base_rate, base_lat = _in_process(base / "direct", sessions, messages, clients,
                                          progress)
    ms = 1000.0
    label = f"{sessions:,} sessions x {messages}, {clients} clients"
    figures = [
        figure("turns", f"turns/s, POST → long-poll reply, {label}", http_rate, "turns/s",
               baseline=base_rate, baseline_label="in-process submit"),
        figure("p50", "  POST → reply read, p50", percentile(http_lat, 0.5) * ms, "ms",
               baseline=percentile(base_lat, 0.5) * ms, baseline_label="in-process p50"),
        figure("p99", "  POST → reply read, p99", percentile(http_lat, 0.99) * ms, "ms",
               baseline=percentile(base_lat, 0.99) * ms, baseline_label="in-process p99"),
    ]
    return {"figures": figures, "details": {"sessions": sessions, "messages": messages,
                                            "clients": clients}}
