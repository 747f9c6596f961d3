"""The housekeeping watcher: it runs a pass when one is due, and never spins on a due pass
that its tick did not run."""

from __future__ import annotations

import threading

from hermes_actors.config.sections import HousekeepingConfig
from hermes_actors.runtime.housekeeping import HousekeepingSchedule, Watcher
from hermes_actors.testing import FakeClock, wait_until


def test_a_tick_that_runs_no_pass_is_not_repeated_at_once():
    # the gateway's tick returns without a pass while it stops: the pass is rescheduled
    clock = FakeClock()
    schedule = HousekeepingSchedule(HousekeepingConfig(first_delay=0, interval=3600),
                                    clock.monotonic())
    due = schedule.next_pass
    ticks, first = [], threading.Event()

    def tick() -> None:  # no pass_done: what a stopping gateway's tick does
        ticks.append(clock.monotonic())
        first.set()

    watcher = Watcher(schedule, clock, tick)
    watcher.start()
    try:
        assert first.wait(5)
        # the watcher reschedules on its own thread right after the tick returns
        wait_until(lambda: schedule.next_pass > due, 5, message="the rescheduled pass")
        assert schedule.next_pass == due + 3600
        assert len(ticks) == 1
    finally:
        watcher.stop()


def test_a_failed_tick_is_rescheduled_too():
    clock = FakeClock()
    schedule = HousekeepingSchedule(HousekeepingConfig(first_delay=0, interval=60),
                                    clock.monotonic())
    failed = threading.Event()

    def tick() -> None:
        failed.set()
        raise RuntimeError("the pass broke")

    watcher = Watcher(schedule, clock, tick)
    watcher.start()
    try:
        assert failed.wait(5)
        wait_until(lambda: schedule.next_pass > clock.monotonic(), 5,
                   message="the rescheduled pass")
        assert schedule.next_pass == clock.monotonic() + 60
    finally:
        watcher.stop()
