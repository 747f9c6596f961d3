"""Shared pieces of the scenarios: progress lines, memory readings, work directories, a
gateway with a recording adapter, and a closed-loop message driver.

Imported only in (gevent-patched) children, after patching.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import math
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "Progress",
    "RecordingAdapter",
    "Workers",
    "anon_bytes",
    "closed_loop",
    "make_gateway",
    "percentile",
    "settle_memory",
    "scratch_dir",
]


class Progress:
    """Progress lines on stderr, at most one a second (overwritten in place on a terminal)."""

    def __init__(self, label: str, every: float = 1.0) -> None:
        self.label = label
        self.every = every
        self._last = 0.0
        self._tty = sys.stderr.isatty()
        self._shown = False

    def update(self, text: str, *, force: bool = False) -> None:
        """Show ``text`` if a second passed since the last line (or ``force``)."""
        now = time.monotonic()
        if not force and now - self._last < self.every:
            return
        self._last = now
        line = f"  [{self.label}] {text}"
        if self._tty:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
        self._shown = True

    def done(self) -> None:
        """End the in-place line."""
        if self._tty and self._shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
        self._shown = False


def anon_bytes() -> int:
    """This process's anonymous resident memory (``RssAnon`` of ``/proc/self/status``)."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def settle_memory() -> None:
    """Collect garbage and give freed arenas back to the OS before a memory reading."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of already sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values), max(1, math.ceil(q * len(sorted_values)))) - 1
    return sorted_values[index]


@contextlib.contextmanager
def scratch_dir(base: str | None, name: str) -> Iterator[Path]:
    """A fresh directory under ``base`` (default: the system temp dir), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=f"hermes-bench-{name}-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _adapter_class() -> type:
    from hermes_actors.adapters.memory import InMemoryAdapter

    class _Recording(InMemoryAdapter):
        """An in-memory adapter that also calls ``on_sent(target, text, monotonic_time)``."""

        def __init__(self, platform: str, on_sent: Callable[..., None] | None) -> None:
            super().__init__(platform)
            self.on_sent = on_sent

        def send(self, target, text):
            result = super().send(target, text)
            if result.success and self.on_sent is not None:
                self.on_sent(target, text, time.perf_counter())
            return result

    return _Recording


def RecordingAdapter(platform: str = "telegram",  # noqa: N802 - a class made on demand
                     on_sent: Callable[..., None] | None = None) -> Any:
    """An ``InMemoryAdapter`` for ``platform`` that reports every successful send."""
    return _adapter_class()(platform, on_sent)


def make_gateway(home: Path, *, adapters: list[Any], agent_factory: Callable[[Any], Any],
                 **config: Any) -> Any:
    """A started :class:`~hermes_actors.Gateway` with ``config`` overrides (no env but
    ``HERMES_STORE_SYNCHRONOUS``, so one run can measure each durability level), with
    the collector settings of the standalone process (``hermes_actors.process.heap``)."""
    from hermes_actors import Gateway, load_config
    from hermes_actors.process.heap import freeze_startup_heap, tune_gc

    tune_gc()
    level = os.environ.get("HERMES_STORE_SYNCHRONOUS")
    env = {"HERMES_STORE_SYNCHRONOUS": level} if level else {}
    gw = Gateway(home, config=load_config(config, env=env), agent_factory=agent_factory,
                 adapters=adapters)
    gw.start()
    freeze_startup_heap()
    return gw


def closed_loop(gw: Any, adapter: Any, sources: list[Any], messages: int, *,
                submitters: int = 32, progress: Progress | None = None,
                timeout: float = 600.0) -> tuple[float, int]:
    """Each session sends its next message when the reply to the previous one arrived.

    ``submitters`` concurrent senders (like inbound connections) take ready sessions from
    one queue; every session sends ``messages`` messages, each answered by one turn whose
    reply starts with ``echo: ``. Returns the seconds from the first submit to the last
    reply, and how many other sends (notices) were seen meanwhile.
    """
    from hermes_actors import MessageEvent

    total = len(sources) * messages
    left = [messages] * len(sources)
    index = {src.chat_id: i for i, src in enumerate(sources)}
    ready: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    replies, notices = [0], [0]
    finished = threading.Event()

    def on_sent(target, text, _t) -> None:
        if not text.startswith("echo: "):  # a notice, not the turn's reply
            notices[0] += 1
            return
        i = index[target.chat_id]
        left[i] -= 1
        replies[0] += 1
        if left[i] > 0:
            ready.put(i)
        if replies[0] >= total:
            finished.set()

    adapter.on_sent = on_sent

    def submitter() -> None:
        while True:
            i = ready.get()
            if i is None:
                return
            gw.submit(MessageEvent(source=sources[i], text=f"message {left[i]} of {i}"))

    for i in range(len(sources)):
        ready.put(i)
    started = time.perf_counter()
    workers = [threading.Thread(target=submitter, daemon=True) for _ in range(submitters)]
    for w in workers:
        w.start()
    deadline = started + timeout
    while not finished.wait(0.5):
        if progress is not None:
            progress.update(f"{replies[0]:,}/{total:,} turns, {time.perf_counter() - started:.1f} s")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"only {replies[0]} of {total} replies after {timeout:.0f} s")
    elapsed = time.perf_counter() - started
    for _ in workers:
        ready.put(None)
    adapter.on_sent = None
    return elapsed, notices[0]


class Workers:
    """``count`` daemon threads, each running ``work(index)``, started at once;
    :meth:`join` waits for all of them and re-raises the first exception one raised."""

    def __init__(self, work: Callable[[int], None], count: int) -> None:
        self._errors: list[BaseException] = []

        def run(index: int) -> None:
            try:
                work(index)
            except BaseException as exc:  # noqa: BLE001 - re-raised by join()
                self._errors.append(exc)

        self._threads = [threading.Thread(target=run, args=(i,), daemon=True)
                         for i in range(count)]
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        for thread in self._threads:
            thread.join()
        if self._errors:
            raise self._errors[0]
