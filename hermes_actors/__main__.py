"""``python -m hermes_actors`` is the ``hermes-actors`` command."""

from hermes_actors.cli import main

raise SystemExit(main())
