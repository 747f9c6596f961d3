#!/usr/bin/env python3
"""Memory soak: churn many sessions with ~2 MB transcripts through the agent cache.

Why it exists: the memory budget (§11) is only worth having if the process's anonymous
memory really stays near it while sessions come and go. Unit tests use a fake probe; this
script uses the real :class:`~hermes_actors.runtime.memory.MemoryProbe` (cgroup ``anon``
under a cgroup v2 limit, else ``/proc/self/status`` RssAnon) and real allocations.

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
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:
    import hermes_actors  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_actors.config import AgentCacheConfig
from hermes_actors.runtime.cache import AgentCacheActor
from hermes_actors.runtime.clock import SystemClock
from hermes_actors.runtime.eviction import should_check_pressure
from hermes_actors.runtime.memory import MB, MemoryProbe

#: Bytes of content per transcript message (hex text of half as many random bytes).
MESSAGE_BYTES = 4096


class TranscriptAgent:
    """A fake agent that holds its session's transcript in memory, as a real one does."""

    def __init__(self, session_id: str, transcript_bytes: int) -> None:
        #: The session this agent serves.
        self.session_id = session_id
        #: The in-memory transcript: message dicts with unique content strings.
        self.messages = [
            {"role": "user" if i % 2 else "assistant",
             "content": os.urandom(MESSAGE_BYTES // 2).hex()}
            for i in range(max(1, transcript_bytes // MESSAGE_BYTES))
        ]
        #: Soft releases seen.
        self.released = 0

    def run_turn(self, grow_bytes: int) -> int:
        """Append one exchange of ``grow_bytes``; returns the bytes added."""
        self.messages.append({"role": "assistant", "content": os.urandom(grow_bytes // 2).hex()})
        return grow_bytes

    def commit_memory(self, messages: list[dict]) -> None:
        """Accept the committed transcript (nothing to remember in a soak)."""

    def release_clients(self) -> None:
        """Count soft releases."""
        self.released += 1

    def close(self) -> None:
        """Drop the transcript."""
        self.messages = []


class PeakSampler:
    """Samples the probe's anonymous memory every ``interval`` seconds; keeps the peak."""

    def __init__(self, probe: MemoryProbe, interval: float = 0.005) -> None:
        self.probe = probe
        self.interval = interval
        #: The highest figure seen, bytes.
        self.peak = probe.anon_bytes()
        #: How many samples were taken.
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-sampler", daemon=True)

    def sample(self) -> int:
        """Take one sample now; returns it."""
        value = self.probe.anon_bytes()
        self.samples += 1
        if value > self.peak:
            self.peak = value
        return value

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


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


def schedule(sessions: int, turns: int, seed: int) -> list[int]:
    """Every session once in order, then random revisits with a recent-session bias."""
    rng = random.Random(seed)
    order = list(range(min(sessions, turns)))
    while len(order) < turns:
        # Half the revisits go to the most recent tenth, as chats cluster in time.
        if rng.random() < 0.5:
            order.append(rng.randrange(max(0, sessions - sessions // 10), sessions))
        else:
            order.append(rng.randrange(sessions))
    return order


def run_soak(args: argparse.Namespace) -> dict:
    """Run the churn; returns the result record (also printed as a table)."""
    probe = MemoryProbe()
    settings = AgentCacheConfig(
        max_size=args.sessions, idle_ttl_secs=3600.0, memory_high_mb=args.memory_high_mb,
        max_evictions_per_pass=args.max_evictions_per_pass, protect_recent=args.protect_recent,
    )
    ref = AgentCacheActor.start(
        settings, SystemClock(), probe=probe,
        load_transcript=lambda sid: [{"role": "system", "content": f"summary of {sid}"}],
    )
    cache = ref.proxy()
    transcript_bytes = int(args.transcript_mb * MB)
    grow = args.grow_kb * 1024
    lock = threading.Lock()
    counts = {"turns": 0, "hits": 0, "misses": 0, "pressure_checks": 0, "released": 0}
    start = time.monotonic()
    deadline = start + args.max_seconds
    baseline = probe.anon_bytes()

    # One turn at a time per session, as the SessionActor guarantees.
    session_locks = [threading.Lock() for _ in range(args.sessions)]

    def turn(index: int) -> None:
        with session_locks[index]:
            one_turn(index)

    def one_turn(index: int) -> None:
        if time.monotonic() > deadline:
            return
        key, sid = f"soak:{index}", f"sid-{index}"
        agent = cache.checkout(key, sid).get()
        hit = agent is not None
        grown = 0
        if agent is None:
            agent = TranscriptAgent(sid, transcript_bytes)
            grown = transcript_bytes  # the rebuilt history is new memory
        try:
            grown += agent.run_turn(grow)
        finally:
            cache.checkin(key, sid, agent).get()
        del agent
        released = 0
        if should_check_pressure(grown):
            released = cache.check_pressure().get()
        sampler.sample()
        with lock:
            counts["turns"] += 1
            counts["hits" if hit else "misses"] += 1
            counts["pressure_checks"] += should_check_pressure(grown)
            counts["released"] += released
            done = counts["turns"]
        if done % args.housekeeping_every == 0:
            swept = cache.sweep_memory().get()
            with lock:
                counts["released"] += swept
        if done % args.progress_every == 0:
            s = cache.statistics().get()
            print(f"[{done:>6}/{args.turns}] {time.monotonic() - start:6.1f}s  anon "
                  f"{sampler.sample() / MB:6.1f} MB  peak {sampler.peak / MB:6.1f} MB"
                  f"  cached {s.size:>4}  evictions {s.evictions}", flush=True)

    print(f"memory soak: {args.sessions} sessions, {args.turns} turns, "
          f"{args.transcript_mb:g} MB transcripts, budget {args.memory_high_mb:g} MB, "
          f"{args.workers} workers, baseline anon {baseline / MB:.1f} MB", flush=True)
    limit = probe.limit()
    print(f"probe: limit {'none' if limit is None else f'{limit.limit_bytes / MB:.0f} MB'}"
          f" ({'cgroup v2 anon' if limit and limit.v2_dir else 'RssAnon'} measured)",
          flush=True)
    try:
        with PeakSampler(probe) as sampler, ThreadPoolExecutor(args.workers) as pool:
            for future in [pool.submit(turn, i)
                           for i in schedule(args.sessions, args.turns, args.seed)]:
                future.result()
        stats = cache.statistics().get()
        cache.close_all().get()
    finally:
        ref.stop()
    elapsed = time.monotonic() - start
    budget = stats.budget_bytes or 0
    return {
        "sessions": args.sessions,
        "turns_planned": args.turns,
        "turns_run": counts["turns"],
        "stopped_early": counts["turns"] < args.turns,
        "seconds": round(elapsed, 2),
        "transcript_mb": args.transcript_mb,
        "budget_mb": round(budget / MB, 1),
        "baseline_anon_mb": round(baseline / MB, 1),
        "peak_anon_mb": round(sampler.peak / MB, 1),
        "peak_over_budget_mb": round((sampler.peak - budget) / MB, 1),
        "peak_vs_budget": round(sampler.peak / budget, 3) if budget else None,
        "final_anon_mb": round(probe.anon_bytes() / MB, 1),
        "samples": sampler.samples,
        "hits": counts["hits"],
        "misses": counts["misses"],
        "pressure_checks": counts["pressure_checks"],
        "evictions": stats.evictions,
        "cached_at_end": stats.size,
    }


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
