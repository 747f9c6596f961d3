"""The private parts of other libraries this project borrows (issue 37 §5; docs/architecture.md,
"Borrowed internals"): on the installed versions each is in its tested range, so the fast
path is taken, and still has the shape relied on. An upgrade that changes one fails here,
loudly, instead of quietly misbehaving (outside the range the public path is taken)."""

from __future__ import annotations

import inspect
import io
import json
import subprocess
import sys

import gevent
import pykka
import pytest

from hermes_actors import _versions
from hermes_actors._versions import in_tested_range, version_tuple


def test_version_parsing_and_ranges():
    assert version_tuple("3.3.9") == (3, 3, 9)
    assert version_tuple("26.9.0rc1") == (26, 9, 0)
    assert in_tested_range("pykka", "4.5.0") and not in_tested_range("pykka", "5.0.0")
    assert not in_tested_range("gevent", "24.1.9") and not in_tested_range("peewee", None)


class TestPykka:
    def test_in_range_and_borrowed(self):
        from hermes_actors._green import actor

        assert actor.PYKKA_VERSION is not None and actor.BORROW_PYKKA

    def test_the_envelope_is_a_slotted_pair(self):
        from pykka._envelope import Envelope

        assert tuple(Envelope.__slots__) == ("message", "reply_to")
        envelope = object.__new__(Envelope)
        envelope.message, envelope.reply_to = "m", None
        assert (envelope.message, envelope.reply_to) == ("m", None)

    def test_light_actor_init_sets_what_pykka_sets(self):
        from hermes_actors._green.actor import LightActor, LightRef

        class Plain(pykka.ThreadingActor):
            pass

        class Light(LightActor):
            pass

        assert set(vars(Light())) == set(vars(Plain()))  # the copy of Actor.__init__
        assert type(Light().actor_ref) is LightRef

    def test_the_public_path_works_too(self, monkeypatch):
        from hermes_actors._green import actor

        monkeypatch.setattr(actor, "BORROW_PYKKA", False)

        class Echo(actor.LightActor):
            def on_receive(self, message):
                return message

        ref = Echo.start()
        try:
            ref.tell("told")
            assert ref.ask("asked", timeout=10) == "asked"
        finally:
            ref.stop()


class TestGevent:
    def test_in_range(self):
        assert in_tested_range("gevent", gevent.__version__)

    def test_plugins_are_looked_up_by_group_through_importlib_metadata(self):
        # what the stand-in of _green/plugins.py answers
        import gevent.events

        source = inspect.getsource(gevent.events.notify_and_call_entry_points)
        assert "from importlib import metadata" in source
        assert "metadata.entry_points(group=event.ENTRY_POINT_NAME)" in source
        from hermes_actors._green.plugins import GROUP_PREFIX

        for event in (gevent.events.GeventWillPatchModuleEvent,
                      gevent.events.GeventDidPatchAllEvent):
            assert event.ENTRY_POINT_NAME.startswith(GROUP_PREFIX)

    def test_patching_with_the_stand_in_leaves_importlib_metadata_unimported(self):
        code = ("import sys; from hermes_actors._green.monkey import patch_all; patch_all(); "
                "print('importlib.metadata' in sys.modules)")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, check=True)
        assert done.stdout.strip() == "False"

    def test_wsgi_input_has_the_fields_linger_sets(self):
        from gevent.pywsgi import Input

        stream = Input(io.BytesIO(b"body"), 4)
        for field in ("send_100_continue_enabled", "content_length", "position",
                      "chunked_input"):
            assert hasattr(stream, field), field
        assert stream.read(2) == b"bo" and stream.position == 2
        stream.content_length, stream.chunked_input = stream.position, False
        assert stream.read() == b""  # what linger relies on: the rest is not read


class TestPeewee:
    def test_in_range_by_its_source(self):
        from hermes_actors.store.backends.peewee_import import peewee_source_version, pw

        version = peewee_source_version()
        assert version == pw.__version__ and in_tested_range("peewee", version)

    def test_peewee_imports_psycopg_at_its_import_and_the_trick_hides_it(self):
        code = ("import sys; from hermes_actors.store.backends.peewee_import import pw; "
                "print(pw.psycopg is None, 'psycopg' in sys.modules)")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, check=True)
        assert done.stdout.split() == ["True", "False"]
        import peewee

        assert "import psycopg\n" in inspect.getsource(peewee)  # still tried at its import


class TestJson:
    def test_in_range_and_borrowed(self):
        from hermes_actors.model import jsontext

        assert in_tested_range("python", _versions.python_version())
        assert jsontext.to_json is jsontext._c_to_json

    @pytest.mark.parametrize("value", [
        {"a": [1, 2.5, None, True], "é": "ü\u2028", "n": {"x": -0.0}},
        ["\ud83d\ude00", 10**20, float("inf")], "plain", [],
    ])
    def test_c_make_encoder_answers_as_json_dumps(self, value):
        from hermes_actors.model.jsontext import _c_to_json

        assert _c_to_json(value) == json.dumps(value, ensure_ascii=False)


class TestSlackSocketMode:
    """``adapters/slack/socket.py``'s ``_wake_receive`` ends the built-in Socket Mode client's
    receive and dispatch at once through its attributes (read with ``getattr``: were one gone,
    a stop would only be slower, by up to 3 s)."""

    def test_the_client_still_has_what_the_quick_stop_uses(self):
        from slack_sdk.socket_mode.builtin.client import SocketModeClient
        from slack_sdk.socket_mode.builtin.connection import Connection

        client = SocketModeClient(app_token="xapp-1-A1-1-x", web_client=None)
        try:
            for name in ("message_queue", "closed", "current_session_state",
                         "current_session", "auto_reconnect_enabled"):
                assert hasattr(client, name), name
            assert hasattr(client.current_session_state, "terminated")
            assert callable(client.message_queue.put)
            assert "self.sock" in inspect.getsource(Connection.__init__)
        finally:
            client.close()
