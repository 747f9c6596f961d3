"""DbExecutor: one dedicated worker thread; under gevent, callers wait without blocking the hub."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from hermes_actors.errors import StoreError
from hermes_actors.store.backends.sqlite.executor import DbExecutor


class TestThreadWorker:
    """Every job runs on the same worker thread, in order, with results and errors returned."""

    def test_one_dedicated_thread(self, executor):
        idents = {executor.run(threading.get_ident) for _ in range(5)}
        assert len(idents) == 1 and threading.get_ident() not in idents

    def test_concurrent_callers_are_serialised(self, executor):
        seen: list[int] = []
        active = [0]

        def job(n: int) -> int:
            active[0] += 1
            assert active[0] == 1
            seen.append(n)
            active[0] -= 1
            return n * 2

        results: dict[int, int] = {}
        threads = [
            threading.Thread(target=lambda n=n: results.__setitem__(n, executor.run(job, n)))
            for n in range(20)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == {n: n * 2 for n in range(20)} and sorted(seen) == list(range(20))

    def test_errors_are_reraised(self, executor):
        with pytest.raises(KeyError, match="missing"):
            executor.run(lambda: {}["missing"])
        assert executor.run(lambda: "still working") == "still working"

    def test_nested_calls_run_inline(self, executor):
        assert executor.run(lambda: executor.run(lambda: executor.on_worker())) is True

    def test_posted_group_calls_report_to_their_callback(self, executor):
        done = threading.Event()
        heard: list = []

        def group(payloads):
            return [(p != "bad", p if p != "bad" else ValueError(p)) for p in payloads]

        def callback(ok, value):
            heard.append((ok, value if ok else str(value), executor.on_worker()))
            if len(heard) == 2:
                done.set()

        executor.post_grouped(group, "fine", callback)
        executor.post_grouped(group, "bad", callback)
        assert done.wait(10)
        assert heard == [(True, "fine", True), (False, "bad", True)]

    def test_closed_executor_refuses_work(self):
        ex = DbExecutor()
        ex.close()
        ex.close()
        with pytest.raises(StoreError):
            ex.run(lambda: None)


GEVENT_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()

    import sys
    import gevent
    from gevent.monkey import get_original
    from gevent.threadpool import ThreadPool

    from hermes_actors.store import SessionStore
    from hermes_actors.store.backends.sqlite.executor import DbExecutor
    from hermes_actors.model.source import SessionSource

    native_ident = get_original("_thread", "get_ident")
    native_lock = get_original("_thread", "allocate_lock")

    ex = DbExecutor()
    assert ex.gevent
    worker = ex.run(native_ident)
    assert worker != native_ident() and ex.run(native_ident) == worker

    # A job blocked on the worker thread does not block the hub.
    gate = native_lock()
    gate.acquire()
    blocked = gevent.spawn(ex.run, gate.acquire)
    assert gevent.spawn(lambda: "hub is free").get(timeout=10) == "hub is free"
    gate.release()
    blocked.get(timeout=10)

    # A posted call reports in the hub, once committed; the poster does not wait.
    heard = []
    ex.post_grouped(lambda ps: [(True, p * 2) for p in ps], 21,
                    lambda ok, v: heard.append((ok, v, native_ident())))
    assert heard == []
    ex.run(lambda: None)  # the batch after it ran: the hub has heard by now
    gevent.sleep(0)
    assert heard == [(True, 42, native_ident())], heard

    # Posted from a native thread, the callback still runs once.
    calls = []
    pool = ThreadPool(1)
    pool.apply(ex.post_grouped, (lambda ps: [(True, p) for p in ps], 1,
                                 lambda ok, v: calls.append(v)))
    ex.run(lambda: None)
    gevent.sleep(0)
    assert calls == [1], calls
    pool.kill()

    # A caller on a foreign native thread is served by the same worker.
    pool = ThreadPool(1)
    assert pool.apply(ex.run, (native_ident,)) == worker
    pool.kill()
    ex.close()

    # The whole store works from many greenlets.
    store = SessionStore(sys.argv[1], mirror_interval=1.0)
    def first_message(n):
        return store.get_or_create_session(SessionSource("telegram", chat_id=str(n % 5)))
    jobs = [gevent.spawn(first_message, n) for n in range(50)]
    gevent.joinall(jobs, raise_error=True, timeout=30)
    assert len(store.list_sessions()) == 5 and store.db.counts()["sessions"] == 5
    store.close()
    print("ok")
    """
)


class TestGevent:
    """Under monkey-patching the worker is a native thread and greenlets wait cooperatively."""

    def test_in_a_patched_process(self, tmp_path):
        result = subprocess.run(
            [sys.executable, "-c", GEVENT_SCRIPT, str(tmp_path / "home" / "sessions")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "ok"
