"""The server's WAL as a server in service has it: segment files ready for reuse.

Why: the harness starts a freshly initialised server for the run, whose ``pg_wal`` holds
one segment. Until its first checkpoint (``checkpoint_timeout``, 5 minutes: longer than
any scenario) every 16 MB of WAL is a new file, and the backend whose commit crosses into
it writes 16 MB of zeros and fsyncs them before its ``COMMIT`` returns
(``wal_init_zero=on``: wait events ``WalInitWrite``, ``WalInitSync``). Measured in
``latency-pg``: ~53 ms, once every ~3.5 s at 1,000 msg/s, and every message in flight
waits for it; three such stalls in 10 s were the p99 (55-63 ms, against a median of 5 ms).
A server in service does not do this: each checkpoint renames the segments it no longer
needs into future ones (``wal_recycle=on``, as many as its recent WAL volume calls for,
at least ``min_wal_size``), so it creates a segment only when its volume grows.

So before each measurement the server passes through :data:`SEGMENTS` segments (one tiny
WAL record and ``pg_switch_wal()`` each) and checkpoints, which recycles them ahead of the
insert position, the state a checkpoint leaves on a server in service. No setting is
changed. Rejected: ``wal_init_zero=off`` or larger segments (settings a benchmark leaves at
their defaults); a warm-up load before the measurement without the checkpoint (it creates
the files earlier, but they stay behind the insert position, so the measured run still
creates its own).
"""

from __future__ import annotations

__all__ = ["SEGMENTS", "recycle_segments"]

#: Segments recycled ahead of a measurement (16 MB each: 512 MB, ~100,000 turns of WAL,
#: more than the largest scenario writes into one database; below ``max_wal_size``, 1 GB,
#: up to which a checkpoint keeps them).
SEGMENTS = 32


def recycle_segments(admin_dsn: str, segments: int = SEGMENTS) -> bool:
    """Have the server that ``admin_dsn`` reaches keep ``segments`` WAL segments ready for
    reuse (module doc); ``False`` when its role may not (``pg_switch_wal`` and
    ``CHECKPOINT`` need a superuser or a grant), and nothing was done."""
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        try:
            for _ in range(segments):
                # pg_switch_wal() does nothing unless WAL was written since the last switch
                conn.execute("SELECT pg_switch_wal() "
                             "FROM pg_logical_emit_message(false, 'hermes-bench', '')")
            conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            return False
    return True
