"""``hermes-actors cluster status [--json]``: the cluster's nodes and leases, as the
database has them.

It reads the database the home's configuration names (``store.backend: postgres`` and
``store.dsn``, from ``<home>/config.yaml`` or ``HERMES_STORE_*``; any node's home will do:
they share one database) in one read-only snapshot, and never needs a running node. Ages and
expiries are measured on the database's clock, the one the leases are judged by, so a skewed
clock on the machine running the command cannot mislead it.

Exit codes: 0 a cluster was found; 1 the database holds no cluster yet; 2 a home whose
store is not PostgreSQL, or a database server that cannot be reached. The DSN is only ever
shown with its password masked.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from hermes_actors.cluster.report import status_report
from hermes_actors.errors import StoreUnavailableError, StoreUnreachableError, UsageError
from hermes_actors.process.home import CONFIG_NAME, existing_home, home_config

__all__ = ["cmd_cluster_status", "format_status", "status_report"]


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return ["  " + "  ".join(cell.ljust(width) for cell, width in
                             zip(row, widths, strict=True)).rstrip()
            for row in (header, *rows)]


def format_status(report: dict[str, Any]) -> list[str]:
    """The report as the lines ``cluster status`` prints."""
    if report["shards"] is None:
        return [f"no cluster in {report['where']}: no node has joined one yet"]
    nodes = report["nodes"]
    states = [node["state"] for node in nodes]
    lines = [f"cluster: {report['shards']} shards in {report['where']} "
             f"(database clock {_when(report['now'])})",
             f"nodes: {states.count('live')} live, {states.count('leaving')} leaving, "
             f"{states.count('dead')} dead"]
    if nodes:
        lines += _table(("NODE", "STATE", "HEARTBEAT", "STARTED", "HOST", "PID", "ADDRESS",
                         "SHARDS"),
                        [(n["node_id"], n["state"],
                          "-" if n.get("heartbeat_age") is None
                          else f"{n['heartbeat_age']:.1f}s ago",
                          _when(n.get("started_at")), n.get("host") or "-",
                          str(n.get("pid") or "-"), n.get("address") or "-", str(n["shards"]))
                         for n in nodes])
    lines.append(f"leases: {report['held']} held, {report['free']} free")
    rows = [(str(lease["shard"]), lease["owner"] or "-", str(lease["epoch"]), lease["state"],
             _expiry(lease)) for lease in report["leases"]]
    if rows:
        lines += _table(("SHARD", "OWNER", "EPOCH", "STATE", "EXPIRES"), rows)
    adapters = report.get("adapter_leases") or []
    if adapters:
        lines.append(f"adapter leases (pull adapters, polled by their holder): "
                     f"{sum(1 for a in adapters if a['state'] == 'held')} held")
        lines += _table(("ADAPTER", "OWNER", "EPOCH", "STATE", "EXPIRES"),
                        [(a["adapter"], a["owner"] or "-", str(a["epoch"]), a["state"],
                          _expiry(a)) for a in adapters])
    return lines


def _expiry(lease: dict[str, Any]) -> str:
    if lease["state"] == "free":
        return "-"
    if lease["expires_in"] >= 0:
        return f"in {lease['expires_in']:.1f}s"
    return f"expired {-lease['expires_in']:.1f}s ago"


def cmd_cluster_status(args: argparse.Namespace) -> int:
    """Print the cluster's nodes and leases (``--json``: as one JSON document)."""
    from hermes_actors.store.backends.postgres.leases import PgLeases

    home = existing_home(args)
    store = home_config(home).store
    if store.backend != "postgres" or not store.dsn:
        raise UsageError(
            f"cluster status reads a PostgreSQL store, but the store of {str(home)!r} is "
            f"{store.backend!r}: set store.backend: postgres and store.dsn in "
            f"{home / CONFIG_NAME} (or HERMES_STORE_BACKEND and HERMES_STORE_DSN)")
    leases = PgLeases.open(store.dsn, read_only=True)
    try:
        snapshot = leases.snapshot()
    except StoreUnavailableError as exc:
        raise StoreUnreachableError(str(exc)) from None
    finally:
        leases.close()
    report = status_report(snapshot, leases.where)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print("\n".join(format_status(report)))
    return 0 if report["shards"] is not None else 1
