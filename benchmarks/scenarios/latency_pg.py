"""``latency-pg``: the ``latency`` scenario on the PostgreSQL backend.

The same open-loop load (1,000 msg/s offered, round-robin over 1,000 sessions, latency
from each message's scheduled submit to its reply's send) to a gateway with
``store.backend: postgres`` on a fresh database of the run's server
(:mod:`benchmarks.pgserver`). Baseline, same child, same offered load: raw pykka asks to
one echo actor. Target: p99 within 20 x the raw ask's p99.

Offered from :data:`SENDERS` concurrent senders instead of 16: a submit returns once its
message is durable, which on PostgreSQL is a group commit on the server (tens of
milliseconds near saturation), and 16 blocking senders could then offer only ~800 msg/s;
the latencies are taken from the scheduled times either way, so more senders only let
the driver offer what is asked. The raw baseline is offered as in ``latency`` (16 senders:
with 64 its p99 rose from ~1.2 to ~2 ms, which would loosen the target).

Then the same at half the rate, in a fresh database (information, no target): what the
backend does with the load it can carry.
"""

from __future__ import annotations

from typing import Any

from benchmarks import pgserver
from benchmarks.scenarios.latency import FULL, QUICK, measure
from benchmarks.util import Progress

__all__ = ["SENDERS", "run"]

#: Concurrent senders offering the load (see the module doc).
SENDERS = 64


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """The load on a fresh PostgreSQL database, then half of it; p99 within 20 x."""
    rate, duration, sessions = QUICK if quick else FULL
    store = {"backend": "postgres"}
    with pgserver.database() as dsn:
        main = measure(quick=quick, progress=progress, workdir=workdir, p99_target=20.0,
                       store={**store, "dsn": dsn}, senders=SENDERS)
    with pgserver.database() as dsn:
        half = measure(quick=quick, progress=progress, workdir=workdir, p99_target=None,
                       store={**store, "dsn": dsn}, senders=SENDERS,
                       load=(rate / 2, duration, sessions), prefix="half_")
    return {"figures": main["figures"] + half["figures"],
            "details": {"full": main["details"], "half": half["details"]}}
