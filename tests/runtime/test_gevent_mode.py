"""The runtime scenario tests pass under ``gevent.monkey.patch_all()`` too.

pytest cannot un-patch a process, so the gevent run is a child process: the same test
modules, executed by ``python -m gevent.monkey --module pytest``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SCENARIOS = [
    "test_gateway_turns.py",
    "test_gateway_queueing.py",
    "test_delegations.py",
    "test_idle_actors.py",
    "test_gevent_mode.py",
    "../cache/test_gateway_cache.py",
]


@pytest.mark.skipif(os.environ.get("HERMES_TEST_BACKEND") == "gevent",
                    reason="already running under gevent")
def test_scenarios_under_gevent(tmp_path):
    """Run the scenario modules in a gevent-patched child and require them all to pass."""
    env = dict(os.environ, HERMES_TEST_BACKEND="gevent")
    cmd = [sys.executable, "-m", "gevent.monkey", "--module", "pytest", "-q", "-x",
           "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "gevent"),
           *[str(HERE / name) for name in SCENARIOS]]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout, tail


def test_backend_matches_environment():
    """Under the gevent child, threading really is patched (the run is not a no-op)."""
    import gevent.monkey

    patched = gevent.monkey.is_module_patched("threading")
    assert patched == (os.environ.get("HERMES_TEST_BACKEND") == "gevent")
