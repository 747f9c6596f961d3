"""``WhatsAppAdapter`` against the fake Graph API, and its webhook routes in ``HttpApi``
with a stand-in gateway: sends, refusals, and what a failure before durability answers."""

from __future__ import annotations

import io
import json

import pytest

from hermes_actors import load_config
from hermes_actors.adapters.http import HttpApi
from hermes_actors.adapters.outbox import Outbox
from hermes_actors.adapters.whatsapp import WhatsAppAdapter, WhatsAppSecrets
from hermes_actors.errors import ConfigError, StoreError, StoreRejectedError
from hermes_actors.model.source import SessionSource

from .fake_graph_api import (
    APP_SECRET,
    PHONE_NUMBER_ID,
    TOKEN,
    VERIFY_TOKEN,
    sign,
    text_message,
    webhook,
)

DM = SessionSource("whatsapp", chat_id="+60123456789", chat_type="dm")


@pytest.fixture
def adapter(graph_api):
    settings = load_config({"whatsapp": {"api_base_url": graph_api.url,
                                         "phone_number_id": PHONE_NUMBER_ID}}, env={}).whatsapp
    made = WhatsAppAdapter(settings, WhatsAppSecrets(TOKEN, APP_SECRET, VERIFY_TOKEN))
    yield made
    made.close()


class TestSend:
    def test_connect_and_send(self, adapter, graph_api):
        assert adapter.connect()["id"] == PHONE_NUMBER_ID and adapter.connected
        result = adapter.send(DM, "hello")
        assert result.success and result.message_id.startswith("wamid.OUT")
        [sent] = graph_api.sends("60123456789")
        assert sent.body["to"] == "60123456789" and sent.body["text"]["body"] == "hello"

    def test_rate_limit_mid_split_keeps_the_rest(self, adapter, graph_api):
        text = "a" * 4000 + "\n\n" + "b" * 4000
        graph_api.fail(400, 80007, "rate limit", skip=1)  # the second part meets it
        result = adapter.send(DM, text)
        assert not result.success and not result.permanent
        assert result.retry_after == 2.0 and result.unsent == "b" * 4000
        assert graph_api.texts("60123456789") == ["a" * 4000]

    def test_window_refusal_is_permanent_and_masked(self, adapter, graph_api):
        graph_api.fail(400, 131047, f"Re-engagement message {TOKEN}")
        result = adapter.send(DM, "late")
        assert not result.success and result.permanent and result.retry_after is None
        assert "131047" in result.error and TOKEN not in result.error

    def test_rejected_token_is_a_config_error(self, graph_api):
        settings = load_config({"whatsapp": {"api_base_url": graph_api.url,
                                             "phone_number_id": PHONE_NUMBER_ID}},
                               env={}).whatsapp
        wrong = WhatsAppAdapter(settings, WhatsAppSecrets("EAAG-wrong-token-123", APP_SECRET,
                                                          VERIFY_TOKEN))
        with pytest.raises(ConfigError, match="rejected the access token") as caught:
            wrong.connect()
        assert "EAAG-wrong-token-123" not in str(caught.value)
        wrong.close()


class _Ingress:
    def __init__(self) -> None:
        self.refusals: list[str] = []

    def refused(self, reason: str) -> None:
        self.refusals.append(reason)


class _Gateway:
    """What ``HttpApi`` asks of a gateway for the webhook routes."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.events: list = []
        self.ingress = _Ingress()

    def submit(self, event):
        if self.fail is not None and self.events:
            raise self.fail
        self.events.append(event)
        return event.event_id


def _call(app, method, body=b"", signature=None, query=""):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": "/whatsapp/webhook",
               "QUERY_STRING": query, "CONTENT_LENGTH": str(len(body)),
               "wsgi.input": io.BytesIO(body)}
    if signature:
        environ["HTTP_X_HUB_SIGNATURE_256"] = signature
    seen = {}
    chunks = app(environ, lambda status, headers: seen.update(status=status))
    return int(seen["status"].split()[0]), b"".join(chunks)


def _app(adapter, gateway):
    http = load_config({"http": {"token": "bearer-token"}}, env={}).http
    adapter.start_events(gateway.submit)
    return HttpApi(gateway, Outbox(), http, webhooks=adapter.routes())


class TestRoutes:
    def test_two_messages_and_a_store_failure_is_503(self, adapter):
        gateway = _Gateway(fail=StoreError("disk full"))
        body = json.dumps(webhook({"messages": [
            {"from": "601111111", "id": "wamid.1", "type": "text", "text": {"body": "a"}},
            {"from": "601111111", "id": "wamid.2", "type": "text", "text": {"body": "b"}}]})
        ).encode()
        status, _ = _call(_app(adapter, gateway), "POST", body, sign(body))
        assert status == 503 and len(gateway.events) == 1  # Meta delivers it again

    def test_rejected_message_is_skipped(self, adapter):
        gateway = _Gateway(fail=StoreRejectedError("cannot encode"))
        body = json.dumps(webhook({"messages": [
            {"from": "601111111", "id": "wamid.1", "type": "text", "text": {"body": "a"}},
            {"from": "601111111", "id": "wamid.2", "type": "text", "text": {"body": "b"}}]})
        ).encode()
        assert _call(_app(adapter, gateway), "POST", body, sign(body))[0] == 200

    def test_signature_challenge_and_draining(self, adapter):
        gateway = _Gateway()
        app = _app(adapter, gateway)
        body = json.dumps(text_message("60123456789", "hi")).encode()
        assert _call(app, "POST", body, "sha256=" + "0" * 64)[0] == 401
        assert _call(app, "POST", body)[0] == 401 and gateway.events == []
        assert _call(app, "POST", b"not json", sign(b"not json"))[0] == 400
        query = f"hub.mode=subscribe&hub.verify_token={VERIFY_TOKEN}&hub.challenge=77"
        assert _call(app, "GET", query=query) == (200, b"77")
        assert _call(app, "GET", query="hub.mode=subscribe&hub.challenge=77")[0] == 403
        assert _call(app, "POST", body, sign(body))[0] == 200 and len(gateway.events) == 1
        app.accepting = False
        assert _call(app, "POST", body, sign(body))[0] == 503
        assert gateway.ingress.refusals == ["stopping"]
