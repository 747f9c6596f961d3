"""How a list of operations is applied: one result per op, all or nothing, later delivery,
diagnostics, and a closed backend."""

from __future__ import annotations

import threading

import pytest

from hermes_actors.errors import StoreError
from hermes_actors.store.protocol import DIAGNOSTIC_TABLES

from .ops import message, put, session


class _NotAnOp:
    """Something no backend knows how to apply."""


class TestApply:
    def test_one_result_per_op(self, backend):
        results = backend.apply([session(), message("q"), put("k")])
        assert len(results) == 3

    def test_a_list_that_fails_leaves_nothing(self, backend):
        with pytest.raises(StoreError):
            backend.apply([put("k"), _NotAnOp()])
        assert backend.routing_row("k") is None
        backend.apply([put("k")])  # and the backend goes on
        assert backend.routing_row("k") is not None

    def test_apply_later_reports_the_results(self, backend):
        done = threading.Event()
        seen: list = []

        def callback(ok, value):
            seen.append((ok, value))
            done.set()

        backend.apply_later([put("k")], callback)
        assert done.wait(10)
        assert seen == [(True, [None])]
        assert backend.routing_row("k") is not None

    def test_apply_later_reports_a_failure(self, backend):
        done = threading.Event()
        seen: list = []
        backend.apply_later([_NotAnOp()], lambda ok, value: (seen.append(ok), done.set()))
        assert done.wait(10) and seen == [False]

    @pytest.mark.parametrize("table", DIAGNOSTIC_TABLES)
    def test_every_diagnostic_table_lists(self, backend, table):
        assert isinstance(backend.rows(table), list)

    def test_an_unknown_table_is_refused(self, backend):
        with pytest.raises(ValueError):
            backend.rows("sqlite_master")

    def test_a_closed_backend_refuses_writes(self, opened):
        opened.backend.close()
        with pytest.raises(StoreError):
            opened.backend.apply([put("k")])
