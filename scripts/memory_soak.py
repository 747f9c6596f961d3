#!/usr/bin/env python3
"""Memory soak: churn many sessions with ~2 MB transcripts through the agent cache.

Why it exists: the memory budget (§11) is only worth having if the process's anonymous
memory really stays near it while sessions come and go. Unit tests use a fake probe; this
script uses the real :class:`~hermes_actors.runtime.memory.MemoryProbe` (cgroup ``anon``
under a cgroup v2 limit, else ``/proc/self/status`` RssAnon) and real allocations.

The engine lives in :mod:`benchmarks.soak` (the ``memory`` benchmark scenario uses it too).
Each turn checks an agent out of an ``AgentCacheActor``; on a miss a fresh fake agent
"rebuilds its history" (about ``--transcript-mb`` of message dicts with unique strings, so
the heap really grows); every turn appends a little. After each turn the worker calls
``check_pressure()`` when the transcript grew past the documented threshold (a rebuild
always does), and every ``--housekeeping-every`` turns ``sweep_memory()`` runs as
housekeeping would. The LRU cap is set to the number of sessions, so only the memory pass
bounds the cache. A sampler thread records the peak anonymous memory.

    python scripts/memory_soak.py --sessions 500 --memory-high-mb 300 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

try:
    import benchmarks.soak  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.soak import (  # noqa: E402 - after the path fallback
    MESSAGE_BYTES,
    PeakSampler,
    TranscriptAgent,
    run_soak,
    schedule,
)

__all__ = ["MESSAGE_BYTES", "PeakSampler", "TranscriptAgent", "main", "parse_args",
           "print_table", "run_soak", "schedule"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=500, help="distinct sessions (500)")
    p.add_argument("--turns", type=int, default=None, help="turns in all (2 x sessions)")
    p.add_argument("--memory-high-mb", type=float, default=300.0, help="budget, MB (300)")
    p.add_argument("--transcript-mb", type=float, default=2.0, help="per agent, MB (2)")
    p.add_argument("--grow-kb", type=int, default=16, help="added per turn, KB (16)")
    p.add_argument("--workers", type=int, default=4, help="concurrent turns (4)")
    p.add_argument("--max-evictions-per-pass", type=int, default=16)
    p.add_argument("--protect-recent", type=int, default=8)
    p.add_argument("--housekeeping-every", type=int, default=50,
                   help="turns between sweep_memory() calls (50)")
    p.add_argument("--max-seconds", type=float, default=120.0, help="stop churning after")
    p.add_argument("--progress-every", type=int, default=100, help="turns per progress line")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    p.add_argument("--verbose", action="store_true", help="log each memory pass")
    args = p.parse_args(argv)
    if args.sessions < 1 or args.workers < 1 or args.memory_high_mb <= 0:
        p.error("--sessions, --workers and --memory-high-mb must be positive")
    if args.turns is None:
        args.turns = 2 * args.sessions
    return args


def print_table(result: dict) -> None:
    """The result as a two-column table."""
    rows = [
        ("turns run / planned", f"{result['turns_run']} / {result['turns_planned']}"
         + ("  (stopped at --max-seconds)" if result["stopped_early"] else "")),
        ("elapsed", f"{result['seconds']} s"),
        ("budget", f"{result['budget_mb']} MB"),
        ("baseline anon", f"{result['baseline_anon_mb']} MB"),
        ("peak anon", f"{result['peak_anon_mb']} MB"),
        ("peak - budget", f"{result['peak_over_budget_mb']:+} MB"),
        ("peak / budget", f"{result['peak_vs_budget']}"),
        ("final anon (after close_all)", f"{result['final_anon_mb']} MB"),
        ("hits / misses", f"{result['hits']} / {result['misses']}"),
        ("pressure checks", str(result["pressure_checks"])),
        ("evictions", ", ".join(f"{k}={v}" for k, v in result["evictions"].items())),
        ("cached at end", str(result["cached_at_end"])),
        ("anon samples", str(result["samples"])),
    ]
    width = max(len(name) for name, _ in rows)
    print()
    print(f"{'metric':<{width}}  value")
    print(f"{'-' * width}  {'-' * 24}")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def main(argv: list[str] | None = None) -> int:
    """Run the soak; exit 0 (the numbers are the result, not a pass/fail)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    result = run_soak(args)
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
