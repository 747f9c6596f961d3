"""Long polling: an update is acknowledged only once its message is durable, exactly once."""

from __future__ import annotations

import logging
import threading

import pytest

from hermes_actors.adapters.telegram import BotClient
from hermes_actors.adapters.telegram.poller import UpdatePoller
from hermes_actors.errors import HermesActorsError, StoreError, StoreRejectedError

from .fake_bot_api import TOKEN, group, private


@pytest.fixture
def client(bot_api):
    made = BotClient(TOKEN, bot_api.url)
    yield made
    made.close()


class Pauses:
    """An injected backoff wait: records each pause and returns at once."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    def __call__(self, stopped: threading.Event, seconds: float) -> bool:
        self.asked.append(seconds)
        return stopped.is_set()


class TestAcknowledgement:
    """The offset moves past an update only after ``submit`` returned."""

    def test_offset_advances_after_submit_and_the_next_poll_confirms(self, client, bot_api):
        first = bot_api.message(private(), "one")
        second = bot_api.message(private(), "two")
        seen_offsets = []

        def submit(event):
            # while a message is being made durable, nothing about it has been acknowledged
            seen_offsets.append(bot_api.acknowledged())
            texts.append(event.text)

        texts: list[str] = []
        poller = UpdatePoller(client, submit, poll_timeout=1)
        assert poller.poll_once() == 2
        assert texts == ["one", "two"] and seen_offsets == [0, 0]
        assert poller.offset == second + 1
        assert poller.poll_once() == 0  # this poll carries the offset: both confirmed
        assert bot_api.acknowledged() == second + 1 > first
        assert bot_api.pending == []

    def test_a_store_failure_acknowledges_nothing_and_the_update_comes_again(self, client,
                                                                             bot_api):
        update = bot_api.message(private(), "retry me")
        calls: list[str] = []

        def submit(event):
            calls.append(event.text)
            if len(calls) == 1:
                raise StoreError("disk full")

        pauses = Pauses()
        poller = UpdatePoller(client, submit, poll_timeout=1, wait=pauses)
        with pytest.raises(StoreError):
            poller.poll_once()
        assert poller.offset is None and bot_api.acknowledged() == 0
        assert poller.poll_once() == 1  # delivered again by the server, submitted again
        assert calls == ["retry me", "retry me"] and poller.offset == update + 1

    def test_a_message_the_store_rejects_is_logged_and_acknowledged(self, client, bot_api,
                                                                    caplog):
        """Its retry would be rejected the same way, and every later update waits behind
        it: it is skipped, named by its update id, and the next messages go on."""
        rejected = bot_api.message(private(), "cannot be stored")
        after = bot_api.message(private(), "after it")
        texts: list[str] = []

        def submit(event):
            if event.text == "cannot be stored":
                raise StoreRejectedError("write rejected by state.db: UnicodeEncodeError")
            texts.append(event.text)

        poller = UpdatePoller(client, submit, poll_timeout=1)
        with caplog.at_level(logging.ERROR, logger="hermes_actors.telegram"):
            assert poller.poll_once() == 2
        assert texts == ["after it"] and poller.offset == after + 1
        assert poller.poll_once() == 0 and bot_api.acknowledged() == after + 1
        [record] = [r for r in caplog.records if "telegram_rejected" in r.getMessage()]
        assert f"update_id={rejected}" in record.getMessage()
        assert "UnicodeEncodeError" in record.getMessage()

    def test_half_an_emoji_is_stored_and_answered(self, client, bot_api, make_harness):
        """A text cut inside a surrogate pair reaches a real gateway (U+FFFD for the half)
        and does not hold up the message after it."""
        h = make_harness()
        broken = bot_api.message(private(), "broken \ud83d")
        poller = UpdatePoller(client, h.gw.submit, poll_timeout=1)
        assert poller.poll_once() == 1 and poller.offset == broken + 1
        h.idle()
        after = bot_api.message(private(), "after it")
        assert poller.poll_once() == 1 and poller.offset == after + 1
        h.idle()
        assert h.texts() == ["echo: broken \ufffd", "echo: after it"]

    def test_a_stopped_gateway_ends_the_loop_without_acknowledging(self, client, bot_api):
        bot_api.message(private(), "too late")

        def submit(event):
            raise HermesActorsError("the gateway is not running")

        poller = UpdatePoller(client, submit, poll_timeout=1)
        poller.run()  # returns: the gateway no longer accepts
        assert poller.finished.is_set() and poller.offset is None
        assert len(bot_api.pending) == 1

    def test_poll_failures_back_off(self, client, bot_api):
        pauses = Pauses()
        done = threading.Event()

        def submit(event):
            done.set()

        poller = UpdatePoller(client, submit, poll_timeout=1, wait=pauses)
        bot_api.message(private(), "after the outage")
        thread = threading.Thread(target=poller.run, daemon=True)
        bot_api.fail("getUpdates", 502, "Bad Gateway", times=1)
        thread.start()
        assert done.wait(30)
        poller.stop()
        thread.join(30)
        assert pauses.asked[:1] == [1.0]


class TestFiltering:
    """Other chats are dropped when ``allowed_chats`` is set, logged once per chat."""

    def test_allowed_chats(self, client, bot_api, caplog):
        bot_api.message(private(1), "stranger")
        bot_api.message(private(1), "stranger again")
        bot_api.message(group(-200), "another stranger")
        last = bot_api.message(private(42), "friend")
        submitted: list[str] = []
        poller = UpdatePoller(client, lambda e: submitted.append(e.text), poll_timeout=1,
                              allowed_chats=["42"])
        with caplog.at_level(logging.INFO, logger="hermes_actors.telegram"):
            poller.poll_once()
        assert submitted == ["friend"] and poller.offset == last + 1
        dropped = [r.getMessage() for r in caplog.records if "telegram_dropped" in r.getMessage()]
        assert len(dropped) == 2
        assert "chat_id=1 " in dropped[0] and "chat_id=-200 " in dropped[1]

    def test_updates_without_a_message_for_the_agent_are_acknowledged(self, client, bot_api):
        sticker = {"file_id": "s", "file_unique_id": "u", "type": "regular", "width": 1,
                   "height": 1, "is_animated": False, "is_video": False}
        update = bot_api.message(private(), None, sticker=sticker)
        submitted: list = []
        poller = UpdatePoller(client, submitted.append, poll_timeout=1)
        poller.poll_once()
        assert submitted == [] and poller.offset == update + 1


class TestLeaseDeadline:
    """On a cluster node the poller runs only until its adapter lease's local deadline
    (``time_left``): each long poll ends before it, nothing is submitted after it, and the
    loop ends there (the updates stay unacknowledged for the next holder)."""

    def test_each_poll_ends_before_the_deadline(self, client, bot_api):
        left = [9.5, 2.9, 1.6, 1.4]
        poller = UpdatePoller(client, lambda e: None, poll_timeout=30,
                              time_left=lambda: left[0])
        for _ in range(len(left)):
            bot_api.message(private(), "x")  # so each poll returns at once
            poller.poll_once()
            left.pop(0)
        asked = [int(c.params["timeout"]) for c in bot_api.of("getUpdates")]
        # whole seconds, ending half a second before the deadline at least; with less
        # than 1.5 s left no poll (the poller waits for a renewal or the deadline)
        assert asked == [9, 2, 1]

    def test_nothing_is_submitted_once_the_deadline_passed(self, client, bot_api):
        bot_api.message(private(), "late")
        left = [5.0]
        submitted: list[str] = []

        def get_updates_then_expire(offset, timeout):
            updates = BotClient.get_updates(client, offset, timeout)
            left[0] = 0.0  # the deadline passes while the poll was out (a pause)
            return updates

        client.get_updates = get_updates_then_expire  # type: ignore[method-assign]
        poller = UpdatePoller(client, lambda e: submitted.append(e.text), poll_timeout=1,
                              time_left=lambda: left[0])
        poller.run()  # ends at the deadline instead of polling again
        assert submitted == [] and poller.offset is None and poller.finished.is_set()
        assert len(bot_api.of("getUpdates")) == 1 and bot_api.acknowledged() == 0
