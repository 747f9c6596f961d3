"""Garbage-collector settings for a long-running gateway process.

Almost everything the runtime allocates is freed by reference counting; the cyclic
collector finds next to nothing, but with default thresholds it runs every 700 allocations
and, at 10,000 live sessions, makes full passes over half a million objects: measured at
40 % of the hub's CPU in the throughput benchmark. A gateway process therefore raises the
first threshold, and after startup freezes what it loaded (routing, actors, modules) so
later passes skip it. A library must not change process-wide settings behind its
embedder's back, so these are called by the standalone process (and the benchmarks, which
measure what it does), not by :class:`~hermes_actors.Gateway`.
"""

from __future__ import annotations

import gc

__all__ = ["GC_THRESHOLDS", "freeze_startup_heap", "tune_gc"]

#: ``gc.set_threshold`` for a gateway process: a young pass every 50,000 net allocations.
GC_THRESHOLDS = (50_000, 20, 10)


def tune_gc() -> None:
    """Apply :data:`GC_THRESHOLDS` (call once, early)."""
    gc.set_threshold(*GC_THRESHOLDS)


def freeze_startup_heap() -> None:
    """After startup: collect once, then move every surviving object out of the
    collector's sight (``gc.freeze``), so later passes only walk what came after."""
    gc.collect()
    gc.freeze()
