"""Small agent programs for ``CommandAgent`` tests, written to a folder and run with Python.

Each takes its instructions from ``argv``; none sleeps: a program that must stay busy blocks
in ``signal.pause()`` after telling the test (over a TCP connection to the test's listener)
that it has started and what its pid is, so the test acts on a known state.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

__all__ = ["SOURCES", "Started", "argv", "write_programs"]

SOURCES = {
    # Replies with the request it read, as a JSON string, plus fixed usage.
    "echo_request": """
import json, sys
request = json.load(sys.stdin)
json.dump({"reply": json.dumps(request), "usage": {"input_tokens": 5, "output_tokens": 2,
                                                    "prompt_tokens": 5}}, sys.stdout)
""",
    # Prints argv[1] as it is (a reply record, plain text, or nothing).
    "print": """
import sys
sys.stdin.read()
sys.stdout.write(sys.argv[1])
""",
    # Creates the file argv[1] and prints nothing.
    "touch": """
import pathlib, sys
sys.stdin.read()
pathlib.Path(sys.argv[1]).touch()
""",
    # Writes argv[1] to stderr and exits with status argv[2].
    "fail": """
import sys
sys.stdin.read()
sys.stderr.write(sys.argv[1])
sys.exit(int(sys.argv[2]))
""",
    # Connects to 127.0.0.1:argv[1], sends "<pid> <grandchild pid or 0>\\n", then blocks.
    # argv[2]: "plain", "ignore-term" (survives SIGTERM), "grandchild" (starts a blocked
    # grandchild in the same process group first) or "stray" (the same, but the grandchild
    # ignores SIGTERM and holds none of the program's pipes, so it outlives the program).
    "block": """
import os, signal, socket, subprocess, sys
sys.stdin.read()
port, mode = int(sys.argv[1]), sys.argv[2]
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = 0
if mode == "grandchild":
    grandchild = subprocess.Popen(
        [sys.executable, "-c", "import signal; signal.pause()"]).pid
if mode == "stray":
    # Ignored before the fork, so the grandchild never has a moment without it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = subprocess.Popen(
        [sys.executable, "-c", "import signal; signal.pause()"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
with socket.create_connection(("127.0.0.1", port)) as conn:
    conn.sendall(f"{os.getpid()} {grandchild}\\n".encode())
while True:
    signal.pause()
""",
    # Starts a helper that keeps the program's stdout and stderr and blocks, reports
    # "<pid> <helper pid>" to 127.0.0.1:argv[1], prints argv[2] and exits with status 0.
    "leave_helper": """
import os, socket, subprocess, sys
sys.stdin.read()
helper = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"],
                          stdin=subprocess.DEVNULL).pid
with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as conn:
    conn.sendall(f"{os.getpid()} {helper}\\n".encode())
sys.stdout.write(sys.argv[2])
""",
}


def write_programs(folder: Path) -> dict[str, Path]:
    """Write every program into ``folder``; returns name → path."""
    paths = {}
    for name, source in SOURCES.items():
        path = folder / f"{name}.py"
        path.write_text(source.lstrip(), encoding="utf-8")
        paths[name] = path
    return paths


class Started:
    """A loopback listener a ``block`` program reports to once it is running."""

    def __init__(self, timeout: float = 10.0) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(timeout)
        #: The port to pass to the ``block`` program.
        self.port: int = self._server.getsockname()[1]

    def wait(self) -> tuple[int, int]:
        """Block until a program reports; returns its pid and its grandchild's pid (or 0)."""
        conn, _ = self._server.accept()
        with conn:
            conn.settimeout(self._server.gettimeout())
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(64)
                if not chunk:
                    raise ConnectionError("the program closed before reporting")
                data += chunk
        pid, grandchild = data.split()
        return int(pid), int(grandchild)

    def close(self) -> None:
        """Stop listening."""
        self._server.close()


def argv(paths: dict[str, Path], name: str, *args: object) -> list[str]:
    """The command line running program ``name`` with ``args``."""
    return [sys.executable, str(paths[name]), *map(str, args)]
