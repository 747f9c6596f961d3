"""``GET /metrics``: the gateway's state as Prometheus text, read at scrape time.

Nothing is counted twice: every gauge is computed from ``Gateway.stats()``, the gateway's
ingress and turn counters, the store and the startup
:class:`~hermes_actors.runtime.recovery.RecoveryReport` when Prometheus asks, so the numbers
cannot drift from the runtime's own bookkeeping. A scrape reads running totals and asks the
cache and supervisor actors once each: its cost does not grow with the number of live
sessions. The metrics live in their own ``CollectorRegistry`` (not prometheus-client's
global one), so several gateways in one process, or tests, never collide.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "GatewayMetrics", "LEDGER_STATES"]

log = logging.getLogger("hermes_actors.metrics")

#: The ``Content-Type`` of the Prometheus text format ``render`` produces.
CONTENT_TYPE = CONTENT_TYPE_LATEST
#: Ledger states worth watching (``delivered`` rows are history, pruned after 7 days).
LEDGER_STATES = ("pending", "attempting", "failed", "abandoned")
#: ``RecoveryReport`` counts exported as ``hermes_recovery_<field>``, with their HELP texts.
_REPORT_FIELDS = (
    ("recovered_replies", "Replies found in the transcript of interrupted turns and owed "
                          "again by the last startup."),
    ("redelivered", "Owed replies and notices sent by the last startup's ledger sweep."),
    ("replayed_inbox", "Accepted messages the last startup found unanswered and ran again."),
)
#: The supervisor's statistics exported as ``hermes_supervisor_<field>``.
_SUPERVISOR_FIELDS = (
    ("counted_sessions", "Sessions whose stuck-loop counter is above zero (they were "
                         "mid-turn across a restart)."),
    ("suspensions", "Sessions suspended by the stuck-loop guard since start."),
    ("redelivered", "Owed replies delivered by ledger sweeps since start."),
    ("drain_timeouts", "Sessions interrupted at a drain deadline and marked for resumption."),
)


#: Turn statuses always exported (at 0 until one happens).
TURN_STATUSES = ("completed", "interrupted", "failed", "partial")


def _bucket(bound: float) -> str:
    return repr(float(bound))


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


class _GatewayCollector(Collector):
    """Reads the gateway at scrape time (see the module docstring)."""

    def __init__(self, gateway: Any, report: Callable[[], Any], outbox: Any = None) -> None:
        self._gw = gateway
        self._report = report
        self._outbox = outbox

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not read a gateway that is not started."""
        return []

    def collect(self) -> Iterator[Metric]:
        """One family per gauge or counter; a failed read only drops its own families."""
        stats = self._gw.stats()
        running = stats.get("state") == "running"
        yield GaugeMetricFamily("hermes_up", "Whether the gateway accepts messages.",
                                value=1.0 if running else 0.0)
        yield from self._runtime(stats)
        yield from self._traffic()
        yield from self._cache(stats.get("cache") or {})
        yield from self._supervisor(stats.get("supervisor") or {})
        yield from self._recovery()
        if stats.get("cluster"):
            yield from self._cluster(stats["cluster"])
        if running:
            yield from self._store()
        if self._outbox is not None:
            yield CounterMetricFamily(
                "hermes_outbox_appended", "Replies appended to the HTTP outbox by this process.",
                value=float(self._outbox.appended),
            )

    def _cluster(self, cluster: dict[str, Any]) -> Iterator[Metric]:
        """A cluster node's shards and fenced writes (docs/cluster.md)."""
        yield GaugeMetricFamily("hermes_cluster_shards_owned",
                                "Shards this node serves now.", value=cluster["serving"])
        for key, doc in (("gained", "Shards gained (and recovered) since start."),
                         ("lost", "Shards lost since start (expired, fenced, halted)."),
                         ("handovers", "Shards handed over to other nodes since start.")):
            yield CounterMetricFamily(f"hermes_cluster_shards_{key}", doc, value=cluster[key])
        fence = cluster.get("fence") or {}
        family = CounterMetricFamily(
            "hermes_cluster_fenced_writes",
            "Writes refused because this node no longer held their shard, by where.",
            labels=["where"])
        family.add_metric(["local"], float(fence.get("refused_locally", 0)))
        family.add_metric(["database"], float(fence.get("refused_by_database", 0)))
        yield family
        adapters = cluster.get("adapters")
        if adapters:
            held = GaugeMetricFamily(
                "hermes_cluster_adapter_leases_held",
                "Whether this node holds the lease of a pull adapter (and polls it), by "
                "adapter.", labels=["adapter"])
            for name in adapters["configured"]:
                held.add_metric([name], 1.0 if name in adapters["held"] else 0.0)
            yield held
            yield CounterMetricFamily("hermes_cluster_adapter_leases_gained",
                                      "Pull adapter leases gained since start.",
                                      value=adapters["gained"])

    def _runtime(self, stats: dict[str, Any]) -> Iterator[Metric]:
        gauges = (
            ("live_sessions", "hermes_sessions_live", "Session actors alive now."),
            ("running_turns", "hermes_turns_running", "Turns running now."),
            ("queue_depth_total", "hermes_queue_depth", "Events queued in live sessions."),
            ("outstanding", "hermes_work_outstanding",
             "Units of outstanding work (queued events, turns, delegations, deliveries)."),
            ("delegations_running", "hermes_delegations_running", "Background delegations."),
        )
        for key, name, doc in gauges:
            value = _number(stats.get(key))
            if value is not None:
                yield GaugeMetricFamily(name, doc, value=value)
        for key, name, doc in (
            ("actors_started", "hermes_session_actors_started", "Session actors started."),
            ("actors_retired", "hermes_session_actors_retired", "Idle session actors retired."),
        ):
            value = _number(stats.get(key))
            if value is not None:
                yield CounterMetricFamily(name, doc, value=value)

    def _cache(self, cache: dict[str, Any]) -> Iterator[Metric]:
        for key, name, doc in (
            ("size", "hermes_agent_cache_size", "Cached agents."),
            ("in_use", "hermes_agent_cache_in_use", "Cached agents checked out by turns."),
            ("budget_bytes", "hermes_memory_budget_bytes", "Memory budget of the agent cache."),
            ("last_anon_bytes", "hermes_memory_anon_bytes",
             "Anonymous memory at the last memory check."),
        ):
            value = _number(cache.get(key))
            if value is not None:
                yield GaugeMetricFamily(name, doc, value=value)
        evictions = CounterMetricFamily(
            "hermes_agent_cache_evictions", "Cached agents released, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted((cache.get("evictions") or {}).items()):
            evictions.add_metric([str(reason)], float(count))
        yield evictions
        closed = _number(cache.get("closed"))
        if closed is not None:
            yield CounterMetricFamily("hermes_agent_cache_closed",
                                      "Agents closed at boundaries.", value=closed)

    def _traffic(self) -> Iterator[Metric]:
        ingress = self._gw.ingress.statistics()
        yield CounterMetricFamily("hermes_messages_accepted",
                                  "Messages from people accepted (durable and queued for "
                                  "their session).", value=float(ingress.accepted))
        refused = CounterMetricFamily(
            "hermes_messages_refused", "Messages not accepted, by reason: the session's queue "
            "was full, a repeat of an accepted message, the gateway was stopping, or a "
            "malformed request.", labels=["reason"])
        for reason, count in ingress.refused.items():
            refused.add_metric([reason], float(count))
        yield refused
        turns = self._gw.turn_counters.statistics()
        family = CounterMetricFamily("hermes_turns", "Agent turns finished, by final status.",
                                     labels=["status"])
        for status in sorted({*TURN_STATUSES, *turns.by_status}):
            family.add_metric([status], float(turns.by_status.get(status, 0)))
        yield family
        bounds = [*(_bucket(b) for b in turns.bucket_bounds), "+Inf"]
        yield HistogramMetricFamily(
            "hermes_turn_duration_seconds",
            "How long agent turns took, from start to the recorded answer.",
            buckets=[(le, float(n)) for le, n in zip(bounds, turns.duration_buckets, strict=True)],
            sum_value=turns.duration_sum)

    def _supervisor(self, supervisor: dict[str, Any]) -> Iterator[Metric]:
        for key, doc in _SUPERVISOR_FIELDS:
            value = _number(supervisor.get(key))
            if value is not None:  # counted_sessions goes up and down; the rest only up
                family = GaugeMetricFamily if key == "counted_sessions" else CounterMetricFamily
                yield family(f"hermes_supervisor_{key}", doc, value=value)

    def _recovery(self) -> Iterator[Metric]:
        report = self._report()
        if report is None:
            return
        yield GaugeMetricFamily("hermes_recovery_clean_shutdown",
                                "Whether the previous run stopped gracefully (1 on a first "
                                "start: there was no previous run to lose).",
                                value=1.0 if report.clean_shutdown or report.new_home else 0.0)
        for key, doc in _REPORT_FIELDS:
            yield GaugeMetricFamily(f"hermes_recovery_{key}", doc,
                                    value=float(getattr(report, key)))
        for key, doc in (("resumed", "Interrupted sessions the last startup continued."),
                         ("suspended", "Sessions the last startup suspended as stuck in a "
                                       "restart loop.")):
            yield GaugeMetricFamily(f"hermes_recovery_{key}", doc,
                                    value=float(len(getattr(report, key))))

    def _store(self) -> Iterator[Metric]:
        store = self._gw.store
        yield GaugeMetricFamily("hermes_sessions_stored", "Routing entries in the store.",
                                value=float(store.statistics().sessions))
        yield GaugeMetricFamily("hermes_store_degraded", "Whether the store runs without its database (degraded mode).",
                                value=1.0 if store.degraded else 0.0)
        try:
            counts = store.ledger_counts()
        except Exception:  # noqa: BLE001 - a scrape must not fail on one read
            log.exception("cannot read the delivery ledger for metrics")
            return
        family = GaugeMetricFamily("hermes_ledger_obligations",
                                   "Delivery obligations by state.", labels=["state"])
        for state in LEDGER_STATES:
            family.add_metric([state], float(counts.get(state, 0)))
        yield family


class GatewayMetrics:
    """The metrics of one gateway: its registry, the HTTP request counter, and rendering."""

    def __init__(self, gateway: Any, *, report: Callable[[], Any] = lambda: None,
                 outbox: Any = None) -> None:
        #: The registry (prometheus-client's global one is never used).
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_GatewayCollector(gateway, report, outbox))
        ProcessCollector(registry=self.registry)
        #: HTTP requests answered, by route and status code.
        self.requests = Counter("hermes_http_requests", "HTTP requests answered.",
                                ["route", "status"], registry=self.registry)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric now."""
        return generate_latest(self.registry)
