"""``BotClient``: the four Bot API calls the adapter makes, through pyTelegramBotAPI, with the
token kept out of every error and log line.

Why pyTelegramBotAPI (``telebot``): it is synchronous and pure Python over ``requests``, so
under ``gevent.monkey.patch_all()`` its calls wait on gevent's sockets and a long poll costs
one greenlet; the asyncio libraries would need an event loop the gevent hub does not run.
Only its request layer (``TeleBot`` methods, ``apihelper``) and its types are used; its own
polling loop and handler threads are not (the adapter decides when an update is
acknowledged, see :mod:`~hermes_actors.adapters.telegram.poller`).

Why a wrapper at all: the Bot API puts the token in the URL (``/bot<token>/sendMessage``),
and telebot's and requests' errors name the URL. Every call goes through
:meth:`BotClient._call`, which turns any failure into a :class:`TelegramError` whose text has
the token masked and which keeps what the adapter decides on: the status (Telegram's
``error_code``, or ``None`` when the server was not reached), Telegram's description and
``retry_after``. The original exception is dropped (``from None``), so no traceback shows it.
Loggers that print URLs at debug level (urllib3's) get a filter masking the token too.

telebot keeps its API URL and HTTP session in module globals (``apihelper.API_URL``,
``apihelper.session``): a process talks to one Bot API server at a time. Clients register the
server they use; a second open client asking for another one is refused.
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import requests
from telebot import TeleBot, apihelper, types

from hermes_actors.adapters.base import MaskingFilter
from hermes_actors.errors import ConfigError, HermesActorsError

__all__ = ["DEFAULT_API_URL", "BotClient", "TelegramError", "mask_token"]

#: Telegram's own Bot API server.
DEFAULT_API_URL = "https://api.telegram.org"
#: Seconds to wait for a connection to the Bot API server.
CONNECT_TIMEOUT = 10
#: Loggers that may print a request URL (and so the token) at debug level.
_URL_LOGGERS = ("TeleBot", "urllib3", "urllib3.connectionpool", "urllib3.connection",
                "urllib3.util.retry", "requests")
_MASK = "<token>"

T = TypeVar("T")


class TelegramError(HermesActorsError):
    """A Bot API call that failed; the text never contains the token."""

    def __init__(self, message: str, *, status: int | None = None,
                 retry_after: float | None = None, description: str = "") -> None:
        super().__init__(message)
        #: Telegram's ``error_code`` (an HTTP status), or ``None`` when no answer came.
        self.status = status
        #: Seconds Telegram asked to wait (a 429), else ``None``.
        self.retry_after = retry_after
        #: Telegram's description of the error (masked), or ``""``.
        self.description = description

    @property
    def rejected_token(self) -> bool:
        """Whether Telegram refused the token itself (401, or 404 for a malformed one)."""
        return self.status in (401, 404)


def mask_token(text: str, token: str) -> str:
    """``text`` with ``token`` (also percent-encoded, also its secret half) replaced."""
    if not token:
        return text
    for form in (token, urllib.parse.quote(token, safe=""), token.partition(":")[2]):
        if form and len(form) >= 8:
            text = text.replace(form, _MASK)
    return text


class _Library:
    """telebot's process-wide settings, and who uses them (the one piece of global state)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users: dict[str, int] = {}
        #: The tokens masked in telebot's log lines (those of the adapters that use it).
        self.tokens: set[str] = set()
        self.mask = MaskingFilter(self._masked)
        for name in _URL_LOGGERS:
            logging.getLogger(name).addFilter(self.mask)

    def _masked(self, text: str) -> str:
        for token in tuple(self.tokens):
            text = mask_token(text, token)
        return text

    def acquire(self, base_url: str, token: str) -> None:
        with self.lock:
            others = [url for url, count in self.users.items() if count and url != base_url]
            if others:
                raise ConfigError(
                    f"this process already talks to the Bot API at {others[0]}; "
                    f"pyTelegramBotAPI serves one server per process (asked: {base_url})"
                )
            self.users[base_url] = self.users.get(base_url, 0) + 1
            self.tokens.add(token)
            # telebot declares these module globals as None-typed: set them by name.
            setattr(apihelper, "API_URL", base_url + "/bot{0}/{1}")  # noqa: B010
            setattr(apihelper, "FILE_URL", base_url + "/file/bot{0}/{1}")  # noqa: B010
            if apihelper.session is None:
                # One pooled session for every greenlet: telebot would otherwise open a new
                # one (a new TLS handshake) in each turn worker.
                setattr(apihelper, "session", requests.Session())  # noqa: B010

    def release(self, base_url: str) -> None:
        with self.lock:
            if self.users.get(base_url):
                self.users[base_url] -= 1


_library = _Library()


class BotClient:
    """The Bot API calls of one bot (``token``) on ``api_base_url`` (default Telegram's)."""

    def __init__(self, token: str, api_base_url: str | None = None) -> None:
        self.base_url = (api_base_url or DEFAULT_API_URL).rstrip("/")
        self._token = token
        _library.acquire(self.base_url, token)
        self._closed = False
        self._bot = TeleBot(token, threaded=False, validate_token=False)

    def close(self) -> None:
        """Stop using the library's settings (another server may be used afterwards)."""
        if not self._closed:
            self._closed = True
            _library.release(self.base_url)

    def get_me(self) -> types.User:
        """``getMe``: the bot's own user (checks the token)."""
        return self._call("getMe", self._bot.get_me)

    def get_updates(self, offset: int | None, timeout: int) -> list[types.Update]:
        """``getUpdates`` from ``offset`` (confirming every update below it), waiting up to
        ``timeout`` seconds for one; only ``message`` updates are asked for."""
        return self._call("getUpdates", self._bot.get_updates, offset=offset,
                          timeout=CONNECT_TIMEOUT, long_polling_timeout=timeout,
                          allowed_updates=["message"])

    def send_message(self, chat_id: str, text: str, thread_id: str | None = None
                     ) -> types.Message:
        """``sendMessage`` of plain ``text`` to the chat (and forum topic)."""
        return self._call("sendMessage", self._bot.send_message, chat_id, text,
                          message_thread_id=_thread(thread_id))

    def send_chat_action(self, chat_id: str, thread_id: str | None = None,
                         action: str = "typing") -> None:
        """``sendChatAction``: "typing…" (for about five seconds) in the chat (and topic)."""
        self._call("sendChatAction", self._bot.send_chat_action, chat_id, action,
                   message_thread_id=_thread(thread_id))

    def _call(self, method: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except apihelper.ApiTelegramException as exc:
            description = self._mask(str(exc.description))
            retry_after = _retry_after(exc.result_json)
            raise TelegramError(
                f"Telegram refused {method}: {exc.error_code} {description}",
                status=int(exc.error_code), retry_after=retry_after, description=description,
            ) from None
        except apihelper.ApiHTTPException as exc:
            status = int(getattr(exc.result, "status_code", 0) or 0) or None
            raise TelegramError(f"the Bot API answered {method} with HTTP {status}",
                                status=status) from None
        except apihelper.ApiException:
            raise TelegramError(f"the Bot API answered {method} with invalid JSON") from None
        except requests.RequestException as exc:
            raise TelegramError(f"cannot reach the Bot API at {self.base_url} ({method}): "
                                f"{self._mask(str(exc))}") from None
        except Exception as exc:  # noqa: BLE001 - anything else from the library, masked
            raise TelegramError(f"{method} failed: {type(exc).__name__}: "
                                f"{self._mask(str(exc))}") from None

    def _mask(self, text: str) -> str:
        return mask_token(text, self._token)


def _thread(thread_id: str | None) -> int | None:
    return int(thread_id) if thread_id and thread_id.lstrip("-").isdigit() else None


def _retry_after(result: Any) -> float | None:
    parameters = result.get("parameters") if isinstance(result, dict) else None
    value = parameters.get("retry_after") if isinstance(parameters, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None
