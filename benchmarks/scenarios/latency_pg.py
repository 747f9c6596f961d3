"""``latency-pg``: the ``latency`` scenario on the PostgreSQL backend.

The same open-loop load (1,000 msg/s offered, round-robin over 1,000 sessions, latency
from each message's scheduled submit to its reply's send) to a gateway with
``store.backend: postgres`` on a fresh database of the run's server
(:mod:`benchmarks.pgserver`). Baseline, same child, same offered load: raw pykka asks to
one echo actor. Target: p99 within 20 x the raw ask's p99.
"""

from __future__ import annotations

from typing import Any

from benchmarks import pgserver
from benchmarks.scenarios.latency import measure
from benchmarks.util import Progress

__all__ = ["run"]


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """The load on a fresh PostgreSQL database; p99 within 20 x the raw ask's."""
    with pgserver.database() as dsn:
        return measure(quick=quick, progress=progress, workdir=workdir, p99_target=20.0,
                       store={"backend": "postgres", "dsn": dsn})
