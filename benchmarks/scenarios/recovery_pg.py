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

import json
import statistics
import sys
import time
from typing import Any

from benchmarks import pgserver
from benchmarks.rawpg import RAW_READ, build_fixture
from benchmarks.report import Target, figure
from benchmarks.scenarios.recovery import bytecode_env, spawn_until_line
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
        raw_s = statistics.median(t for t, _ in raw)
        expected = f"{sessions} {markers + replied} 0 0"
        if raw[0][1] != expected:
            raise RuntimeError(f"the fixture reads as {raw[0][1]!r}, not {expected!r}")
        progress.update("gateway start", force=True)
        home = base / "home"
        (home / "sessions").mkdir(parents=True)  # a home a gateway ran in, not a new one
        ready_s, line = spawn_until_line([sys.executable, "-m", "benchmarks._ready",
                                          str(home), dsn], env)
    detail = json.loads(line)
    report = detail["report"]
    if f"recovered_replies={replied}" not in report or \
            f"resumed={markers - replied}" not in report:
        raise RuntimeError(f"recovery did not judge every marker: {report}")
    label = f"{sessions:,} sessions, {markers:,} markers"
    figures = [
        figure("ready", f"process start → ready, {label}", ready_s, "s", baseline=raw_s,
               baseline_label="raw psycopg read", target=Target("<=", 3.0, on="ratio")),
        figure("start_call", "  of which Gateway.start()", detail["start_s"], "s"),
        figure("imports", "  of which interpreter + imports (gevent, hermes_actors)",
               ready_s - detail["start_s"], "s"),
    ]
    return {"figures": figures, "details": {"sessions": sessions, "markers": markers,
                                            "report": report, "raw_read_runs": raw,
                                            "fixture_s": fixture_s,
                                            "import_s": detail["import_s"]}}
