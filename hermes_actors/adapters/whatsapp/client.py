"""``GraphClient``: the two Cloud API calls the adapter makes (``GET /<phone number id>`` to
check the token, ``POST /<phone number id>/messages`` to send), through ``requests``, with the
token kept out of every error and log line.

``requests`` is synchronous: under ``gevent.monkey.patch_all()`` (``hermes-actors run``) its
sockets are gevent's, so a send waits in its own greenlet. The token travels only in the
``Authorization`` header; every failure is turned into a :class:`WhatsAppError` whose text
has the token masked anyway (an error may quote a request), keeping what the adapter decides
on: the HTTP status, Meta's error ``code`` and the seconds to wait before a retry. The
original exception is dropped (``from None``), so no traceback shows it.
"""

from __future__ import annotations

import logging
from typing import Any

import requests

from hermes_actors.errors import HermesActorsError

__all__ = ["GraphClient", "WhatsAppError", "mask_secrets"]

#: Seconds to wait for a connection, then for an answer.
TIMEOUTS = (10.0, 30.0)
#: Meta's codes of a rate limit (besides an HTTP 429): throughput, spam rate, pair rate, and
#: the application's call budget.
RATE_LIMIT_CODES = frozenset({4, 80007, 130429, 131048, 131056})
#: Seconds to wait after a rate limit that named none.
DEFAULT_RETRY_AFTER = 2.0
#: Meta's codes of a token it rejects (expired, revoked, malformed).
TOKEN_CODES = frozenset({190})
_MASK = "<token>"

log = logging.getLogger("hermes_actors.whatsapp")


def mask_secrets(text: str, *secrets: str | None) -> str:
    """``text`` with each of ``secrets`` (of 8 characters or more) replaced."""
    for secret in secrets:
        if secret and len(secret) >= 8:
            text = text.replace(secret, _MASK)
    return text


class WhatsAppError(HermesActorsError):
    """A Cloud API call that failed; the text never contains the token."""

    def __init__(self, message: str, *, status: int | None = None, code: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        #: The HTTP status, or ``None`` when the server was not reached.
        self.status = status
        #: Meta's ``error.code``, when it gave one.
        self.code = code
        #: Seconds to wait before trying again (a rate limit), else ``None``.
        self.retry_after = retry_after

    @property
    def rejected_token(self) -> bool:
        """Whether Meta refused the token itself."""
        return self.status == 401 or self.code in TOKEN_CODES


class GraphClient:
    """The Cloud API calls of one phone number on ``api_base_url`` (the Graph API root)."""

    def __init__(self, token: str, phone_number_id: str, api_base_url: str) -> None:
        self.base_url = api_base_url.rstrip("/")
        self.phone_number_id = phone_number_id
        self._token = token
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {token}"

    def close(self) -> None:
        """Close the pooled connections."""
        self._session.close()

    def phone_number(self) -> dict[str, Any]:
        """``GET /<phone number id>``: the number the token may send from."""
        return self._call("GET", f"/{self.phone_number_id}",
                          params={"fields": "display_phone_number,verified_name"})

    def send_text(self, to: str, body: str) -> dict[str, Any]:
        """Send one text message to ``to`` (digits); returns Meta's answer."""
        return self._call("POST", f"/{self.phone_number_id}/messages", json={
            "messaging_product": "whatsapp", "recipient_type": "individual", "to": to,
            "type": "text", "text": {"preview_url": False, "body": body}})

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        what = f"{method} {path.split('/')[-1] if path.count('/') > 1 else 'phone number'}"
        try:
            response = self._session.request(method, self.base_url + path, timeout=TIMEOUTS,
                                             **kwargs)
        except requests.RequestException as exc:
            raise WhatsAppError(mask_secrets(
                f"{what}: the Graph API at {self.base_url} was not reached "
                f"({type(exc).__name__}: {exc})", self._token)) from None
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.ok and isinstance(data, dict):
            return data
        error = data.get("error") if isinstance(data, dict) else None
        error = error if isinstance(error, dict) else {}
        code = error.get("code") if isinstance(error.get("code"), int) else None
        message = str(error.get("message") or response.reason or "no description")
        retry_after = None
        if response.status_code == 429 or code in RATE_LIMIT_CODES:
            retry_after = _seconds(response.headers.get("Retry-After")) or DEFAULT_RETRY_AFTER
        raise WhatsAppError(mask_secrets(
            f"{what}: {response.status_code} {message}"
            + (f" (code {code})" if code is not None else ""), self._token),
            status=response.status_code, code=code, retry_after=retry_after)


def _seconds(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 < seconds < 3600 else None
