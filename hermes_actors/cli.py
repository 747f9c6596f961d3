"""The ``hermes-actors`` command line (§12, §17.16, §17.35, §17.48, §17.49; ``cluster``:
issue 20).

Subcommands are rows of :data:`SUBCOMMANDS`: a path (``("db", "check")``), a help text, a
function ``run(args) -> exit code`` and optionally a function adding its own arguments; the
parser, ``--home`` and the error handling come for free. Every subcommand takes ``--home DIR``
after the subcommand (given before it, it is moved there); it wins over ``HERMES_HOME``, whose
default is ``./hermes_home``. ``--version`` prints the installed version.

This module's imports are kept light on purpose (nothing here imports ``threading``): ``run``
must apply ``gevent.monkey.patch_all()`` before the runtime is imported, so every command
imports what it needs inside its function. The bodies of ``run``, ``send``, ``chat`` and
``bench`` live in :mod:`hermes_actors.process.commands`. ``bench`` hands its arguments over
unparsed (see :data:`PASSTHROUGH`).

Exit codes: 0 success; 1 a runtime failure or an unhealthy check; 2 a usage or configuration
error (any :class:`HermesActorsError` that is not a store failure), or a store database
server that cannot be reached (:class:`StoreUnreachableError`: nothing ran). Errors are one
line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hermes_actors.errors import (
    CommandFailed,
    HermesActorsError,
    StoreError,
    StoreUnreachableError,
    UsageError,
)
from hermes_actors.process.admin import ADMIN_COMMANDS
from hermes_actors.process.arguments import (
    configure_bench,
    configure_chat,
    configure_cluster_status,
    configure_migrate,
    configure_run,
    configure_send,
    configure_show,
    home_directory,
)
from hermes_actors.process.home import DEFAULT_HOME
from hermes_actors.process.inspect import (
    cmd_db_check,
    cmd_db_rebuild_fts,
    cmd_sessions_list,
    cmd_sessions_show,
)

__all__ = ["SUBCOMMANDS", "CommandFailed", "Subcommand", "UsageError", "build_parser", "main"]


@dataclass(frozen=True)
class Subcommand:
    """One leaf of the command tree."""

    #: Words that select it: ``("db", "check")``, or ``("run",)``.
    path: tuple[str, ...]
    #: One line for ``--help``.
    help: str
    #: Runs the command; returns the exit code.
    run: Callable[[argparse.Namespace], int]
    #: Adds the command's own arguments (``--home`` is added for every command).
    configure: Callable[[argparse.ArgumentParser], None] | None = None
    #: A longer description for the command's ``--help``.
    description: str | None = None


# -- run, chat, send, bench ----------------------------------------------------------------

def cmd_run(args: argparse.Namespace) -> int:
    """``run``: patch gevent first, then start the standalone gateway."""
    from hermes_actors._green.monkey import patch_all

    patch_all()
    from hermes_actors.process.commands import run_command

    return run_command(args)


def cmd_chat(args: argparse.Namespace) -> int:
    """``chat``: an interactive console session on an embedded gateway."""
    from hermes_actors.process.commands import chat_command

    return chat_command(args)


def cmd_send(args: argparse.Namespace) -> int:
    """``send``: post a message to a running gateway."""
    from hermes_actors.process.commands import send_command

    return send_command(args)


def cmd_db_migrate(args: argparse.Namespace) -> int:
    """``db migrate``: copy a SQLite home into an empty PostgreSQL database."""
    from hermes_actors.process.migrate import cmd_db_migrate as migrate

    return migrate(args)


def cmd_cluster_status(args: argparse.Namespace) -> int:
    """``cluster status``: the cluster's nodes and leases in the home's PostgreSQL store."""
    from hermes_actors.process.cluster import cmd_cluster_status as status

    return status(args)


def cmd_bench(args: argparse.Namespace) -> int:
    """``bench``: run the benchmark harness."""
    from hermes_actors.process.commands import bench_command

    return bench_command(args)


#: The command tree; append rows to add subcommands.
SUBCOMMANDS: list[Subcommand] = [
    Subcommand(("run",), "run the standalone gateway with its HTTP API", cmd_run,
               configure_run, "Run the gateway until SIGTERM or SIGINT (graceful drain); a "
               "second signal (either) ends the drain at once, a third exits at once with "
               "code 130."),
    Subcommand(("send",), "send a message to a running gateway", cmd_send, configure_send,
               "POST the message to the gateway's HTTP API; with --wait, print its final "
               "answer (acknowledgements such as 'Queued for the next turn.' go to stderr), "
               "waiting across a restart of the gateway. Exit 0 for a reply or the answer to "
               "a command (/status, /new...), 1 for a notice refusing the message (the agent "
               "failed, the turn was cancelled...) or no answer within --timeout."),
    Subcommand(("chat",), "interactive console session (embedded gateway)", cmd_chat,
               configure_chat, "Each line is a message on platform 'local'; /quit or "
               "end of input stops the gateway gracefully."),
    Subcommand(("sessions", "list"), "list sessions", cmd_sessions_list),
    Subcommand(("sessions", "show"), "show one session", cmd_sessions_show, configure_show),
    Subcommand(("db", "check"), "report database health (read-only)", cmd_db_check),
    Subcommand(("db", "rebuild-fts"), "rebuild the full-text index", cmd_db_rebuild_fts),
    Subcommand(("db", "migrate"), "copy the home's state.db into an empty PostgreSQL database",
               cmd_db_migrate, configure_migrate,
               "Copy every table of the home's state.db (sessions, transcripts, routing, "
               "inbox, ledger, outbox, node state) into the empty PostgreSQL database --to "
               "names, in one transaction, and verify the row counts. The gateway must not "
               "be running; state.db and the config file are left as they are."),
    Subcommand(("cluster", "status"), "show the cluster's nodes, shards and leases",
               cmd_cluster_status, configure_cluster_status,
               "Read the cluster's tables in the PostgreSQL store of the home's configuration "
               "(any node's home: they share the database): every node with its heartbeat "
               "age and shards held, every shard's lease with its owner, epoch and expiry, "
               "measured on the database's clock. Exit 1 when no node has created a cluster "
               "there yet."),
    *(Subcommand(("admin", word), text, run, configure, "Against a running gateway's "
                 "operator routes (/v1/admin/..., http.admin_token). Exit 0 done, 1 the "
                 "gateway failed or is unreachable, 2 a usage error, a wrong token (401) or "
                 "an unknown session or delivery (404).")
      for word, text, run, configure in ADMIN_COMMANDS),
    Subcommand(("bench",), "run the benchmark harness (python -m benchmarks)", cmd_bench,
               configure_bench, "Arguments after 'bench' (and an optional leading --home "
               "DIR) are passed to the benchmark harness unchanged."),
]

#: Commands whose arguments are passed on unparsed (after an optional leading ``--home``).
PASSTHROUGH = ("bench",)


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors raise instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    """The parser for every row of :data:`SUBCOMMANDS`."""
    parser = _Parser(prog="hermes-actors", description="hermes_actors gateway tools",
                     epilog="--home DIR goes with any command (before or after its name).")
    parser.add_argument("--version", action="version", version=f"hermes-actors {_version()}")
    groups: dict[tuple[str, ...], Any] = {
        (): parser.add_subparsers(dest="command", metavar="COMMAND")
    }
    parsers: dict[tuple[str, ...], argparse.ArgumentParser] = {(): parser}
    for sub in SUBCOMMANDS:
        for depth in range(1, len(sub.path) + 1):
            prefix = sub.path[:depth]
            if prefix in parsers:
                continue
            leaf = depth == len(sub.path)
            child = groups[prefix[:-1]].add_parser(
                prefix[-1], help=sub.help if leaf else f"{prefix[-1]} commands",
                description=(sub.description or sub.help) if leaf else None,
            )
            parsers[prefix] = child
            if leaf:
                child.add_argument(
                    "--home", type=home_directory,
                    help=f"home directory (default: $HERMES_HOME or {DEFAULT_HOME})"
                )
                if sub.configure is not None:
                    sub.configure(child)
                child.set_defaults(handler=sub.run)
            else:
                groups[prefix] = child.add_subparsers(dest="_".join(prefix), metavar="COMMAND")
                child.set_defaults(group_parser=child)  # "db" alone prints the db commands
    return parser


def _passthrough(argv: list[str]) -> argparse.Namespace | None:
    """The arguments of a :data:`PASSTHROUGH` command, unparsed; ``None`` for the others
    (and for ``--help``, which argparse answers)."""
    if not argv or argv[0] not in PASSTHROUGH or argv[1:2] in (["-h"], ["--help"]):
        return None
    rest, home = argv[1:], None
    if rest[:1] == ["--home"] and len(rest) >= 2:
        home, rest = rest[1], rest[2:]
    elif rest and rest[0].startswith("--home="):
        home, rest = rest[0].split("=", 1)[1], rest[1:]
    handler = next(sub.run for sub in SUBCOMMANDS if sub.path == (argv[0],))
    return argparse.Namespace(home=home, rest=rest, handler=handler)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hermes_actors")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _home_after_command(argv: list[str]) -> list[str]:
    """``--home DIR`` (or ``--home=DIR``) given before the command, moved to just after the
    command's words, where every command's parser takes it."""
    if argv[:1] == ["--home"] and len(argv) >= 2:
        home, rest = argv[:2], argv[2:]
    elif argv and argv[0].startswith("--home="):
        home, rest = argv[:1], argv[1:]
    else:
        return argv
    depth = max((len(sub.path) for sub in SUBCOMMANDS
                 if tuple(rest[:len(sub.path)]) == sub.path), default=0)
    if depth == 0:
        raise UsageError("--home DIR needs a command after it "
                         "(hermes-actors --home DIR run, or hermes-actors run --home DIR)")
    return rest[:depth] + home + rest[depth:]


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        argv = _home_after_command(argv)
        try:
            args = _passthrough(argv) or parser.parse_args(argv)
        except SystemExit as exc:  # --help
            return int(exc.code or 0)
        handler = getattr(args, "handler", None)
        if handler is None:
            getattr(args, "group_parser", parser).print_help(sys.stderr)
            return 2
        code = handler(args)
        sys.stdout.flush()  # (a closed pipe is reported here, not at the interpreter's exit)
        return code
    except BrokenPipeError:  # the output's reader is gone (``| head -1``): end quietly
        _discard_stdout()
        return 1
    except StoreUnreachableError as exc:
        _error(exc)
        return 2
    except StoreError as exc:
        _error(exc)
        return 1
    except CommandFailed as exc:
        _error(exc)
        return 1
    except HermesActorsError as exc:
        _error(exc)
        return 2
    except KeyboardInterrupt:
        return 130


def _error(exc: BaseException) -> None:
    """Print ``exc`` as the command's one error line, without a secret (a DSN's password:
    :func:`~hermes_actors.model.dsn.scrub`)."""
    from hermes_actors.model.dsn import scrub

    print(f"hermes-actors: error: {scrub(str(exc))}", file=sys.stderr)


def _discard_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's last flush of what is
    still buffered does not fail again on the closed pipe."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (a test's capture)
        pass
    finally:
        os.close(devnull)
