"""Where a command's home is (``--home``, else ``HERMES_HOME``, else ``./hermes_home``), and
the configuration its gateway reads there."""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path
from typing import Any

from hermes_actors.errors import ConfigWarning, UsageError

__all__ = ["CONFIG_NAME", "DEFAULT_HOME", "existing_home", "home_config", "resolve_home"]

#: The home used when neither ``--home`` nor ``HERMES_HOME`` is given.
DEFAULT_HOME = "./hermes_home"
#: The config file read from the home when ``--config`` is not given.
CONFIG_NAME = "config.yaml"


def home_config(home: Path) -> Any:
    """The configuration the gateway of ``home`` reads when no ``--config`` is given (its
    ``config.yaml`` when present, and the ``HERMES_*`` variables); warnings are ignored:
    reporting them is the business of ``run``."""
    from hermes_actors.config import load_config

    path = home / CONFIG_NAME
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return load_config(path if path.is_file() else None)


def resolve_home(args: argparse.Namespace) -> Path:
    """``--home``, else ``HERMES_HOME``, else ``./hermes_home``."""
    return Path(args.home or os.environ.get("HERMES_HOME") or DEFAULT_HOME)


def existing_home(args: argparse.Namespace) -> Path:
    """:func:`resolve_home`, which must exist (a read-only command creates nothing)."""
    home = resolve_home(args)
    if not home.is_dir():
        raise UsageError(
            f"home directory {str(home)!r} does not exist (give --home DIR or set HERMES_HOME)"
        )
    return home
