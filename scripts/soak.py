"""Soak: mixed traffic over loopback HTTP against a real gateway process, with random restarts.

    python scripts/soak.py --minutes 10 --chats 16 [--home DIR] [--json FILE]

A real ``hermes-actors run`` process (scripted agent, queue mode) takes messages from client
threads while a restarter kills it with SIGKILL or stops it with SIGTERM at random moments
and starts it again. Every message the gateway accepted (HTTP 202, or 200 with
``"duplicate": true``: the id returned is then the first one's) is remembered with the
event id it was given. At the end the process is stopped, started once more so recovery
can finish, and every accepted message is reconciled against the durable outbox by event
id (:mod:`hermes_actors.testing.reconcile`): each must be named in the ``in_reply_to`` of
exactly one final outbox row (any kind but ``ack``, or as the row's ``final`` flag says):

  lost        an accepted event id no final row names;
  duplicated  an accepted event named by two or more final rows, or the same final answer
              twice (same chat, same text without the recovered prefix, same in_reply_to);
  unnamed     a final row naming no accepted event.

A message no final row names whose session the stuck-loop guard suspended while it was the
interrupted turn (on the evidence of the home's database) counts as suspended, not lost.
The last line is the verdict:

    soak: N messages, N answered, 0 lost, 0 duplicated, 0 unnamed, R restarts

Traffic goes only to 127.0.0.1, the run is bounded in time and in message count, and it
stops by itself. Exit status 0 when nothing was lost, duplicated or unnamed (and no chat's
answers came out of order or in another chat), 1 otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hermes_actors.testing import db_rows  # noqa: E402
from hermes_actors.testing.reconcile import (  # noqa: E402
    Accepted,
    Verdict,
    event_ids,
    is_final,
    reconcile,
    suspension_evidence,
)

READY = re.compile(r"event=ready .*port=(\d+)")
# The storm breaker is off: the soak restarts on purpose faster than "3 boots with resumable
# sessions in 60 s", and a storm skips auto-continue by design (the flags stay set).
CONFIG = """\
busy_input_mode: {mode}
queue_max: 1000
restart_drain_timeout: 2
restart_storm: {{max_restarts: 1000000, window_seconds: 60}}
agent:
  kind: scripted
http:
  port: 0
"""


class Gateway:
    """One gateway process at a time over ``home``; ``url`` follows its port."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.lock = threading.Lock()
        self.restarts = Counter()

    def start(self) -> None:
        cmd = [sys.executable, "-m", "hermes_actors", "run", "--home", str(self.home),
               "--port", "0"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        deadline = time.monotonic() + 60
        seen: list[str] = []
        for line in proc.stderr:
            seen = (seen + [line.rstrip()])[-20:]
            match = READY.search(line)
            if match:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway did not become ready within 60 s")
        else:
            said = "\n".join(seen)
            raise RuntimeError(f"the gateway exited before ready (code {proc.wait()}):\n{said}")
        threading.Thread(target=_drain_pipe, args=(proc.stderr,), daemon=True).start()
        with self.lock:
            self.proc, self.url = proc, f"http://127.0.0.1:{match.group(1)}"

    def restart(self, how: str) -> None:
        with self.lock:
            proc, self.url = self.proc, ""
        proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
        proc.wait(timeout=60)
        self.restarts[how] += 1
        self.start()

    def stop(self) -> int:
        with self.lock:
            proc, self.url = self.proc, ""
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=60)


def _drain_pipe(pipe) -> None:
    for _ in pipe:
        pass


def _request(url: str, path: str, body: dict | None = None, timeout: float = 10.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="POST" if data else "GET",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, json.loads(resp.read())


def client(gw: Gateway, chat: str, stop: threading.Event, accepted: list[Accepted], counter,
           max_messages: int, rng: random.Random, window: int,
           unconfirmed: list[tuple[str, str]]) -> None:
    """Send unique messages to one chat until told to stop; remember the accepted ones with
    their event ids.

    Each message carries a ``message_id`` (its text) and is posted again until the gateway
    answers: a retry after a lost answer (the process killed meanwhile) is then answered
    200 ``"duplicate": true`` with the first event's id, never taken as a second message,
    so no answer names an id the client does not know. A message still unanswered when the
    client stops goes to ``unconfirmed`` (:func:`confirm` posts it once more at the end).

    Like a person, a chat does not run arbitrarily far ahead of its answers: at most
    ``window`` accepted messages may be unanswered (no final row names them), then it reads
    the outbox (a long poll) until answers come back. So the queue cap is never the thing
    being measured.
    """
    unanswered: set[str] = set()
    cursor = 0
    pending: str | None = None  # posted, no answer yet: posted again with its message_id
    while not stop.is_set():
        url = gw.url
        if not url:
            stop.wait(0.05)
            continue
        if pending is None and len(unanswered) >= window:
            try:
                query = urllib.parse.urlencode({"chat_id": chat, "after": cursor, "wait": 1})
                _, data = _request(url, f"/v1/outbox?{query}", timeout=15)
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
                stop.wait(0.05)  # the process is restarting
                continue
            for row in data["messages"]:
                if is_final(row):
                    unanswered.difference_update(event_ids(row))
            cursor = data["cursor"]
            continue
        if pending is None:
            with counter["lock"]:
                if counter["n"] >= max_messages:
                    return
                counter["n"] += 1
                pending = f"m{counter['n']}"
        event_id = post(url, chat, pending)
        if event_id is not None:
            accepted.append(Accepted(event_id, chat, pending))
            unanswered.add(event_id)
            pending = None
            stop.wait(rng.uniform(0.0, 0.02))
        else:
            stop.wait(0.05)  # not answered: the same message again (the process may have it)
    if pending is not None:
        unconfirmed.append((chat, pending))


def post(url: str, chat: str, text: str) -> str | None:
    """Post one message (``message_id`` = its text); its event id once the gateway took it
    (202) or knew it already (200, ``"duplicate": true``), else ``None``."""
    try:
        status, body = _request(url, "/v1/messages",
                                {"chat_id": chat, "text": text, "message_id": text})
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
        return None
    if status in (200, 202) and isinstance(body, dict) and body.get("event_id"):
        return str(body["event_id"])
    return None


def confirm(gw: Gateway, unconfirmed: list[tuple[str, str]], accepted: list[Accepted]) -> None:
    """Post once more, with their message ids, the messages no answer came for: the gateway
    names the event it took (a duplicate) or takes them now; either way they are accepted."""
    for chat, text in unconfirmed:
        for _ in range(50):
            event_id = post(gw.url, chat, text)
            if event_id is not None:
                accepted.append(Accepted(event_id, chat, text))
                break
            time.sleep(0.1)
        else:
            print(f"soak: {text} of {chat} never acknowledged", file=sys.stderr)


def restarter(gw: Gateway, stop: threading.Event, every: tuple[float, float],
              rng: random.Random) -> None:
    while not stop.wait(rng.uniform(*every)):
        how = rng.choice(["kill", "kill", "term"])
        print(f"soak: restart ({how}) #{sum(gw.restarts.values()) + 1}", file=sys.stderr,
              flush=True)
        gw.restart(how)


def outbox_rows(url: str, chat: str) -> list[dict]:
    """Every outbox row of ``chat``, in cursor order."""
    rows: list[dict] = []
    after = 0
    while True:
        query = urllib.parse.urlencode({"chat_id": chat, "after": after, "limit": 1000})
        _, data = _request(url, f"/v1/outbox?{query}")
        if not data["messages"]:
            return rows
        rows += data["messages"]
        after = data["cursor"]


def settle(gw: Gateway, chats: list[str], timeout: float) -> None:
    """Wait until every chat's session is idle (bounded)."""
    deadline = time.monotonic() + timeout
    for chat in chats:
        key = urllib.parse.quote(f"agent:main:webhook:dm:{chat}", safe="")
        while time.monotonic() < deadline:
            try:
                _, data = _request(gw.url, f"/v1/sessions/{key}")
            except urllib.error.HTTPError:
                break  # no session for this chat
            if not data.get("running") and not data.get("queue_depth"):
                break
            time.sleep(0.2)


def judge(accepted: list[Accepted], outbox: dict[str, list[dict]], home: Path) -> Verdict:
    """The verdict by event id; the messages no final row names are looked up in the home's
    database (a session suspended by the stuck-loop guard: not lost)."""
    verdict = reconcile(accepted, outbox)
    if verdict.lost:
        try:
            tables = {t: db_rows(home, t) for t in ("inbox", "sessions", "routing", "messages")}
        except Exception as exc:  # noqa: BLE001 - the verdict stands without the evidence
            print(f"soak: no suspension evidence ({exc!r})", file=sys.stderr)
        else:
            verdict = reconcile(accepted, outbox, suspension_evidence(**tables))
    return verdict


def summary(verdict: Verdict) -> dict:
    """The verdict's numbers (the ``--json`` file)."""
    return {"messages": verdict.accepted, "answered": verdict.answered,
            "lost": len(verdict.lost), "duplicated": verdict.duplicates,
            "unnamed": len(verdict.unnamed), "out_of_order": len(verdict.out_of_order),
            "misrouted": len(verdict.misrouted), "suspended": len(verdict.suspended),
            "redelivered": len(verdict.redelivered), "continued": len(verdict.continued),
            "acks": verdict.acks, "ok": verdict.ok,
            "lost_ids": verdict.lost[:100],
            "duplicated_ids": sorted(verdict.duplicated)[:100],
            "unnamed_rows": [{k: r.get(k) for k in ("chat_id", "text", "kind", "in_reply_to")}
                             for r in verdict.unnamed[:100]],
            "verdict": verdict.line()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--chats", type=int, default=16)
    parser.add_argument("--max-messages", type=int, default=2_000_000)
    parser.add_argument("--window", type=int, default=50,
                        help="unanswered messages a chat may have before it waits")
    parser.add_argument("--restart-min", type=float, default=8.0,
                        help="shortest time between restarts, seconds")
    parser.add_argument("--restart-max", type=float, default=30.0)
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--busy-input-mode", choices=("queue", "interrupt"), default="queue",
                        help="queue: a turn per message; interrupt: follow-ups cut the "
                             "running turn and merge (one reply names them all)")
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    home = args.home or Path(tempfile.mkdtemp(prefix="hermes-soak-"))
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(CONFIG.format(mode=args.busy_input_mode))
    gw = Gateway(home)
    gw.start()
    stop = threading.Event()
    accepted: list[Accepted] = []
    unconfirmed: list[tuple[str, str]] = []
    counter = {"n": 0, "lock": threading.Lock()}
    chats = [f"soak{i}" for i in range(args.chats)]
    threads = [threading.Thread(target=client, daemon=True,
                                args=(gw, c, stop, accepted, counter, args.max_messages,
                                      random.Random(rng.random()), args.window,
                                      unconfirmed))
               for c in chats]
    for t in threads:
        t.start()
    restarts = threading.Thread(target=restarter, daemon=True,
                                args=(gw, stop, (args.restart_min, args.restart_max), rng))
    restarts.start()
    started = time.monotonic()
    while time.monotonic() - started < args.minutes * 60 and counter["n"] < args.max_messages:
        time.sleep(min(10.0, args.minutes * 60))
        print(f"soak: {time.monotonic() - started:.0f}s, {len(accepted)} accepted, "
              f"{sum(gw.restarts.values())} restarts", file=sys.stderr, flush=True)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    restarts.join(timeout=120)
    # A final stop, then one more start so recovery delivers whatever is owed.
    gw.stop()
    gw.start()
    confirm(gw, unconfirmed, accepted)
    settle(gw, chats, timeout=600)
    outbox = {chat: outbox_rows(gw.url, chat) for chat in chats}
    code = gw.stop()
    verdict = judge(accepted, outbox, home)
    result = summary(verdict)
    result.update(restarts=sum(gw.restarts.values()), kills=gw.restarts["kill"],
                  terms=gw.restarts["term"], final_exit=code,
                  seconds=round(time.monotonic() - started, 1), home=str(home))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(f"soak: {verdict.line()}", file=sys.stderr)
    print(f"soak: {result['messages']} messages, {result['answered']} answered, "
          f"{result['lost']} lost, {result['duplicated']} duplicated, "
          f"{result['unnamed']} unnamed, {result['restarts']} restarts")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
