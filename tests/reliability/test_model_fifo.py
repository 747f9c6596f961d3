"""Model-based test of §8 through the real Gateway (hypothesis stateful testing).

Random interleavings of plain messages, ``/queue``, internal wake-ups, ``/stop``, ``/new``,
``/reset`` and clean restarts are applied both to a running ``Gateway`` (ScriptedAgent,
threads) and to a plain-list model of §8 written independently here; after every drain the
sequence of messages the agent saw must equal the model's. Turns are held open with
``hold <gate>`` so that "a message arrives mid-turn" is a fact of the test, not of timing.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

import pykka
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from hermes_actors import Gateway, InMemoryAdapter, MessageEvent, SessionSource, load_config
from hermes_actors.testing import Gates, ScriptedAgent

SRC = SessionSource("telegram", chat_id="42", user_id="7")
CAP = 3


class Model:
    """§8 for one session, as lists: slot items are (kind, [texts])."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.running = False
        self.slot: tuple[str, list[str]] | None = None
        self.overflow: list[tuple[str, list[str]]] = []
        self.seen: list[str] = []

    def depth(self) -> int:
        return len(self.overflow) + (self.slot is not None)

    def fifo(self, item) -> None:
        if self.slot is None:
            self.slot = item
        else:
            self.overflow.append(item)

    def plain(self, text: str) -> None:
        if not self.running and self.depth() == 0:
            self.seen.append(text)
        elif self.mode == "interrupt":
            if self.slot is not None and self.slot[0] == "followup":
                self.slot = ("followup", self.slot[1] + [text])
            else:
                if self.slot is not None:
                    self.overflow.insert(0, self.slot)
                self.slot = ("followup", [text])
        elif self.depth() < CAP:
            self.fifo(("followup", [text]))  # queue mode: FIFO, but still a follow-up

    def queue(self, text: str) -> None:
        if not self.running and self.depth() == 0:
            self.seen.append(text)
        elif self.depth() < CAP:
            self.fifo(("queued", [text]))

    def wake(self, text: str) -> None:
        if not self.running and self.depth() == 0:
            self.seen.append(text)
        else:
            self.fifo(("internal", [text]))

    def stop(self) -> None:
        if self.slot is not None and self.slot[0] == "followup":
            self.slot = None
            for i, item in enumerate(self.overflow):
                if item[0] == "internal":
                    self.slot = self.overflow.pop(i)
                    break
            else:  # no wake-up waits: the overflow head moves up (FIFO for what follows)
                if self.overflow:
                    self.slot = self.overflow.pop(0)

    def new(self) -> None:
        items = ([self.slot] if self.slot else []) + self.overflow
        kept = [i for i in items if i[0] == "internal"]
        self.slot = kept[0] if kept else None
        self.overflow = kept[1:]

    def drain(self) -> None:
        self.running = False
        while self.slot is not None or self.overflow:
            item = self.slot if self.slot is not None else self.overflow.pop(0)
            if item is self.slot:
                self.slot = self.overflow.pop(0) if self.overflow else None
            self.seen.append("\n".join(item[1]))


class GatewayMachine(RuleBasedStateMachine):
    """The Gateway and the model agree on what the agent sees, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.home = Path(tempfile.mkdtemp(prefix="hermes-model-"))
        self.names = (f"m{n}" for n in itertools.count())
        self.gates = Gates()
        self.log: list = []
        self.gw: Gateway | None = None
        self.gate: str | None = None

    def _start(self) -> None:
        self.gw = Gateway(self.home, config=load_config(
            {"busy_input_mode": self.model.mode, "queue_max": CAP}, env={}),
            agent_factory=lambda ctx: ScriptedAgent(gates=self.gates, log=self.log),
            adapters=[InMemoryAdapter("telegram")])
        self.gw.start()

    @initialize(mode=st.sampled_from(["interrupt", "queue"]))
    def setup(self, mode: str) -> None:
        self.model = Model(mode)
        self._start()

    def _submit(self, text: str, internal: bool = False) -> None:
        self.gw.submit(MessageEvent(source=SRC, text=text, internal=internal))

    def _idle(self) -> None:
        assert self.gw.wait_idle(timeout=20)

    @precondition(lambda self: not self.model.running)
    @rule()
    def begin_turn(self) -> None:
        self.gate = next(self.names)
        self._submit(f"hold {self.gate}")
        assert self.gates.wait_until_waiting(self.gate)
        self.model.seen.append(f"hold {self.gate}")
        self.model.running = True

    @rule()
    def plain(self) -> None:
        text = next(self.names)
        self._submit(text)
        self.model.plain(text)
        if not self.model.running:
            self._idle()

    @rule()
    def queue(self) -> None:
        text = next(self.names)
        self._submit(f"/queue {text}")
        self.model.queue(text)
        if not self.model.running:
            self._idle()

    @rule()
    def wake(self) -> None:
        text = next(self.names)
        self._submit(text, internal=True)
        self.model.wake(text)
        if not self.model.running:
            self._idle()

    @precondition(lambda self: self.model.running)
    @rule(command=st.sampled_from(["/stop", "/new", "/reset"]))
    def clear(self, command: str) -> None:
        self._submit(command)
        self.model.stop() if command == "/stop" else self.model.new()

    @precondition(lambda self: self.model.running)
    @rule()
    def finish_turn(self) -> None:
        self.gates.open(self.gate)
        self._idle()
        self.model.drain()

    @precondition(lambda self: not self.model.running)
    @rule()
    def restart(self) -> None:
        self.gw.stop(drain_timeout=5)
        self._start()

    @invariant()
    def agent_saw_what_the_model_says(self) -> None:
        if self.gw is None or self.model.running:
            return
        assert [s.message for s in self.log] == self.model.seen

    def teardown(self) -> None:
        self.gates.open_all()
        if self.gw is not None:
            self.gw.stop(drain_timeout=5)
        pykka.ActorRegistry.stop_all()
        shutil.rmtree(self.home, ignore_errors=True)


GatewayMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=20, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGatewayModel = GatewayMachine.TestCase
