"""The bodies of ``hermes-actors run``, ``send``, ``chat`` and ``bench`` (§12, §17.35, §17.49).

:mod:`hermes_actors.cli` declares the arguments and imports this module only when one of
these commands runs, after ``run`` has patched gevent; so nothing here may be imported by
``cli`` at module level, and this module imports the runtime only inside functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import os
import sys
import warnings
from pathlib import Path

from hermes_actors.config import GatewayConfig, load_config
from hermes_actors.errors import CommandFailed, ConfigWarning, UsageError
from hermes_actors.process.home import CONFIG_NAME, home_config, resolve_home

__all__ = [
    "bench_command", "chat_command", "default_url", "load_home_config", "run_command",
    "send_command",
]

#: The port ``send`` assumes when the config leaves it to the system (``http.port: 0``).
DEFAULT_PORT = 8642


def load_home_config(args: argparse.Namespace) -> tuple[Path, GatewayConfig]:
    """The home and the config of ``run``/``chat``: ``--config FILE``, else
    ``<home>/config.yaml`` when present; env overrides; then ``--host``, ``--port``,
    ``--agent`` from the command line. Config warnings are printed as one line each."""
    home = resolve_home(args)
    path = args.config or (home / CONFIG_NAME if (home / CONFIG_NAME).is_file() else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        config = load_config(path)
    for warning in caught:
        print(f"hermes-actors: warning: {warning.message}", file=sys.stderr)
    if not args.home and not os.environ.get("HERMES_HOME") and config.home is not None:
        home = config.home  # a --config file may name the home
    http = config.http
    if getattr(args, "host", None) is not None:
        http = dataclasses.replace(http, host=args.host)
    if getattr(args, "port", None) is not None:
        http = dataclasses.replace(http, port=args.port)
    agent = config.agent
    if getattr(args, "agent", None) is not None:
        agent = dataclasses.replace(agent, kind=args.agent)
    return home, dataclasses.replace(config, http=http, agent=agent)


def run_command(args: argparse.Namespace) -> int:
    """``run``: the standalone gateway (gevent must already be patched)."""
    from hermes_actors.process.standalone import RunOptions, configure_logging, run

    configure_logging()
    home, config = load_home_config(args)
    return run(RunOptions(home=home, config=config))


def chat_command(args: argparse.Namespace) -> int:
    """``chat``: an interactive console session on an embedded gateway, or with ``--url``
    on a running one."""
    if getattr(args, "url", None):
        return _remote_chat(args)
    from hermes_actors.process.console import chat

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s %(message)s")
    home, config = load_home_config(args)
    return chat(home, config, chat_id=args.chat_id, user_id=args.user_id)


def _remote_chat(args: argparse.Namespace) -> int:
    from hermes_actors.process.client import ClientError, GatewayClient
    from hermes_actors.process.console import remote_chat

    token = args.token or _home_http_settings(resolve_home(args)).token or None
    try:
        return remote_chat(GatewayClient(args.url, token), chat_id=args.chat_id,
                           user_id=args.user_id)
    except ClientError as exc:
        if exc.refused:
            raise UsageError(str(exc)) from None
        raise CommandFailed(str(exc)) from None


def send_command(args: argparse.Namespace) -> int:
    """``send``: post one message to a running gateway; with ``--wait`` print its final
    answer (its acknowledgements go to stderr meanwhile), across a restart of the gateway."""
    from hermes_actors.process.client import ClientError, GatewayClient, SendOptions, send

    http = _home_http_settings(resolve_home(args))
    token = args.token or http.token or None
    options = SendOptions(
        text=args.text, chat_id=args.chat_id, user_id=args.user_id, platform=args.platform,
        wait=args.wait, timeout=args.timeout,
    )
    try:
        client = GatewayClient(args.url or default_url(http), token)
        result = send(client, options, out=lambda text: print(text, flush=True),
                      note=lambda text: print(text, file=sys.stderr, flush=True))
    except ClientError as exc:
        if exc.refused:
            raise UsageError(str(exc)) from None
        raise CommandFailed(str(exc)) from None
    if options.wait and result.answer is None:
        raise CommandFailed(f"no reply within {args.timeout:g}s")
    if not result.ok:
        raise CommandFailed("no reply: the gateway answered with the notice above")
    return 0


def _import_harness():
    try:
        return importlib.import_module("benchmarks.__main__")
    except ModuleNotFoundError as exc:
        local = Path.cwd()
        if exc.name not in ("benchmarks", "benchmarks.__main__") or not (
                local / "benchmarks" / "__main__.py").is_file():
            raise
    sys.path.insert(0, str(local))
    sys.modules.pop("benchmarks", None)
    return importlib.import_module("benchmarks.__main__")


def _home_http_settings(home: Path):
    """The ``http`` section as the gateway of ``home`` would read it (its config.yaml, when
    present, and ``HERMES_HTTP_*``); warnings are the business of ``run``, not ``send``."""
    return home_config(home).http


def default_url(http) -> str:
    """Where a gateway with these ``http`` settings listens, seen from this machine."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(http.host, http.host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{http.port or DEFAULT_PORT}"


def bench_command(args: argparse.Namespace) -> int:
    """``bench``: hand the remaining arguments to ``benchmarks.__main__.main(argv)``.

    The harness is part of the repository, not of the installed package: it is found on
    the path (``python -m benchmarks`` from a checkout), else in a ``benchmarks`` folder of
    the working directory.
    """
    try:
        module = _import_harness()
    except ModuleNotFoundError as exc:
        if exc.name not in ("benchmarks", "benchmarks.__main__"):
            raise
        raise UsageError(
            "the benchmark harness was not found (no 'benchmarks' package): run "
            "'hermes-actors bench' from the root of a hermes_actors checkout"
        ) from None
    entry = getattr(module, "main", None)
    if not callable(entry):
        raise UsageError("benchmarks.__main__ has no main(argv) function")
    if args.home:
        os.environ["HERMES_HOME"] = str(args.home)
    return int(entry(list(args.rest)) or 0)
