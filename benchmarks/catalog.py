"""The scenarios by name, in the default order (no imports: the parent reads this)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SCENARIOS", "Scenario"]


class Scenario(NamedTuple):
    """A scenario the harness can run."""

    #: The name on the command line and in the JSON.
    name: str
    #: What it measures, one line.
    summary: str
    #: Seconds after which a child run is killed (full mode; quick mode uses a quarter).
    timeout: float
    #: Whether it needs the run's PostgreSQL server (``benchmarks.pgserver``).
    postgres: bool = False


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("throughput", "sessions x messages through the full runtime, durable", 900),
    Scenario("latency", "submit -> reply p50/p99 at a fixed offered load", 300),
    Scenario("http", "POST /v1/messages -> reply read by a long-poll GET /v1/outbox, vs a "
             "raw WSGI bound", 300),
    Scenario("sse", "answers pushed to 1,000 open GET /v1/stream, vs a raw WSGI bound", 300),
    Scenario("fifo", "bursts of /queue during long turns; order verified", 300),
    Scenario("recovery", "stored sessions + in-flight markers: process start -> ready", 600),
    Scenario("routing-scale", "cost of one routing change at 1k / 10k / 100k sessions", 600),
    Scenario("memory", "agents with large transcripts churning under a memory budget", 600),
    Scenario("actors", "10,000 live sessions: memory per idle session, start cost", 300),
    Scenario("throughput-pg", "throughput on the PostgreSQL backend, vs raw psycopg", 900,
             postgres=True),
    Scenario("latency-pg", "latency on the PostgreSQL backend, vs raw pykka ask", 300,
             postgres=True),
    Scenario("recovery-pg", "recovery on the PostgreSQL backend: start -> ready, vs raw read",
             600, postgres=True),
    Scenario("cluster-handover", "a node killed: until its chats are served, vs lease_ttl + "
             "single-node recovery", 900, postgres=True),
    Scenario("cluster-scaling", "CPU per turn and throughput, 2 nodes vs a one-node cluster",
             900, postgres=True),
    Scenario("cluster-cost", "a one-node cluster vs a single gateway on one server: "
             "throughput, CPU and WAL flushes a turn, the idle node's cost", 600,
             postgres=True),
)
