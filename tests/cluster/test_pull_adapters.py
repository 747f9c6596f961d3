"""``PullAdapters`` (no database): the Telegram poller runs from the gain of the adapter's
lease until its loss or its local deadline, whichever comes first, against the fake Bot
API; a stopped poller is started again at the next gain."""

from __future__ import annotations

import time

import pytest
from telegram_adapter.fake_bot_api import TOKEN, FakeBotApi, private

from hermes_actors.adapters.telegram import TelegramAdapter
from hermes_actors.config import TelegramConfig
from hermes_actors.runtime.pull_adapters import PullAdapters, pull_adapters
from hermes_actors.testing import wait_until

LEASE = "telegram:" + TOKEN.partition(":")[0]


class Deadlines:
    """The lease manager's side: the local deadline of each (name, epoch), set by the test
    on the real monotonic clock."""

    def __init__(self) -> None:
        self.until: dict[tuple[str, int], float] = {}

    def time_left(self, name: str, epoch: int) -> float:
        return max(0.0, self.until.get((name, epoch), 0.0) - time.monotonic())


@pytest.fixture
def setup():
    api = FakeBotApi()
    # one-second polls: a poller on a thread is stopped once its poll returns
    adapter = TelegramAdapter(TelegramConfig(api_base_url=api.url, poll_timeout=1), TOKEN)
    adapter.connect()
    submitted: list[str] = []
    pulls = PullAdapters(pull_adapters([adapter, object()]), lambda e: submitted.append(e.text))
    deadlines = Deadlines()
    pulls.bind(deadlines.time_left)
    yield api, adapter, pulls, deadlines, submitted
    adapter.close()
    api.close()


class TestPullAdapters:
    def test_only_adapters_that_pull_get_a_lease(self, setup):
        _, adapter, pulls, _, _ = setup
        assert pulls.adapters == {LEASE: adapter}

    def test_polls_from_gain_to_loss_then_again_at_the_next_gain(self, setup):
        api, adapter, pulls, deadlines, submitted = setup
        deadlines.until[(LEASE, 1)] = time.monotonic() + 60
        pulls.gained(LEASE, 1)
        api.message(private(), "one")
        wait_until(lambda: submitted == ["one"], message="the first update")
        pulls.lost(LEASE, 1, "released")
        assert adapter.poller is not None and adapter.poller.finished.is_set()  # stopped
        polls = len(api.of("getUpdates"))
        api.message(private(), "two")  # nobody polls it now
        assert api.polling == 0 and len(api.of("getUpdates")) == polls
        assert pulls.statistics().held == {}
        deadlines.until[(LEASE, 2)] = time.monotonic() + 60
        pulls.gained(LEASE, 2)
        wait_until(lambda: submitted == ["one", "two"], message="the second update")
        assert pulls.statistics().held == {LEASE: 2}
        assert (pulls.statistics().gained, pulls.statistics().lost) == (2, 1)
        pulls.lost(LEASE, 2, "halted")

    def test_the_local_deadline_stops_the_poller_without_a_loss_reported(self, setup):
        api, adapter, pulls, deadlines, _ = setup
        # No renewal comes (a stuck database, a pause): the deadline stays 2.5 s away.
        stop_by = deadlines.until[(LEASE, 1)] = time.monotonic() + 2.5
        pulls.gained(LEASE, 1)
        api.wait_for(lambda: api.polling == 1)
        # the poller ends its loop there, and the watchdog ends the tenure
        wait_until(lambda: adapter.poller.finished.is_set() and not pulls.statistics().held,
                   message="the end of the poller and of its tenure")
        # it ended by the deadline: its last poll was shortened to end before it (a poll
        # on a thread cannot be cut; under gevent the watchdog cuts it at the deadline)
        assert time.monotonic() <= stop_by + 0.5
        assert api.polling == 0
        last = api.of("getUpdates")[-1]
        assert last.at < stop_by
        pulls.lost(LEASE, 1, "expired")  # the manager's round reports it later: no effect
        assert pulls.statistics().lost == 1

    def test_a_renewal_answered_after_the_deadline_starts_polling_again(self, setup):
        api, adapter, pulls, deadlines, submitted = setup
        deadlines.until[(LEASE, 1)] = time.monotonic() + 2.0
        pulls.gained(LEASE, 1)
        first = adapter.poller
        wait_until(first.finished.is_set, message="the poller's end")  # by the deadline
        # The round's renewal, sent before the deadline, is answered now: the lease is
        # held again, under the same epoch, until a later deadline.
        deadlines.until[(LEASE, 1)] = time.monotonic() + 60
        api.message(private(), "after the late renewal")
        wait_until(lambda: submitted == ["after the late renewal"], message="the update")
        assert adapter.poller is not first and pulls.statistics().held == {LEASE: 1}
        pulls.lost(LEASE, 1, "released")
        assert adapter.poller.finished.is_set()
