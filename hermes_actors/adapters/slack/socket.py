"""``SlackSocketAdapter``: the Slack platform over Socket Mode, for a gateway Slack cannot
post to (no public HTTPS address).

The gateway opens the connection: ``apps.connections.open`` (Web API, with the app-level
``xapp-`` token) hands out a websocket URL, and Slack sends each event over it in an
envelope that must be acknowledged (``{"envelope_id": ...}``); an envelope left
unacknowledged is sent again (the same ``event_id``, ``retry_attempt`` counting up), also
on the next connection. So an envelope is acknowledged only once ``submit``
(``Gateway.submit``) returned, that is once its message is in the durable inbox, or once it
is known to be nothing the agent answers; a ``kill -9`` before that loses nothing, and the
envelope that comes again is recognised by its ``event_id`` (the message's ingress key)
and not answered twice (:func:`~hermes_actors.adapters.slack.adapter.take_event`, as for
the Events API).

The client is slack_sdk's built-in ``SocketModeClient``: its websocket is written on the
standard library's ``socket``/``ssl`` and its workers are ``threading`` threads, so under
gevent's monkey-patching it is all greenlets and cooperative sockets, with no dependency
beyond slack_sdk (the ``websocket_client``, ``aiohttp`` and ``websockets`` variants were
rejected: another package, or an asyncio loop beside the hub). Replies still go through
the Web API (``chat.postMessage``, :class:`~.adapter.SlackApp`).

The connection is a *pull* adapter in the gateway's sense (``lease_name``,
``start_polling``, ``stop_polling``, as Telegram's ``getUpdates``): standalone, it runs from
start to stop; on a cluster node only while the node holds the lease ``slack:<app id>``
(``runtime/pull_adapters``), so one node at a time receives the app's events. It is given
``time_left`` (the lease's local deadline): past it nothing is submitted or acknowledged
(Slack sends it again, to whichever node connects next) and the connection is closed.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any

from hermes_actors.adapters.backoff import pause_after
from hermes_actors.adapters.slack.adapter import (
    SlackApp,
    SlackError,
    bot_token,
    read_secret,
    take_event,
)
from hermes_actors.config import SlackConfig
from hermes_actors.errors import ConfigError
from hermes_actors.model.events import MessageEvent

__all__ = ["SlackSocketAdapter", "SocketReceiver", "check_socket_secrets", "lease_name"]

log = logging.getLogger("hermes_actors.slack")

#: Seconds between looks at the connection while it is up (it reconnects by itself too).
CHECK_INTERVAL = 1.0
#: The logger slack_sdk's Socket Mode client writes to (masked like the Web API's).
SOCKET_LOGGER = "slack_sdk.socket_mode"
#: Outcomes of :func:`take_event` that leave the envelope unacknowledged.
_KEEP = frozenset({"unavailable", "stopping"})


def check_socket_secrets(env: Mapping[str, str], settings: SlackConfig) -> tuple[str, str]:
    """The bot token and the app-level token from the environment, or a
    :class:`ConfigError` naming the variable that is missing or malformed."""
    read_secret(env, settings.bot_token_env, "slack.bot_token_env",
                "the app's Bot User OAuth Token (xoxb-...)")  # (a missing one named first)
    app_token = read_secret(
        env, settings.app_token_env, "slack.app_token_env",
        "an app-level token with the connections:write scope (xapp-..., Basic "
        "Information, App-Level Tokens): slack.mode socket needs it")
    if not app_token.startswith("xapp-"):
        raise ConfigError(f"the Slack app-level token in {settings.app_token_env} is "
                          "malformed (expected xapp-..., an App-Level Token)")
    return bot_token(env, settings), app_token


def lease_name(app_token: str) -> str:
    """``slack:<app id>`` (the app id is the token's third field, ``xapp-1-A0123-...``);
    a digest of the token when it has none."""
    parts = app_token.split("-")
    if len(parts) > 3 and parts[2][:1] == "A" and parts[2].isalnum():
        return f"slack:{parts[2]}"
    return "slack:" + hashlib.sha256(app_token.encode()).hexdigest()[:16]


class SocketReceiver:
    """One run of the Socket Mode connection: connects (again, with a growing pause, while
    it fails), takes each envelope, and ends at :meth:`stop` or when ``time_left()``
    reaches 0. ``submit`` must return only once the event is durable; while the gateway
    does not accept messages, envelopes are left unacknowledged (Slack sends them again)."""

    def __init__(self, app_token: str, web_client: Any, submit: Callable[[MessageEvent], Any],
                 *, bot_user_id: str | None,
                 time_left: Callable[[], float] | None = None,
                 ping_interval: float = 5.0) -> None:
        self._app_token = app_token
        self._web_client = web_client
        self._submit = submit
        self._bot_user_id = bot_user_id
        self._time_left = time_left
        self._ping_interval = ping_interval
        self._stopped = threading.Event()
        self._client: Any = None
        self._client_lock = threading.Lock()
        #: Envelopes acknowledged so far.
        self.acknowledged = 0
        #: Set once the loop has ended.
        self.finished = threading.Event()

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called or the loop ended."""
        return self._stopped.is_set() or self.finished.is_set()

    def start(self) -> SocketReceiver:
        """Run :meth:`run` in a thread (a greenlet under gevent's patching); returns
        ``self``."""
        threading.Thread(target=self.run, name="slack-socket-mode", daemon=True).start()
        return self

    def stop(self, wait: float | None = None) -> None:
        """Close the connection (an envelope being submitted finishes first); waits up to
        ``wait`` seconds for the loop to end, when given."""
        self._stopped.set()
        self._close_client()
        if wait is not None:
            self.finished.wait(wait)

    def _left(self) -> float | None:
        return None if self._time_left is None else self._time_left()

    def run(self) -> None:
        """Connect and stay connected until stopped or past the deadline."""
        from slack_sdk.socket_mode.builtin import SocketModeClient

        sdk_log = logging.getLogger(SOCKET_LOGGER)
        if sdk_log.level == logging.NOTSET and not log.isEnabledFor(logging.DEBUG):
            sdk_log.setLevel(logging.WARNING)  # its connection chatter: our event= lines say it
        failures = 0
        try:
            with self._client_lock:
                if self._stopped.is_set():
                    return
                client = self._client = SocketModeClient(
                    app_token=self._app_token, web_client=self._web_client,
                    logger=logging.getLogger(SOCKET_LOGGER),
                    ping_interval=self._ping_interval, concurrency=4)
                client.socket_mode_request_listeners.append(self._on_request)
            while not self._stopped.is_set():
                left = self._left()
                if left is not None and left <= 0:
                    log.info("event=slack_socket_stopped reason=lease_deadline")
                    return
                pause = CHECK_INTERVAL
                if not client.is_connected():
                    error = self._connect(client)
                    if error is None:
                        failures = 0
                        log.info("event=slack_socket_connected session=%s",
                                 client.session_id())
                    elif not self._stopped.is_set():
                        pause = pause_after(failures)
                        failures += 1
                        log.warning("event=slack_socket_failed error=%s retry_in=%.0fs",
                                    error, pause)
                self._stopped.wait(pause if left is None else max(0.0, min(pause, left)))
        finally:
            self._close_client()
            self.finished.set()

    @staticmethod
    def _connect(client: Any) -> str | None:
        """One connection attempt: ``None``, or what failed (no secret in it)."""
        from slack_sdk.errors import SlackApiError

        try:
            client.connect_to_new_endpoint()
        except SlackApiError as exc:
            data = getattr(exc.response, "data", None)
            error = data.get("error") if isinstance(data, dict) else None
            return f"apps.connections.open: {error or type(exc).__name__}"
        except Exception as exc:  # noqa: BLE001 - the loop outlives any failure
            return f"{type(exc).__name__}"
        return None if client.is_connected() else "the websocket did not open"

    def _close_client(self) -> None:
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                _wake_receive(client)
                client.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                log.debug("event=slack_socket_close_failed", exc_info=True)

    def _on_request(self, client: Any, request: Any) -> None:
        """One envelope (on one of the client's workers)."""
        from slack_sdk.socket_mode.response import SocketModeResponse

        if self._stopped.is_set():
            return  # not acknowledged: it comes again
        if request.type == "events_api":
            left = self._left()
            if left is not None and left <= 0:
                return  # the lease may be another node's by now: it takes this again
            payload = request.payload if isinstance(request.payload, dict) else {}
            if request.retry_attempt:
                log.info("event=slack_retry event_id=%s retry_num=%s reason=%s",
                         str(payload.get("event_id") or "")[:64], request.retry_attempt,
                         str(request.retry_reason or "")[:40])
            if payload.get("type") == "event_callback":
                if take_event(payload, self._submit, self._bot_user_id) in _KEEP:
                    return  # not durable: Slack sends it again
        # slash commands, interactivity: not for the agent, acknowledged and dropped
        try:
            client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
            self.acknowledged += 1
        except Exception as exc:  # noqa: BLE001 - the envelope simply comes again
            log.warning("event=slack_ack_failed envelope=%s error=%s",
                        str(request.envelope_id)[:64], type(exc).__name__)


def _wake_receive(client: Any) -> None:
    """End the client's receive and dispatch at once: the receive holds the socket's
    receive lock, which closing needs, for up to its 3 s receive timeout, and the dispatcher
    looks for the end every second (the stop of a process, a lease's handover).
    The session is marked ended first, so that the woken receive does not go on; this
    touches the client's attributes only through ``getattr`` (absent: the close waits)."""
    client.auto_reconnect_enabled = False
    queue = getattr(client, "message_queue", None)
    if queue is not None:  # (its dispatcher waits on it for up to 1 s between looks)
        client.closed = True
        queue.put(None)
    state = getattr(client, "current_session_state", None)
    sock = getattr(getattr(client, "current_session", None), "sock", None)
    if state is not None and sock is not None:
        state.terminated = True
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class SlackSocketAdapter(SlackApp):
    """The ``slack`` platform of one Slack app in Socket Mode (``slack.mode: socket``)."""

    def __init__(self, settings: SlackConfig, token: str, app_token: str, *,
                 client: Any = None, ping_interval: float = 5.0) -> None:
        from slack_sdk.web import WebClient

        super().__init__(settings, token, app_token, client=client)
        self._app_token = app_token
        #: The Web API client of ``apps.connections.open`` (the app token, not the bot's).
        self._app_client = WebClient(base_url=self.base_url)
        self._ping_interval = ping_interval
        self._receiver: SocketReceiver | None = None
        #: The lease a cluster node holds while it receives the app's events.
        self.lease_name = lease_name(app_token)
        logging.getLogger(SOCKET_LOGGER).addFilter(self._mask)

    @property
    def poller(self) -> SocketReceiver | None:
        """The running receiver, once started."""
        return self._receiver

    def connect(self) -> str:
        """``auth.test`` for the bot token, then ``apps.connections.open`` for the app token:
        either rejected is a :class:`ConfigError`."""
        user_id = super().connect()
        try:
            self._call("apps.connections.open", self._app_client.apps_connections_open,
                       app_token=self._app_token)
        except SlackError as exc:
            if exc.token_rejected:
                raise ConfigError(
                    f"Slack rejected the app-level token in {self._settings.app_token_env} "
                    f"({exc.error or exc.status}): check the App-Level Token and its "
                    "connections:write scope, and that Socket Mode is on") from None
            raise
        return user_id

    def start_polling(self, submit: Callable[[MessageEvent], Any], *,
                      checkpoint: Callable[[str], None] = lambda name: None,
                      time_left: Callable[[], float] | None = None) -> SocketReceiver:
        """Connect and hand events to ``submit`` until :meth:`stop_polling` (or
        ``time_left()`` reaching 0)."""
        if self._receiver is not None and not self._receiver.stopped:
            raise RuntimeError("the Slack Socket Mode connection is already running")
        self._receiver = SocketReceiver(self._app_token, self._app_client, submit,
                                        bot_user_id=self.bot_user_id, time_left=time_left,
                                        ping_interval=self._ping_interval).start()
        log.info("event=slack_socket_mode lease=%s", self.lease_name)
        return self._receiver

    def stop_polling(self, wait: float | None = None) -> None:
        """Close the connection (what was not acknowledged comes again)."""
        if self._receiver is not None:
            self._receiver.stop(wait)

    def close(self) -> None:
        """Close the connection and stop sending."""
        self.stop_polling(wait=10)
        logging.getLogger(SOCKET_LOGGER).removeFilter(self._mask)
        super().close()
