"""Raw pykka baselines under the same concurrency backend (greenlets, in a patched child).

:func:`ask_latencies` offers asks to one echo actor at a fixed rate, the way the latency
scenario offers messages to the gateway; :func:`idle_actors` starts bare actors and reads
what each costs in memory and start time. Both are the floor an actor runtime on pykka can
reach on this machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import pykka

from benchmarks.util import anon_bytes, settle_memory

__all__ = ["IdleActors", "ask_latencies", "ask_rate", "idle_actors", "offered_load"]


class _Echo(pykka.ThreadingActor):
    use_daemon_thread = True

    def on_receive(self, message):
        return message


class _Idle(pykka.ThreadingActor):
    use_daemon_thread = True


def offered_load(rate: float, duration: float, send: Callable[[int], None], start: float,
                 *, senders: int = 16) -> int:
    """Call ``send(i)`` for ``i`` in ``range(rate * duration)`` at ``start + i / rate``.

    ``senders`` threads (greenlets) take the next index, sleep until its scheduled time and
    send. Latencies are taken from the scheduled times, so a sender that falls behind does
    not hide the queueing it caused. Returns the number of sends.
    """
    count = int(rate * duration)
    lock = threading.Lock()
    nxt = [0]

    def sender() -> None:
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= count:
                return
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            send(i)

    workers = [threading.Thread(target=sender, daemon=True) for _ in range(senders)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return count


def ask_latencies(rate: float, duration: float) -> list[float]:
    """Seconds from each ask's scheduled time to its answer, sorted."""
    ref = _Echo.start()
    latencies: list[float] = []
    start = time.perf_counter() + 0.05

    def send(i: int) -> None:
        ref.ask(i)
        latencies.append(time.perf_counter() - (start + i / rate))

    offered_load(rate, duration, send, start)
    ref.stop()
    return sorted(latencies)


def ask_rate(asks: int, *, askers: int = 32) -> float:
    """Asks answered per second by one echo actor, ``askers`` threads (greenlets) asking
    back to back (as the throughput scenario's submitters do), best of three passes."""
    if asks < askers:
        raise ValueError(f"need at least {askers} asks, not {asks}")
    each = asks // askers
    ref = _Echo.start()

    def asker() -> None:
        for i in range(each):
            ref.ask(i)

    try:
        best = 0.0
        for _ in range(3):
            started = time.perf_counter()
            workers = [threading.Thread(target=asker, daemon=True) for _ in range(askers)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            best = max(best, each * askers / (time.perf_counter() - started))
        return best
    finally:
        ref.stop()


class IdleActors(NamedTuple):
    """What :func:`idle_actors` measured."""

    #: Anonymous memory per idle actor, bytes.
    bytes_per_actor: float
    #: Start cost per actor, microseconds.
    start_us: float


def idle_actors(count: int) -> IdleActors:
    """Start ``count`` bare actors; memory and start time per actor; stop them."""
    settle_memory()
    before = anon_bytes()
    started = time.perf_counter()
    refs = [_Idle.start() for _ in range(count)]
    elapsed = time.perf_counter() - started
    time.sleep(0.05)  # let every actor loop reach its idle wait
    settle_memory()
    after = anon_bytes()
    for ref in refs:
        ref.stop(block=True, timeout=10)
    del refs
    settle_memory()
    return IdleActors((after - before) / count, elapsed / count * 1e6)
