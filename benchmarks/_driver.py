"""A load driver of :mod:`benchmarks.httpload` in a process of its own, gevent-patched
before any import: ``python -m benchmarks._driver long-poll PORT SESSIONS MESSAGES CLIENTS``
or ``... stream PORT STREAMS MESSAGES POSTERS``; prints ``{"elapsed": s, "latencies": [...]}``.
"""

from hermes_actors._green.monkey import patch_all

patch_all()

import json  # noqa: E402 - after patching, on purpose
import sys  # noqa: E402

from benchmarks.httpload import long_poll_load, stream_load  # noqa: E402


def main(argv: list[str]) -> int:
    """Run the driver named by ``argv[0]`` and print its result."""
    kind, port, *sizes = argv
    load = long_poll_load if kind == "long-poll" else stream_load
    elapsed, latencies = load(int(port), *(int(s) for s in sizes))
    print(json.dumps({"elapsed": elapsed, "latencies": latencies}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
