"""Under ``gevent.monkey.patch_all()`` no query freezes the hub: while one greenlet's
``pg_sleep`` runs on the server, other greenlets read and write through the same backend.

Run in a child process patched before anything is imported, as ``hermes-actors run`` is.
The proof needs no clock: another greenlet sees the sleeping query *active on the server*
(``pg_stat_activity``), then writes and reads, then sees the same sleep still active and
cancels it; with a frozen hub it could only run once the sleep had returned. The sleep is
long (30 s, a generous bound that a healthy run never waits for) so that no step races it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

DRIVER = textwrap.dedent("""
    from gevent import monkey
    monkey.patch_all()

    import sys
    import tempfile

    import gevent
    from gevent.event import Event

    from hermes_actors.errors import StoreError
    from hermes_actors.store.backends.postgres.backend import PostgresBackend
    from hermes_actors.store.ops import PutRouting
    from hermes_actors.store.routing import NO_FLAGS
    from hermes_actors.testing import wait_until

    backend = PostgresBackend(sys.argv[1], tempfile.mkdtemp(), pool_size=2)
    assert backend._committer._thread.__class__.__module__.startswith("gevent")
    started, slept = Event(), Event()
    seen = []
    SLEEP = "SELECT pg_sleep(30)"

    def sleeper():
        started.set()
        try:
            backend.sql(SLEEP)
            seen.append("the sleep was not cancelled")
        except StoreError as exc:
            assert "canceling statement" in str(exc), exc
        slept.set()

    def sleeping_pids():
        return [pid for (pid,) in backend.sql(
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query = %s",
            (SLEEP,))]

    def other():
        started.wait()
        def sleeping():
            assert not slept.is_set(), "the sleep ended before anyone else could run"
            return sleeping_pids()

        first = wait_until(sleeping, 30, 0.005, "the sleep in pg_stat_activity")
        seen.append("saw the sleep")
        backend.apply([PutRouting("k", "{}", *NO_FLAGS)])
        assert backend.routing_row("k") is not None
        still = sleeping_pids() == first and not slept.is_set()
        seen.append("wrote and read" if still else "too late")
        backend.sql("SELECT pg_cancel_backend(%s)", (first[0],))

    jobs = [gevent.spawn(sleeper), gevent.spawn(other)]
    gevent.joinall(jobs, timeout=60, raise_error=True)
    assert all(job.successful() for job in jobs), [job.exception for job in jobs]
    backend.close()
    print(" / ".join(seen))
""")


class TestGevent:
    """A slow query in one greenlet does not stop the others."""

    def test_pg_sleep_does_not_freeze_the_hub(self, postgres_dsn):
        done = subprocess.run([sys.executable, "-c", DRIVER, postgres_dsn],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "saw the sleep / wrote and read"
