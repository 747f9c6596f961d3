"""The memory soak's engine: sessions with large transcripts churning through the agent cache.

Shared by ``scripts/memory_soak.py`` (a standalone tool with its own command line) and the
``memory`` benchmark scenario. Each turn checks an agent out of an ``AgentCacheActor``; on a
miss a fresh fake agent "rebuilds its history" (about ``transcript_mb`` of message dicts with
unique strings, so the heap really grows); every turn appends a little. After each turn the
worker calls ``check_pressure()`` when the transcript grew past the documented threshold (a
rebuild always does), and every ``housekeeping_every`` turns ``sweep_memory()`` runs as
housekeeping would. The LRU cap is the number of sessions, so only the memory pass bounds
the cache. A sampler records the peak anonymous memory measured by the real
:class:`~hermes_actors.runtime.memory.MemoryProbe`.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hermes_actors.config import AgentCacheConfig
from hermes_actors.runtime.cache import AgentCacheActor
from hermes_actors.runtime.clock import SystemClock
from hermes_actors.runtime.eviction import should_check_pressure
from hermes_actors.runtime.memory import MB, MemoryProbe

__all__ = ["MESSAGE_BYTES", "PeakSampler", "TranscriptAgent", "run_soak", "schedule"]

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


def run_soak(args: Any, progress: Callable[[str], None] = print) -> dict:
    """Run the churn described by ``args`` (the script's options); returns the result.

    ``progress`` receives the progress lines (the script prints them).
    """
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
            progress(f"[{done:>6}/{args.turns}] {time.monotonic() - start:6.1f}s  anon "
                  f"{sampler.sample() / MB:6.1f} MB  peak {sampler.peak / MB:6.1f} MB"
                  f"  cached {s.size:>4}  evictions {s.evictions}")

    progress(f"memory soak: {args.sessions} sessions, {args.turns} turns, "
          f"{args.transcript_mb:g} MB transcripts, budget {args.memory_high_mb:g} MB, "
          f"{args.workers} workers, baseline anon {baseline / MB:.1f} MB")
    limit = probe.limit()
    progress(f"probe: limit {'none' if limit is None else f'{limit.limit_bytes / MB:.0f} MB'}"
          f" ({'cgroup v2 anon' if limit and limit.v2_dir else 'RssAnon'} measured)")
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
