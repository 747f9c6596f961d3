"""``routing-scale``: the cost of one routing change at 1k / 10k / 100k stored sessions.

For each size a fixture ``state.db`` is opened by a real ``SessionStore`` (mirror on, as
configured by default: coalesced ``sessions.json`` writes), all sizes at once, and routing
changes are timed one by one, interleaved across the sizes so that each is measured under
the same conditions: ``mark_resume_pending`` / ``clear_resume_pending`` alternating over a
sample of keys, each one a committed, durable change (one routing upsert, §5). The figure
is the median change; the mean and p99 (which would include a coalesced mirror write,
should one fall in the window) are kept as detail.

Baseline, same run: the reference pattern's change (:mod:`benchmarks.rawsql`: the whole
``sessions.json`` re-serialised and rewritten with fsync) at each size; and, for the
headline, our own change at the smallest size: the target is that the cost does not grow.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.fixtures import build_state_db, dm_key
from benchmarks.rawsql import reference_change
from benchmarks.report import Target, figure
from benchmarks.util import Progress, percentile, scratch_dir

__all__ = ["run"]

FULL = (1_000, 10_000, 100_000)
QUICK = (1_000, 5_000, 10_000)
#: Timed changes per size (after a warm-up of a tenth as many).
CHANGES = 2_000


def _our_changes(homes: dict[int, Path], changes: int) -> dict[int, list[float]]:
    """Time ``changes`` changes per size, interleaved across the open stores so every size
    is measured under the same conditions (warm code, same moment)."""
    from hermes_actors import load_config
    from hermes_actors.store import SessionStore

    stores = {n: SessionStore(home / "sessions", load_config({}, env={}))
              for n, home in homes.items()}
    try:
        for n, store in stores.items():
            if len(store.list_sessions()) != n:
                raise RuntimeError(f"the store loaded {len(store.list_sessions())} of {n}")
            store.flush()  # the load-time mirror write is not a change's cost
        keys = {n: [dm_key(k * (n // 100)) for k in range(100)] for n in stores}
        timings: dict[int, list[float]] = {n: [] for n in stores}
        for i in range(changes + changes // 10):
            for n, store in stores.items():
                key = keys[n][i % 100]
                started = time.perf_counter()
                if (i // 100) % 2 == 0:
                    ok = store.mark_resume_pending(key, "restart_timeout")
                else:
                    ok = store.clear_resume_pending(key)
                elapsed = time.perf_counter() - started
                if not ok:
                    raise RuntimeError(f"change {i} of {key} was refused")
                if i >= changes // 10:  # the first tenth warms up
                    timings[n].append(elapsed)
    finally:
        for store in stores.values():
            store.close()
    return {n: sorted(t) for n, t in timings.items()}


def run(*, quick: bool, progress: Progress, workdir: str | None) -> dict[str, Any]:
    """Time changes at every size, ours and the reference's."""
    sizes = QUICK if quick else FULL
    changes = CHANGES // 4 if quick else CHANGES
    ref: dict[int, float] = {}
    with scratch_dir(workdir, "routing") as base:
        homes = {}
        for sessions in sizes:
            progress.update(f"{sessions:,} sessions: fixture, reference change", force=True)
            homes[sessions] = base / f"home{sessions}"
            build_state_db(homes[sessions], sessions)
            ref[sessions] = reference_change(base / f"ref{sessions}", sessions,
                                             repeats=3 if quick or sessions >= 50_000 else 10)
        progress.update(f"{changes:,} changes per size, interleaved", force=True)
        ours = _our_changes(homes, changes)
    us = 1e6
    small, large = sizes[0], sizes[-1]
    figures = []
    details: dict[str, Any] = {}
    for sessions in sizes:
        t = ours[sessions]
        median = statistics.median(t) * us
        details[str(sessions)] = {"median_us": median, "mean_us": statistics.fmean(t) * us,
                                  "p99_us": percentile(t, 0.99) * us,
                                  "reference_us": ref[sessions] * us}
        figures.append(figure(f"change_{sessions}", f"one change at {sessions:,} sessions",
                              median, "µs", baseline=ref[sessions] * us,
                              baseline_label="reference rewrite"))
    figures.append(figure(
        "growth", f"  change at {large:,} / change at {small:,}",
        statistics.median(ours[large]) * us, "µs",
        baseline=statistics.median(ours[small]) * us,
        baseline_label=f"ours at {small:,}", target=Target("<=", 1.5, on="ratio")))
    figures.append(figure(
        "reference_growth", f"  reference at {large:,} / at {small:,}", ref[large] * us, "µs",
        baseline=ref[small] * us, baseline_label=f"reference at {small:,}"))
    return {"figures": figures, "details": details}
