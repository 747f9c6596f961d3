"""The Discord bridge process: hikari on plain asyncio, spoken to in JSON lines.

``python -m hermes_actors.adapters.discord.bridge`` is started by the gateway process
(:class:`~hermes_actors.adapters.discord.client.BridgeClient`) and is not monkey-patched:
hikari and aiohttp run on an ordinary event loop here, never on gevent's hub (why a process
and not a thread: ``docs/architecture.md``, "The Discord bridge"). It dies with its parent:
the end of its standard input ends it.

The first line on standard input is the hello: ``{"token", "api_base_url", "gateway_url",
"intents", "log_level"}`` (the token travels on the pipe, never in the command line or the
environment). The bridge then starts hikari's REST client and answers ``{"t": "ready"}``.
Then each line is a request ``{"op", "n", ...}`` answered by ``{"t": "result", "n", "ok":
true, "d": ...}`` or ``{"t": "result", "n", "ok": false, "error": {"kind", ...}}`` (kinds:
``rate_limited`` with ``retry_after``, ``http`` with ``status``, ``code`` and
``message``, ``connection``, ``failed``), in any order:

* ``me``: ``GET /users/@me`` (``d``: ``id``, ``username``);
* ``send`` (``channel``, ``content``): ``POST /channels/<id>/messages`` (``d``: the new
  message's ``id``); no ``@everyone`` or role pings, users may be mentioned;
* ``typing`` (``channel``): ``POST /channels/<id>/typing``;
* ``channel`` (``channel``): ``GET /channels/<id>`` (``d``: ``id``, ``type``,
  ``parent_id``, ``name``);
* ``open``: connect the Gateway (one shard) and keep it connected, reconnecting and resuming
  as hikari does, opening a new session after a close it cannot resume (answered at once;
  ``{"t": "gateway", "state": "ready"|"lost", ...}`` lines tell how it goes);
* ``close``: disconnect the Gateway, then hand over what it had received (answered once
  nothing is left; ``d``: ``forwarded``, ``dropped``). A close while the first connection
  is still being made ends the process (hikari cannot cancel a shard's start): the parent
  starts a new bridge.

Gateway events that matter (``MESSAGE_CREATE`` and the channel and thread events the
adapter learns threads from) go to the parent as ``{"t": "event", "e", "name", "d"}`` one
at a time, in the order received: the next only once the parent answered ``{"op": "taken",
"e"}`` (``"dropped": true`` when it did not keep it). So a message is the parent's only
once it is durable there, and messages keep their order.

Logging goes to standard error (the parent's log) in the parent's format, the token masked;
hikari's own lines from ``warning`` up (its REST client's from ``error``: the delivery logs
the rate limits it waits out), ``debug`` shows its ``info`` too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from hermes_actors.adapters.base import MaskingFilter

__all__ = ["FORWARDED", "main"]

#: The Gateway events handed to the parent.
FORWARDED = frozenset({"MESSAGE_CREATE", "GUILD_CREATE", "CHANNEL_CREATE", "CHANNEL_UPDATE",
                       "CHANNEL_DELETE", "THREAD_CREATE", "THREAD_UPDATE", "THREAD_DELETE",
                       "THREAD_LIST_SYNC"})
#: Seconds between attempts to open a Gateway session that failed (the last repeats).
BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
_CHANNEL_FIELDS = ("id", "type", "parent_id", "name")

log = logging.getLogger("hermes_actors.discord.bridge")


def _channel_fields(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, Mapping):
        return None
    return {k: item[k] for k in _CHANNEL_FIELDS if k in item}


def reduce_event(name: str, data: Any) -> Any:
    """What the parent needs of an event: a guild's channels and threads, not its members,
    roles and emojis (a large guild's ``GUILD_CREATE`` is megabytes)."""
    if name == "GUILD_CREATE" and isinstance(data, Mapping):
        return {"id": data.get("id"),
                "channels": [c for c in map(_channel_fields, data.get("channels") or ()) if c],
                "threads": [c for c in map(_channel_fields, data.get("threads") or ()) if c]}
    if name == "THREAD_LIST_SYNC" and isinstance(data, Mapping):
        return {"threads": [c for c in map(_channel_fields, data.get("threads") or ()) if c]}
    return data


def _plain(value: Any) -> Any:
    """``json.dumps``'s fallback: hikari hands payloads over as read-only mappings."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


class _Masking(MaskingFilter):
    """The token masked in a record's message (:class:`MaskingFilter`) and in its
    traceback."""

    def __init__(self, secret: str) -> None:
        super().__init__(lambda text: text.replace(secret, "<token>") if secret else text)
        self._secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        super().filter(record)
        if self._secret and record.exc_info and record.exc_info[1] is not None:
            shown = logging.Formatter().formatException(record.exc_info)
            if self._secret in shown:
                record.exc_text = shown.replace(self._secret, "<token>")
        return True


def _configure_logging(level: str, token: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.addFilter(_Masking(token))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    debug = level == "debug"
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    logging.getLogger("hikari").setLevel(logging.INFO if debug else logging.WARNING)
    # (its rate-limit warning says it retries: here the delivery ledger does, and logs it)
    logging.getLogger("hikari.rest").setLevel(logging.INFO if debug else logging.ERROR)


def _error(exc: BaseException) -> dict[str, Any]:
    """A hikari failure as the parent reads it."""
    import hikari

    if isinstance(exc, hikari.RateLimitTooLongError):
        return {"kind": "rate_limited", "retry_after": float(exc.retry_after)}
    if isinstance(exc, hikari.HTTPResponseError):
        status = int(exc.status)
        if status == 429:  # (a 429 hikari does not turn into a wait: e.g. Cloudflare's)
            return {"kind": "rate_limited", "retry_after": 1.0}
        return {"kind": "http", "status": status, "code": int(exc.code or 0),
                "message": str(exc.message or "")[:200]}
    if isinstance(exc, (hikari.HTTPError, OSError, asyncio.TimeoutError)):
        return {"kind": "connection", "message": f"{type(exc).__name__}: {exc}"[:200]}
    return {"kind": "failed", "message": f"{type(exc).__name__}: {exc}"[:200]}


class Bridge:
    """One bot's REST client and Gateway shard, driven by the parent's requests."""

    def __init__(self, hello: Mapping[str, Any], emit: Any) -> None:
        import hikari

        self._token = str(hello["token"])
        self._gateway_url = hello.get("gateway_url") or None
        self._emit = emit
        self.bot = hikari.GatewayBot(
            self._token, rest_url=hello.get("api_base_url") or None, logs=None, banner=None,
            suppress_optimization_warning=True,
            cache_settings=hikari.impl.CacheSettings(components=hikari.api.CacheComponents.NONE),
            intents=hikari.Intents(int(hello["intents"])),
            # every rate limit is the delivery ledger's to wait out; every failure its to retry
            max_rate_limit=0, max_retries=0)
        self.bot.event_manager.subscribe(hikari.ShardPayloadEvent, self._on_payload)
        self._events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._taken: dict[int, asyncio.Future[bool]] = {}
        self._seq = 0
        self._forwarded = self._dropped = 0
        self._shard: Any = None
        self._gateway: asyncio.Task[None] | None = None
        self._started = False

    async def start(self) -> None:
        self._rest().start()  # (GatewayBot.start would also open shards: not wanted here)
        asyncio.get_running_loop().create_task(self._forward())

    async def stop(self) -> None:
        if self._gateway is not None:
            await self._close()
        await self._rest().close()

    def _rest(self) -> Any:
        """The bot's REST client (hikari's implementation, which is started and closed)."""
        from hikari.impl import RESTClientImpl

        rest = self.bot.rest
        assert isinstance(rest, RESTClientImpl)
        return rest

    # -- requests ---------------------------------------------------------------------------

    async def handle(self, request: dict[str, Any]) -> None:
        op, number = request.get("op"), request.get("n")
        if op == "taken":
            future = self._taken.pop(int(request["e"]), None)
            if future is not None and not future.done():
                future.set_result(not request.get("dropped"))
            return
        try:
            data = await self._do(str(op), request)
        except Exception as exc:  # noqa: BLE001 - every failure is the parent's to judge
            self._emit({"t": "result", "n": number, "ok": False, "error": _error(exc)})
            return
        self._emit({"t": "result", "n": number, "ok": True, "d": data})

    async def _do(self, op: str, request: dict[str, Any]) -> Any:
        rest = self.bot.rest
        if op == "me":
            me = await rest.fetch_my_user()
            return {"id": str(me.id), "username": me.username}
        if op == "send":
            message = await rest.create_message(
                int(request["channel"]), str(request["content"]), mentions_everyone=False,
                role_mentions=False, user_mentions=True)
            return {"id": str(message.id)}
        if op == "typing":
            await rest.trigger_typing(int(request["channel"]))
            return {}
        if op == "channel":
            found = await rest.fetch_channel(int(request["channel"]))
            parent = getattr(found, "parent_id", None)
            return {"id": str(found.id), "type": int(found.type),
                    "parent_id": str(parent) if parent else None,
                    "name": getattr(found, "name", None)}
        if op == "open":
            if self._gateway is None or self._gateway.done():
                self._gateway = asyncio.get_running_loop().create_task(self._keep_open())
            return {}
        if op == "close":
            return await self._close()
        raise ValueError(f"unknown request {op!r}")

    # -- the Gateway ------------------------------------------------------------------------

    async def _keep_open(self) -> None:
        from hikari.impl import GatewayShardImpl

        failures = 0
        while True:
            try:
                url = self._gateway_url or (await self.bot.rest.fetch_gateway_bot_info()).url
                self._shard = shard = GatewayShardImpl(
                    event_manager=self.bot.event_manager, event_factory=self.bot.event_factory,
                    intents=self.bot.intents, http_settings=self.bot.http_settings,
                    proxy_settings=self.bot.proxy_settings, token=self._token, url=url)
                self._started = False
                await shard.start()
                self._started = True
                failures = 0
                self._emit({"t": "gateway", "state": "ready"})
                await shard.join()  # returns (or raises) once the session ends for good
                raise RuntimeError("the Gateway session ended")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reported, then a new session
                import hikari

                self._started = False
                pause = BACKOFF[min(failures, len(BACKOFF) - 1)]
                failures += 1
                state: dict[str, Any] = {"t": "gateway", "state": "lost",
                                         "error": f"{type(exc).__name__}: {exc}"[:300],
                                         "retry_in": pause}
                if isinstance(exc, hikari.GatewayServerClosedConnectionError) and exc.code:
                    state["code"] = int(exc.code)
                self._emit(state)
                await asyncio.sleep(pause)

    async def _close(self) -> dict[str, int]:
        task, self._gateway = self._gateway, None
        if task is not None and not task.done():
            if not self._started:  # hikari's start() cannot be cancelled: end the process
                self._emit({"t": "gateway", "state": "abandoned"})
                raise SystemExit(3)
            task.cancel()
            shard, self._shard = self._shard, None
            if shard is not None and shard.is_alive:
                await shard.close()
            try:
                await task
            except asyncio.CancelledError:
                pass
        while not self._events.empty() or self._taken:  # hand over what came meanwhile
            await asyncio.sleep(0.01)
        return {"forwarded": self._forwarded, "dropped": self._dropped}

    async def _on_payload(self, event: Any) -> None:
        if event.name in FORWARDED:
            self._events.put_nowait((event.name, event.payload))

    async def _forward(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            name, data = await self._events.get()
            self._seq += 1
            self._taken[self._seq] = taken = loop.create_future()
            self._emit({"t": "event", "e": self._seq, "name": name,
                        "d": reduce_event(name, data)})
            if await taken:
                self._forwarded += 1
            else:
                self._dropped += 1


def _protocol_output() -> Any:
    """The pipe to the parent, kept for the protocol alone: file descriptor 1 becomes the
    log's (standard error), so that a stray ``print`` of a library cannot garble a line."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


async def _run() -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = _protocol_output()

    def emit(message: dict[str, Any]) -> None:
        out.write(json.dumps(message, default=_plain, separators=(",", ":")).encode() + b"\n")
        out.flush()

    line = await reader.readline()
    if not line:
        return 0
    hello = json.loads(line)
    _configure_logging(str(hello.get("log_level") or "info"), str(hello["token"]))
    bridge = Bridge(hello, emit)
    await bridge.start()
    emit({"t": "ready"})
    tasks: set[asyncio.Task[None]] = set()
    try:
        while line := await reader.readline():
            task = loop.create_task(bridge.handle(json.loads(line)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        for task in tasks:
            task.cancel()
        try:
            await asyncio.wait_for(bridge.stop(), 5)
        except (Exception, asyncio.CancelledError):  # noqa: BLE001 - the process is ending
            pass
    return 0


def main() -> int:
    """Run until standard input ends (the parent closed it, or died)."""
    try:
        return asyncio.run(_run())
    except KeyboardInterrupt:
        return 0
    except SystemExit as exc:
        return int(exc.code or 0)
    except BrokenPipeError:  # the parent is gone
        return 0


if __name__ == "__main__":
    sys.exit(main())
