"""§15 crash matrix: every named crash point × every ScriptedAgent turn kind, real processes.

Each case runs a gateway child with ``HERMES_ACTORS_CRASHPOINT`` armed, sends one message of
the kind, lets the process die at the point (or, when the kind never reaches that point,
SIGKILLs it once idle), starts it again and checks what a user received: the message was
answered, no reply was delivered twice except once more with the recovered prefix after an
``attempting`` crash, the restart counter advanced when the crash was mid-turn, and the
session still answers.
"""

from __future__ import annotations

import json

import pytest

from hermes_actors.model.silence import SILENCE_NOTICE
from hermes_actors.runtime.crash import CRASH_POINTS
from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.runtime.turn import FAILED_NOTICE

from .conftest import crash_at, outbox

pytestmark = pytest.mark.slow
KEY = "agent:main:telegram:dm:42"

#: kind -> (message, the answers that count as answering it)
KINDS = {
    "reply": ("hello", {"echo: hello"}),
    "silent": ("silent", {SILENCE_NOTICE}),
    "delegation": ("delegate 0", {"delegated 0"}),
    "failure": ("fail", {FAILED_NOTICE.format("ScriptedFailure")}),
}
#: Points after which the durable turn marker is still set (the crash is mid-turn). The
#: marker is cleared in the transaction that records the obligation (with the ledger on,
#: as here, the reply is persisted in it too), so a crash at ``after_reply_persisted`` or
#: ``after_ledger_recorded`` finds a settled turn with its answer owed in the ledger.
MID_TURN = {"after_turn_marked", "after_user_persisted"}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_matrix(spawn, point, kind):
    text, answers = KINDS[kind]
    env = {"HERMES_ACTORS_CRASHPOINT": point}
    if point == "during_recovery":
        # The point sits in the next boot's recovery: crash mid-turn first, then at it.
        first = crash_at(spawn, "after_user_persisted", text)
        assert spawn(env=env, ready=False).wait_exit() == 137
        recovered = spawn()
        recovered.idle()
        recovered.send("ping")
        recovered.idle()
        assert recovered.sent()[-1] == "echo: ping"
        assert [t for t in outbox(first.home) if t.startswith("resumed:")] == [
            f"resumed: {text}"]
        return

    child = spawn(env=env)
    child.send(text)
    code = child.idle_or_exit()
    crashed = code is not None
    if point == "during_drain" and not crashed:
        child.proc.stdin.write(json.dumps({"stop": 5}) + "\n")
        child.proc.stdin.flush()
        code = child.wait_exit()
        crashed = True
    elif not crashed:
        child.kill()  # the kind never reached the point: crash after the fact
    if crashed:
        assert code == 137, child.seen

    restarted = spawn()
    if crashed and point in MID_TURN:
        # (the file itself may already be reset by the resumed turn's success)
        assert restarted.report["interrupted"] == [KEY], "the restart counter must advance"
    restarted.idle()
    restarted.send("ping")
    restarted.idle()
    assert restarted.sent()[-1] == "echo: ping", "the session must not be stuck"

    received = outbox(child.home)
    plain = [t for t in received if t in answers]
    prefixed = [t for t in received if t.startswith(RECOVERED_PREFIX)]
    resumed = [t for t in received if t == f"resumed: {text}"]
    assert plain or prefixed or resumed, f"message not answered: {received}"
    if point == "after_send_before_delivered" and crashed:
        # Sent once, then redelivered once with the prefix: the only allowed repeat.
        assert len(plain) == 1 and len(prefixed) == 1
        assert prefixed[0] == RECOVERED_PREFIX + plain[0]
    else:
        assert len(plain) + len(prefixed) + len(resumed) == 1, received
