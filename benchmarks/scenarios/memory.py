"""``memory``: agents with large transcripts churning under a memory budget (§11).

The engine of ``scripts/memory_soak.py`` (:mod:`benchmarks.soak`) in a gevent child: many
sessions, each agent rebuilding a transcript of a few MB on a cache miss, revisits biased
to recent sessions, the LRU cap as large as the session count so that only the memory pass
(``memory_high_mb``, pressure checks after growth, a sweep every 50 turns as housekeeping)
bounds the cache. The real probe measures anonymous memory (``RssAnon`` here; the cgroup's
``anon`` under a cgroup v2 limit) and a sampler keeps the peak.

Figure: peak anonymous memory; baseline: the budget (``memory_high_mb``); target: the
ratio stays at or under 1.2. The anonymous memory before the churn is kept as detail.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from benchmarks.report import Target, figure
from benchmarks.util import Progress

__all__ = ["run"]

FULL = {"sessions": 500, "turns": 1000, "memory_high_mb": 300.0, "transcript_mb": 2.0}
QUICK = {"sessions": 200, "turns": 800, "memory_high_mb": 120.0, "transcript_mb": 1.0}


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """Churn under the budget; peak anonymous memory against it."""
    from benchmarks.soak import run_soak

    params = QUICK if quick else FULL
    args = SimpleNamespace(
        grow_kb=16, workers=4, max_evictions_per_pass=16, protect_recent=8,
        housekeeping_every=50, max_seconds=120.0, progress_every=50, seed=1, **params,
    )
    result = run_soak(args, progress=lambda line: progress.update(line.strip()))
    if result["stopped_early"]:
        raise RuntimeError(f"the churn stopped at {args.max_seconds:g} s: "
                           f"{result['turns_run']} of {result['turns_planned']} turns")
    label = (f"peak anon, {params['sessions']} sessions x {params['transcript_mb']:g} MB "
             f"transcripts, {params['turns']} turns")
    figures = [
        figure("peak", label, result["peak_anon_mb"], "MB",
               baseline=result["budget_mb"], baseline_label="memory_high_mb",
               target=Target("<=", 1.2, on="ratio")),
        figure("start", "  anon before the churn", result["baseline_anon_mb"], "MB",
               baseline=result["budget_mb"], baseline_label="memory_high_mb"),
        figure("evictions", "  memory evictions", float(result["evictions"]["memory"]),
               "agents"),
    ]
    return {"figures": figures, "details": result}
