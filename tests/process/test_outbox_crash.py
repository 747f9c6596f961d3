"""The durable outbox is exactly once across a SIGKILL (§7): a real ``hermes-actors run``
process killed between a reply's send and its ledger outcome leaves one outbox row, not the
reply and then its ``♻️ Recovered reply`` copy (external platforms stay at-least-once:
``tests/reliability/test_crash_matrix.py``)."""

from __future__ import annotations

import pytest

from hermes_actors.testing import db_rows

CRASH = "HERMES_ACTORS_CRASHPOINT"


@pytest.fixture
def store_env(every_backend) -> tuple[dict[str, str], dict]:
    """The process's environment for each store backend, and the config to read it with."""
    if not every_backend:
        return {}, {}
    return ({"HERMES_STORE_BACKEND": "postgres",
             "HERMES_STORE_DSN": every_backend["store"]["dsn"]}, every_backend)


def test_killed_after_the_append_the_reply_is_in_the_outbox_once(start_gateway, tmp_path,
                                                                   store_env):
    env, config = store_env
    home = tmp_path / "home"
    crashing = start_gateway(home=home, env={**env, CRASH: "after_send_before_delivered"})
    status, _, _ = crashing.request("POST", "/v1/messages", {"chat_id": "c1", "text": "hello"})
    assert status == 202
    assert crashing.proc.wait(timeout=30) == 137  # killed right after the outbox append

    again = start_gateway(home=home, env=env)
    assert "redelivered=0" in again.recovery()  # the append was the ledger's outcome
    again.post("c1", "next")  # the session still answers; anything owed went first
    messages = again.replies("c1", 2)
    assert [(m["text"], m["kind"]) for m in messages] == [
        ("echo: hello", "reply"), ("echo: next", "reply")]
    assert again.stop() == 0

    rows = db_rows(home, "outbox", config=config)
    assert sorted(r["text"] for r in rows) == ["echo: hello", "echo: next"]
    states = sorted((r["content"], r["state"]) for r in db_rows(home, "deliveries",
                                                                 config=config))
    assert states == [("echo: hello", "delivered"), ("echo: next", "delivered")]
