"""``http``: the shipped path: ``POST /v1/messages`` to a reply read by a long-poll
``GET /v1/outbox``, through the real HTTP adapter, as turns/s, CPU per turn and p99 latency,
against the raw HTTP bound of the same server stack.

The gateway runs as ``hermes-actors run`` does (:func:`gateway_server`): the gevent WSGI
server of :mod:`hermes_actors.adapters.http` with the ``http`` settings on loopback, outbox
adapters for the served platforms, the echo agent. The clients are closed loops, one
keep-alive connection each (:func:`benchmarks.httpload.long_poll_load`). They run in the
same process as the gateway (as the in-process baseline's submitters do), so the figure
includes the client side of HTTP; the same load is also run from a driver process of its
own, to show whether the driver limits the figure.

Baselines, same run, same sessions x messages and clients:

* the raw HTTP bound (:class:`benchmarks.rawhttp.RawApi`): a minimal WSGI application on
  the same server and settings that keeps the POSTed message in a dict and answers the long
  poll from it. Target: the gateway at least half of it;
* ``Gateway.submit`` in-process, each reply taken from an in-memory adapter (latency:
  submit to send; a submitter does not wait for the reply, so more turns are in flight).
  Target: the HTTP path's p99 at most twice the in-process p99.

CPU per turn counts this process and its children (the SQLite writer) over the load,
driver included: on a shared machine it drifts far less than turns/s.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from benchmarks.httpload import DriverProcess, long_poll_load, measured
from benchmarks.rawhttp import RawApi, serve
from benchmarks.report import Target, figure
from benchmarks.util import Progress, RecordingAdapter, make_gateway, percentile, scratch_dir

__all__ = ["gateway_server", "raw_server", "run"]

#: ``(sessions, messages per session, concurrent clients)``.
FULL = (1_000, 3, 32)
QUICK = (100, 2, 8)


@contextlib.contextmanager
def gateway_server(home, http: dict[str, Any] | None = None) -> Iterator[int]:
    """A gateway served over HTTP as ``hermes-actors run`` serves it (the gevent WSGI server
    with the ``http`` settings, outbox adapters for the served platforms, the echo agent);
    yields its port, stops it all afterwards."""
    from hermes_actors import EchoAgent, load_config
    from hermes_actors.adapters.http import HttpApi
    from hermes_actors.adapters.outbox import Outbox, OutboxAdapter

    config = load_config({"http": http or {}}, env={})
    outbox = Outbox()
    gw = make_gateway(home, adapters=[OutboxAdapter(p, outbox) for p in config.http.platforms],
                      agent_factory=lambda _ctx: EchoAgent(), http=http or {})
    outbox.bind(lambda: gw.store)
    server = serve(HttpApi(gw, outbox, config.http), config.http)
    try:
        yield server.server_port
    finally:
        outbox.close()  # (ends the open streams)
        server.stop(timeout=5)
        gw.stop(drain_timeout=10)


@contextlib.contextmanager
def raw_server(http: dict[str, Any] | None = None) -> Iterator[int]:
    """The raw bound (:class:`benchmarks.rawhttp.RawApi`) on the same server and settings."""
    from hermes_actors import load_config

    config = load_config({"http": http or {}}, env={})
    app = RawApi(config.http.stream_keepalive)
    server = serve(app, config.http)
    try:
        yield server.server_port
    finally:
        app.close()
        server.stop(timeout=5)


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
    """The HTTP path against its raw bound and the in-process baseline."""
    sessions, messages, clients = QUICK if quick else FULL
    sizes = (sessions, messages, clients)

    def update(text: str) -> None:
        progress.update(text)

    total = sessions * messages
    with scratch_dir(workdir, "http") as base:
        progress.update(f"HTTP path: {sessions:,} sessions x {messages}, {clients} clients",
                        force=True)
        with gateway_server(base / "http") as port:
            http_rate, http_lat, http_cpu = measured(
                lambda: long_poll_load(port, *sizes, progress=update), total)
        progress.update("raw HTTP bound", force=True)
        with raw_server() as port:
            raw_rate, raw_lat, raw_cpu = measured(
                lambda: long_poll_load(port, *sizes, progress=update), total)
        progress.update("HTTP path, the driver in a process of its own", force=True)
        with gateway_server(base / "apart") as port:
            apart_rate, _, _ = measured(
                lambda: DriverProcess("long-poll", port, *sizes).result(), total)
        progress.update("in-process baseline", force=True)
        base_rate, base_lat = _in_process(base / "direct", sessions, messages, clients,
                                          progress)
    ms = 1000.0
    label = f"{sessions:,} sessions x {messages}, {clients} clients"
    p99, base99 = percentile(http_lat, 0.99) * ms, percentile(base_lat, 0.99) * ms
    figures = [
        figure("turns", f"turns/s, POST → long-poll reply, {label}", http_rate, "turns/s",
               baseline=raw_rate, baseline_label="raw HTTP bound",
               target=Target(">=", 0.5, on="ratio")),
        figure("vs_submit", "  the same turns/s against in-process submit", http_rate,
               "turns/s", baseline=base_rate, baseline_label="in-process submit"),
        figure("cpu", "  CPU per turn (the process + its writer, with the driver)",
               http_cpu, "µs", baseline=raw_cpu, baseline_label="raw HTTP bound"),
        figure("apart", "  turns/s, the load driver in its own process", apart_rate,
               "turns/s", baseline=http_rate, baseline_label="driver in the gateway"),
        figure("p50", "  POST → reply read, p50", percentile(http_lat, 0.5) * ms, "ms",
               baseline=percentile(base_lat, 0.5) * ms, baseline_label="in-process p50"),
        figure("p99", "  POST → reply read, p99", p99, "ms", baseline=base99,
               baseline_label="in-process p99", target=Target("<=", 2.0, on="ratio")),
        figure("raw_p99", "  raw HTTP bound, POST → reply read, p99",
               percentile(raw_lat, 0.99) * ms, "ms", baseline=p99,
               baseline_label="gateway p99"),
    ]
    return {"figures": figures, "details": {"sessions": sessions, "messages": messages,
                                            "clients": clients}}
