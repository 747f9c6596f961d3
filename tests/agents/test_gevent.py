"""The agents work under ``gevent.monkey.patch_all()`` (the standalone process's mode).

pytest cannot un-patch a process, so the gevent run is a child process: ``gevent_driver.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DRIVER = Path(__file__).with_name("gevent_driver.py")


class TestUnderGevent:
    """Turns, interrupts and timeouts behave the same in a gevent-patched process."""

    def test_agents_under_gevent(self, tmp_path):
        """Command and OpenAI turns complete, and interrupts from another greenlet land
        (an OpenAI one during the TLS handshake too)."""
        proc = subprocess.run([sys.executable, str(DRIVER), str(tmp_path)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout.splitlines()[-1]) == {
            "patched": True,
            "round_trip": "héllo",
            "interrupt": "interrupted",
            "timeout": "CommandAgentTimeout",
            "reply": "hello from the model",
            "openai_interrupt": "interrupted",
            "openai_handshake_interrupt": "interrupted",
        }
