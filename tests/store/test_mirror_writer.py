"""``MirrorWriter``: coalesced writes of ``sessions.json``, rendered off the gevent hub."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from hermes_actors.store.backends.files.mirror import MirrorWriter

GEVENT_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()

    import json, sys
    from pathlib import Path
    import gevent
    from gevent.monkey import get_original
    from hermes_actors.store.backends.files.mirror import MirrorWriter

    gate = get_original("_thread", "allocate_lock")()
    gate.acquire()

    def render():
        # Blocks its thread until a greenlet ran: in the hub that greenlet never could.
        if not gate.acquire(timeout=20):
            raise SystemExit("the hub was frozen while the mirror rendered")
        return [json.dumps({"_README": "r", "k": {"session_id": "s"}}).encode()]

    path = Path(sys.argv[1])
    writer = MirrorWriter(path, lambda: render, interval=None)
    writer.mark_dirty()
    flushing = gevent.spawn(writer.flush)
    gevent.spawn(gate.release).join(timeout=20)
    assert flushing.get(timeout=20) is True
    assert json.loads(path.read_text())["k"] == {"session_id": "s"}
    print("ok")
    """
)

FAILING_WRITE_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()

    import sys
    from pathlib import Path
    from hermes_actors.store.backends.files.mirror import MirrorWriter

    path = Path(sys.argv[1]) / "sessions.json"  # its folder is a regular file
    writer = MirrorWriter(path, lambda: (lambda: [b'{"_README": "r"}']), interval=None)
    writer.mark_dirty()
    assert writer.flush() is False and writer.dirty  # refused, kept for a retry
    print("ok")
    """
)


class TestMirrorWriter:
    """A render is written whole, once per burst of changes, and never in the hub."""

    def test_a_render_runs_off_the_hub(self, tmp_path):
        out = subprocess.run([sys.executable, "-c", GEVENT_SCRIPT, str(tmp_path / "m.json")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "ok"

    def test_a_failed_write_off_the_hub_is_one_warning_not_a_traceback(self, tmp_path):
        # gevent's thread pool printed the handled error's traceback (and "failed with
        # NotADirectoryError") on stderr before the writer's own warning, at every retry
        folder = tmp_path / "sessions"
        folder.write_text("a file where the sessions folder should be\n")
        out = subprocess.run([sys.executable, "-c", FAILING_WRITE_SCRIPT, str(folder)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "ok"
        assert "Traceback" not in out.stderr and "failed with" not in out.stderr, out.stderr

    def test_a_burst_of_changes_is_one_write(self, tmp_path):
        renders = []

        def document():
            renders.append(1)
            return lambda: [json.dumps({"_README": "r", "n": len(renders)}).encode()]

        writer = MirrorWriter(tmp_path / "m.json", document, interval=None)
        for _ in range(5):
            writer.mark_dirty()
        assert writer.flush() and writer.flush()
        assert len(renders) == 1 and writer.writes == 1
        assert json.loads((tmp_path / "m.json").read_text())["n"] == 1

    def test_a_failed_render_keeps_the_old_file_and_retries(self, tmp_path):
        path = tmp_path / "m.json"
        path.write_text('{"_README": "old"}')
        outcomes = iter([ValueError("bad row"), None])

        def render():
            failure = next(outcomes)
            if failure is not None:
                raise failure
            return [b'{"_README": ', b'"new"}']

        writer = MirrorWriter(path, lambda: render, interval=None)
        writer.mark_dirty()
        assert writer.flush() is False and writer.dirty
        assert json.loads(path.read_text()) == {"_README": "old"}
        assert writer.flush() is True
        assert json.loads(path.read_text()) == {"_README": "new"}
