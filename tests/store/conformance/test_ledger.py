"""The delivery ledger: one row per obligation, claims by gateway boot, outcomes, prunes."""

from __future__ import annotations

from hermes_actors.store.ops import (
    LedgerClaim,
    LedgerFinish,
    LedgerPrune,
    LedgerRelease,
    LedgerReopen,
)

from .ops import T0, record

HOUR = 3600.0


def claim(oid: str = "o" * 24, boot: str = "b1", node: str = "n1",
          at: float = T0) -> LedgerClaim:
    return LedgerClaim(oid, node, boot, at)


def finish(state: str, oid: str = "o" * 24, at: float = T0, error: str | None = None,
           content: str | None = None) -> LedgerFinish:
    return LedgerFinish(oid, state, error, at, content)


def release(oid: str = "o" * 24, boot: str = "b1", node: str = "n1",
            at: float = T0) -> LedgerRelease:
    return LedgerRelease(oid, node, boot, at)


class TestLedger:
    def test_record_is_idempotent(self, backend):
        backend.apply([record(), record(content="hi")])
        [row] = backend.ledger_rows()
        assert (row["state"], row["attempts"], row["kind"], row["in_reply_to"]) == (
            "pending", 0, "reply", "e1 e2")
        assert row["owner_node"] is None and row["owner_boot"] is None

    def test_claims_by_boot(self, backend):
        backend.apply([record()])
        assert backend.apply([claim()]) == [True]
        assert backend.apply([claim()]) == [False]  # this boot is sending it
        assert backend.apply([claim(boot="b2")]) == [True]  # an earlier boot is gone
        [row] = backend.ledger_rows()
        assert (row["attempts"], row["owner_node"], row["owner_boot"]) == (2, "n1", "b2")
        assert backend.apply([claim("missing")]) == [False]

    def test_a_claim_handed_back_unspent(self, backend):
        backend.apply([record()])
        backend.apply([claim()])
        assert backend.apply([release(boot="b2"), release(node="n2"), release("missing")]) == [
            False, False, False]  # only the claim's owner hands it back
        assert backend.apply([release(at=T0 + 5)]) == [True]
        [row] = backend.ledger_rows()
        assert (row["state"], row["attempts"], row["owner_node"], row["owner_boot"],
                row["updated_at"]) == ("pending", 0, None, None, T0 + 5)
        assert backend.apply([release()]) == [False]  # not attempting any more
        assert backend.apply([claim()]) == [True]  # claimable again, by the same boot
        assert backend.ledger_rows()[0]["attempts"] == 1

    def test_a_claim_handed_back_after_earlier_attempts_stays_uncertain(self, backend):
        backend.apply([record()])
        backend.apply([claim(boot="b0"), claim()])  # b0 is gone: its send is uncertain
        assert backend.apply([release()]) == [True]
        [row] = backend.ledger_rows()
        assert (row["state"], row["attempts"], row["owner_boot"]) == ("failed", 1, None)
        backend.apply([claim(), finish("delivered")])
        assert backend.apply([release()]) == [False]  # final rows are never handed back
        assert backend.ledger_rows()[0]["state"] == "delivered"

    def test_an_operator_reopens_failed_and_abandoned_rows(self, backend):
        backend.apply([record("a" * 24), record("b" * 24), record("c" * 24, at=T0 - 25 * HOUR),
                       record("d" * 24)])
        backend.apply([claim("a" * 24), claim("b" * 24), claim("c" * 24), claim("d" * 24)])
        backend.apply([finish("delivered", "a" * 24), finish("failed", "b" * 24, error="x"),
                       finish("failed", "c" * 24, error="y")])
        assert backend.apply([
            LedgerReopen("a" * 24, T0 + 5), LedgerReopen("b" * 24, T0 + 5),
            LedgerReopen("c" * 24, T0 + 5), LedgerReopen("d" * 24, T0 + 5),
            LedgerReopen("z" * 24, T0 + 5),
        ]) == ["delivered", "failed", "abandoned", "attempting", None]
        rows = {r["obligation_id"][0]: r for r in backend.ledger_rows()}
        for oid in "bc":
            assert (rows[oid]["state"], rows[oid]["attempts"], rows[oid]["owner_node"],
                    rows[oid]["owner_boot"], rows[oid]["last_error"],
                    rows[oid]["updated_at"]) == ("pending", 0, None, None, None, T0 + 5)
        assert (rows["a"]["state"], rows["d"]["state"]) == ("delivered", "attempting")
        assert backend.apply([claim("b" * 24)]) == [True]  # a sweep may send it again
        assert backend.ledger_rows(("attempting",))[0]["attempts"] == 1

    def test_outcomes(self, backend):
        backend.apply([record("a" * 24), record("b" * 24), record("c" * 24, at=T0 - 25 * HOUR)])
        backend.apply([claim("a" * 24), claim("b" * 24), claim("c" * 24)])
        assert backend.apply([finish("delivered", "a" * 24), finish("failed", "b" * 24, error="x"),
                              finish("failed", "c" * 24), finish("failed", "z" * 24)]) == [
            "delivered", "failed", "abandoned", None]  # c: older than a day
        assert backend.apply([claim("a" * 24, boot="b9")]) == [False]  # final
        assert backend.apply([claim("b" * 24)]) == [True]  # a retry of its own failure
        assert backend.ledger_counts() == {"delivered": 1, "attempting": 1, "abandoned": 1}
        assert [r["obligation_id"] for r in backend.ledger_rows(("attempting",))] == ["b" * 24]
        assert backend.ledger_rows(None, "other") == []

    def test_an_attempt_that_sent_the_first_parts_leaves_only_the_rest_owed(self, backend):
        backend.apply([record(content="one\n\ntwo\n\nthree")])
        backend.apply([claim()])
        assert backend.apply([finish("failed", error="429", content="two\n\nthree")]) == [
            "failed"]
        assert backend.ledger_rows()[0]["content"] == "two\n\nthree"
        # a rate limit waited out: the try counted and the row claimed again, one list
        assert backend.apply([finish("failed", error="429", content="three"), claim()]) == [
            "failed", True]
        backend.apply([finish("failed", error="500")])  # nothing sent: still owed as is
        [row] = backend.ledger_rows()
        assert (row["state"], row["attempts"], row["content"], row["last_error"]) == (
            "failed", 2, "three", "500")

    def test_an_outcome_after_another_senders_claim_changes_nothing(self, backend):
        backend.apply([record(), claim()])  # n1/b1 sends, then pauses
        backend.apply([claim(node="n2"), finish("delivered", at=T0 + 5)])  # n2 took it over
        late = LedgerFinish("o" * 24, "failed", "fenced", T0 + 9, None, "n1", "b1")
        assert backend.apply([late]) == [None]
        [row] = backend.ledger_rows()
        assert (row["state"], row["owner_node"], row["updated_at"]) == ("delivered", "n2",
                                                                        T0 + 5)
        mine = LedgerFinish("o" * 24, "failed", None, T0 + 9, None, "n2", "b1")
        assert backend.apply([mine]) == ["failed"]  # the claim's own sender records it

    def test_abandoned_after_three_attempts(self, backend):
        backend.apply([record()])
        for n in range(3):
            backend.apply([claim(boot=f"b{n}")])
            state = backend.apply([finish("failed", error=f"boom {n}")])[0]
        assert state == "abandoned" and backend.ledger_rows()[0]["last_error"] == "boom 2"

    def test_a_refusal_for_good_is_abandoned_at_the_first_attempt(self, backend):
        backend.apply([record()])
        backend.apply([claim()])
        assert backend.apply([finish("abandoned", error="403 blocked")]) == ["abandoned"]
        assert backend.apply([claim(boot="b2")]) == [False]  # final: never sent again
        [row] = backend.ledger_rows()
        assert (row["state"], row["attempts"], row["last_error"]) == (
            "abandoned", 1, "403 blocked")

    def test_prune_final_rows(self, backend):
        backend.apply([record("a" * 24), record("b" * 24)])
        backend.apply([claim("a" * 24), finish("delivered", "a" * 24, at=T0)])
        assert backend.apply([LedgerPrune(T0 - 1)]) == [0]
        assert backend.apply([LedgerPrune(T0 + 1)]) == [1]
        assert [r["obligation_id"] for r in backend.ledger_rows()] == ["b" * 24]

    def test_durability(self, opened):
        opened.backend.apply([record()])
        again = opened.reopen()
        assert len(again.ledger_rows()) == 1
