"""``sse``: answers pushed to many open ``GET /v1/stream`` connections (Server-Sent Events),
against the raw HTTP bound on the same server stack.

The gateway runs as in ``http`` (:func:`benchmarks.scenarios.http.gateway_server`), with
``http.max_streams`` and ``http.max_connections`` raised to hold every stream. One stream is
opened per chat (1,000 in the full run) before the clock starts; then ``posters`` keep-alive
connections POST messages, a chat's next one when the answer to its previous one arrived
on its stream (:func:`benchmarks.httpload.stream_load`). A latency runs from the POST to the
moment the client read the answer's event.

Baseline, same run, same clients and server settings: the raw bound
(:class:`benchmarks.rawhttp.RawApi`), whose streams are woken by their chat's gevent event.
"""

from __future__ import annotations

from typing import Any

from benchmarks.httpload import measured, stream_load
from benchmarks.report import Target, figure
from benchmarks.scenarios.http import gateway_server, raw_server
from benchmarks.util import Progress, percentile, scratch_dir

__all__ = ["run"]

#: ``(open streams, answers per stream, posting connections)``.
FULL = (1_000, 3, 32)
QUICK = (50, 2, 4)


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """Answers per second to the open streams, the gateway against its raw bound."""
    streams, messages, posters = QUICK if quick else FULL
    sizes = (streams, messages, posters)
    total = streams * messages
    http = {"max_streams": streams + 8, "max_connections": streams + posters + 16}

    def update(text: str) -> None:
        progress.update(text)

    with scratch_dir(workdir, "sse") as base:
        progress.update(f"gateway: {streams:,} streams x {messages}, {posters} posters",
                        force=True)
        with gateway_server(base / "sse", http) as port:
            rate, lat, cpu = measured(lambda: stream_load(port, *sizes, progress=update),
                                      total)
    progress.update("raw HTTP bound", force=True)
    with raw_server(http) as port:
        raw_rate, raw_lat, raw_cpu = measured(
            lambda: stream_load(port, *sizes, progress=update), total)
    ms = 1000.0
    label = f"{streams:,} open streams x {messages}, {posters} posters"
    figures = [
        figure("answers", f"answers/s on open streams, {label}", rate, "answers/s",
               baseline=raw_rate, baseline_label="raw HTTP bound",
               target=Target(">=", 0.5, on="ratio")),
        figure("cpu", "  CPU per answer (the process + its writer, with the driver)", cpu,
               "µs", baseline=raw_cpu, baseline_label="raw HTTP bound"),
        figure("p50", "  POST → event read, p50", percentile(lat, 0.5) * ms, "ms",
               baseline=percentile(raw_lat, 0.5) * ms, baseline_label="raw bound p50"),
        figure("p99", "  POST → event read, p99", percentile(lat, 0.99) * ms, "ms",
               baseline=percentile(raw_lat, 0.99) * ms, baseline_label="raw bound p99"),
    ]
    return {"figures": figures, "details": {"streams": streams, "messages": messages,
                                            "posters": posters}}
