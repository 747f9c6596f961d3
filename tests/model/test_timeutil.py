"""``model.timeutil``: the real clock, and time as the project keeps it."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from hermes_actors.model.timeutil import SystemClock, from_epoch, isoformat, parse_timestamp
from hermes_actors.runtime.clock import SystemClock as RuntimeSystemClock
from hermes_actors.store.core import SystemClock as StoreSystemClock


class TestSystemClock:
    def test_one_clock_for_the_runtime_and_the_store(self):
        assert RuntimeSystemClock is SystemClock and StoreSystemClock is SystemClock

    def test_it_reads_the_time_modules_own_functions(self):
        clock = SystemClock()
        assert clock.time is time.time and clock.monotonic is time.monotonic
        before = time.time()
        assert before <= clock.time() <= time.time()
        assert clock.monotonic() <= clock.monotonic()

    def test_sleep_waits(self):
        clock = SystemClock()
        start = clock.monotonic()
        clock.sleep(0.01)
        assert clock.monotonic() - start >= 0.01


class TestTimes:
    def test_epoch_round_trip_is_aware_utc(self):
        when = from_epoch(1_700_000_000.25)
        assert when.tzinfo is timezone.utc and when.timestamp() == 1_700_000_000.25
        assert isoformat(when) == "2023-11-14T22:13:20.250000+00:00"
        assert parse_timestamp(isoformat(when)) == when

    def test_other_offsets_and_epoch_numbers_become_utc(self):
        parsed = parse_timestamp("2023-11-14T23:13:20+01:00")
        assert parsed == datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)
        assert parsed.tzinfo is timezone.utc
        assert parse_timestamp(1_700_000_000) == from_epoch(1_700_000_000)

    def test_malformed_values_are_none(self):
        for value in (None, True, "", "  ", "yesterday", [], 1e30):
            assert parse_timestamp(value) is None
