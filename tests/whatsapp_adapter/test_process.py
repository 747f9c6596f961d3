"""The WhatsApp adapter in the real ``hermes-actors run`` process, against the fake Graph API.

The process is configured as an operator would (``platforms: [whatsapp]``, the secrets in
``WHATSAPP_*``), with ``whatsapp.api_base_url`` pointing at the fake server; webhooks are
posted to the process as Meta posts them. Tests wait for what the fake server sees and for
HTTP answers; nothing sleeps.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest
from process.conftest import GatewayProcess, platform_home, run_cli, stopped_after

from hermes_actors.testing import db_rows

from .fake_graph_api import (
    APP_SECRET,
    PHONE_NUMBER_ID,
    TOKEN,
    VERIFY_TOKEN,
    post_webhook,
    sign,
    statuses,
    text_message,
)

ENV = {"WHATSAPP_TOKEN": TOKEN, "WHATSAPP_APP_SECRET": APP_SECRET,
       "WHATSAPP_VERIFY_TOKEN": VERIFY_TOKEN}


def _config(graph_api, **whatsapp) -> dict:
    return {"platforms": ["whatsapp"], "http": {"token": "http-bearer-token"},
            "whatsapp": {"api_base_url": graph_api.url, "phone_number_id": PHONE_NUMBER_ID,
                         **whatsapp}}


@pytest.fixture
def whatsapp_gateway(tmp_path, graph_api):
    """``start(env=None, **whatsapp)`` → a ready gateway serving the fake phone number."""
    with stopped_after() as started:
        def start(*args: str, env: dict | None = None, **whatsapp) -> GatewayProcess:
            home = platform_home(tmp_path, _config(graph_api, **whatsapp))
            gateway = GatewayProcess(home, "--agent", "scripted", *args,
                                     env={**ENV, **(env or {})})
            started.append(gateway)
            return gateway

        yield start


def _get(port: int, query: dict) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/whatsapp/webhook?" + urllib.parse.urlencode(query))
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


class TestWebhook:
    """Verification, signature, a DM answered where it came from, redelivery, statuses."""

    def test_conversation(self, whatsapp_gateway, graph_api):
        gateway = whatsapp_gateway()
        assert "event=whatsapp_connected" in gateway.stderr.text()
        # the subscription check: the challenge for the right token, 403 otherwise
        good = {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN,
                "hub.challenge": "1158201444"}
        assert _get(gateway.port, good) == (200, "1158201444")
        assert _get(gateway.port, {**good, "hub.verify_token": "wrong"})[0] == 403
        # a bad or missing signature: 401 and nothing stored
        body = json.dumps(text_message("60123456789", "forged")).encode()
        assert post_webhook(gateway.port, body, signature=sign(body, "not-the-secret"))[0] == 401
        assert post_webhook(gateway.port, body, signature=None)[0] == 401
        # a DM, answered where it came from; its redelivery (same wamid) answered once
        message = text_message("60123456789", "hello", wamid="wamid.HELLO", name="Siti")
        assert post_webhook(gateway.port, message)[0] == 200
        assert post_webhook(gateway.port, message)[0] == 200
        # statuses are not messages, nor is the business number's own message
        assert post_webhook(gateway.port, statuses("60123456789"))[0] == 200
        assert post_webhook(gateway.port, text_message("15550100", "my own"))[0] == 200
        [sent] = graph_api.wait_sent(1, "60123456789")
        assert sent.body["text"]["body"] == "echo: hello"
        assert (sent.body["messaging_product"], sent.body["type"]) == ("whatsapp", "text")
        assert post_webhook(gateway.port, text_message("60123456789", "marker"))[0] == 200
        graph_api.wait_sent(2, "60123456789")
        assert graph_api.texts("60123456789") == ["echo: hello", "echo: marker"]
        assert graph_api.sends("15550100") == []
        # the session is keyed by the canonical sender; the forged message left nothing
        status, _, listing = gateway.request("GET", "/v1/sessions", token="http-bearer-token")
        assert status == 200
        assert [s["session_key"] for s in listing["sessions"]] == [
            "agent:main:whatsapp:dm:+60123456789"]
        assert gateway.stop() == 0
        output = gateway.stderr.text() + gateway.stdout.text()
        assert "event=whatsapp_bad_signature" in output and "forged" not in output
        for secret in ENV.values():
            assert secret not in output
        rows = db_rows(gateway.home, "deliveries")
        assert all(r["state"] == "delivered" for r in rows) and len(rows) == 2
        assert "forged" not in json.dumps(db_rows(gateway.home, "deliveries"))

    def test_the_bearer_token_does_not_guard_the_webhook(self, whatsapp_gateway):
        gateway = whatsapp_gateway()
        status, _, _ = gateway.request("GET", "/v1/sessions", token=False)
        assert status == 401  # (the other routes still need it)

    def test_a_long_reply_is_split_in_order(self, whatsapp_gateway, graph_api):
        gateway = whatsapp_gateway()
        paragraphs = [f"part {n}: " + "x" * 1000 for n in range(7)]
        post_webhook(gateway.port, text_message("60123456789", "\n\n".join(paragraphs)))
        graph_api.wait_sent(2, "60123456789")
        parts = graph_api.texts("60123456789")
        assert len(parts) == 2 and all(len(p) <= 4096 for p in parts)
        assert "\n\n".join(parts) == "echo: " + "\n\n".join(paragraphs)


class TestRefusals:
    """A rate limit is waited out; the 24-hour window's refusal is not retried."""

    def test_rate_limit_and_window(self, whatsapp_gateway, graph_api, tmp_path):
        graph_api.fail(429, 130429, "Rate limit hit", to="60111111111", retry_after=1)
        graph_api.fail(400, 131047, "Re-engagement message", to="60222222222")
        gateway = whatsapp_gateway(env={"HERMES_LOG_LEVEL": "debug"})
        post_webhook(gateway.port, text_message("60111111111", "slow down"))
        [sent] = graph_api.wait_sent(1, "60111111111")
        attempts = graph_api.attempts("60111111111")
        assert len(attempts) == 2 and attempts[1].at - attempts[0].at >= 1.0
        assert sent.body["text"]["body"] == "echo: slow down"
        post_webhook(gateway.port, text_message("60222222222", "too late"))
        post_webhook(gateway.port, text_message("60333333333", "after"))
        graph_api.wait_sent(1, "60333333333")
        graph_api.wait_for(lambda: graph_api.attempts("60222222222"))
        assert gateway.stop() == 0
        assert len(graph_api.attempts("60222222222")) == 1  # not retried
        rows = {r["chat_id"]: r for r in db_rows(tmp_path / "home", "deliveries")}
        assert (rows["+60111111111"]["state"], rows["+60111111111"]["attempts"]) == (
            "delivered", 2)
        assert rows["+60222222222"]["state"] == "abandoned"
        output = gateway.stderr.text() + gateway.stdout.text() + json.dumps(rows)
        for secret in ENV.values():
            assert secret not in output


class TestStartErrors:
    """A missing or rejected secret is one clear line and exit 2, never a traceback."""

    @pytest.mark.parametrize("missing", sorted(ENV))
    def test_missing_secret(self, tmp_path, graph_api, missing):
        home = platform_home(tmp_path, _config(graph_api))
        done = run_cli("run", "--home", str(home), "--port", "0",
                       env={k: v for k, v in ENV.items() if k != missing})
        assert done.returncode == 2, done.stderr
        assert f"{missing}" in done.stderr and "is not set" in done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr

    def test_rejected_token(self, tmp_path, graph_api):
        home = platform_home(tmp_path, _config(graph_api))
        wrong = "EAAG-this-token-is-not-the-right-one"
        done = run_cli("run", "--home", str(home), "--port", "0",
                       env={**ENV, "WHATSAPP_TOKEN": wrong})
        assert done.returncode == 2, done.stderr
        assert "rejected the access token in WHATSAPP_TOKEN" in done.stderr
        assert wrong not in done.stderr + done.stdout
        assert "Traceback" not in done.stderr
        assert not (home / "state.db").exists()


class TestKill:
    """``kill -9`` once the message is durable (before or after the 200), a restart, and
    Meta's redelivery of the same body: answered exactly once."""

    @pytest.mark.parametrize("point", ["after_message_accepted", "after_ledger_recorded"])
    def test_exactly_once(self, whatsapp_gateway, graph_api, point):
        first = whatsapp_gateway(env={"HERMES_ACTORS_CRASHPOINT": point})
        message = text_message("60123456789", "survive", wamid="wamid.SURVIVE")
        try:
            post_webhook(first.port, message, timeout=30)
        except (ConnectionError, http.client.HTTPException):
            pass  # killed before answering: Meta delivers it again
        assert first.proc.wait(timeout=30) == 137
        assert graph_api.sends() == []
        second = whatsapp_gateway()
        assert post_webhook(second.port, message)[0] == 200  # Meta's redelivery
        graph_api.wait_sent(1, "60123456789")
        post_webhook(second.port, text_message("60123456789", "marker"))
        graph_api.wait_for(lambda: "echo: marker" in graph_api.texts("60123456789"))
        # (a reply owed at the crash is redelivered with the recovery prefix)
        texts = graph_api.texts("60123456789")
        assert [t for t in texts if t.endswith("echo: survive")] == texts[:1]
        assert texts[1:] == ["echo: marker"]
