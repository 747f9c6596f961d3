"""Where a command's home is: ``--home``, else ``HERMES_HOME``, else ``./hermes_home``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from hermes_actors.errors import UsageError

__all__ = ["DEFAULT_HOME", "existing_home", "resolve_home"]

#: The home used when neither ``--home`` nor ``HERMES_HOME`` is given.
DEFAULT_HOME = "./hermes_home"


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
