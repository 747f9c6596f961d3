"""Housekeeping timing (§10): when the next pass and the next routing prune are due.

The schedule is pure (it reads no clock; callers pass ``now``), and the watcher that sleeps
between passes runs only with the real clock: with an injected clock, tests drive passes
themselves through ``Gateway.housekeeping_tick()`` and no background thread races them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from hermes_actors._green import spawn
from hermes_actors.config import HousekeepingConfig

__all__ = ["HousekeepingSchedule", "Watcher"]

log = logging.getLogger("hermes_actors.housekeeping")


class HousekeepingSchedule:
    """Next-due times of the pass and of the prune, from a monotonic origin."""

    def __init__(self, settings: HousekeepingConfig, start: float) -> None:
        self._settings = settings
        #: Monotonic time the next pass is due.
        self.next_pass = start + settings.first_delay
        #: Monotonic time the next routing prune is due.
        self.next_prune = start + settings.first_delay

    def pass_done(self, now: float) -> None:
        """Schedule the pass after one that ran at ``now``."""
        self.next_pass = now + self._settings.interval

    def take_prune(self, now: float) -> bool:
        """True (and rescheduled) when a prune is due at ``now``."""
        if now < self.next_prune:
            return False
        self.next_prune = now + self._settings.prune_interval
        return True


class Watcher:
    """A daemon thread that runs ``tick`` whenever the schedule says a pass is due."""

    def __init__(self, schedule: HousekeepingSchedule, clock, tick: Callable[[], None]) -> None:
        self._schedule = schedule
        self._clock = clock
        self._tick = tick
        self._stop = threading.Event()

    def start(self) -> None:
        """Start watching (without waiting for the watcher to run: see ``hermes_actors._green``)."""
        spawn(self._run, "housekeeping")

    def stop(self) -> None:
        """Stop after the current pass."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            delay = max(0.0, self._schedule.next_pass - self._clock.monotonic())
            if self._stop.wait(delay):
                return
            due = self._schedule.next_pass
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - the watcher outlives a failed pass
                log.exception("housekeeping pass failed")
            if self._schedule.next_pass <= due:  # the tick did not run a pass (the gateway
                # is stopping) or failed before it rescheduled: never spin on a due pass
                self._schedule.pass_done(self._clock.monotonic())
