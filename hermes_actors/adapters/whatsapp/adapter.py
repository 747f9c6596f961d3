"""``WhatsAppAdapter``: the gateway's ``whatsapp`` platform (WhatsApp Cloud API).

Ingress is Meta's webhook, served by the HTTP adapter at :data:`WEBHOOK_PATH` (the routes
are authenticated by Meta's signature, not by ``http.token``):

* ``GET``: the subscription check, answered with ``hub.challenge`` when ``hub.verify_token``
  is the configured one (else 403);
* ``POST``: ``X-Hub-Signature-256`` must be the HMAC-SHA256 of the raw body with the app
  secret (else 401, and nothing is read further); each message of the body is submitted
  (``Gateway.submit``: durable before it returns, and a redelivered wamid is recognised as
  a duplicate), and only then is the answer 200. A failure before every message is durable
  is a 5xx, so Meta delivers the body again; what was stored already is then a duplicate.

Replies go through the delivery ledger like any platform's: :meth:`WhatsAppAdapter.send`
splits the text at 4,096 characters and sends the parts in order; a rate limit (HTTP 429,
or Meta's codes 130429, 80007, ...) comes back as ``retry_after`` with the part not yet sent,
and the refusal outside the 24-hour customer-service window (code 131047) or to a number
that is not on WhatsApp (131026) as ``permanent`` (never retried).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from hermes_actors.adapters.base import SendResult
from hermes_actors.adapters.whatsapp.client import GraphClient, WhatsAppError, mask_secrets
from hermes_actors.adapters.whatsapp.mapping import (
    challenge_answer,
    recipient,
    signature_ok,
    split_message,
    webhook_events,
)
from hermes_actors.config import WhatsAppConfig
from hermes_actors.errors import ConfigError, StoreRejectedError
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.source import SessionSource

__all__ = ["PERMANENT_CODES", "WEBHOOK_PATH", "WebhookRejected", "WhatsAppAdapter",
           "WhatsAppSecrets", "read_secrets"]

#: Where Meta posts the webhook (the HTTP adapter routes it here).
WEBHOOK_PATH = "/whatsapp/webhook"
#: Meta's codes of a refusal for good: outside the 24-hour window (131047), not a WhatsApp
#: user (131026), the user stopped marketing messages (131050), a recipient not allowed
#: for a test number (131030).
PERMANENT_CODES = frozenset({131047, 131026, 131030, 131050})

log = logging.getLogger("hermes_actors.whatsapp")


class WebhookRejected(Exception):
    """A webhook request refused: ``status`` and a message for the sender."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class WhatsAppSecrets:
    """The three secrets, read from the environment (never shown in ``repr``)."""

    def __init__(self, token: str, app_secret: str, verify_token: str) -> None:
        self.token = token
        self.app_secret = app_secret
        self.verify_token = verify_token

    def __repr__(self) -> str:
        return "WhatsAppSecrets(<hidden>)"


def read_secrets(settings: WhatsAppConfig, env: Mapping[str, str]) -> WhatsAppSecrets:
    """The secrets from the environment variables ``settings`` names, or one
    :class:`ConfigError` naming the first missing one (and the setting that names it)."""
    if settings.phone_number_id is None:
        raise ConfigError("config key 'whatsapp.phone_number_id': required when platforms "
                          "lists whatsapp (the phone number id from the WhatsApp API setup page)")
    values = []
    for setting, what in (("token_env", "the access token"),
                          ("app_secret_env", "the app secret (webhook signatures)"),
                          ("verify_token_env", "the webhook verify token")):
        variable = getattr(settings, setting)
        value = (env.get(variable) or "").strip()
        if not value:
            raise ConfigError(f"platforms lists whatsapp, but the environment variable "
                              f"{variable} (the whatsapp.{setting} setting) is not set: put "
                              f"{what} there")
        values.append(value)
    return WhatsAppSecrets(*values)


class WhatsAppAdapter:
    """The ``whatsapp`` platform of one business phone number."""

    def __init__(self, settings: WhatsAppConfig, secrets: WhatsAppSecrets, *,
                 client: GraphClient | None = None) -> None:
        #: Always ``whatsapp``.
        self.platform = "whatsapp"
        #: True from a successful ``connect()`` until ``close()``.
        self.connected = False
        #: The phone number (``GET /<phone number id>``), once connected.
        self.phone: dict[str, Any] = {}
        self._settings = settings
        self._secrets = secrets
        self._aliases = dict(settings.lid_aliases or {})
        self._phone_number_id = str(settings.phone_number_id)
        self._client = client or GraphClient(secrets.token, self._phone_number_id,
                                             str(settings.api_base_url))
        #: Messages submitted so far.
        self.submitted = 0
        #: Where messages go (``Gateway.submit``) while the process takes events.
        self._submit: Callable[[MessageEvent], Any] | None = None

    @property
    def client(self) -> GraphClient:
        """The Graph API client."""
        return self._client

    def connect(self) -> dict[str, Any]:
        """Check the token against the phone number. A rejected token raises
        :class:`ConfigError`; an unreachable server :class:`WhatsAppError`."""
        try:
            self.phone = self._client.phone_number()
        except WhatsAppError as exc:
            if exc.rejected_token:
                raise ConfigError(
                    f"WhatsApp rejected the access token in {self._settings.token_env} for "
                    f"phone number id {self._phone_number_id} ({exc}): check it in the app's "
                    "WhatsApp API setup") from None
            raise
        self.connected = True
        log.info("event=whatsapp_connected phone_number_id=%s number=%s",
                 self._phone_number_id, self.phone.get("display_phone_number", "?"))
        return self.phone

    def close(self) -> None:
        """Stop taking messages and sending."""
        self.stop_events()
        self.connected = False
        self._client.close()

    # -- the webhook --------------------------------------------------------------------------

    def routes(self) -> dict[str, dict[str, Callable[[Any], tuple[int, Any]]]]:
        """The HTTP routes this adapter serves (Meta's webhook, not behind the bearer
        token): path -> method -> handler of a
        :class:`~hermes_actors.adapters.http.WebhookRequest`."""
        return {WEBHOOK_PATH: {"GET": self._verify_route, "POST": self._receive_route}}

    def start_events(self, submit: Callable[[MessageEvent], Any]) -> None:
        """Hand messages to ``submit`` (``Gateway.submit``) from now on."""
        self._submit = submit

    def stop_events(self) -> None:
        """Answer webhooks ``503`` from now on (Meta delivers them again later)."""
        self._submit = None

    def _verify_route(self, request: Any) -> tuple[int, Any]:
        try:
            return 200, self.verify(request.query)
        except WebhookRejected as exc:
            return exc.status, {"error": exc.message}

    def _receive_route(self, request: Any) -> tuple[int, Any]:
        submit = self._submit
        if submit is None:
            return 503, {"error": "the gateway is not taking WhatsApp messages now"}
        try:
            count = self.receive(request.body, request.headers.get("x-hub-signature-256"),
                                 submit)
        except WebhookRejected as exc:
            return exc.status, {"error": exc.message}
        return 200, {"messages": count}

    def verify(self, query: Mapping[str, str]) -> str:
        """The answer to Meta's subscription check (``GET``), or :class:`WebhookRejected`."""
        answer = challenge_answer(query, self._secrets.verify_token)
        if answer is None:
            log.warning("event=whatsapp_verify_refused mode=%s",
                        str(query.get("hub.mode", ""))[:20].encode("unicode_escape").decode())
            raise WebhookRejected(403, "verification refused: wrong hub.verify_token or mode")
        log.info("event=whatsapp_verified")
        return answer

    def receive(self, body: bytes, signature: str | None,
                submit: Callable[[MessageEvent], Any]) -> int:
        """Check and store one webhook body (``POST``); returns how many messages it held.
        Returns only once each is durable (``submit``); any failure before is raised (the
        caller answers 5xx and Meta delivers the body again)."""
        if not signature_ok(body, signature, self._secrets.app_secret):
            log.warning("event=whatsapp_bad_signature bytes=%d", len(body))
            raise WebhookRejected(401, "missing or invalid X-Hub-Signature-256")
        try:
            payload = json.loads(body.decode("utf-8"))
            events, skipped = webhook_events(payload, aliases=self._aliases,
                                             phone_number_id=self._phone_number_id)
        except (UnicodeDecodeError, ValueError, TypeError, AttributeError) as exc:
            # Signed by Meta and still unreadable: a retry would not help.
            log.warning("event=whatsapp_unreadable error=%s", type(exc).__name__)
            raise WebhookRejected(400, "the body is not a WhatsApp webhook") from None
        for event in events:
            try:
                submit(event)
            except StoreRejectedError as exc:  # every redelivery would be refused as well
                log.error("event=whatsapp_rejected message_id=%s error=%s",
                          event.source.message_id, exc)
                continue
            self.submitted += 1
        if skipped:
            log.debug("event=whatsapp_skipped messages=%d", skipped)
        return len(events)

    # -- delivery -----------------------------------------------------------------------------

    def send(self, target: SessionSource, text: str) -> SendResult:
        """Send ``text`` to the chat, split at WhatsApp's limit, in order."""
        if not target.chat_id:
            return SendResult(False, error="no chat id to send to")
        to = recipient(target.chat_id)
        parts = split_message(text)
        last: dict[str, Any] = {}
        for index, part in enumerate(parts):
            try:
                last = self._client.send_text(to, part)
            except WhatsAppError as exc:
                # The parts already sent stay sent: a retry sends only the rest.
                error = mask_secrets(str(exc), self._secrets.token, self._secrets.app_secret)
                return SendResult(False, error=error, retry_after=exc.retry_after,
                                  unsent="\n\n".join(parts[index:]) if index else None,
                                  permanent=exc.code in PERMANENT_CODES)
        messages = last.get("messages") if isinstance(last, dict) else None
        first = messages[0] if isinstance(messages, list) and messages else {}
        message_id = first.get("id") if isinstance(first, dict) else None
        return SendResult(True, message_id=str(message_id) if message_id else None)
