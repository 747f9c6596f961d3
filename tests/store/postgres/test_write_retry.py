"""A server restart (a second or two with the port closed) is ridden out by the writer's
capped exponential backoff, not turned into an outage by three immediate retries
(issue 37 §3); a server that stays away is declared unavailable within the budget."""

from __future__ import annotations

import pytest

from hermes_actors.errors import StoreUnavailableError
from hermes_actors.store.backends.postgres import writer as writer_module
from hermes_actors.store.backends.postgres.connection import Server
from hermes_actors.store.backends.postgres.writer import (
    RETRY_BUDGET,
    RETRY_FIRST_DELAY,
    RETRY_MAX_DELAY,
    Backoff,
    Writer,
)
from hermes_actors.store.ops import PutRouting
from hermes_actors.store.routing import NO_FLAGS


class FakeClock:
    """A clock that only the fake sleep moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def backoff(self, rand=lambda: 0.5) -> Backoff:
        return Backoff(sleep=self.sleep, clock=lambda: self.now, rand=rand)


class RestartingServer(Server):
    """A server whose port is closed until the fake clock reaches ``back_at`` seconds."""

    def __init__(self, dsn: str, clock: FakeClock, back_at: float) -> None:
        super().__init__(dsn)
        self.clock = clock
        self.back_at = back_at
        self.refused = 0

    def connect(self, *, writer: bool = False):
        if self.clock.now < self.back_at:
            self.refused += 1
            raise StoreUnavailableError("cannot connect: connection refused")
        return super().connect(writer=writer)


def _put(key: str) -> PutRouting:
    return PutRouting(key, "{}", *NO_FLAGS)


def test_the_pauses_grow_to_the_cap_and_fit_in_the_budget():
    clock = FakeClock()
    backoff = clock.backoff(rand=lambda: 1.0)  # the longest pauses jitter allows
    while backoff.pause():
        pass
    assert clock.sleeps[0] == pytest.approx(RETRY_FIRST_DELAY)
    assert clock.sleeps == sorted(clock.sleeps)
    assert max(clock.sleeps) == pytest.approx(RETRY_MAX_DELAY)
    assert sum(clock.sleeps) <= RETRY_BUDGET
    assert sum(clock.sleeps) > RETRY_BUDGET - RETRY_MAX_DELAY  # the budget was used
    assert 5.0 <= RETRY_BUDGET <= 10.0


def test_jitter_spreads_the_pauses():
    low, high = FakeClock(), FakeClock()
    low.backoff(rand=lambda: 0.0).pause()
    high.backoff(rand=lambda: 1.0).pause()
    assert low.sleeps[0] == pytest.approx(RETRY_FIRST_DELAY / 2)
    assert high.sleeps[0] == pytest.approx(RETRY_FIRST_DELAY)


def test_a_two_second_restart_is_ridden_out(pg, postgres_dsn):  # pg: the schema
    clock = FakeClock()
    server = RestartingServer(postgres_dsn, clock, back_at=2.0)
    writer = Writer(server, backoff=clock.backoff)
    try:
        assert writer.apply_group([[_put("a")], [_put("b")]]) == [(True, [None]),
                                                                  (True, [None])]
        assert writer.apply_group([[_put("c")]]) == [(True, [None])]
    finally:
        writer.close()
    assert server.refused > 3  # more than the three immediate attempts of before
    assert 2.0 <= sum(clock.sleeps) < RETRY_BUDGET


def test_a_server_that_stays_away_fails_every_list_within_the_budget():
    clock = FakeClock()
    server = RestartingServer("postgresql://u@127.0.0.1:1/db", clock, back_at=1e9)
    writer = Writer(server, backoff=clock.backoff)
    outcomes = writer.apply_group([[_put("a")], [_put("b")], [_put("c")]])
    assert [ok for ok, _ in outcomes] == [False] * 3
    assert all(isinstance(error, StoreUnavailableError) for _, error in outcomes)
    assert sum(clock.sleeps) <= RETRY_BUDGET
    refused = server.refused
    assert writer.apply_group([[_put("d")]])[0][0] is False  # a new group: a new budget
    assert server.refused > refused + 1


def test_no_constant_of_immediate_attempts_is_left():
    assert not hasattr(writer_module, "WRITE_ATTEMPTS")
