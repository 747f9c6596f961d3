"""The database server goes away under load and comes back: a real ``run`` process on a
PostgreSQL server of the test's own, stopped and started again while messages keep coming.

Every message the gateway accepted (HTTP 202) is answered, none twice, and the gateway
serves again by itself; what it could not take while the server was down it refused (503),
so the client knew to send it again.
"""

from __future__ import annotations

import threading

import pytest

from hermes_actors.testing.postgres import start_embedded_server

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

CHATS = [str(n) for n in range(1, 6)]


@pytest.fixture
def own_server():
    """A server this test may stop (never the shared one)."""
    server = start_embedded_server()
    yield server
    server.stop()


class Sender(threading.Thread):
    """Posts numbered messages round the chats until told to stop; a refused message is
    sent again (as a client would), so each number is accepted exactly once."""

    def __init__(self, gateway) -> None:
        super().__init__(daemon=True)
        self.gateway = gateway
        self.accepted: dict[str, tuple[str, str]] = {}  # event id -> (chat, text)
        self.refused = 0
        self.halt = threading.Event()
        self.count = threading.Condition()
        self.failure: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.halt.is_set():
                chat, text = CHATS[n % len(CHATS)], f"message {n}"
                status, _, body = self.gateway.request(
                    "POST", "/v1/messages", {"chat_id": chat, "text": text}, timeout=30)
                if status == 503:
                    self.refused += 1
                    self.halt.wait(0.05)  # a client's pause before it tries again
                    continue
                assert status == 202, (status, body)
                with self.count:
                    self.accepted[body["event_id"]] = (chat, text)
                    self.count.notify_all()
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failure = exc

    def wait_for(self, accepted: int, timeout: float = 60) -> None:
        with self.count:
            assert self.count.wait_for(lambda: len(self.accepted) >= accepted, timeout), \
                f"only {len(self.accepted)} messages accepted"


def _unanswered(messages: list[dict], wanted: set[str]) -> set[str]:
    """The ``wanted`` event ids no final message names (the turn that was running when the
    server went away is continued by the gateway that replaces it, and its reply names
    the interrupted message too)."""
    return wanted - {eid for m in messages if m["final"] for eid in m["in_reply_to"]}


def _wait_until_answered(gateway, accepted: dict[str, tuple[str, str]], timeout: float = 60
                         ) -> dict[str, list[dict]]:
    """Long-poll each chat until every accepted message of it is answered."""
    by_chat: dict[str, list[dict]] = {}
    for chat in CHATS:
        wanted = {eid for eid, (c, _) in accepted.items() if c == chat}
        found, after = [], 0
        while _unanswered(found, wanted):
            page = gateway.outbox(chat, after=after, wait=timeout)
            assert page["messages"], (f"chat {chat}: {sorted(_unanswered(found, wanted))} "
                                      f"unanswered; got {[m['text'] for m in found]}")
            found += page["messages"]
            after = page["cursor"]
        by_chat[chat] = found
    return by_chat


class TestServerOutage:
    """Stopping the server under load loses no accepted message and answers none twice."""

    def test_stop_and_restart_under_load(self, own_server, start_gateway):
        with own_server.database() as dsn:
            # Queue mode: every message is a turn of its own, answered by its own reply.
            gateway = start_gateway(env={"HERMES_STORE_BACKEND": "postgres",
                                         "HERMES_STORE_DSN": dsn,
                                         "HERMES_BUSY_INPUT_MODE": "queue"})
            sender = Sender(gateway)
            sender.start()
            try:
                sender.wait_for(20)
                own_server.pause()
                gateway.stderr.expect(r"event=store_outage", timeout=60)
                own_server.resume()
                gateway.stderr.expect(r"event=store_back", timeout=60)
                before = len(sender.accepted)
                sender.wait_for(before + 20)  # served again, by the new gateway
            finally:
                sender.halt.set()
                sender.join(timeout=60)
            assert sender.failure is None, sender.failure
            accepted = dict(sender.accepted)
            for chat, messages in _wait_until_answered(gateway, accepted).items():
                # exactly one final answer per message, the continued one's included
                named = [eid for m in messages if m["final"] for eid in m["in_reply_to"]]
                assert len(named) == len(set(named)), f"chat {chat}: a message answered twice"
            assert sender.refused > 0  # the outage was seen by the client, as 503s
            assert gateway.stop() == 0


def _in_an_outage(own_server, start_gateway, dsn):
    """A gateway on ``dsn`` that answered once, then met the paused server (``own_server``
    is resumed by the caller): returned once it logged the outage."""
    gateway = start_gateway(env={"HERMES_STORE_BACKEND": "postgres", "HERMES_STORE_DSN": dsn})
    gateway.post("1", "hello")
    gateway.replies("1", 1)
    own_server.pause()
    # its write fails (or is refused, once the outage is known): either way seen
    gateway.request("POST", "/v1/messages", {"chat_id": "1", "text": "during"})
    gateway.stderr.expect(r"event=store_outage", timeout=60)
    return gateway


class TestHomeDuringAnOutage:
    """While the gateway waits for its database, the home stays its own (no second gateway
    can take it between the replacements), and a stop signal ends the process."""

    def test_the_home_stays_locked_and_a_signal_stops_the_wait(self, own_server,
                                                               start_gateway):
        from hermes_actors.errors import HomeInUseError
        from hermes_actors.runtime.homelock import HomeLock

        with own_server.database() as dsn:
            gateway = _in_an_outage(own_server, start_gateway, dsn)
            gateway.stderr.expect(r"event=store_waiting", timeout=60)  # a start failed
            with pytest.raises(HomeInUseError):
                HomeLock(gateway.home).acquire()
            assert gateway.stop(timeout=30) == 0
            own_server.resume()


class TestWaitingLogs:
    """While the server is away, each failed start of a new gateway is one
    ``event=store_waiting`` line, not a traceback as if something had crashed."""

    def test_a_failed_start_is_one_line(self, own_server, start_gateway):
        with own_server.database() as dsn:
            gateway = _in_an_outage(own_server, start_gateway, dsn)
            try:
                gateway.stderr.expect(r"event=store_waiting attempt=1 ", timeout=60)
                gateway.stderr.expect(r"event=store_waiting attempt=2 ", timeout=60)
                text = gateway.stderr.text()
                assert "Traceback" not in text and "failed with" not in text, text
            finally:
                own_server.resume()
            gateway.stderr.expect(r"event=store_back", timeout=60)
            assert gateway.stop(timeout=30) == 0
