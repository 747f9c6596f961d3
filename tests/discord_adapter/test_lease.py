"""The Discord Gateway under the pull-adapter lease (``PullAdapters``, no database): one
connection per bot, open from the gain of ``discord:<bot id>`` until its loss or its local
deadline, against the fake Discord with the real bridge."""

from __future__ import annotations

import time

import pytest

from hermes_actors.adapters.discord import DiscordAdapter
from hermes_actors.config import DiscordConfig
from hermes_actors.runtime.pull_adapters import PullAdapters, pull_adapters

from .fake_discord import BOT_ID, TOKEN, FakeDiscord

pytestmark = pytest.mark.discord

LEASE = f"discord:{BOT_ID}"


class Deadlines:
    """The lease manager's side: each (name, epoch)'s local deadline, on the real clock."""

    def __init__(self) -> None:
        self.until: dict[tuple[str, int], float] = {}

    def time_left(self, name: str, epoch: int) -> float:
        return max(0.0, self.until.get((name, epoch), 0.0) - time.monotonic())


def test_the_gateway_is_open_while_the_lease_is_held():
    fake = FakeDiscord()
    adapter = DiscordAdapter(DiscordConfig(api_base_url=fake.url), TOKEN)
    try:
        adapter.connect()
        submitted: list[str] = []

        def submit(event):
            submitted.append(event.text)
            return event.event_id

        pulls = PullAdapters(pull_adapters([adapter, object()]), submit)
        assert pulls.adapters == {LEASE: adapter}
        deadlines = Deadlines()
        pulls.bind(deadlines.time_left)
        assert fake.live() == []  # connected for REST only: no Gateway before the lease
        deadlines.until[(LEASE, 1)] = time.monotonic() + 60
        pulls.gained(LEASE, 1)
        fake.wait_identified()
        fake.message("500", "one")
        fake.wait_for(lambda: submitted == ["one"])
        pulls.lost(LEASE, 1, "released")  # returns once the Gateway is closed
        assert fake.live() == [] and adapter.poller.stopped
        deadlines.until[(LEASE, 2)] = time.monotonic() + 3.0
        pulls.gained(LEASE, 2)
        fake.wait_identified()
        fake.message("500", "two")
        fake.wait_for(lambda: submitted == ["one", "two"])
        # no renewal: the watchdog closes the Gateway at the local deadline
        fake.wait_for(lambda: not fake.live() and adapter.poller.stopped, timeout=10)
        assert time.monotonic() >= deadlines.until[(LEASE, 2)]
        assert len(fake.sessions) == 2  # one connection at a time, one per tenure
        pulls.lost(LEASE, 2, "expired")
    finally:
        adapter.close()
        fake.close()
