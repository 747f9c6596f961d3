"""The outbox (cursors, reads by chat, prunes) and the node's own state."""

from __future__ import annotations

import dataclasses

import pytest

from hermes_actors.errors import StoreError
from hermes_actors.store.ops import (
    LedgerClaim,
    LedgerFinish,
    NodeValue,
    OutboxAppend,
    OutboxPrune,
    SetSessionRestarts,
)

from .ops import T0, record

OID = "o" * 24


def append(chat: str = "42", text: str = "hi", at: float = T0, floor: int = 0,
           platform: str = "webhook") -> OutboxAppend:
    return OutboxAppend("k", platform, chat, None, text, "reply", at, floor, "e1")


def delivered(oid: str = OID, node: str = "n1", boot: str = "b1", at: float = T0 + 1,
              text: str = "hi") -> OutboxAppend:
    """An append that ends ledger row ``oid``'s attempt by sender ``node``/``boot``."""
    op = append(text=text, at=at)
    op.obligation_id, op.owner_node, op.owner_boot = oid, node, boot
    return op


class _NotAnOp:
    """Something no backend knows how to apply (fails the list it is in)."""


class TestOutboxAppendEndsAnAttempt:
    """An outbox append with its ledger row: the row and ``delivered`` in one transaction,
    only while the sender holds the claim (the durable outbox is exactly once)."""

    def _texts(self, backend) -> list[str]:
        return [r["text"] for r in backend.outbox_read("webhook", "42", 0, 10)]

    def _ledger(self, backend) -> tuple:
        [row] = backend.ledger_rows()
        return row["state"], row["owner_node"], row["owner_boot"]

    def test_appended_and_delivered_together(self, backend):
        backend.apply([record(), LedgerClaim(OID, "n1", "b1", T0)])
        [cursor] = backend.apply([delivered()])
        assert cursor is not None and cursor > 0
        assert [(r["cursor"], r["text"], r["kind"]) for r in
                backend.outbox_read("webhook", "42", 0, 10)] == [(cursor, "hi", "reply")]
        [row] = backend.ledger_rows()
        assert (row["state"], row["updated_at"], row["last_error"]) == (
            "delivered", T0 + 1, None)
        assert backend.apply([delivered()]) == [None]  # never a second row for it
        assert self._texts(backend) == ["hi"]

    def test_refused_when_another_sender_holds_the_claim(self, backend):
        backend.apply([record(), LedgerClaim(OID, "n1", "b1", T0),
                       LedgerClaim(OID, "n2", "b2", T0 + 1)])  # the shard moved on
        assert backend.apply([delivered()]) == [None]
        assert backend.apply([delivered(boot="b0")]) == [None]  # same node, other boot
        assert self._texts(backend) == []
        assert self._ledger(backend) == ("attempting", "n2", "b2")

    def test_refused_when_not_claimed_final_or_unknown(self, backend):
        backend.apply([record()])
        assert backend.apply([delivered()]) == [None]  # pending: nobody's claim
        assert self._ledger(backend) == ("pending", None, None)
        backend.apply([LedgerClaim(OID, "n1", "b1", T0),
                       LedgerFinish(OID, "failed", "x", T0, None, "n1", "b1")])
        assert backend.apply([delivered()]) == [None]  # failed: not being attempted
        assert backend.apply([delivered("z" * 24)]) == [None]
        assert self._texts(backend) == []
        assert self._ledger(backend)[0] == "failed"

    def test_a_list_that_fails_leaves_neither(self, backend):
        backend.apply([record(), LedgerClaim(OID, "n1", "b1", T0)])
        with pytest.raises(StoreError):
            backend.apply([delivered(), _NotAnOp()])
        assert self._texts(backend) == []
        assert self._ledger(backend) == ("attempting", "n1", "b1")
        assert backend.apply([delivered()])[0] is not None  # and the claim still holds

    def test_durability(self, opened):
        opened.backend.apply([record(), record("p" * 24), LedgerClaim(OID, "n1", "b1", T0)])
        opened.backend.apply([delivered(text="sent"), delivered("p" * 24, text="refused")])
        again = opened.reopen()
        assert self._texts(again) == ["sent"]
        states = {r["obligation_id"]: r["state"] for r in again.ledger_rows()}
        assert states == {OID: "delivered", "p" * 24: "pending"}


class TestOutbox:
    def test_cursors_and_reads(self, backend):
        first, second, other = backend.apply([append(text="a"), append(text="b"),
                                              append("43", "c")])
        assert first < second < other
        rows = backend.outbox_read("webhook", "42", 0, 10)
        assert [(r["cursor"], r["text"], r["in_reply_to"]) for r in rows] == [
            (first, "a", "e1"), (second, "b", "e1")]
        assert [r["text"] for r in backend.outbox_read("webhook", "42", first, 10)] == ["b"]
        assert len(backend.outbox_read("webhook", "42", 0, 1)) == 1
        assert backend.outbox_read("api_server", "42", 0, 10) == []
        assert backend.outbox_head() == other

    def test_cursors_never_go_back_below_a_floor(self, backend):
        [cursor] = backend.apply([append(floor=500)])
        assert cursor > 0  # a database numbers rows itself; the files backend continues
        assert backend.apply([append()])[0] > cursor

    def test_a_row_imported_with_its_cursor_keeps_it(self, backend):
        # a degraded run's row (its journal's import): the cursor a reader may have seen is
        # kept, and the backend's own numbering continues above it (issue 36)
        [first] = backend.apply([append(text="a")])
        imported = first + 1_700_000_000_000_000
        kept = dataclasses.replace(append(text="degraded"), cursor=imported)
        assert backend.apply([kept]) == [imported]
        assert backend.outbox_head() == imported
        [after] = backend.apply([append(text="b")])
        assert after > imported
        assert [(r["cursor"], r["text"]) for r in backend.outbox_read("webhook", "42", first,
                                                                      10)] == [
            (imported, "degraded"), (after, "b")]

    def test_prune(self, backend):
        backend.apply([append(at=T0 - 10), append(at=T0 + 10)])
        assert backend.apply([OutboxPrune(T0)]) == [1]
        assert [r["created_at"] for r in backend.outbox_read("webhook", "42", 0, 10)] == [
            T0 + 10]

    def test_durability(self, opened):
        opened.backend.apply([append()])
        again = opened.reopen()
        assert len(again.outbox_read("webhook", "42", 0, 10)) == 1


class TestNode:
    def test_a_stable_node_id(self, opened):
        node = opened.backend.node_id()
        assert len(node) == 32 and node == opened.backend.node_id()
        assert opened.reopen().node_id() == node

    def test_values(self, opened):
        node = opened.backend.node_id()
        opened.backend.apply([NodeValue(node, "restart_counts", '{"k": 2}'),
                              NodeValue(node, "clean_shutdown", '{"pid": 1}')])
        assert opened.backend.node_values(node) == {"restart_counts": '{"k": 2}',
                                                    "clean_shutdown": '{"pid": 1}'}
        opened.backend.apply([NodeValue(node, "clean_shutdown", None)])
        again = opened.reopen()
        assert again.node_values(node) == {"restart_counts": '{"k": 2}'}
        assert again.node_values("another node") == {}


class TestSessionRestarts:
    """``SetSessionRestarts`` sets some sessions' stuck-loop counts and leaves the others; a
    store of one node keeps them as its ``restart_counts`` value (§5), a cluster's database
    per session for every node."""

    def test_set_and_removed(self, opened):
        node = opened.backend.node_id()
        assert opened.backend.session_restarts(node) == {}
        opened.backend.apply([SetSessionRestarts(node, (("a", 2), ("b", 1)), T0)])
        opened.backend.apply([SetSessionRestarts(node, (("a", 0), ("c", 3)), T0 + 1)])
        assert opened.backend.session_restarts(node) == {"b": 1, "c": 3}
        assert opened.reopen().session_restarts(node) == {"b": 1, "c": 3}

    def test_one_node_keeps_them_in_its_restart_counts(self, opened):
        node = opened.backend.node_id()
        opened.backend.apply([NodeValue(node, "restart_counts", '{"k": 2}')])
        opened.backend.apply([SetSessionRestarts(node, (("a", 1),), T0)])
        if opened.kind == "postgres":  # per session, whichever node: not a node's value
            assert opened.backend.session_restarts("another node") == {"a": 1}
            assert opened.backend.node_values(node)["restart_counts"] == '{"k": 2}'
        else:
            assert opened.backend.node_values(node)["restart_counts"] == '{"a": 1, "k": 2}'
            assert opened.backend.session_restarts(node) == {"a": 1, "k": 2}

    def test_in_the_transaction_of_other_writes(self, backend):
        node = backend.node_id()
        backend.apply([SetSessionRestarts(node, (("a", 1),), T0),
                       OutboxAppend("a", "webhook", "42", None, "x", "reply", T0)])
        assert backend.session_restarts(node) == {"a": 1}
        assert len(backend.outbox_read("webhook", "42", 0, 10)) == 1
