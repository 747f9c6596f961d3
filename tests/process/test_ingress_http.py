"""``POST /v1/messages`` exactly once, and refusals that look refused (issue 17.2, 17.3).

Real ``hermes-actors run`` processes: a retry of a message whose answer was lost (the process
was killed between the durable accept and the answer) is answered ``200`` with the first
event's id and ``"duplicate": true``, and the chat gets exactly one reply. A message the
session's queue cannot take is answered ``429`` and nothing about it is stored.
"""

from __future__ import annotations

import http.client

import pytest

from hermes_actors.runtime.session_actor import QUEUE_FULL
from hermes_actors.testing import db_rows

from .conftest import GatewayProcess

pytestmark = pytest.mark.slow


def _retry_body(chat_id: str, text: str, message_id: str) -> dict:
    return {"chat_id": chat_id, "text": text, "message_id": message_id}


class TestRetryAfterCrash:
    """kill -9 between the durable accept and the answer, retry after the restart: one reply."""

    def test_one_reply_for_a_retried_message(self, start_gateway, tmp_path):
        home = tmp_path / "home"
        crashing = GatewayProcess(home, env={"HERMES_ACTORS_CRASHPOINT": "after_message_accepted"})
        try:
            with pytest.raises((http.client.HTTPException, ConnectionError)):
                crashing.request("POST", "/v1/messages", _retry_body("r", "hello", "m-1"))
            assert crashing.proc.wait(timeout=30) == 137
        finally:
            crashing.kill()
        [accepted] = db_rows(home, "inbox")  # durable, though never acknowledged

        again = start_gateway()
        assert "replayed_inbox=1" in again.recovery()
        status, _, body = again.request("POST", "/v1/messages",
                                        _retry_body("r", "hello", "m-1"))
        assert status == 200, body
        assert body["duplicate"] is True and body["event_id"] == accepted["event_id"]
        assert body["session_key"] == "agent:main:webhook:dm:r"
        [reply] = again.replies("r", 1)
        assert reply["text"] == "echo: hello"
        # a second message with another id is a new message; the retry added nothing
        again.post("r", "second", message_id="m-2")
        later = again.replies("r", 1, after=reply["cursor"])
        assert [m["text"] for m in later] == ["echo: second"]
        assert len(db_rows(home, "inbox")) == 2

    def test_same_message_id_in_another_chat_is_new(self, start_gateway):
        gateway = start_gateway()
        first = gateway.post("a", "x", message_id="same")
        second = gateway.post("b", "x", message_id="same")
        assert first["event_id"] != second["event_id"]
        assert gateway.replies("a", 1)[0]["text"] == gateway.replies("b", 1)[0]["text"]


class TestQueueFullIsRefused:
    """With ``busy_input_mode: queue`` and a full queue: 429, ``Retry-After``, nothing kept."""

    def test_429_and_nothing_stored(self, start_gateway, tmp_path):
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.yaml").write_text("busy_input_mode: queue\nqueue_max: 2\n"
                                          "restart_drain_timeout: 1\n")
        gateway = start_gateway("--agent", "scripted")
        gateway.post("full", "sleep 30")
        depths = [gateway.post("full", f"waiting {i}")["queue_depth"] for i in range(2)]
        assert depths == [1, 2]
        status, headers, body = gateway.request("POST", "/v1/messages",
                                                {"chat_id": "full", "text": "one too many"})
        assert status == 429
        assert body == {"error": QUEUE_FULL.format(2)}
        assert int(headers["retry-after"]) > 0
        texts = [row["payload"] for row in db_rows(home, "inbox")]
        assert len(texts) == 3 and not any("one too many" in t for t in texts)
        assert not any("one too many" in row["content"] for row in db_rows(home, "messages"))
        assert not any("Queue full" in row["text"] for row in db_rows(home, "outbox"))
        metrics = gateway.request("GET", "/metrics")[2]
        assert 'hermes_messages_refused_total{reason="queue_full"} 1.0' in metrics
