"""Shared fixtures: every test leaves no actor running behind it."""

from __future__ import annotations

import pykka
import pytest


@pytest.fixture(autouse=True)
def _stop_all_actors():
    yield
    pykka.ActorRegistry.stop_all(block=True, timeout=10)
