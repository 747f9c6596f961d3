"""One run of one scenario, in a gevent-patched child: ``python -m benchmarks._child NAME OUT``.

``patch_all()`` comes first, before anything imports ``threading`` (the package
``__init__`` imports nothing), so actors, turn workers and timers are greenlets exactly as
in the standalone process. The result (figures and details) is written to ``OUT`` as JSON;
progress goes to stderr. A scenario that detects a broken invariant (FIFO order, lost
messages) raises, and the child exits 1 with the reason on stderr.
"""

from hermes_actors._green.monkey import patch_all

patch_all()

import argparse  # noqa: E402 - after patching, on purpose
import importlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

from benchmarks.util import Progress  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Run the scenario once and write its result; 0 on success, 1 on failure."""
    p = argparse.ArgumentParser(prog="python -m benchmarks._child")
    p.add_argument("scenario")
    p.add_argument("out")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--workdir", default=None)
    p.add_argument("--label", default="")
    args = p.parse_args(argv)
    module = importlib.import_module("benchmarks.scenarios." + args.scenario.replace("-", "_"))
    progress = Progress(args.label or args.scenario)
    started = time.perf_counter()
    try:
        result = module.run(quick=args.quick, progress=progress, workdir=args.workdir)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, loudly
        progress.done()
        traceback.print_exc()
        Path(args.out).write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    progress.done()
    result["seconds"] = round(time.perf_counter() - started, 2)
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
