"""``hermes-actors run``: the standalone supervisor process (§12).

One gevent hub serves everything: session actors and turn workers are greenlets (``threading``
is patched before this module is imported), SQLite runs on the store's own native worker
thread, and the HTTP adapter is gevent's ``WSGIServer``, one greenlet per request, so a
client long-polling the outbox costs a greenlet. The order of a run:

1. read the chat platforms' settings (``platforms: [telegram]``: a missing token fails here);
2. take ``<home>/gateway.lock`` (``Gateway.claim_home()``: a second gateway on the same home,
   standalone or embedded, is refused);
3. check each platform (Telegram's ``getMe``: a rejected token fails here, exit 2);
4. bind the listening socket (a port in use fails before any recovery work);
5. ``Gateway.start()`` (recovery, which logs its one-line summary), then the platforms'
   ingress (Telegram's long poll), so nothing arrives before recovery opened the gateway;
6. serve until SIGTERM or SIGINT (a database server that fails meanwhile is waited out: see
   below); new messages are then refused with 503 (and platforms stop
   taking updates: what they did not acknowledge comes again next start) while running work
   drains for up to ``restart_drain_timeout`` seconds; a second signal ends the drain at
   once (turns still running are interrupted and marked for resumption, as at a deadline),
   a third exits on the spot (the state is crash-safe, the next start recovers it);
7. ``Gateway.stop()``, which writes the clean-shutdown marker; close the server and the
   platforms; exit 0.

An outage of a database server (``store.backend: postgres``; SQLite fails over to degraded
mode instead): the gateway refuses new messages from the first failed call (503, and
platforms leave their updates unacknowledged), this process stops it (its writes fail; what
they would have recorded is what recovery reads from the database), then starts a new
gateway every few seconds until the server answers. That start recovers exactly as after a
crash: interrupted turns resume with the restart note, unconsumed messages replay in
order, owed replies are delivered. The HTTP server, the outbox and the platforms stay up
throughout (``event=store_outage`` ... ``event=store_back``).

Lifecycle events are logged as ``event=<name> key=value ...`` lines on stderr.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
from gevent.event import Event

from hermes_actors.adapters.http import HttpApi, make_server
from hermes_actors.adapters.outbox import DEFAULT_RETENTION_DAYS, Outbox, OutboxAdapter
from hermes_actors.config import GatewayConfig
from hermes_actors.errors import CommandFailed, ConfigError, StoreUnavailableError
from hermes_actors.model.dsn import scrub
from hermes_actors.process.heap import freeze_startup_heap, tune_gc
from hermes_actors.process.platforms import connect_platforms, platform_adapters
from hermes_actors.runtime.crash import crashpoint
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.homelock import HomeLock

__all__ = ["RunOptions", "open_bind_warning", "run"]

log = logging.getLogger("hermes_actors.process")

#: Seconds between outbox prunes.
PRUNE_INTERVAL = 3600.0
#: Seconds the HTTP server waits for requests in progress when it closes.
_SERVER_STOP_TIMEOUT = 2.0
#: Seconds between checks for an outage of the database server while serving.
OUTAGE_CHECK_INTERVAL = 0.5
#: Seconds between attempts to start a new gateway during an outage (doubling up to the last).
RECONNECT_DELAYS = (1.0, 2.0, 4.0, 8.0)


@dataclass(frozen=True)
class RunOptions:
    """What ``run`` was asked to do, after the command line and the config were read."""

    #: The home directory (created when missing).
    home: Path
    #: The configuration, with command-line overrides applied.
    config: GatewayConfig


class _Signals:
    """Counts stop signals: the first asks for a graceful stop, the second ends the drain,
    the third exits at once."""

    def __init__(self) -> None:
        #: Set by the first signal.
        self.stop = Event()
        #: Set by the second signal.
        self.hurry = Event()
        self.count = 0
        self.name = ""

    def install(self) -> None:
        """Route SIGTERM and SIGINT here (run in the hub, so they never interrupt a greenlet
        in the middle of its work)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            gevent.signal_handler(signum, self.received, signum)

    def received(self, signum: int) -> None:
        """Handle one signal."""
        self.count += 1
        name = signal.Signals(signum).name
        if self.count == 1:
            self.name = name
            self.stop.set()
        elif self.count == 2:
            log.warning("event=hurry signal=%s note=ending the drain now", name)
            self.hurry.set()
        else:
            log.error("event=abort signal=%s note=exiting without a graceful stop; "
                      "the next start recovers", name)
            os._exit(130)


class GatewaySlot:
    """The gateway this process runs now, for the parts that outlive it (the HTTP API, the
    outbox, the platforms' polls): after an outage of the database server it is replaced by
    a new one. Attributes are the current gateway's; ``submit`` says "unavailable" while a
    replacement is under way, so a platform keeps its update for later."""

    def __init__(self, gateway: Gateway) -> None:
        #: The current gateway.
        self.current = gateway
        #: Whether the gateway is being replaced (between the outage and the new start).
        self.replacing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.current, name)

    def submit(self, event: Any) -> str:
        """``Gateway.submit`` of the current gateway."""
        if self.replacing:
            raise StoreUnavailableError("the gateway is waiting for its database")
        return self.current.submit(event)


def _log_event(event: str, **fields: Any) -> None:
    log.info("event=%s %s", event, " ".join(f"{k}={v}" for k, v in fields.items()))


def _hurry(slot: GatewaySlot, signals: _Signals) -> None:
    signals.hurry.wait()
    slot.current.stop(drain_timeout=0)


def _wait_for_stop_or_outage(slot: GatewaySlot, signals: _Signals) -> bool:
    """Serve until a stop signal (``False``) or an outage of the gateway's database server
    (``True``)."""
    while not signals.stop.wait(OUTAGE_CHECK_INTERVAL):
        if slot.current.outage.is_set():
            return True
    return False


def _unless_stopped(signals: _Signals, work: Any) -> tuple[bool, Any]:
    """Run ``work()`` until it returns (``(True, its result)``; its exception is raised) or
    a stop signal comes first (``(False, None)``: ``work`` is left running, the process is
    about to end). ``work``'s exception is caught in its greenlet and raised here: a
    greenlet that died of it would have the hub print its traceback (a start failing while
    the database is away, every few seconds of an outage, as if something had crashed)."""
    def attempt() -> tuple[bool, Any]:
        try:
            return True, work()
        except Exception as exc:  # noqa: BLE001 - raised in the caller
            return False, exc

    job = gevent.spawn(attempt)
    stop = gevent.spawn(signals.stop.wait)
    try:
        gevent.wait([job, stop], count=1)
    finally:
        stop.kill()
    if not job.ready():
        return False, None
    ok, value = job.get()
    if not ok:
        raise value
    return True, value


def _replace_gateway(slot: GatewaySlot, make_gateway: Any, signals: _Signals,
                     report_box: list[Any]) -> bool:
    """After an outage: stop the gateway, then start new ones until one starts (``True``)
    or a stop signal comes first (``False``)."""
    old = slot.current
    dsn = old.config.store.dsn

    def safe(exc: object) -> str:  # (the backend masks passwords already: twice is safe)
        return scrub(str(exc), dsn) if dsn else str(exc)

    log.warning("event=store_outage error=%s note=messages are refused until the database "
                "is back", safe(old.store.outage))
    slot.replacing = True
    # Its writes fail: recovery reads the database instead. A stop signal meanwhile ends
    # the process at once (a database that does not answer can hold a stop for long, and
    # everything durable is in the database: the next start recovers as after a crash).
    if not _unless_stopped(signals, lambda: old.stop(drain_timeout=0))[0]:
        return False
    attempt = 0
    while not signals.stop.is_set():
        # Current from the start on: its recovery delivers through the outbox, which writes
        # to the current gateway's store.
        gateway = slot.current = make_gateway()
        try:
            started, report = _unless_stopped(signals, gateway.start)
            if not started:
                return False
        except StoreUnavailableError as exc:
            delay = RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)]
            attempt += 1
            log.warning("event=store_waiting attempt=%d retry_in=%.0fs error=%s", attempt,
                        delay, safe(exc))
            signals.stop.wait(delay)
            continue
        slot.replacing = False
        report_box[:] = [report]
        _log_event("store_back", attempts=attempt + 1)
        return True
    return False


def _url(host: str, port: int) -> str:
    """The base URL of the server (an IPv6 address in brackets)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (a bound address) is reachable from this machine only."""
    import ipaddress

    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # (an IPv6 zone id)
    except ValueError:
        return host.lower() == "localhost"
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


def open_bind_warning(host: str, token: str | None) -> str | None:
    """The warning logged at start when the server listens beyond loopback without a token
    (``None`` when there is nothing to warn about)."""
    if token or _is_loopback(host):
        return None
    return (f"event=unauthenticated_bind host={host} note=http.token is not set and the port "
            "is reachable from other machines: anyone who can reach it can post messages as "
            "any user and read every outbox; set http.token (HERMES_HTTP_TOKEN) or bind to "
            "127.0.0.1")


def _prune_outbox(outbox: Outbox, stop: Event) -> None:
    while True:
        try:
            pruned = outbox.prune(DEFAULT_RETENTION_DAYS)
            if pruned:
                _log_event("outbox_pruned", rows=pruned)
        except Exception:  # noqa: BLE001 - pruning is housekeeping; serving goes on
            log.exception("outbox prune failed")
        if stop.wait(PRUNE_INTERVAL):
            return


def run(options: RunOptions) -> int:
    """Run the standalone gateway until a stop signal; returns the exit code (0)."""
    config, home = options.config, options.home
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandFailed(f"cannot create the home directory {str(home)!r}: {exc}") from None
    platforms = platform_adapters(config)
    outbox = Outbox()
    adapters = [OutboxAdapter(platform, outbox) for platform in config.http.platforms]

    # One lock for the life of the process: the gateways that replace one another after a
    # database outage all hold it, so no other gateway can take the home in between.
    home_lock = HomeLock(home)

    def make_gateway() -> Gateway:
        return Gateway(home, config, adapters=[*adapters, *platforms], home_lock=home_lock)

    gateway = make_gateway()
    try:
        gateway.claim_home()  # a busy home is refused before the port is bound
        connect_platforms(platforms)
        return _serve(home, config, GatewaySlot(gateway), make_gateway, outbox, platforms)
    finally:
        for adapter in platforms:
            adapter.close()
        home_lock.release()


def _serve(home: Path, config: GatewayConfig, slot: GatewaySlot, make_gateway: Any,
           outbox: Outbox, platforms: list[Any]) -> int:
    http = config.http
    _log_event("starting", pid=os.getpid(), home=home.resolve(), agent=config.agent.kind,
               platforms=",".join([*http.platforms, *(a.platform for a in platforms)]))
    tune_gc()
    outbox.bind(lambda: slot.store)
    report_box: list[Any] = []
    webhooks = {path: handler for adapter in platforms if hasattr(adapter, "routes")
                for path, handler in adapter.routes().items()}
    app = HttpApi(slot, outbox, http, report=lambda: report_box[0] if report_box else None,
                  webhooks=webhooks)
    try:
        server = make_server(app, http.host, http.port, socket_timeout=http.body_timeout,
                             max_connections=http.max_connections,
                             header_timeout=http.header_timeout,
                             keepalive_timeout=http.keepalive_timeout)
    except OSError as exc:
        reason = exc.strerror or str(exc)  # (a failed name lookup's errno is negative)
        raise CommandFailed(f"cannot listen on {http.host}:{http.port}: {reason}") from None
    # a cluster node records where it answers (``cluster status``, ``GET /v1/admin/cluster``)
    address = _url(server.server_host, server.server_port).removeprefix("http://")
    slot.current.advertised_address = address

    def make_node() -> Gateway:
        gateway = make_gateway()
        gateway.advertised_address = address
        return gateway
    signals = _Signals()
    signals.install()
    try:
        report = slot.current.start()
        freeze_startup_heap()
        report_box.append(report)  # its summary line was logged by start()
        server.start()
        for adapter in platforms:
            if hasattr(adapter, "start_events"):  # a push platform: every node takes events
                adapter.start_events(slot.submit)
            elif not config.cluster.enabled:  # a node polls while it holds the lease
                adapter.start_polling(slot.submit, checkpoint=crashpoint)
        host, port = server.server_host, server.server_port
        warning = open_bind_warning(server.socket.getsockname()[0], http.token)
        if warning:
            log.warning("%s", warning)
        _log_event("ready", host=host, port=port, url=_url(host, port),
                   auth="token" if http.token else "none")
        pruner = gevent.spawn(_prune_outbox, outbox, signals.stop)
        while _wait_for_stop_or_outage(slot, signals):
            if not _replace_gateway(slot, make_node, signals, report_box):
                break
        app.accepting = False
        for adapter in platforms:
            if hasattr(adapter, "stop_events"):
                adapter.stop_events()
            else:
                adapter.stop_polling()
        _log_event("stopping", signal=signals.name, drain_timeout=config.restart_drain_timeout)
        # A second signal calls stop(drain_timeout=0), which cuts the running drain short.
        hurry = gevent.spawn(_hurry, slot, signals)
        if slot.current.running or not slot.replacing:
            # (a signal during an outage's stop leaves that stop running: not waited for)
            slot.current.stop(drain_timeout=config.restart_drain_timeout)
        hurry.kill()
        pruner.kill()
    finally:
        outbox.close()  # releases long polls, so the server's handlers end at once
        server.stop(timeout=_SERVER_STOP_TIMEOUT)
        if slot.current.running:  # start() or the drain failed: leave recoverable state
            slot.current.stop(drain_timeout=0)
    _log_event("stopped", clean_shutdown=slot.current.stopped_cleanly)
    return 0


#: ``HERMES_LOG_LEVEL`` values: ``info`` (default: lifecycle events, one line per HTTP
#: request), ``debug`` (also one line per finished turn), ``warning``, ``error``.
LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
              "error": logging.ERROR}


def configure_logging(level: str | None = None) -> None:
    """Log lines on stderr: ``<time> <LEVEL> <logger> <message>``, at ``level`` (a key of
    :data:`LOG_LEVELS`; default ``HERMES_LOG_LEVEL``, else ``info``)."""
    name = (level or os.environ.get("HERMES_LOG_LEVEL") or "info").strip().lower()
    if name not in LOG_LEVELS:
        raise ConfigError(f"HERMES_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, "
                          f"not {name!r}")
    logging.basicConfig(
        level=LOG_LEVELS[name], stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _Scrubbed) for f in handler.filters):
            handler.addFilter(_Scrubbed())


class _Scrubbed(logging.Filter):
    """Log lines without a DSN's secret (:func:`~hermes_actors.model.dsn.scrub`), whoever
    logged them (a driver, a library)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        clean = scrub(text)
        if clean != text:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            shown = logging.Formatter().formatException(record.exc_info)
            if scrub(shown) != shown:
                record.exc_text = scrub(shown)
        return True
