"""Under ``gevent.monkey.patch_all()`` the manager's rounds are a greenlet and a round
waiting on the server never freezes the hub.

Run in a child process patched before anything is imported, as ``hermes-actors run`` is.
Another connection locks the lease table; the round's snapshot then waits on that lock *on
the server*, which the main greenlet observes (``pg_stat_activity``) while the round is
still waiting: with a frozen hub it could not run at all. Unlocking lets the round finish,
and the gains arrive on the manager's greenlet.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.postgres

DRIVER = textwrap.dedent("""
    from gevent import monkey
    monkey.patch_all()

    import sys

    import gevent
    import psycopg
    from gevent.event import Event

    from hermes_actors.cluster.events import ShardListener
    from hermes_actors.cluster.membership import LeaseManager
    from hermes_actors.store.backends.postgres.leases import PgLeases
    from hermes_actors.testing import wait_until

    dsn = sys.argv[1]
    full, where = Event(), []

    class Listener(ShardListener):
        def gained(self, shard, epoch):
            where.append(type(gevent.getcurrent()).__name__)
            if len(where) == 4:
                full.set()

    manager = LeaseManager(PgLeases.open(dsn), "a", shards=4, lease_ttl=30, heartbeat=0.05,
                           listener=Listener())
    manager.join()
    locker = psycopg.connect(dsn)
    locker.execute("LOCK TABLE shard_leases IN ACCESS EXCLUSIVE MODE")
    manager.start()
    WAITING = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
               " AND pid <> pg_backend_pid()")
    with psycopg.connect(dsn, autocommit=True) as watch:
        wait_until(lambda: watch.execute(WAITING).fetchone()[0], 30,
                   message="the round's wait for the lock")
    seen = ["saw the round wait" if not full.is_set() else "too late"]
    locker.rollback()
    assert full.wait(30), "the round did not finish"
    assert manager.stop(timeout=10)
    print(" / ".join(seen + sorted(set(where))))
""")


class TestGevent:
    def test_a_waiting_round_does_not_freeze_the_hub(self, postgres_dsn):
        done = subprocess.run([sys.executable, "-c", DRIVER, postgres_dsn],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "saw the round wait / Greenlet"
