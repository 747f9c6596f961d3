"""``recovery``: N stored sessions, K in-flight turn markers; process start -> ready.

The fixture (:mod:`benchmarks.fixtures`) is a crashed gateway's ``state.db``: no
``.clean_shutdown``, ``K`` sessions with a fresh turn marker and the user message of that
turn, half of them with the reply persisted (recovery records those in the ledger and
delivers them once; the other half are marked for resume and auto-continued).

Figure: the wall time from spawning a gateway process (``python -m benchmarks._ready``,
gevent-patched like the standalone process) to ``Gateway.start()`` returning, i.e. routing
loaded, markers judged, ledger swept, auto-continue dispatched. Baseline, same fixture:
spawning a bare ``python`` that merely reads the same rows with raw ``sqlite3`` (every
routing row, the in-flight turns' messages, the pending inbox and ledger rows). Both
include interpreter start; the in-process split (imports, ``start()``) is kept as detail.

Both children run with bytecode caches, as a gateway restarting after a crash has them:
``hermes_actors`` and ``benchmarks`` are compiled in place (``__pycache__``, as any first
import writes it) before timing. This machine class sets ``PYTHONDONTWRITEBYTECODE=1``;
without the caches every start compiled the package again (a quarter of the start, by
py-spy).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import hermes_actors
from benchmarks.fixtures import build_state_db
from benchmarks.report import Target, figure
from benchmarks.util import Progress, scratch_dir

__all__ = ["bytecode_env", "ready_result", "run", "spawn_until_line"]

#: ``(sessions, markers)``.
FULL = (100_000, 1_000)
QUICK = (10_000, 100)

RAW_READ = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
routing = conn.execute("SELECT session_key, entry FROM routing").fetchall()
turns = conn.execute("SELECT session_id, role, content, turn_token, is_reply FROM messages"
                     " WHERE turn_token IS NOT NULL").fetchall()
inbox = conn.execute("SELECT session_key, payload FROM inbox WHERE consumed_at IS NULL"
                     " ORDER BY seq").fetchall()
ledger = conn.execute("SELECT * FROM deliveries WHERE state IN"
                      " ('pending', 'attempting', 'failed')").fetchall()
print(len(routing), len(turns), len(inbox), len(ledger), flush=True)
"""


def bytecode_env() -> dict[str, str]:
    """The children's environment, bytecode caches allowed and ``hermes_actors`` and
    ``benchmarks`` already compiled (see the module doc)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    packages = [Path(hermes_actors.__file__).parent, Path(__file__).parents[1]]
    # A tree that cannot be written only makes the start slower: not a failure.
    subprocess.run([sys.executable, "-m", "compileall", "-q", *map(str, packages)],
                   env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return env


def spawn_until_line(cmd: list[str], env: dict[str, str],
                      timeout: float = 300.0) -> tuple[float, str]:
    """Seconds from spawning ``cmd`` to its first stdout line, and that line."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        elapsed = time.perf_counter() - started
        if not line:
            raise RuntimeError(f"{cmd[1:3]} exited {proc.wait(timeout)} before it was ready")
    finally:
        proc.kill()
        proc.wait(timeout)
    return elapsed, line.strip()


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """Build the fixture, time the raw read (median of 3), then the gateway's start."""
    sessions, markers = QUICK if quick else FULL
    with scratch_dir(workdir, "recovery") as base:
        home = base / "home"
        progress.update(f"fixture: {sessions:,} sessions, {markers:,} markers", force=True)
        fixture = build_state_db(home, sessions, markers=markers, replied=markers // 2,
                                 now=time.time())
        env = bytecode_env()
        progress.update("raw sqlite3 read", force=True)
        raw = [spawn_until_line([sys.executable, "-c", RAW_READ, str(fixture.path)], env)
               for _ in range(3)]
        expected = f"{sessions} {markers + markers // 2} 0 0"
        if raw[0][1] != expected:
            raise RuntimeError(f"the fixture reads as {raw[0][1]!r}, not {expected!r}")
        progress.update("gateway start", force=True)
        ready_s, line = spawn_until_line([sys.executable, "-m", "benchmarks._ready",
                                           str(home)], env)
    return ready_result(line, ready_s, raw, raw_label="raw sqlite3 read", sessions=sessions,
                        markers=markers, replied=markers // 2)


def ready_result(line: str, ready_s: float, raw: list[tuple[float, str]], *, raw_label: str,
                 sessions: int, markers: int, replied: int, **details: Any) -> dict[str, Any]:
    """The scenario's result from the gateway child's JSON ``line`` (checked: every marker
    judged) and the raw reads ``raw`` (median taken): the figures of either backend."""
    detail = json.loads(line)
    report = detail["report"]
    if f"recovered_replies={replied}" not in report or \
            f"resumed={markers - replied}" not in report:
        raise RuntimeError(f"recovery did not judge every marker: {report}")
    raw_s = statistics.median(t for t, _ in raw)
    label = f"{sessions:,} sessions, {markers:,} markers"
    figures = [
        figure("ready", f"process start → ready, {label}", ready_s, "s", baseline=raw_s,
               baseline_label=raw_label, target=Target("<=", 3.0, on="ratio")),
        figure("start_call", "  of which Gateway.start()", detail["start_s"], "s"),
        figure("imports", "  of which interpreter + imports (gevent, hermes_actors)",
               ready_s - detail["start_s"], "s"),
    ]
    return {"figures": figures, "details": {"sessions": sessions, "markers": markers,
                                            "report": report, "raw_read_runs": raw,
                                            "import_s": detail["import_s"],
                                            "gc_threshold": detail["gc_threshold"], **details}}


