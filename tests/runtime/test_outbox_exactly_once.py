"""The durable outbox is exactly once (§7): a reply's append and its ledger row's
``delivered`` are one transaction, refused when the claim is not this gateway's; a sweep
sends an answer again after an uncertain attempt as kind ``recovered``."""

from __future__ import annotations

import pytest

from hermes_actors import Gateway, MessageEvent, SessionSource, load_config
from hermes_actors.adapters.base import Outgoing
from hermes_actors.adapters.outbox import Outbox, OutboxAdapter
from hermes_actors.runtime.delivery import RECOVERED_PREFIX, Delivery, Owed
from hermes_actors.runtime.ledger_sweep import sweep_ledger
from hermes_actors.store import SessionStore
from hermes_actors.testing import FakeClock

WEBHOOK = SessionSource("webhook", chat_id="8")


@pytest.fixture
def store(tmp_path):
    store = SessionStore(tmp_path / "home" / "sessions", clock=FakeClock(),
                         mirror_interval=None)
    yield store
    store.close()


@pytest.fixture
def outbox(store):
    return Outbox(lambda: store)


def _record(store, content: str = "owed", kind: str = "reply", claim: bool = False,
            token: str = "t") -> str:
    key = store.get_or_create_session(WEBHOOK).session_key
    oid = store.ledger_record(session_key=key, platform="webhook", chat_id="8",
                              thread_id=None, content=content, kind=kind, token=token,
                              claim=claim, in_reply_to=("e1", "e2"))
    assert oid is not None
    return oid


def _rows(outbox):
    return [(r["text"], r["kind"], r["in_reply_to"]) for r in outbox.read("webhook", "8")]


def _state(store, oid):
    [row] = [r for r in store.ledger_rows() if r["obligation_id"] == oid]
    return row["state"], row["owner_node"], row["owner_boot"]


class _NoFinish:
    """The store as ``Delivery`` sees it, counting outcomes it is asked to record."""

    def __init__(self, store):
        self._store = store
        self.finished: list[str] = []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def ledger_finish(self, obligation_id, *args, **kwargs):
        self.finished.append(obligation_id)
        return self._store.ledger_finish(obligation_id, *args, **kwargs)

    def ledger_finish_later(self, obligation_id, *args, **kwargs):
        self.finished.append(obligation_id)
        return self._store.ledger_finish_later(obligation_id, *args, **kwargs)


class TestDeliveryIntoTheOutbox:
    def test_the_append_records_the_outcome(self, store, outbox):
        counting = _NoFinish(store)
        delivery = Delivery(counting, [OutboxAdapter("webhook", outbox)])
        oid = _record(store, claim=True)  # recorded and claimed by this store's sender
        assert delivery.attempt(Owed(oid, True, "reply", ("e1", "e2")), WEBHOOK, "owed")
        assert _rows(outbox) == [("owed", "reply", "e1 e2")]
        assert _state(store, oid)[0] == "delivered"
        assert counting.finished == []  # no second commit: the append was the outcome

    def test_a_claim_taken_over_appends_nothing(self, store, outbox):
        counting = _NoFinish(store)
        delivery = Delivery(counting, [OutboxAdapter("webhook", outbox)])
        oid = _record(store, claim=True)
        assert store.ledger_claim(oid, owner=("other-node", "other-boot"))  # moved on
        assert delivery.attempt(Owed(oid, True, "reply"), WEBHOOK, "owed") is False
        assert _rows(outbox) == []
        assert _state(store, oid) == ("attempting", "other-node", "other-boot")
        assert counting.finished == []  # the row is the other sender's to settle

    def test_attempt_many_records_with_the_append(self, store, outbox):
        counting = _NoFinish(store)
        delivery = Delivery(counting, [OutboxAdapter("webhook", outbox)])
        oids = [_record(store, f"owed {n}", token=f"t{n}") for n in range(3)]
        sent = delivery.attempt_many((oid, Outgoing(WEBHOOK, f"owed {n}", "reply"))
                                     for n, oid in enumerate(oids))
        assert sent == oids and counting.finished == []
        assert [t for t, *_ in _rows(outbox)] == ["owed 0", "owed 1", "owed 2"]
        assert {_state(store, oid)[0] for oid in oids} == {"delivered"}

    def test_a_direct_send_is_a_plain_append(self, store, outbox):
        result = OutboxAdapter("webhook", outbox).send(WEBHOOK, "hi")
        assert result.success and not result.recorded
        assert _rows(outbox) == [("hi", "reply", None)]


class TestSweepKinds:
    """A ledger sweep sends an answer whose attempt was uncertain as ``recovered``, with the
    events it answers; a notice stays a notice, a pending reply a reply."""

    def test_redelivery_kind(self):
        from hermes_actors.store.ledger import redelivery_kind

        assert redelivery_kind("reply", True) == "recovered"
        assert redelivery_kind("recovered", True) == "recovered"
        assert redelivery_kind("reply", False) == "reply"
        assert redelivery_kind("notice", True) == "notice"
        assert redelivery_kind("ack", True) == "ack"  # any other kind keeps its own

    def test_uncertain_rows_go_out_as_recovered(self, store, outbox):
        dead = ("node-gone", "boot-gone")
        attempting = _record(store, "was attempting", token="t1")
        failed = _record(store, "failed once", token="t2")
        notice = _record(store, "a notice", kind="notice", token="t3")
        pending = _record(store, "never tried", token="t4")
        for oid in (attempting, notice):
            assert store.ledger_claim(oid, owner=dead)  # a boot that died mid-attempt
        assert store.ledger_claim(failed)
        assert store.ledger_finish(failed, "failed", error="boom") == "failed"
        delivery = Delivery(store, [OutboxAdapter("webhook", outbox)])
        assert sweep_ledger(store, delivery) == 4
        assert sorted(_rows(outbox)) == sorted([
            (RECOVERED_PREFIX + "was attempting", "recovered", "e1 e2"),
            (RECOVERED_PREFIX + "failed once", "recovered", "e1 e2"),
            (RECOVERED_PREFIX + "a notice", "notice", "e1 e2"),
            ("never tried", "reply", "e1 e2"),
        ])
        assert {_state(store, oid)[0] for oid in (attempting, failed, notice, pending)} == {
            "delivered"}

    def test_in_a_gateway(self, tmp_path):
        """A reply whose attempt a crashed boot left ``attempting`` is in the outbox once,
        as ``recovered``, after the restart; the next reply is a plain ``reply``."""
        home = tmp_path / "home"
        store = SessionStore(home / "sessions", mirror_interval=None)
        oid = _record(store, claim=True)  # claimed by this boot, which then crashed
        store.close()
        outbox = Outbox()
        gateway = Gateway(home, load_config({}, env={}),
                          adapters=[OutboxAdapter("webhook", outbox)])
        outbox.bind(lambda: gateway.store)
        try:
            assert gateway.start().redelivered == 1
            gateway.submit(MessageEvent(source=WEBHOOK, text="next"))
            assert gateway.wait_idle(timeout=30)
            rows = _rows(outbox)
            states = {r["obligation_id"]: r["state"] for r in gateway.store.ledger_rows()}
        finally:
            gateway.stop(drain_timeout=5)
        assert rows[0] == (RECOVERED_PREFIX + "owed", "recovered", "e1 e2")
        assert [(t, k) for t, k, _ in rows[1:]] == [("echo: next", "reply")]
        assert set(states.values()) == {"delivered"} and oid in states
