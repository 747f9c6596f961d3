#!/usr/bin/env python3
"""Where the Discord client's asyncio loop runs, measured: a native thread inside the
gevent-patched gateway process, or a bridge process of its own (issue 38).

    python scripts/discord_bridge_bench.py [--messages 2000] [--sends 400] [--repeat 3]

The parent (not patched) serves the tests' fake Discord (``tests/discord_adapter/
fake_discord.py``: the REST API and a Gateway websocket on loopback) and starts, per run
and variant, a child that is patched as ``hermes-actors run`` is
(:func:`hermes_actors._green.monkey.patch_all`), with a ticker greenlet measuring how late
the hub gets to run (its lag). The child connects hikari (``GatewayBot``'s REST client and
one ``GatewayShardImpl``) either

* ``thread``: on an asyncio loop in a native thread of the gevent process (gevent's thread
  pool), events handed to the hub with ``loop.run_callback_threadsafe`` and answers back
  with ``call_soon_threadsafe``; or
* ``process``: in a bridge process (plain asyncio, not patched), JSON lines over its
  stdin/stdout, read and written by greenlets;
* ``adapter``: the adapter as built on that decision (``DiscordAdapter``), measured the
  same way (its ``taken`` figure is when ``submit`` returned: the answer follows at once).

and then, for each message, does what the adapter must: hand the ``MESSAGE_CREATE`` to a
greenlet (``submit``, here a no-op: the bridge's own cost is measured), and take the next
one only once that greenlet answered (durable before taken, in order). Then ``--sends``
replies from 8 greenlets at once, each a REST ``POST /channels/<id>/messages`` whose answer
the greenlet waits for. Figures per variant: start to READY, ingest (messages/s over the
burst, latency from the fake's send to the greenlet's submit and to the loop's "taken"),
sends (per second, latency), the hub's lag (p99 and max of a 1 ms ticker during the
burst, and while 20 GUILD_CREATE of a 5,000-member guild come in, ~1 MB each: what a bot
in large guilds gets at every connect), CPU seconds of the gateway process (and of the
bridge) per 1,000 messages, and the resident memory added. The fake's burst is sent in one coroutine, each frame stamped with
``time.monotonic()`` (one clock for all processes on Linux).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHANNEL = "4400000000000000001"
#: Greenlets sending at once.
SENDERS = 8
#: Seconds between two messages of the paced phase (latency, hub lag).
PACE = 0.005
#: The heavy phase: GUILD_CREATE events of a guild with this many members.
HEAVY_EVENTS = 20
GUILD_MEMBERS = 5000


def _big_guild(members: int) -> dict[str, Any]:
    """A GUILD_CREATE of a large guild (~1 MB of JSON): members, roles, channels."""
    return {
        "id": "3300000000000000009", "name": "big", "unavailable": False,
        "member_count": members, "roles": [{"id": str(i), "name": f"role {i}"}
                                           for i in range(50)],
        "channels": [{"id": str(4400000000000000000 + i), "type": 0, "name": f"c{i}"}
                     for i in range(200)],
        "threads": [], "members": [
            {"user": {"id": str(2200000000000000000 + i), "username": f"member{i}",
                      "discriminator": "0", "avatar": None, "global_name": f"Member {i}"},
             "roles": ["1", "2"], "joined_at": "2025-01-01T00:00:00+00:00", "deaf": False,
             "mute": False, "nick": None} for i in range(members)]}


# -- the parent: the fake, the runs, the table ---------------------------------------------


def _parent(args: argparse.Namespace) -> int:
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "discord_adapter")]
    from fake_discord import TOKEN, FakeDiscord, message_object

    results: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variants}
    for run in range(args.repeat):
        for variant in args.variants:
            fake = FakeDiscord()
            try:
                results[variant].append(_one(fake, TOKEN, variant, args, message_object))
            finally:
                fake.close()
            print(f"run {run + 1} {variant}: {json.dumps(results[variant][-1])}",
                  file=sys.stderr)
    _table(results, args)
    return 0


def _one(fake: Any, token: str, variant: str, args: argparse.Namespace,
         message_object: Any) -> dict[str, Any]:
    import asyncio

    child = subprocess.Popen(
        [sys.executable, __file__, "--child", variant, "--rest", fake.url, "--token", token,
         "--sends", str(args.sends)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.stdin is not None and child.stdout is not None
    ready = json.loads(child.stdout.readline())  # connected: READY came
    fake.wait_identified(1)
    payloads = [message_object(CHANNEL, f"m{i}", author={
        "id": "2200000000000000001", "username": "alice", "discriminator": "0",
        "avatar": None}) for i in range(args.messages)]

    async def burst(payloads: list[dict[str, Any]], pause: float) -> None:
        [session] = fake.live()
        for payload in payloads:
            payload["nonce"] = payload["content"] = repr(time.monotonic())
            await fake._dispatch(session, "MESSAGE_CREATE", payload)
            if pause:
                await asyncio.sleep(pause)

    result: dict[str, Any] = {}
    paced = payloads[:args.messages // 4]
    for phase, batch, pause in (("paced", paced, PACE), ("burst", payloads, 0.0)):
        child.stdin.write(f"ingest {len(batch)}\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "armed"
        asyncio.run_coroutine_threadsafe(burst(batch, pause), fake.loop).result(300)
        figures = json.loads(child.stdout.readline())
        if phase == "paced":
            result.update({k: v for k, v in figures.items() if k != "ingest_per_s"})
        else:
            result["ingest_per_s"] = figures["ingest_per_s"]
            result["burst_cpu_per_1000"] = figures["cpu_per_1000"]
    # Heavy Gateway traffic the adapter does not want (a big guild's GUILD_CREATE at every
    # connect), then one message: the hub's lag while the client parses it.
    guild = _big_guild(GUILD_MEMBERS)

    async def heavy() -> None:
        [session] = fake.live()
        for _ in range(HEAVY_EVENTS):
            await fake._dispatch(session, "GUILD_CREATE", guild)
        payload = dict(payloads[0], id="9" * 18)
        payload["nonce"] = payload["content"] = repr(time.monotonic())
        await fake._dispatch(session, "MESSAGE_CREATE", payload)

    child.stdin.write("ingest 1\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "armed"
    asyncio.run_coroutine_threadsafe(heavy(), fake.loop).result(300)
    figures = json.loads(child.stdout.readline())
    result["heavy_lag_p99_ms"] = figures["lag_p99_ms"]
    result["heavy_lag_max_ms"] = figures["lag_max_ms"]
    result["heavy_cpu_s"] = figures["cpu_per_1000"] / 1000
    child.stdin.write("sends\n")
    child.stdin.flush()
    result.update(json.loads(child.stdout.readline()))
    child.stdin.write("quit\n")
    child.stdin.flush()
    child.wait(30)
    result["ready_s"] = ready["ready_s"]
    result["rss_added_mb"] = ready["rss_added_mb"]
    assert len(fake.posted(CHANNEL)) >= args.sends // SENDERS * SENDERS
    return result


def _table(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    rows = [
        ("start to READY, s", "ready_s", 2),
        ("ingest of a burst, messages/s", "ingest_per_s", 0),
        ("CPU s per 1,000 messages of the burst (all processes)", "burst_cpu_per_1000", 3),
        ("ingest latency p50, ms (fake → submit; paced)", "submit_p50_ms", 2),
        ("ingest latency p99, ms (fake → submit)", "submit_p99_ms", 2),
        ("taken latency p50, ms (fake → loop has the answer)", "taken_p50_ms", 2),
        ("hub lag during paced ingest p99, ms", "lag_p99_ms", 2),
        ("hub lag during paced ingest max, ms", "lag_max_ms", 1),
        ("CPU s per 1,000 paced messages (all processes)", "cpu_per_1000", 3),
        ("sends/s (8 greenlets)", "sends_per_s", 0),
        ("send latency p50, ms", "send_p50_ms", 2),
        ("send latency p99, ms", "send_p99_ms", 2),
        ("CPU s per 1,000 sends (all processes)", "send_cpu_per_1000", 3),
        ("hub lag during 20 large GUILD_CREATE p99, ms", "heavy_lag_p99_ms", 1),
        ("hub lag during 20 large GUILD_CREATE max, ms", "heavy_lag_max_ms", 1),
        ("CPU s for the 20 GUILD_CREATE (all processes)", "heavy_cpu_s", 2),
        ("resident memory added, MB", "rss_added_mb", 1),
    ]
    variants = list(results)
    print(f"{args.messages} messages, {args.sends} sends, {args.repeat} runs each: "
          "median (min-max)\n")
    print("| figure | " + " | ".join(variants) + " |")
    print("|---|" + "---|" * len(variants))
    for title, key, digits in rows:
        cells = []
        for variant in variants:
            values = [r[key] for r in results[variant]]
            median = statistics.median(values)
            cells.append(f"{median:,.{digits}f} ({min(values):,.{digits}f}-"
                         f"{max(values):,.{digits}f})")
        print(f"| {title} | " + " | ".join(cells) + " |")


# -- the child: the gateway process's side -------------------------------------------------


def _rss_mb(pid: int | None = None) -> float:
    with open(f"/proc/{pid or 'self'}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu(pid: int | None = None) -> float:
    with open(f"/proc/{pid or 'self'}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _child(args: argparse.Namespace) -> int:
    from hermes_actors._green.monkey import patch_all

    patch_all()
    import gevent
    from gevent.event import AsyncResult
    from gevent.fileobject import FileObjectPosix

    rss_before = _rss_mb()
    submitted: list[tuple[float, float]] = []  # (stamp, monotonic at submit)
    taken: list[float] = []
    expected = [0]
    done = AsyncResult()

    def submit(payload: dict[str, Any]) -> str:
        submitted.append((float(payload["nonce"]), time.monotonic()))
        if len(submitted) == expected[0]:
            done.set(True)
        return str(payload["id"])

    started = time.monotonic()
    if args.child == "thread":
        bridge: Any = _ThreadBridge(args.rest, args.token, submit, taken)
    elif args.child == "process":
        bridge = _ProcessBridge(args.rest, args.token, submit, taken)
    else:
        bridge = _AdapterBridge(args.rest, args.token, submit, taken)
    bridge.start()
    ready_s = time.monotonic() - started
    extra_pid = getattr(bridge, "pid", None)
    rss_added = _rss_mb() - rss_before + (_rss_mb(extra_pid) if extra_pid else 0.0)
    out = sys.stdout
    print(json.dumps({"ready_s": ready_s, "rss_added_mb": rss_added}), file=out, flush=True)

    lags: list[float] = []
    ticking = [False]

    def ticker() -> None:
        while True:
            before = time.monotonic()
            gevent.sleep(0.001)
            if ticking[0]:
                lags.append(time.monotonic() - before - 0.001)

    gevent.spawn(ticker)
    stdin = FileObjectPosix(sys.stdin.fileno(), "r", close=False)  # (read by the hub)
    for line in stdin:
        command = line.split()
        if command[0] == "ingest":
            expected[0] = int(command[1])
            submitted.clear()
            taken.clear()
            lags.clear()
            done = AsyncResult()
            cpu0 = _cpu() + (_cpu(extra_pid) if extra_pid else 0.0)
            ticking[0] = True
            print("armed", file=out, flush=True)
            done.get(timeout=300)
            bridge.wait_taken(expected[0])
            ticking[0] = False
            cpu = _cpu() + (_cpu(extra_pid) if extra_pid else 0.0) - cpu0
            first = min(s for s, _ in submitted)
            last = max(t for _, t in submitted)
            submit_ms = [(t - s) * 1000 for s, t in submitted]
            taken_ms = [(t - s) * 1000 for (s, _), t in zip(submitted, taken, strict=False)]
            print(json.dumps({
                "ingest_per_s": len(submitted) / (last - first),
                "submit_p50_ms": statistics.median(submit_ms),
                "submit_p99_ms": _pct(submit_ms, 0.99),
                "taken_p50_ms": statistics.median(taken_ms),
                "lag_p99_ms": _pct(lags, 0.99) * 1000, "lag_max_ms": max(lags) * 1000,
                "cpu_per_1000": cpu / len(submitted) * 1000,
            }), file=out, flush=True)
        elif command[0] == "sends":
            cpu0 = _cpu() + (_cpu(extra_pid) if extra_pid else 0.0)
            latencies: list[float] = []
            each = args.sends // SENDERS

            def sender(n: int, each: int = each, latencies: list[float] = latencies) -> None:
                for i in range(each):
                    t0 = time.monotonic()
                    bridge.send(CHANNEL, f"reply {n}.{i}")
                    latencies.append(time.monotonic() - t0)

            t0 = time.monotonic()
            gevent.joinall([gevent.spawn(sender, n) for n in range(SENDERS)], raise_error=True)
            elapsed = time.monotonic() - t0
            cpu = _cpu() + (_cpu(extra_pid) if extra_pid else 0.0) - cpu0
            print(json.dumps({
                "sends_per_s": len(latencies) / elapsed,
                "send_p50_ms": statistics.median(latencies) * 1000,
                "send_p99_ms": _pct(latencies, 0.99) * 1000,
                "send_cpu_per_1000": cpu / len(latencies) * 1000,
            }), file=out, flush=True)
        elif command[0] == "quit":
            break
    bridge.close()
    return 0


def _hikari(token: str, rest: str) -> Any:
    import hikari

    return hikari.GatewayBot(
        token, rest_url=rest, logs=None, banner=None, suppress_optimization_warning=True,
        cache_settings=hikari.impl.CacheSettings(components=hikari.api.CacheComponents.NONE),
        intents=hikari.Intents.GUILD_MESSAGES | hikari.Intents.DM_MESSAGES
        | hikari.Intents.MESSAGE_CONTENT, max_rate_limit=0, max_retries=0)


async def _connect(bot: Any, token: str, on_message: Any) -> Any:
    import hikari
    from hikari.impl import GatewayShardImpl

    bot.rest.start()
    await bot.rest.fetch_my_user()
    info = await bot.rest.fetch_gateway_bot_info()

    async def on_payload(event: Any) -> None:
        if event.name == "MESSAGE_CREATE":
            await on_message(event.payload)

    bot.event_manager.subscribe(hikari.ShardPayloadEvent, on_payload)
    shard = GatewayShardImpl(event_manager=bot.event_manager, event_factory=bot.event_factory,
                             intents=bot.intents, http_settings=bot.http_settings,
                             proxy_settings=bot.proxy_settings, token=token, url=info.url)
    await shard.start()
    return shard


class _ThreadBridge:
    """hikari on an asyncio loop in a native thread of this (gevent) process."""

    def __init__(self, rest: str, token: str, submit: Any, taken: list[float]) -> None:
        import platform

        # hikari's IDENTIFY asks platform.architecture(), which runs `file` through
        # subprocess: gevent's, which cannot wait for a child off the main thread
        # (TypeError). Asked once here, on the hub's thread.
        arch = platform.architecture()
        platform.architecture = lambda *a, **k: arch  # type: ignore[assignment]
        self.rest, self.token, self.submit, self.taken = rest, token, submit, taken
        import gevent

        self.hub = gevent.get_hub()
        from gevent.threadpool import ThreadPool

        self.pool = ThreadPool(1)
        self.loop: Any = None

    def start(self) -> None:
        import asyncio

        from gevent.event import AsyncResult

        ready = AsyncResult()
        hub = self.hub

        def run() -> None:
            self.loop = loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.bot = _hikari(self.token, self.rest)
            self.queue: asyncio.Queue[Any] = asyncio.Queue()

            async def on_message(payload: Any) -> None:
                await self.queue.put(payload)

            async def taker() -> None:
                while True:
                    payload = await self.queue.get()
                    answer = loop.create_future()

                    def in_hub(payload: Any = payload, answer: Any = answer) -> None:
                        import gevent

                        def job() -> None:
                            result = self.submit(payload)
                            loop.call_soon_threadsafe(answer.set_result, result)

                        gevent.spawn(job)

                    hub.loop.run_callback_threadsafe(in_hub)
                    await answer
                    self.taken.append(time.monotonic())

            async def main() -> None:
                self.shard = await _connect(self.bot, self.token, on_message)
                loop.create_task(taker())
                hub.loop.run_callback_threadsafe(ready.set, True)

            loop.create_task(main())
            loop.run_forever()

        self.pool.spawn(run)
        ready.get(timeout=30)

    def call(self, coro: Any) -> Any:
        import asyncio

        from gevent.event import AsyncResult

        result = AsyncResult()
        hub = self.hub

        def schedule() -> None:
            task = asyncio.ensure_future(coro)

            def done(t: Any) -> None:
                if t.exception() is not None:
                    hub.loop.run_callback_threadsafe(result.set_exception, t.exception())
                else:
                    hub.loop.run_callback_threadsafe(result.set, t.result())

            task.add_done_callback(done)

        self.loop.call_soon_threadsafe(schedule)
        return result.get(timeout=60)

    def send(self, channel: str, text: str) -> Any:
        return self.call(self.bot.rest.create_message(int(channel), text))

    def wait_taken(self, count: int) -> None:
        import gevent

        while len(self.taken) < count:
            gevent.sleep(0.001)

    def close(self) -> None:
        async def stop() -> None:
            await self.shard.close()
            await self.bot.rest.close()

        self.call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)


class _ProcessBridge:
    """hikari in a bridge process; JSON lines over its stdin and stdout."""

    def __init__(self, rest: str, token: str, submit: Any, taken: list[float]) -> None:
        self.rest, self.token, self.submit, self.taken = rest, token, submit, taken
        self.pending: dict[int, Any] = {}
        self.next_id = 0

    def start(self) -> None:
        import gevent
        from gevent import subprocess as gsubprocess
        from gevent.event import AsyncResult

        self.proc = gsubprocess.Popen(
            [sys.executable, __file__, "--bridge", "--rest", self.rest, "--token", self.token],
            stdin=gsubprocess.PIPE, stdout=gsubprocess.PIPE, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.pid = self.proc.pid
        ready = AsyncResult()
        self.ready = ready
        gevent.spawn(self._reader)
        ready.get(timeout=30)

    def _write(self, message: dict[str, Any]) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def _reader(self) -> None:
        import gevent

        for line in self.proc.stdout:
            message = json.loads(line)
            kind = message["t"]
            if kind == "ready":
                self.ready.set(True)
            elif kind == "message":
                def job(message: dict[str, Any] = message) -> None:
                    result = self.submit(message["d"])
                    self._write({"t": "taken", "n": message["n"], "r": result})

                gevent.spawn(job)
            elif kind == "taken_ack":
                self.taken.append(message["at"])
            elif kind == "sent":
                self.pending.pop(message["n"]).set(message)

    def send(self, channel: str, text: str) -> Any:
        from gevent.event import AsyncResult

        self.next_id += 1
        result = AsyncResult()
        self.pending[self.next_id] = result
        self._write({"t": "send", "n": self.next_id, "c": channel, "x": text})
        return result.get(timeout=60)

    def wait_taken(self, count: int) -> None:
        import gevent

        while len(self.taken) < count:
            gevent.sleep(0.001)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


class _AdapterBridge:
    """The adapter as built (``DiscordAdapter``: its bridge process, its client, the
    mapping), measured the same way: ``submit`` is the gateway's, the answer "taken" goes
    to the bridge right after it returns."""

    def __init__(self, rest: str, token: str, submit: Any, taken: list[float]) -> None:
        from hermes_actors.adapters.discord import DiscordAdapter
        from hermes_actors.config import DiscordConfig

        self.adapter = DiscordAdapter(DiscordConfig(api_base_url=rest), token,
                                      log_level="warning")
        self.submit, self.taken = submit, taken

    @property
    def pid(self) -> int:
        return int(self.adapter._bridge.pid)

    def start(self) -> None:
        from gevent.event import Event

        ready = Event()
        on_gateway = self.adapter._on_gateway

        def gateway(message: dict[str, Any]) -> None:
            on_gateway(message)
            if message.get("state") == "ready":
                ready.set()

        self.adapter._on_gateway = gateway  # type: ignore[method-assign]
        self.adapter.connect()

        def submit(event: Any) -> str:
            self.submit({"nonce": event.text, "id": event.source.message_id})
            self.taken.append(time.monotonic())  # (answered "taken" right after)
            return str(event.event_id)

        self.adapter.start_polling(submit)
        ready.wait(30)

    def send(self, channel: str, text: str) -> Any:
        from hermes_actors.model.source import SessionSource

        result = self.adapter.send(SessionSource("discord", chat_id=channel), text)
        assert result.success, result
        return result

    def wait_taken(self, count: int) -> None:
        import gevent

        while len(self.taken) < count:
            gevent.sleep(0.001)

    def close(self) -> None:
        self.adapter.close()


def _bridge(args: argparse.Namespace) -> int:
    """The bridge process: hikari on plain asyncio, JSON lines in and out."""
    import asyncio

    async def main() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        write = sys.stdout.buffer.write
        flush = sys.stdout.buffer.flush
        bot = _hikari(args.token, args.rest)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        answers: dict[int, asyncio.Future[Any]] = {}
        counter = [0]

        def emit(message: dict[str, Any]) -> None:
            write(json.dumps(message).encode() + b"\n")
            flush()

        async def on_message(payload: Any) -> None:
            await queue.put(payload)

        async def taker() -> None:
            while True:
                payload = await queue.get()
                counter[0] += 1
                answers[counter[0]] = future = loop.create_future()
                emit({"t": "message", "n": counter[0], "d": dict(payload)})
                await future
                emit({"t": "taken_ack", "at": time.monotonic()})

        async def send(message: dict[str, Any]) -> None:
            created = await bot.rest.create_message(int(message["c"]), message["x"])
            emit({"t": "sent", "n": message["n"], "id": str(created.id)})

        shard = await _connect(bot, args.token, on_message)
        loop.create_task(taker())
        emit({"t": "ready"})
        while line := await reader.readline():
            message = json.loads(line)
            if message["t"] == "taken":
                answers.pop(message["n"]).set_result(message["r"])
            elif message["t"] == "send":
                loop.create_task(send(message))
        await shard.close()
        await bot.rest.close()

    asyncio.run(main())
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--sends", type=int, default=400)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--variants", default="thread,process,adapter")
    p.add_argument("--child", choices=("thread", "process", "adapter"), help=argparse.SUPPRESS)
    p.add_argument("--bridge", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rest", help=argparse.SUPPRESS)
    p.add_argument("--token", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.variants = args.variants.split(",")
    if args.bridge:
        return _bridge(args)
    if args.child:
        return _child(args)
    return _parent(args)


if __name__ == "__main__":
    sys.exit(main())
