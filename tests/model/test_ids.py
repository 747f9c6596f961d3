"""Event ids and turn tokens: 32 hex digits, unique in a process, apart across processes."""

from __future__ import annotations

import os
import re
import threading

from hermes_actors.model.ids import new_id


def test_format_and_uniqueness_across_threads():
    seen: list[str] = []

    def take() -> None:
        seen.extend(new_id() for _ in range(5000))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 20000
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in seen[:100])


def test_a_forked_child_draws_a_new_prefix():
    parent = new_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.write(write, new_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 32 and child[:16] != parent[:16]
