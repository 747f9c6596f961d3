"""``operator_actions.perform``: where an operator's session action runs (here, or sent to the
session's owner as a control event), and what a control event is. The gateway is a small
stand-in with the parts ``perform`` reads; the whole path runs on real gateways in
``tests/cluster/test_admin_cluster.py``."""

from __future__ import annotations

from types import SimpleNamespace

from hermes_actors import MessageEvent, SessionSource
from hermes_actors.cluster.control import CONTROL, control_action, control_event
from hermes_actors.runtime.operator_actions import perform

SOURCE = SessionSource("telegram", chat_id="1", user_id="u1")


class _Store:
    def __init__(self) -> None:
        self.unsuspended: list[str] = []

    def unsuspend_session(self, key: str) -> bool:
        self.unsuspended.append(key)
        return key == "known"


class _Gateway:
    def __init__(self, cluster=None, entry=None) -> None:
        self.store, self.cluster, self._entry = _Store(), cluster, entry
        self.submitted: list[MessageEvent] = []

    def session_entry(self, key: str):
        return self._entry

    def submit(self, event: MessageEvent) -> str:
        self.submitted.append(event)
        return event.event_id


def _cluster(serves: bool):
    return SimpleNamespace(serves=lambda key: serves)


class TestPerform:
    def test_runs_here_alone_or_where_served(self):
        for cluster in (None, _cluster(True)):
            gw = _Gateway(cluster)
            assert perform(gw, "known", "unsuspend") == (True, None, None)
            assert perform(gw, "other", "unsuspend").found is False
            assert gw.store.unsuspended == ["known", "other"] and gw.submitted == []

    def test_sent_to_the_owner_as_a_control_event(self):
        gw = _Gateway(_cluster(False), SimpleNamespace(origin=SOURCE))
        outcome = perform(gw, "known", "unsuspend")
        [event] = gw.submitted
        assert outcome == (True, event.event_id, None) and gw.store.unsuspended == []
        assert event.source == SOURCE and control_action(event) == "unsuspend"

    def test_unknown_or_without_origin(self):
        assert perform(_Gateway(_cluster(False)), "gone", "unsuspend") == (False, None, None)
        gw = _Gateway(_cluster(False), SimpleNamespace(origin=None))
        outcome = perform(gw, "known", "unsuspend")
        assert outcome.found and "no origin" in outcome.refused and gw.submitted == []


class TestControlEvents:
    def test_only_an_internal_event_naming_an_action(self):
        event = control_event(SOURCE, "unsuspend")
        assert event.internal and event.command is None and control_action(event) == "unsuspend"
        # a message cannot pass for one: only internal events are
        smuggled = MessageEvent(source=SOURCE, text="hi", metadata={CONTROL: "unsuspend"})
        assert control_action(smuggled) is None
        assert control_action(MessageEvent(source=SOURCE, internal=True)) is None
        restored = MessageEvent.from_dict(event.to_dict())  # as the inbox keeps it
        assert control_action(restored) == "unsuspend"
