"""Arguments of ``run``, ``chat``, ``send``, ``bench``, ``db migrate`` and ``cluster status``
(the rows are in :mod:`hermes_actors.cli`).

Kept apart from the commands' bodies because :mod:`hermes_actors.cli` refers to these
functions in its command table at import time, before ``run`` has patched gevent: this module
imports nothing but the standard library.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["AGENT_KINDS", "configure_bench", "configure_chat", "configure_cluster_status",
           "configure_migrate", "configure_run", "configure_send", "configure_show",
           "home_directory"]

#: The agent kinds ``--agent`` accepts.
AGENT_KINDS = ("echo", "scripted", "command", "openai")


def home_directory(text: str) -> str:
    """``--home``: not blank (``--home "$DIR"`` with ``$DIR`` unset fell back to
    ``$HERMES_HOME`` or ``./hermes_home``, another home than the one meant)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"invalid home directory {text!r} (give a folder)")
    return text


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r} (0-65535; 0 picks a free one)")
    return int(text)


def _host(text: str) -> str:
    """Not blank (as ``http.host``): an empty ``--host`` would listen on every interface."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"invalid host {text!r} (an address or a name to listen on, such as 127.0.0.1, "
            "or 0.0.0.0 for every interface)")
    return text.strip()


def _chat_id(text: str) -> str:
    """An id a session key can hold (as ``POST /v1/messages`` checks ``chat_id``): the store
    refuses a key with ``..`` in it."""
    if ".." in text or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(
            f"invalid chat id {text!r} (it may not contain '..' or control characters)")
    return text


def _count(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"invalid count {text!r} (an integer >= 0)")
    return int(text)


#: The longest ``send --wait`` waits (seconds): a day.
MAX_WAIT = 86400


def _wait_seconds(text: str) -> float:
    """More than 0 and at most :data:`MAX_WAIT` (so never inf or nan: checked before the
    message is posted, not when the wait begins)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= MAX_WAIT:
        raise argparse.ArgumentTypeError(
            f"invalid number of seconds {text!r} (more than 0, at most {MAX_WAIT})")
    return seconds


def _configure_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path,
                        help="YAML config file (default: <home>/config.yaml when present)")
    parser.add_argument("--agent", choices=AGENT_KINDS, help="agent kind (overrides agent.kind)")


def configure_run(parser: argparse.ArgumentParser) -> None:
    """``run [--config FILE] [--agent KIND] [--host H] [--port P]``."""
    _configure_config(parser)
    parser.add_argument("--host", type=_host,
                        help="address to listen on (default: http.host, 127.0.0.1)")
    parser.add_argument("--port", type=_port,
                        help="port to listen on (default: http.port, 8642; 0 picks a free one)")


def configure_chat(parser: argparse.ArgumentParser) -> None:
    """``chat [--config FILE] [--agent KIND] [--chat-id ID] [--user-id ID] [--url URL]
    [--token T]``."""
    _configure_config(parser)
    parser.add_argument("--chat-id", default="console", type=_chat_id,
                        help="chat id (default: console)")
    parser.add_argument("--user-id", help="your user id (default: your login name)")
    parser.add_argument("--url", help="talk to the gateway running at URL (its HTTP API and "
                        "event stream) instead of opening the home")
    parser.add_argument("--token", help="bearer token with --url (default: "
                        "$HERMES_HTTP_TOKEN, or http.token in the home's config.yaml)")


def configure_send(parser: argparse.ArgumentParser) -> None:
    """``send TEXT [--chat-id] [--user-id] [--platform] [--url] [--token] [--wait] [--timeout]``."""
    parser.add_argument("text", help="the message text")
    parser.add_argument("--chat-id", default="cli", help="chat id (default: cli)")
    parser.add_argument("--user-id", default="cli", help="user id (default: cli)")
    parser.add_argument("--platform", default="webhook", help="platform (default: webhook)")
    parser.add_argument("--url", help="the gateway (default: http://127.0.0.1:8642, or the "
                        "host and port of http in the home's config.yaml and HERMES_HTTP_*)")
    parser.add_argument("--token", help="bearer token (default: $HERMES_HTTP_TOKEN, or "
                        "http.token in the home's config.yaml)")
    parser.add_argument("--wait", action="store_true",
                        help="wait for the final answer and print it, across a restart of "
                        "the gateway (exit 1 if none comes within --timeout, or it is a notice "
                        "such as a failed turn)")
    parser.add_argument("--timeout", type=_wait_seconds, default=30.0,
                        help=f"seconds --wait waits, reconnecting included (default: 30, at "
                        f"most {MAX_WAIT})")


def configure_bench(parser: argparse.ArgumentParser) -> None:
    """``bench ARG...`` (for ``--help``; the arguments are passed on unparsed)."""
    parser.add_argument("args", nargs="*", metavar="ARG",
                        help="arguments of the benchmark harness (python -m benchmarks --help)")


def configure_show(parser: argparse.ArgumentParser) -> None:
    """``sessions show KEY [--tail N]``."""
    parser.add_argument("key", help="the session key, e.g. agent:main:telegram:dm:42")
    parser.add_argument(
        "--tail", type=_count, default=20, help="how many transcript messages (default 20)"
    )


def configure_migrate(parser: argparse.ArgumentParser) -> None:
    """``db migrate --to DSN``."""
    parser.add_argument("--to", required=True, metavar="DSN",
                        help="the empty PostgreSQL database to copy the home's state.db into "
                        "(postgresql://user@host:5432/db; a password may come from "
                        "PGPASSWORD or ~/.pgpass instead of the DSN)")


def configure_cluster_status(parser: argparse.ArgumentParser) -> None:
    """``cluster status [--json]``."""
    parser.add_argument("--json", action="store_true",
                        help="print the nodes and leases as one JSON document")
