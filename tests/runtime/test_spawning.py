"""LightActor under gevent: bare greenlets, its inbox and gevent futures, pykka semantics kept.

Run in a child process, since gevent's patching is process-wide. Without gevent a
LightActor is a plain ThreadingActor; the whole runtime suite covers that mode.
"""

from __future__ import annotations

import subprocess
import sys

import pykka
import pytest
from pykka import ActorRegistry

from hermes_actors._green.actor import LightActor, LightRef


def child_output(code: str, *args: str) -> str:
    """What ``python -c code args`` prints (a fresh process: gevent patches for good)."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()

CHILD = r"""
from gevent import monkey
monkey.patch_all()
import threading
import pykka
from hermes_actors._green.actor import GreenFuture, LightActor

class Echo(LightActor):
    def on_receive(self, message):
        if message == "boom":
            raise ValueError("boom")
        return message * 2

threads_before = threading.active_count()
ref = Echo.start()
assert threading.active_count() == threads_before, "no thread object per actor"
future = ref.ask(21, block=False)
assert isinstance(future, GreenFuture)
assert future.get(timeout=5) == 42
assert ref.ask(2, block=False).map(lambda v: v + 1).get(timeout=5) == 5
try:
    ref.ask("boom")
except ValueError as exc:
    assert str(exc) == "boom"
else:
    raise AssertionError("the handler's exception must reach the asker")
idle = GreenFuture()
try:
    idle.get(timeout=0.01)
except pykka.Timeout:
    pass
else:
    raise AssertionError("an unset future must time out")
idle.set(1)
try:
    idle.set(2)
except Exception as exc:
    assert type(exc).__name__ == "Full"
assert idle.get() == 1
ref.stop(block=True)
try:
    ref.tell(1)
except pykka.ActorDeadError:
    pass
else:
    raise AssertionError("a tell to a stopped actor must fail")
dead = ref.ask(1, block=False)
try:
    dead.get(timeout=5)
except pykka.ActorDeadError:
    pass
else:
    raise AssertionError("an ask of a stopped actor must fail through its future")
print("ok")
"""


def test_under_gevent():
    assert child_output(CHILD) == "ok"


INBOX_CHILD = r"""
from gevent import monkey
monkey.patch_all()
import gevent
from gevent.event import Event
from hermes_actors._green.actor import GreenInbox, LightActor

inbox = GreenInbox()
assert inbox.empty() and inbox.qsize() == 0
for n in range(5):
    inbox.put(n)
assert not inbox.empty() and inbox.qsize() == 5
assert [inbox.get() for _ in range(5)] == [0, 1, 2, 3, 4], "first in, first out"

# A reader that waits is woken by the next put, and gets the items in order.
got, ready = [], Event()
def reader(count):
    for _ in range(count):
        got.append(inbox.get())
    ready.set()
gevent.spawn(reader, 3)
gevent.sleep(0)  # it waits now
assert got == []
inbox.put("a"); inbox.put("b")
gevent.sleep(0)
inbox.put("c")
assert ready.wait(5) and got == ["a", "b", "c"], got

# A reader killed while it waits takes nothing with it: the next item waits for the next
# reader.
doomed = gevent.spawn(inbox.get)
gevent.sleep(0)
doomed.kill()
inbox.put("kept")
gevent.sleep(0)
assert inbox.qsize() == 1 and inbox.get() == "kept"

# An actor's inbox is one, and its messages are handled in the order they were told.
class Recorder(LightActor):
    def __init__(self):
        super().__init__()
        self.seen = []
    def on_receive(self, message):
        if message == "report":
            return list(self.seen)
        self.seen.append(message)

ref = Recorder.start()
assert type(ref.actor_inbox) is GreenInbox
for n in range(200):
    ref.tell(n)
assert ref.ask("report") == list(range(200))
ref.stop()
print("ok")
"""


def test_green_inbox_is_a_fifo_with_one_waiting_reader():
    assert child_output(INBOX_CHILD) == "ok"


FUTURE_CHILD = r"""
from gevent import monkey
monkey.patch_all()
import gevent
from hermes_actors._green.actor import GreenFuture

# Answered before anyone asks: no event is ever made, the answer is there.
early = GreenFuture()
early.set("early")
assert early._done is None and early.get() == "early" and early._done is None

# A getter that waits (one event, made by it) is woken by the answer, and so is a second.
late, got = GreenFuture(), []
waiters = [gevent.spawn(lambda: got.append(late.get(timeout=5))) for _ in range(2)]
gevent.sleep(0)
assert got == [] and late._done is not None
late.set("late")
gevent.joinall(waiters, timeout=5)
assert got == ["late", "late"], got

# An exception reaches the getter, set before or while it waits.
failed = GreenFuture()
try:
    raise KeyError("before")
except KeyError:
    failed.set_exception()
try:
    failed.get()
except KeyError as exc:
    assert exc.args == ("before",)
else:
    raise AssertionError("the exception must reach the getter")
waiting = GreenFuture()
errors = []
def wait_for_error():
    try:
        waiting.get(timeout=5)
    except LookupError as exc:
        errors.append(exc.args)
worker = gevent.spawn(wait_for_error)
gevent.sleep(0)
waiting.set_exception((LookupError, LookupError("while"), None))
worker.join(5)
assert errors == [("while",)], errors
print("ok")
"""


def test_green_future_answers_early_and_late_getters():
    assert child_output(FUTURE_CHILD) == "ok"


def test_without_gevent_it_is_a_threading_actor():
    class Echo(LightActor):
        def on_receive(self, message):
            return message

    ref = Echo.start()
    try:
        future = ref.ask("x", block=False)
        assert isinstance(future, pykka.ThreadingFuture)
        assert future.get(timeout=5) == "x"
    finally:
        ref.stop()


def test_a_light_actor_is_made_as_pykka_makes_an_actor():
    """``LightActor.__init__`` stands in for pykka's: the same attributes, of the same
    kinds (only its ref is a LightRef)."""
    class Plain(pykka.ThreadingActor):
        pass

    class Light(LightActor):
        pass

    plain, light = Plain(), Light()
    assert set(vars(light)) == set(vars(plain))
    for name, value in vars(plain).items():
        assert isinstance(getattr(light, name), type(value)), name
    assert type(light.actor_ref) is LightRef and light.actor_ref.actor_urn == light.actor_urn
    assert light.actor_urn.startswith("urn:uuid:") and light.actor_urn != plain.actor_urn


def test_a_light_actors_ref_sends_as_pykkas_does():
    """``LightRef``: tells arrive in order, asks answer (or raise the handler's error), and
    a stopped actor refuses both as pykka's ref does (the ask through its future)."""
    class Log(LightActor):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list = []

        def on_receive(self, message):
            if message == "boom":
                raise ValueError("boom")
            if message == "seen":
                return list(self.seen)
            self.seen.append(message)
            return None

    ref = Log.start()
    assert isinstance(ref, LightRef)
    assert ActorRegistry.get_by_urn(ref.actor_urn) is ref
    for n in range(5):
        ref.tell(n)
    assert ref.ask("seen") == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="boom"):
        ref.ask("boom", timeout=5)
    ref.stop()
    with pytest.raises(pykka.ActorDeadError):
        ref.tell(5)
    with pytest.raises(pykka.ActorDeadError):
        ref.ask("seen", timeout=5)
    with pytest.raises(pykka.ActorDeadError):
        ref.ask("seen", block=False).get(timeout=5)


POOL_CHILD = r"""
from gevent import monkey
monkey.patch_all()
import gevent
from gevent.event import Event
from hermes_actors._green import _GreenletPool
from hermes_actors.testing import wait_until

pool = _GreenletPool(max_idle=2)
seen, done = [], Event()

def work(tag):
    def run():
        seen.append((tag, gevent.getcurrent()))
        if tag == "boom":
            raise ValueError("boom")
        if tag == "last":
            done.set()
    return run

pool.run(work("a"))
gevent.sleep(0)
assert len(pool._idle) == 1, "a finished worker parks"
pool.run(work("b"))
gevent.sleep(0)
assert seen[0][1] is seen[1][1], "the next work runs in the parked worker"
errors = []
gevent.get_hub().handle_error = lambda ctx, t, v, tb: errors.append(v)
pool.run(work("boom"))
gevent.sleep(0)
assert [str(e) for e in errors] == ["boom"], "a failing work is reported"
assert len(pool._idle) == 1, "and its worker goes on"
blockers = [Event() for _ in range(4)]
for ev in blockers:
    pool.run(ev.wait)
gevent.sleep(0)
for ev in blockers:
    ev.set()
wait_until(lambda: len(pool._idle) == 2,
           message="the workers' return to the pool")
gevent.sleep(0)  # one more turn of the hub: a late worker would have parked by now
assert len(pool._idle) == 2, "at most max_idle workers stay parked"
import contextvars
var = contextvars.ContextVar("var", default="unset")
values = []
pool.run(lambda: var.set("left behind"))
gevent.sleep(0)
pool.run(lambda: values.append(var.get()))
gevent.sleep(0)
assert values == ["unset"], "every work starts in an empty context, as in a fresh greenlet"
pool.run(work("last"))
assert done.wait(5)
print("ok")
"""


POOL_DROPS_CHILD = r"""
from gevent import monkey
monkey.patch_all()
import gc, weakref
import gevent
from gevent.event import Event
from hermes_actors._green import _GreenletPool

class Held:
    pass

pool = _GreenletPool(max_idle=2)
held = Held()
alive = weakref.ref(held)
pool.run(lambda held=held: None)  # a fresh worker runs a work that holds an object
del held
gevent.sleep(0)
stop = Event()
pool.run(stop.wait)  # the same worker goes on with a long work (as an actor's loop does)
gevent.sleep(0)
gc.collect()
assert alive() is None, "the worker kept its first work alive"
stop.set()
print("ok")
"""


def test_greenlet_pool_keeps_no_finished_work_alive():
    assert child_output(POOL_DROPS_CHILD) == "ok"


def test_greenlet_pool_reuses_finished_workers():
    assert child_output(POOL_CHILD) == "ok"


PATCH_CHILD = r"""
import sys
from hermes_actors._green.monkey import patch_all
assert "threading" not in sys.modules, "nothing is imported that patching must come before"
from importlib import metadata
real = metadata.entry_points
asked = []

def recording(**params):
    asked.append(params)
    return real(**params)

metadata.entry_points = recording
patch_all()
assert metadata.entry_points is recording, "the caller's entry_points is put back"
assert len(asked) == 1, f"the metadata is read once, not {len(asked)} times"
from gevent import monkey
assert monkey.is_module_patched("threading") and monkey.is_module_patched("socket")
import gevent
assert gevent.config.track_greenlet_tree is (sys.argv[1] == "asked"), "tree tracking"
print("ok")
"""


def test_patch_all_reads_the_entry_points_once():
    assert child_output(PATCH_CHILD, "default") == "ok"


def test_patch_all_keeps_greenlet_tree_tracking_when_the_environment_asks(monkeypatch):
    monkeypatch.setenv("GEVENT_TRACK_GREENLET_TREE", "1")
    assert child_output(PATCH_CHILD, "asked") == "ok"


LOADED_CHILD = r"""
import sys
from importlib import metadata
loaded = []
real_load = metadata.EntryPoint.load

def load(self):
    loaded.append((self.group, self.value))
    return real_load(self)

metadata.EntryPoint.load = load
if sys.argv[1] == "ours":
    from hermes_actors._green.monkey import patch_all
    patch_all()
else:
    from gevent import monkey
    monkey.patch_all()
print(sorted(loaded))
"""


def test_patch_all_loads_the_plugins_gevent_would():
    ours = child_output(LOADED_CHILD, "ours")
    assert "gevent.plugins.monkey" in ours  # gevent's own plugin, at least
    assert ours == child_output(LOADED_CHILD, "gevent")


BRIEF_LOCK_CHILD = r"""
from gevent import monkey
monkey.patch_all()
import threading
import gevent
from hermes_actors._green import brief_lock

lock = brief_lock()
native = monkey.get_original("_thread", "LockType")
assert type(lock) is native, f"a native lock under gevent, not {type(lock).__name__}"
assert type(threading.Lock()) is not native, "(gevent patched threading.Lock)"
# A native thread of the hub's pool holds it for a moment: the hub waits in C, then has it.
held = monkey.get_original("_thread", "allocate_lock")()
held.acquire()
order = []

def in_pool():
    with lock:
        held.release()
        order.append("pool")

gevent.get_hub().threadpool.spawn(in_pool)
held.acquire()  # the pool's thread is inside the section now
with lock:
    order.append("hub")
assert order == ["pool", "hub"], order
print("ok")
"""


def test_brief_lock_is_the_native_lock_under_gevent():
    assert child_output(BRIEF_LOCK_CHILD) == "ok"


def test_brief_lock_without_gevent_is_a_threading_lock():
    import threading

    from hermes_actors._green import brief_lock

    assert type(brief_lock()) is type(threading.Lock())


# -- gevent's plugins, found without importlib.metadata ---------------------------------------

PROBE_ENTRY_POINTS = """\
[gevent.plugins.monkey.will_patch_all]
probe = hermes_probe:seen

[gevent.plugins.monkey.did_patch_module]
probe = hermes_probe:seen

[console_scripts]
not-a-plugin = hermes_probe:seen
"""

PROBE_MODULE = """\
calls = []

def seen(event):
    calls.append(type(event).__name__)
"""

PROBED_CHILD = r"""
import sys
if sys.argv[1] == "ours":
    from hermes_actors._green.monkey import patch_all
    patch_all()
    assert "importlib.metadata" not in sys.modules, "patching imported importlib.metadata"
    import importlib
    assert "metadata" not in vars(importlib), "the stand-in is left on the package"
else:
    from gevent import monkey
    monkey.patch_all()
from gevent import monkey
assert monkey.is_module_patched("threading") and monkey.is_module_patched("socket")
import hermes_probe
print(sorted(set(hermes_probe.calls)), len(hermes_probe.calls))
"""


@pytest.fixture
def probe_path(tmp_path, monkeypatch):
    """A folder on ``PYTHONPATH`` holding a distribution with gevent plugins (a probe that
    records the events it is called with)."""
    info = tmp_path / "hermes_probe-1.0.dist-info"
    info.mkdir()
    (info / "entry_points.txt").write_text(PROBE_ENTRY_POINTS)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hermes-probe\nVersion: 1.0\n")
    (tmp_path / "hermes_probe.py").write_text(PROBE_MODULE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def test_patch_all_calls_the_plugins_gevent_would_without_importlib_metadata(probe_path):
    ours = child_output(PROBED_CHILD, "ours")
    assert "WillPatchAllEvent" in ours and "DidPatchModuleEvent" in ours, ours
    assert ours == child_output(PROBED_CHILD, "gevent")


def test_read_plugins_finds_what_importlib_metadata_finds():
    from importlib import metadata

    from hermes_actors._green.plugins import GROUP_PREFIX, read_plugins

    plugins = read_plugins()
    assert plugins is not None
    from gevent import events

    # every group gevent asks about (its events' names), and any other found
    groups = {getattr(events, name).ENTRY_POINT_NAME for name in dir(events)
              if isinstance(getattr(getattr(events, name), "ENTRY_POINT_NAME", None), str)}
    assert {group for group in groups if group.startswith(GROUP_PREFIX)} == groups
    expected = {}
    for group in groups | plugins.keys():
        points = sorted((p.name, p.value) for p in metadata.entry_points(group=group))
        if points:
            expected[group] = points
    found = {group: sorted((p.name, p.value) for p in points)
             for group, points in plugins.items()}
    assert found == expected
    assert "gevent.plugins.monkey.will_patch_all" in found  # gevent's own, at least


def test_read_plugins_first_distribution_of_a_name_wins(tmp_path):
    from hermes_actors._green.plugins import read_plugins

    for folder, target in (("a", "first:seen"), ("b", "second:seen")):
        info = tmp_path / folder / "Hermes.Probe-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "entry_points.txt").write_text(
            f"[gevent.plugins.monkey.will_patch_all]\nprobe = {target}\n")
    plugins = read_plugins([str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "none")])
    assert plugins is not None
    assert [p.value for p in plugins["gevent.plugins.monkey.will_patch_all"]] == ["first:seen"]


def test_read_plugins_leaves_a_zip_on_the_path_to_importlib_metadata(tmp_path):
    from hermes_actors._green.plugins import read_plugins

    archive = tmp_path / "packages.zip"
    archive.write_bytes(b"PK\x05\x06" + b"\x00" * 18)  # an empty zip
    assert read_plugins([str(archive)]) is None


def test_plugin_entry_point_loads_the_attribute_it_names():
    from hermes_actors._green.plugins import PluginEntryPoint

    point = PluginEntryPoint("x", "os.path:join [extra]", "gevent.plugins.x")
    import os.path

    assert point.load() is os.path.join
    assert PluginEntryPoint("x", "os", "g").load() is os
    with pytest.raises(ValueError):
        PluginEntryPoint("x", "not a value!", "g").load()


def test_stand_in_answers_the_rest_from_the_real_module():
    from importlib import metadata

    from hermes_actors._green.plugins import PluginEntryPoint, stand_in

    point = PluginEntryPoint("p", "os:getcwd", "gevent.plugins.monkey.will_patch_all")
    module = stand_in({point.group: (point,)})
    assert module.entry_points(group=point.group) == (point,)
    assert module.entry_points(group="gevent.plugins.other") == ()
    assert module.version("gevent") == metadata.version("gevent")  # asked of the real one
    scripts = {p.name for p in module.entry_points(group="console_scripts")}
    assert "hermes-actors" in scripts
