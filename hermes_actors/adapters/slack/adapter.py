"""``SlackAdapter``: the gateway's Slack platform over the Events API.

In: Slack posts each event to ``POST /slack/events`` on the gateway's HTTP server
(:meth:`SlackAdapter.handle_events`, a route of the HTTP adapter that the bearer token does
not guard). A request is authenticated by Slack's signature (``X-Slack-Signature`` over the
body and ``X-Slack-Request-Timestamp``, five minutes of tolerance, slack_sdk's
``SignatureVerifier``): a bad or stale one is ``401`` and nothing is read further. A
``url_verification`` answers its challenge. A message is answered ``200`` only once
``submit`` (``Gateway.submit``) returned, that is once it is in the durable inbox; a store
that cannot take it is ``503``, so Slack sends the event again. A retry
(``X-Slack-Retry-Num``) carries the same ``event_id``, which is the event's ``message_id``:
the gateway recognises its ingress key and does not process it again.

Out: a plain :class:`~hermes_actors.adapters.base.PlatformAdapter` whose ``send`` the
delivery ledger calls: ``chat.postMessage`` through slack_sdk's ``WebClient`` (urllib:
green under gevent's monkey-patching), split at :data:`~.mapping.MESSAGE_LIMIT`, in order,
into the thread the message came from. A rate limit (``429``) comes back as
``SendResult.retry_after`` (with the parts not sent yet as ``unsent``), so the delivery
waits it out within its attempts; a refusal for good (``channel_not_found``,
``not_in_channel``, ``is_archived``, ...) is ``SendResult.permanent``.

Lifecycle: ``connect()`` calls ``auth.test`` (a rejected token is a
:class:`~hermes_actors.errors.ConfigError`: exit 2 before anything starts) and learns the
bot's user id, whose messages are ignored; ``start_events(submit)`` after
``Gateway.start()`` (until then events are ``503``: Slack retries); ``stop_events()`` when
the process stops accepting; ``close()`` at the end. The token and the signing secret
appear in no log line and no error.

The Web API part (``connect``, ``send``, the masking) is :class:`SlackApp`, and what is done
with one ``event_callback`` is :func:`take_event`: Socket Mode
(:mod:`~hermes_actors.adapters.slack.socket`) shares both.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from hermes_actors.adapters.base import MaskingFilter, SendResult
from hermes_actors.adapters.slack.mapping import message_event, split_message
from hermes_actors.config import SlackConfig
from hermes_actors.errors import ConfigError, HermesActorsError, StoreError, StoreRejectedError
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.source import SessionSource

__all__ = ["EVENTS_PATH", "TOKEN_REJECTED", "SlackAdapter", "SlackApp", "SlackError",
           "bot_token", "check_secrets", "read_secret", "take_event"]

#: Where Slack posts events (the Request URL of the app's Event Subscriptions).
EVENTS_PATH = "/slack/events"
#: Slack's Web API.
DEFAULT_API_URL = "https://slack.com/api/"
#: ``auth.test`` errors that mean the token itself is refused.
TOKEN_REJECTED = frozenset({"invalid_auth", "not_authed", "account_inactive",
                            "token_revoked", "token_expired", "not_allowed_token_type"})
#: ``chat.postMessage`` errors no retry can fix: the row is abandoned at once.
_PERMANENT = frozenset({"channel_not_found", "not_in_channel", "is_archived",
                        "no_permission", "restricted_action", "team_access_not_granted",
                        "ekm_access_denied", "missing_scope", "cannot_reply_to_message",
                        *TOKEN_REJECTED})
_MASK = "<secret>"

log = logging.getLogger("hermes_actors.slack")


class SlackError(HermesActorsError):
    """A Web API call that failed; the text never contains the token."""

    def __init__(self, message: str, *, status: int | None = None, error: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        #: The HTTP status, or ``None`` when no answer came.
        self.status = status
        #: Slack's ``error`` code (``channel_not_found``, ``ratelimited``), or ``""``.
        self.error = error
        #: Seconds Slack asked to wait (a 429), else ``None``.
        self.retry_after = retry_after

    @property
    def token_rejected(self) -> bool:
        """Whether Slack refused the call's token (revoked, wrong, of another kind)."""
        return self.error in TOKEN_REJECTED or self.status in (401, 403)


def read_secret(env: Mapping[str, str], variable: str, setting: str, what: str) -> str:
    """The value of ``variable``, or a :class:`ConfigError` naming the variable (and the
    ``setting`` naming it) when it is missing or malformed (never its value)."""
    value = (env.get(variable) or "").strip()
    if not value:
        raise ConfigError(f"platforms lists slack, but the environment variable {variable} "
                          f"(the {setting} setting) is not set: put {what} there")
    if any(c.isspace() for c in value):
        raise ConfigError(f"the value of {variable} is malformed (it contains whitespace)")
    return value


def bot_token(env: Mapping[str, str], settings: SlackConfig) -> str:
    """The bot token (``xox...``) from the environment, or a :class:`ConfigError`."""
    token = read_secret(env, settings.bot_token_env, "slack.bot_token_env",
                        "the app's Bot User OAuth Token (xoxb-...)")
    if not token.startswith("xox"):
        raise ConfigError(f"the Slack bot token in {settings.bot_token_env} is malformed "
                          "(expected xoxb-..., the app's Bot User OAuth Token)")
    return token


def check_secrets(env: Mapping[str, str], settings: SlackConfig) -> tuple[str, str]:
    """The bot token and the signing secret from the environment, or a
    :class:`ConfigError` naming the variable that is missing (never its value)."""
    read_secret(env, settings.bot_token_env, "slack.bot_token_env",
                "the app's Bot User OAuth Token (xoxb-...)")  # (a missing one named first)
    secret = read_secret(env, settings.signing_secret_env, "slack.signing_secret_env",
                         "the app's Signing Secret (Basic Information)")
    return bot_token(env, settings), secret


_SDK_LOGGERS = ("slack_sdk", "slack_sdk.web.base_client", "slack_sdk.web.slack_response",
                "slack_sdk.signature")


class SlackApp:
    """What both ways in share: the bot's Web API (``auth.test``, ``chat.postMessage``),
    the secrets masked in errors and slack_sdk's log lines. The gateway sees a subclass:
    :class:`SlackAdapter` (the Events API) or
    :class:`~hermes_actors.adapters.slack.socket.SlackSocketAdapter` (Socket Mode)."""

    def __init__(self, settings: SlackConfig, token: str, *secrets: str,
                 client: Any = None) -> None:
        from slack_sdk.web import WebClient

        #: Always ``slack``.
        self.platform = "slack"
        #: True from a successful ``connect()`` until ``close()``.
        self.connected = False
        #: The bot's user id (``auth.test``), whose messages are ignored.
        self.bot_user_id: str | None = None
        self._settings = settings
        #: The Web API root, with its trailing slash.
        self.base_url = (settings.api_base_url or DEFAULT_API_URL).rstrip("/") + "/"
        self._client = client or WebClient(token=token, base_url=self.base_url)
        #: The secrets masked in its errors and in slack_sdk's log lines.
        self._secrets = tuple(s for s in (token, *secrets) if len(s) >= 8)
        self._mask = MaskingFilter(self._masked)
        for name in _SDK_LOGGERS:
            logging.getLogger(name).addFilter(self._mask)

    # -- lifecycle --------------------------------------------------------------------------

    def connect(self) -> str:
        """``auth.test``: check the token and learn the bot's user id. A rejected token
        raises :class:`ConfigError`; an unreachable API :class:`SlackError`."""
        try:
            answer = self._call("auth.test", self._client.auth_test)
        except SlackError as exc:
            if exc.token_rejected:
                raise ConfigError(
                    f"Slack rejected the bot token in {self._settings.bot_token_env} "
                    f"({exc.error or exc.status}): check the app's Bot User OAuth Token"
                ) from None
            raise
        self.bot_user_id = str(answer.get("user_id") or "") or None
        self.connected = True
        log.info("event=slack_connected bot=%s user_id=%s team_id=%s", answer.get("user"),
                 self.bot_user_id, answer.get("team_id"))
        return self.bot_user_id or ""

    def close(self) -> None:
        """Stop sending; no more masking of slack_sdk's log lines."""
        self.connected = False
        for name in _SDK_LOGGERS:
            logging.getLogger(name).removeFilter(self._mask)

    # -- delivery ---------------------------------------------------------------------------

    def send(self, target: SessionSource, text: str) -> SendResult:
        """Send ``text`` to the channel (and thread), split at Slack's limit, in order."""
        if target.chat_id is None:
            return SendResult(False, error="no channel to send to")
        parts = split_message(text)
        last: Any = None
        for index, part in enumerate(parts):
            try:
                last = self._call("chat.postMessage", self._client.chat_postMessage,
                                  channel=target.chat_id, text=part,
                                  thread_ts=target.thread_id)
            except SlackError as exc:
                # The parts already sent stay sent: a retry sends only the rest.
                return SendResult(False, error=str(exc), retry_after=exc.retry_after,
                                  unsent="\n\n".join(parts[index:]) if index else None,
                                  permanent=exc.error in _PERMANENT)
        return SendResult(True, message_id=str(last.get("ts") or "") or None)

    def _call(self, method: str, call: Callable[..., Any], **params: Any) -> Any:
        """One Web API call: its answer's data, or a :class:`SlackError` (masked)."""
        from slack_sdk.errors import SlackApiError, SlackClientError

        try:
            response = call(**{k: v for k, v in params.items() if v is not None})
        except SlackApiError as exc:
            status = getattr(exc.response, "status_code", None)
            data = getattr(exc.response, "data", None)
            error = str(data.get("error") or "") if isinstance(data, dict) else ""
            retry_after = None
            if status == 429 or error == "ratelimited":
                headers = getattr(exc.response, "headers", None) or {}
                value: Any = next((v for k, v in dict(headers).items()
                                   if k.lower() == "retry-after"), None)
                if isinstance(value, list):  # (slack_sdk keeps some headers as lists)
                    value = value[0] if value else None
                try:
                    retry_after = max(0.0, float(value)) if value is not None else 1.0
                except (TypeError, ValueError):
                    retry_after = 1.0
            raise SlackError(self._masked(f"{method} failed: {status} {error}".strip()),
                             status=status, error=error, retry_after=retry_after) from None
        except (SlackClientError, OSError, ValueError) as exc:
            raise SlackError(self._masked(f"{method} failed: {type(exc).__name__}: {exc}")
                             ) from None
        data = response.data if hasattr(response, "data") else response
        return data if isinstance(data, dict) else {}

    def _masked(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, _MASK)
        return text


class SlackAdapter(SlackApp):
    """The ``slack`` platform of one Slack app (one workspace's bot token), its events
    posted by Slack to :data:`EVENTS_PATH`."""

    def __init__(self, settings: SlackConfig, token: str, signing_secret: str, *,
                 client: Any = None, clock: Any = None) -> None:
        from slack_sdk.signature import Clock, SignatureVerifier

        super().__init__(settings, token, signing_secret, client=client)
        self._verifier = SignatureVerifier(signing_secret, clock or Clock())
        self._submit: Callable[[MessageEvent], Any] | None = None

    def routes(self) -> dict[str, dict[str, Callable[[Any], tuple[int, Any]]]]:
        """The HTTP routes this adapter serves (``POST`` only, not behind the bearer token):
        path -> method -> handler of a :class:`~hermes_actors.adapters.http.WebhookRequest`."""
        return {EVENTS_PATH: {"POST": lambda request: self.handle_events(request.headers,
                                                                         request.body)}}

    def start_events(self, submit: Callable[[MessageEvent], Any]) -> None:
        """Hand events to ``submit`` (``Gateway.submit``) from now on."""
        self._submit = submit
        log.info("event=slack_events path=%s", EVENTS_PATH)

    def stop_events(self) -> None:
        """Answer events ``503`` from now on (Slack sends them again later)."""
        self._submit = None

    def close(self) -> None:
        """Stop taking events and sending."""
        self.stop_events()
        super().close()

    # -- ingress ----------------------------------------------------------------------------

    def handle_events(self, headers: Mapping[str, str], body: bytes) -> tuple[int, Any]:
        """Answer one ``POST /slack/events``: ``(status, JSON body)``. ``headers`` are
        lower-cased names."""
        timestamp = headers.get("x-slack-request-timestamp") or ""
        signature = headers.get("x-slack-signature") or ""
        if not self._valid_signature(body, timestamp, signature):
            log.warning("event=slack_rejected reason=bad_or_stale_signature")
            return 401, {"error": "invalid or stale Slack signature"}
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict):
                raise ValueError("not an object")
        except ValueError:
            return 400, {"error": "the body is not a JSON object"}
        kind = payload.get("type")
        if kind == "url_verification":
            return 200, {"challenge": payload.get("challenge")}
        if kind != "event_callback":
            log.info("event=slack_skipped type=%s", str(kind)[:40])
            return 200, {"ok": True}
        event_id = str(payload.get("event_id") or "")[:64]
        retry = headers.get("x-slack-retry-num")
        if retry:
            log.info("event=slack_retry event_id=%s retry_num=%s reason=%s", event_id,
                     retry[:8], (headers.get("x-slack-retry-reason") or "")[:40])
        outcome = take_event(payload, self._submit, self.bot_user_id)
        if outcome in _NOT_TAKEN:
            return 503, {"error": _NOT_TAKEN[outcome]}
        if outcome == "skipped" or outcome == "rejected":
            return 200, {"ok": True}
        return 200, {"ok": True, "duplicate": outcome == "duplicate"}

    def _valid_signature(self, body: bytes, timestamp: str, signature: str) -> bool:
        if not timestamp or not signature:
            return False
        try:
            return bool(self._verifier.is_valid(body, timestamp, signature))
        except (ValueError, TypeError):  # a timestamp that is no number
            return False


#: What :func:`take_event` answers when the event is not durable (Slack sends it again).
_NOT_TAKEN = {"unavailable": "the session store cannot take the event now",
              "stopping": "the gateway is not taking messages now"}


def take_event(payload: dict[str, Any], submit: Callable[[MessageEvent], Any] | None,
               bot_user_id: str | None) -> str:
    """Hand one ``event_callback`` (posted, or carried by a Socket Mode envelope) to
    ``submit`` (``Gateway.submit``, ``None`` while the gateway does not take events).
    Returns what came of it: ``stored`` (durable now), ``duplicate`` (the inbox had it:
    Slack's retry), ``skipped`` (nothing the agent answers), ``rejected`` (the store
    refuses what it carries: every retry would be refused the same way) — acknowledge
    these — or ``unavailable`` / ``stopping`` (not durable: leave it for Slack's retry)."""
    event_id = str(payload.get("event_id") or "")[:64]
    try:
        event = message_event(payload, bot_user_id=bot_user_id)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        log.warning("event=slack_skipped event_id=%s error=%s", event_id, type(exc).__name__)
        return "skipped"
    if event is None:
        log.debug("event=slack_skipped event_id=%s", event_id)
        return "skipped"
    if submit is None:
        return "stopping"
    try:
        accepted = submit(event)
    except StoreRejectedError as exc:
        log.error("event=slack_rejected event_id=%s error=%s", event_id, exc)
        return "rejected"
    except StoreError as exc:
        log.warning("event=slack_not_stored event_id=%s error=%s", event_id, exc)
        return "unavailable"
    except HermesActorsError:  # the gateway is stopping
        return "stopping"
    if accepted != event.event_id:
        log.info("event=slack_duplicate event_id=%s", event_id)
        return "duplicate"
    return "stored"
