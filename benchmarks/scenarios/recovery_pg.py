"""``recovery-pg``: the ``recovery`` scenario on the PostgreSQL backend.

The fixture is the same crashed gateway's store (:func:`benchmarks.fixtures.fixture_rows`:
N sessions, K fresh turn markers with their user messages, half of them with the reply
persisted), written with ``COPY`` into a fresh database of the run's server
(:func:`benchmarks.rawpg.build_fixture`, counts checked), and a home holding only an empty
``sessions`` directory: a node without a clean-shutdown record, so the start recovers (a
home with no store file at all would be reported as new, and its recovery not shown).

Figure: the wall time from spawning a gateway process (``python -m benchmarks._ready HOME
DSN``, gevent-patched like the standalone process) to ``Gateway.start()`` returning:
connections opened, schema checked, routing keys loaded, markers judged, ledger swept,
auto-continue dispatched. Baseline, same fixture: spawning a bare ``python`` that reads the
same rows with raw psycopg (:data:`benchmarks.rawpg.RAW_READ`; median of 3). Both include
interpreter start and both run with bytecode caches (see ``recovery``).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from benchmarks import pgserver
from benchmarks.rawpg import RAW_READ, build_fixture
from benchmarks.scenarios.recovery import bytecode_env, ready_result, spawn_until_line
from benchmarks.util import Progress, scratch_dir

__all__ = ["run"]

#: ``(sessions, markers)``.
FULL = (100_000, 1_000)
QUICK = (10_000, 100)


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """Build the fixture, time the raw read (median of 3), then the gateway's start."""
    sessions, markers = QUICK if quick else FULL
    replied = markers // 2
    with scratch_dir(workdir, "recovery-pg") as base, pgserver.database() as dsn:
        progress.update(f"fixture: {sessions:,} sessions, {markers:,} markers", force=True)
        built = time.perf_counter()
        build_fixture(dsn, sessions, markers=markers, replied=replied, now=time.time())
        fixture_s = time.perf_counter() - built
        env = bytecode_env()
        progress.update("raw psycopg read", force=True)
        raw = [spawn_until_line([sys.executable, "-c", RAW_READ, dsn], env) for _ in range(3)]
        expected = f"{sessions} {markers + replied} 0 0"
        if raw[0][1] != expected:
            raise RuntimeError(f"the fixture reads as {raw[0][1]!r}, not {expected!r}")
        progress.update("gateway start", force=True)
        home = base / "home"
        ready_s, line = spawn_until_line([sys.executable, "-m", "benchmarks._ready",
                                          str(home), dsn], env)
    return ready_result(line, ready_s, raw, raw_label="raw psycopg read", sessions=sessions,
                        markers=markers, replied=replied, fixture_s=fixture_s)
