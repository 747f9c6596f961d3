"""Under ``gevent.monkey.patch_all()`` (as ``hermes-actors run``) a poll in progress is cut
at the lease's local deadline: the Bot API server here holds every ``getUpdates`` for 20 s,
far past the shortened poll the poller asked for, and the watchdog still stops the poller
at the deadline, not when the server answers.

The poller runs in a child process patched before anything is imported; the fake Bot API
runs here, on real threads.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from telegram_adapter.fake_bot_api import TOKEN, FakeBotApi

DRIVER = textwrap.dedent("""
    from gevent import monkey
    monkey.patch_all()

    import sys
    import time

    from hermes_actors.adapters.telegram import TelegramAdapter
    from hermes_actors.config import TelegramConfig
    from hermes_actors.runtime.pull_adapters import PullAdapters, pull_adapters

    url, token = sys.argv[1], sys.argv[2]
    adapter = TelegramAdapter(TelegramConfig(api_base_url=url, poll_timeout=20), token)
    adapter.connect()
    pulls = PullAdapters(pull_adapters([adapter]), lambda event: None)
    start = time.monotonic()
    deadline = start + 2.5  # no renewal comes
    pulls.bind(lambda name, epoch: max(0.0, deadline - time.monotonic()))
    pulls.gained(adapter.lease_name, 1)
    assert adapter.poller.finished.wait(15), "the poller did not stop"
    print(f"stopped after {time.monotonic() - start:.2f}s")
""")


def test_the_watchdog_cuts_a_poll_in_progress_at_the_deadline():
    api = FakeBotApi()
    api.min_hold = 20.0  # a server that answers far later than asked
    try:
        done = subprocess.run([sys.executable, "-c", DRIVER, api.url, TOKEN],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        seconds = float(done.stdout.split("stopped after ")[1].rstrip("s\n"))
        assert 2.4 <= seconds < 4.0, done.stdout  # at the deadline, not after 20 s
        assert [c.method for c in api.calls] == ["getMe", "getUpdates"]
        assert int(api.calls[1].params["timeout"]) <= 2  # it asked for less than 2.5 - 0.5
    finally:
        api.close()
