"""The lease table as an operator reads it: :func:`status_report` turns one
:class:`~hermes_actors.cluster.records.ClusterSnapshot` into plain data (what ``cluster
status --json`` prints and ``GET /v1/admin/cluster`` answers), with every age and expiry
measured on the database's clock the snapshot was read at."""

from __future__ import annotations

from typing import Any

__all__ = ["status_report"]


def status_report(snapshot: Any, where: str) -> dict[str, Any]:
    """The snapshot as plain data (what ``--json`` prints): nodes with their state
    (``live``, ``leaving``, ``dead``), heartbeat age and shards held; leases with their
    state (``held``, ``expired``, ``free``) and seconds to expiry."""
    now = snapshot.now
    held: dict[str, int] = {}
    leases = []
    for row in snapshot.leases:
        holder = row.holder_at(now)
        if holder is not None:
            held[holder] = held.get(holder, 0) + 1
        state = "held" if holder is not None else "expired" if row.owner else "free"
        leases.append({
            "shard": row.shard, "owner": row.owner, "epoch": row.epoch, "state": state,
            "expires_at": row.expires_at, "acquired_at": row.acquired_at,
            "expires_in": None if row.expires_at is None else round(row.expires_at - now, 3),
        })
    nodes = []
    for node in snapshot.nodes:
        state = "dead" if not node.live_at(now) else "leaving" if node.leaving else "live"
        nodes.append({
            "node_id": node.node_id, "state": state, "boot_id": node.boot_id,
            "heartbeat_at": node.heartbeat_at,
            "heartbeat_age": round(now - node.heartbeat_at, 3),
            "started_at": node.started_at, "lease_ttl": node.lease_ttl, "host": node.host,
            "pid": node.pid, "address": node.address, "shards": held.pop(node.node_id, 0),
        })
    for node_id, count in sorted(held.items()):  # a holder whose row was removed
        nodes.append({"node_id": node_id, "state": "unknown", "shards": count})
    adapters = []
    for row in snapshot.adapters:
        holder = row.holder_at(now)
        adapters.append({
            "adapter": row.name, "owner": row.owner, "epoch": row.epoch,
            "state": "held" if holder is not None else "expired" if row.owner else "free",
            "expires_at": row.expires_at, "acquired_at": row.acquired_at,
            "expires_in": None if row.expires_at is None else round(row.expires_at - now, 3),
        })
    return {"where": where, "now": now, "shards": snapshot.shards, "nodes": nodes,
            "leases": leases, "adapter_leases": adapters,
            "held": sum(1 for lease in leases if lease["state"] == "held"),
            "free": sum(1 for lease in leases if lease["state"] != "held")}
