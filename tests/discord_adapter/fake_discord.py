"""A fake Discord on loopback, written for these tests: the REST API and the Gateway.

One aiohttp server on its own event loop in a daemon thread serves both:

* REST under ``<url>`` (``discord.api_base_url``): ``GET /users/@me`` (``401`` for any other
  token), ``GET /gateway/bot`` (naming the fake Gateway), ``GET /channels/<id>`` (the
  channels the test declared), ``POST /channels/<id>/messages`` and ``POST
  /channels/<id>/typing``, each with ``Authorization: Bot <token>``; a failure injected with
  :meth:`FakeDiscord.fail` answers as Discord does (a ``429`` carries ``retry_after`` in its
  JSON body and ``Retry-After``).
* the Gateway at ``<gateway_url>`` (a websocket): ``HELLO`` on connect, ``IDENTIFY`` answered
  with ``READY`` (a wrong token closes with ``4004``), ``HEARTBEAT`` with
  ``HEARTBEAT_ACK``, ``RESUME`` with ``RESUMED``; :meth:`FakeDiscord.dispatch` sends a
  ``DISPATCH`` (``op 0``) with the next sequence number to every identified session. With
  ``compress=zlib-stream`` in the query (hikari asks for it) every frame is a piece of one
  zlib stream ending in ``Z_SYNC_FLUSH``, as Discord sends it.

Tests wait for what the client did (:meth:`FakeDiscord.wait_for`) on a condition notified at
every request and every Gateway frame: nothing sleeps.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

#: The bot's user id, and a token that names it (base64 of the id, as Discord's do).
BOT_ID = "1100000000000000001"
TOKEN = base64.b64encode(BOT_ID.encode()).decode().rstrip("=") + ".GtEsT1.fake-discord-secret-token-0123"
BOT_USER = {"id": BOT_ID, "username": "hermes", "discriminator": "0", "global_name": "Hermes",
            "avatar": None, "bot": True, "mfa_enabled": False, "flags": 0, "verified": True}
ALICE = {"id": "2200000000000000001", "username": "alice", "discriminator": "0",
         "global_name": "Alice", "avatar": None}
BOB = {"id": "2200000000000000002", "username": "bob", "discriminator": "0",
       "global_name": "Bob", "avatar": None}
GUILD = "3300000000000000001"
#: Milliseconds between heartbeats the fake asks for (HELLO).
HEARTBEAT_MS = 41_250

_ids = itertools.count(5_000_000_000_000_000_000)
_SYNC_FLUSH = b"\x00\x00\xff\xff"


def snowflake() -> str:
    """A fresh id (the fake's messages)."""
    return str(next(_ids))


@dataclass
class Call:
    """One REST request the fake answered."""

    method: str
    path: str
    body: Any
    status: int
    at: float = field(default_factory=time.monotonic)


@dataclass
class _Failure:
    method: str
    path: str
    status: int
    body: dict[str, Any]
    headers: dict[str, str]
    times: int


@dataclass
class Session:
    """One Gateway connection."""

    ws: web.WebSocketResponse
    compressor: Any
    identify: dict[str, Any] | None = None
    resumed: bool = False
    seq: int = 0
    frames: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False


class FakeDiscord:
    """The server; ``url`` is the REST root (``discord.api_base_url``), ``gateway_url`` the
    Gateway's (what ``/gateway/bot`` names)."""

    def __init__(self, token: str = TOKEN, *, heartbeat_ms: int = HEARTBEAT_MS) -> None:
        self.token = token
        self.heartbeat_ms = heartbeat_ms
        self.cond = threading.Condition()
        self.calls: list[Call] = []
        self.failures: list[_Failure] = []
        self.sessions: list[Session] = []
        #: channel id -> the channel object ``GET /channels/<id>`` answers.
        self.channels: dict[str, dict[str, Any]] = {}
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True,
                                        name="fake-discord")
        self._thread.start()
        started.wait(10)
        self.url = f"http://127.0.0.1:{self.port}/api/v10"
        self.gateway_url = f"ws://127.0.0.1:{self.port}/gateway"

    # -- the server's thread ----------------------------------------------------------------

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_route("*", "/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self.loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        started.set()
        self.loop.run_forever()

    def close(self) -> None:
        async def stop() -> None:
            for session in list(self.sessions):
                if not session.closed:
                    await session.ws.close()
            await self._runner.cleanup()

        try:
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def _notify(self) -> None:
        with self.cond:
            self.cond.notify_all()

    # -- REST -------------------------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        status, answer, headers = self._answer(request.method, path, body,
                                               request.headers.get("Authorization"))
        with self.cond:
            self.calls.append(Call(request.method, path, body, status))
            self.cond.notify_all()
        if status == 204:
            return web.Response(status=204, headers=headers)
        return web.json_response(answer, status=status, headers=headers)

    def _answer(self, method: str, path: str, body: Any, auth: str | None
                ) -> tuple[int, Any, dict[str, str]]:
        if auth != f"Bot {self.token}":
            return 401, {"message": "401: Unauthorized", "code": 0}, {}
        with self.cond:
            for failure in self.failures:
                if failure.method == method and failure.path == path and failure.times > 0:
                    failure.times -= 1
                    return failure.status, failure.body, failure.headers
        if method == "GET" and path == "/users/@me":
            return 200, BOT_USER, {}
        if method == "GET" and path == "/gateway/bot":
            return 200, {"url": self.gateway_url, "shards": 1,
                         "session_start_limit": {"total": 1000, "remaining": 999,
                                                 "reset_after": 0, "max_concurrency": 1}}, {}
        parts = path.strip("/").split("/")
        if len(parts) >= 2 and parts[0] == "channels":
            channel = parts[1]
            if method == "GET" and len(parts) == 2:
                found = self.channels.get(channel)
                if found is None:
                    return 404, {"message": "Unknown Channel", "code": 10003}, {}
                return 200, found, {}
            if method == "POST" and parts[2:] == ["typing"]:
                return 204, None, {}
            if method == "POST" and parts[2:] == ["messages"]:
                return 200, message_object(channel, (body or {}).get("content", ""),
                                           author=BOT_USER), {}
        return 404, {"message": "404: Not Found", "code": 0}, {}

    # -- the Gateway ------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        compress = request.query.get("compress") == "zlib-stream"
        session = Session(ws, zlib.compressobj() if compress else None)
        with self.cond:
            self.sessions.append(session)
        await self._send(session, {"op": 10, "d": {"heartbeat_interval": self.heartbeat_ms}})
        try:
            async for frame in ws:
                if frame.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                    continue  # (hikari sends its JSON in binary frames)
                payload = json.loads(frame.data)
                with self.cond:
                    session.frames.append(payload)
                    self.cond.notify_all()
                op = payload.get("op")
                if op == 1:
                    await self._send(session, {"op": 11})
                elif op == 2:
                    if payload["d"].get("token") != self.token:
                        await ws.close(code=4004, message=b"Authentication failed.")
                        break
                    with self.cond:
                        session.identify = payload["d"]
                    await self._dispatch(session, "READY", {
                        "v": 10, "user": BOT_USER, "guilds": [{"id": GUILD,
                                                                "unavailable": True}],
                        "session_id": f"session-{len(self.sessions)}",
                        "resume_gateway_url": self.gateway_url, "shard": [0, 1],
                        "application": {"id": BOT_ID, "flags": 0}})
                elif op == 6:
                    with self.cond:
                        session.identify = payload["d"]
                        session.resumed = True
                        session.seq = int(payload["d"].get("seq") or 0)
                    await self._dispatch(session, "RESUMED", {})
        finally:
            with self.cond:
                session.closed = True
                self.cond.notify_all()
        return ws

    async def _send(self, session: Session, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        if session.compressor is None:
            await session.ws.send_str(data.decode())
            return
        chunk = session.compressor.compress(data) + session.compressor.flush(zlib.Z_SYNC_FLUSH)
        assert chunk.endswith(_SYNC_FLUSH)
        await session.ws.send_bytes(chunk)

    async def _dispatch(self, session: Session, name: str, data: dict[str, Any]) -> None:
        session.seq += 1
        await self._send(session, {"op": 0, "t": name, "s": session.seq, "d": data})

    # -- what tests do ----------------------------------------------------------------------

    def live(self) -> list[Session]:
        """The identified sessions still open."""
        with self.cond:
            return [s for s in self.sessions if s.identify is not None and not s.closed]

    def dispatch(self, name: str, data: dict[str, Any]) -> None:
        """Send one ``DISPATCH`` to every identified session (waits until sent)."""
        async def send() -> None:
            for session in self.live():
                await self._dispatch(session, name, data)

        asyncio.run_coroutine_threadsafe(send(), self.loop).result(10)

    def message(self, channel_id: str, content: str, *, author: dict | None = None,
                guild_id: str | None = None, message_id: str | None = None,
                **fields: Any) -> dict[str, Any]:
        """Dispatch ``MESSAGE_CREATE`` of a new message (in a guild when ``guild_id``);
        returns its payload (send it again with :meth:`dispatch` to redeliver it)."""
        payload = message_object(channel_id, content, author=author or ALICE,
                                 message_id=message_id, guild_id=guild_id, **fields)
        self.dispatch("MESSAGE_CREATE", payload)
        return payload

    def thread(self, thread_id: str, parent_id: str, name: str = "a thread",
               *, announce: bool = True) -> dict[str, Any]:
        """A public thread of ``parent_id``: known to ``GET /channels/<id>``, and announced
        with ``THREAD_CREATE`` unless ``announce`` is false."""
        channel = {"id": thread_id, "type": 11, "guild_id": GUILD, "parent_id": parent_id,
                   "name": name, "owner_id": ALICE["id"], "last_message_id": None,
                   "rate_limit_per_user": 0, "message_count": 0, "member_count": 1,
                   "flags": 0, "thread_metadata": {
                       "archived": False, "auto_archive_duration": 1440, "locked": False,
                       "archive_timestamp": "2026-01-01T00:00:00+00:00"}}
        self.channels[thread_id] = channel
        if announce:
            self.dispatch("THREAD_CREATE", {**channel, "newly_created": True})
        return channel

    def text_channel(self, channel_id: str, name: str = "general") -> dict[str, Any]:
        """A guild text channel ``GET /channels/<id>`` knows."""
        channel = {"id": channel_id, "type": 0, "guild_id": GUILD, "name": name,
                   "position": 0, "permission_overwrites": [], "nsfw": False,
                   "parent_id": None, "topic": None, "last_message_id": None,
                   "rate_limit_per_user": 0}
        self.channels[channel_id] = channel
        return channel

    def fail(self, method: str, path: str, status: int, *, retry_after: float | None = None,
             times: int = 1, message: str = "", code: int = 0) -> None:
        """Answer the next ``times`` requests ``method path`` (below the REST root, e.g.
        ``/channels/1/messages``) with ``status``; a 429 carries ``retry_after``."""
        body: dict[str, Any] = {"message": message or f"{status}", "code": code}
        headers: dict[str, str] = {}
        if status == 429:
            body = {"message": "You are being rate limited.", "retry_after": retry_after or 1.0,
                    "global": False}
            headers = {"Retry-After": str(retry_after or 1.0)}
        with self.cond:
            self.failures.append(_Failure(method, path, status, body, headers, times))

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not (result := predicate()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out; calls: {self.calls[-10:]}")
                self.cond.wait(min(left, 0.5))
            return result

    def wait_identified(self, count: int = 1, timeout: float = 30.0) -> list[Session]:
        """Return once ``count`` sessions have identified (or resumed) and are open."""
        return self.wait_for(lambda: len(self.live()) >= count and self.live(), timeout)

    def posted(self, channel: str | None = None) -> list[Call]:
        """The messages created (in ``channel``), in order."""
        with self.cond:
            return [c for c in self.calls if c.method == "POST" and c.status == 200
                    and c.path.endswith("/messages")
                    and (channel is None or c.path == f"/channels/{channel}/messages")]

    def attempts(self, channel: str) -> list[Call]:
        with self.cond:
            return [c for c in self.calls if c.method == "POST"
                    and c.path == f"/channels/{channel}/messages"]

    def typing(self, channel: str) -> list[Call]:
        with self.cond:
            return [c for c in self.calls if c.path == f"/channels/{channel}/typing"]

    def texts(self, channel: str) -> list[str]:
        return [c.body["content"] for c in self.posted(channel)]

    def wait_posted(self, count: int, channel: str | None = None,
                    timeout: float = 30.0) -> list[Call]:
        return self.wait_for(lambda: len(self.posted(channel)) >= count
                             and self.posted(channel), timeout)


def message_object(channel_id: str, content: str, *, author: dict[str, Any],
                   message_id: str | None = None, guild_id: str | None = None,
                   **fields: Any) -> dict[str, Any]:
    """A message as Discord sends it (``MESSAGE_CREATE``'s data, ``POST .../messages``'s
    answer)."""
    message: dict[str, Any] = {
        "id": message_id or snowflake(), "channel_id": channel_id, "author": author,
        "content": content, "timestamp": "2026-01-01T00:00:00.000000+00:00",
        "edited_timestamp": None, "tts": False, "mention_everyone": False, "mentions": [],
        "mention_roles": [], "attachments": [], "embeds": [], "pinned": False, "type": 0,
        "flags": 0, "components": []}
    if guild_id is not None:
        message["guild_id"] = guild_id
        message["member"] = {"roles": [], "joined_at": "2025-01-01T00:00:00+00:00",
                             "deaf": False, "mute": False, "nick": None}
    message.update(fields)
    return message
