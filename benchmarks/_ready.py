"""A gateway process for the recovery scenarios: ``python -m benchmarks._ready HOME [DSN]``.

Patches gevent first and sets the collector as the standalone process does
(``hermes_actors.process.heap``), starts a ``Gateway`` on ``HOME``
(its store on the PostgreSQL database ``DSN`` names, when given, else SQLite in ``HOME``)
with an in-memory Telegram adapter and the echo agent, and prints one JSON line the moment
``start()`` returns (ready: recovery, ledger sweep and auto-continue dispatch done). The
benchmark kills it right after; nothing is stopped cleanly on purpose.
"""

import time

_T0 = time.perf_counter()

from hermes_actors._green.monkey import patch_all  # noqa: E402

patch_all()

import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def main() -> None:
    """Start the gateway, report, and wait to be killed."""
    from hermes_actors import EchoAgent, Gateway, InMemoryAdapter, load_config
    from hermes_actors.process.heap import tune_gc

    imported = time.perf_counter()
    tune_gc()  # the standalone process's collector settings, applied before its start too
    store = {"store": {"backend": "postgres", "dsn": sys.argv[2]}} if len(sys.argv) > 2 else {}
    gw = Gateway(sys.argv[1], config=load_config(store, env={}),
                 agent_factory=lambda _ctx: EchoAgent(), adapters=[InMemoryAdapter("telegram")])
    report = gw.start()
    ready = time.perf_counter()
    print(json.dumps({"import_s": imported - _T0, "start_s": ready - imported,
                      "report": report.summary(), "gc_threshold": gc.get_threshold()}),
          flush=True)
    sys.stdin.read()  # until the benchmark closes the pipe or kills us
    os._exit(0)


if __name__ == "__main__":
    main()
