"""Gateways as cluster nodes on one PostgreSQL database, in one process: each serves the
sessions of its shards, any of them accepts any message, a shard that changes hands is
recovered by its new owner, and a write of a tenure that ended is refused by the database."""

from __future__ import annotations

import pytest

from hermes_actors import Gateway, InMemoryAdapter, MessageEvent, SessionSource, load_config
from hermes_actors.errors import FencedError, StoreUnavailableError
from hermes_actors.store.ops import AcceptEvent, FenceShard, SetRoutingFlags
from hermes_actors.testing import wait_until

from .conftest import SlowFirstAnswer

pytestmark = pytest.mark.postgres

SHARDS = 4


def _config(dsn: str, **cluster):
    return load_config({
        "store": {"backend": "postgres", "dsn": dsn, "pool_size": 2},
        "cluster": {"enabled": True, "shards": SHARDS, "lease_ttl": 3, "heartbeat": 0.2,
                    **cluster},
        "busy_input_mode": "queue",
    }, env={})


@pytest.fixture
def nodes(postgres_dsn, tmp_path):
    """``nodes(n)`` starts ``n`` gateways sharing one adapter (whoever owns a chat answers
    it); all are stopped after the test."""
    adapter = InMemoryAdapter("telegram")
    started: list[Gateway] = []

    def start(n: int, **cluster) -> tuple[list[Gateway], InMemoryAdapter]:
        for _ in range(n):
            gw = Gateway(tmp_path / f"node{len(started)}", _config(postgres_dsn, **cluster),
                         adapters=[adapter])
            gw.start()
            started.append(gw)
        return started, adapter

    yield start
    for gw in started:
        gw.stop(drain_timeout=5)


def _serving(gateways) -> int:
    return sum(gw.cluster.statistics().serving for gw in gateways if gw.running)


def _wait_balanced(gateways, timeout: float = 30) -> None:
    """Until the live nodes serve every shard between them, each its fair share."""
    share = SHARDS // len(gateways)
    for gw in gateways:
        assert gw.cluster.wait_for(lambda s: s.serving >= share, timeout), gw.stats()
    assert _serving(gateways) == SHARDS


def _wait_replies(adapter: InMemoryAdapter, count: int, timeout: float = 30) -> None:
    """Until ``count`` turn replies (``echo: ...``) were sent (acks are not counted)."""
    while True:
        replies = [t for t in adapter.texts() if t.startswith("echo: ")]
        if len(replies) >= count:
            return
        assert adapter.wait_for(len(adapter.texts()) + 1, timeout), adapter.texts()


def _replies(adapter: InMemoryAdapter, chat: str) -> list[str]:
    return [t for t in adapter.texts(chat) if t.startswith("echo: ")]


def _message(chat: str, n: int) -> MessageEvent:
    source = SessionSource("telegram", chat_id=chat, user_id="u" + chat)
    return MessageEvent(source=source, text=f"m{n}")


class TestServingShards:
    """Each node serves its own shards; messages accepted anywhere are answered once, in
    order, by the owner."""

    def test_any_node_accepts_the_owner_answers(self, nodes):
        gateways, adapter = nodes(2)
        _wait_balanced(gateways)
        chats = [str(c) for c in range(8)]
        for n in range(3):
            for i, chat in enumerate(chats):
                gateways[(i + n) % 2].submit(_message(chat, n))
        _wait_replies(adapter, 3 * len(chats))
        for chat in chats:
            assert _replies(adapter, chat) == [f"echo: m{n}" for n in range(3)]
        owners = {gw.store.node_id: gw.cluster for gw in gateways}
        for chat in chats:
            key = gateways[0].store.session_key_for(_message(chat, 0).source)
            serving = [node for node, host in owners.items() if host.serves(key)]
            assert len(serving) == 1  # exactly one node serves each session

    def test_a_stopped_node_hands_its_shards_over(self, nodes):
        gateways, adapter = nodes(2)
        _wait_balanced(gateways)
        gateways[0].submit(_message("1", 0))
        _wait_replies(adapter, 1)
        gateways[1].stop(drain_timeout=5)
        assert gateways[0].cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
        for chat in ("1", "2", "3", "4", "5"):
            gateways[0].submit(_message(chat, 1))
        _wait_replies(adapter, 6)
        assert _replies(adapter, "1") == ["echo: m0", "echo: m1"]


class TestInboxNotices:
    """A message accepted by another node wakes the owner at once (NOTIFY on the shard's
    channel), long before the poll, which comes only every ``lease_ttl``."""

    def test_the_owner_is_woken(self, nodes):
        gateways, adapter = nodes(2, lease_ttl=60)
        _wait_balanced(gateways)
        first, second = gateways
        chat = next(str(c) for c in range(100) if second.cluster.serves(
            first.store.session_key_for(_message(str(c), 0).source)))
        first.submit(_message(chat, 0))  # once answered, the owner listens (shards settled)
        _wait_replies(adapter, 1, timeout=60)
        before = second.cluster.statistics().woken
        first.submit(_message(chat, 1))
        _wait_replies(adapter, 2, timeout=20)  # the poll would have waited 60 s
        assert _replies(adapter, chat) == ["echo: m0", "echo: m1"]
        assert second.cluster.statistics().woken > before


    def test_the_listen_loop_outlives_a_failure_that_is_not_the_drivers(self, postgres_dsn):
        import threading

        import psycopg

        from hermes_actors.store.backends.postgres.listen import InboxNotices
        from hermes_actors.store.backends.postgres.schema import inbox_channel

        heard, woken = [], threading.Event()

        def on_notice(shard):
            heard.append(shard)
            if len(heard) == 1:
                raise RuntimeError("a listener's bug")  # (the loop must not end on it)
            if shard == 3:
                woken.set()

        notices = InboxNotices(postgres_dsn, on_notice, wait=0.05)
        notices.want([3])
        notices.start()
        try:
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                for _ in range(400):  # NOTIFY until the loop, back after its failure, hears
                    conn.execute(f"NOTIFY {inbox_channel(3)}")
                    if woken.wait(0.05):
                        break
            assert woken.is_set(), heard
        finally:
            notices.stop()


    def test_a_nodes_own_accepts_wake_no_pass(self, nodes):
        """The node reads the inbox after its own accept (that pass dispatches it), so its
        own NOTIFY, which would wake a pass that finds nothing, is not passed on."""
        import time

        (node,), adapter = nodes(1, lease_ttl=60)
        _wait_balanced([node])
        notices = node.cluster.notices

        def until(check) -> None:  # the notices come on a connection of their own
            deadline = time.monotonic() + 20
            while not check() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert check(), (notices.heard, notices.listening, node.cluster.statistics())

        until(lambda: notices.listening == frozenset(range(SHARDS)))
        own, woken = notices.own, node.cluster.statistics().woken
        for n in range(3):
            node.submit(_message(str(n), n))
        _wait_replies(adapter, 3, timeout=20)  # dispatched by the passes after the accepts
        until(lambda: notices.own == own + 3)
        assert node.cluster.statistics().woken == woken


class TestOutboxAcrossNodes:
    """A long poll of the outbox waits on any node: it wakes when the chat's owner, another
    node, appends the reply (NOTIFY on the outbox channel), not when its ``wait`` ends."""

    def test_a_long_poll_on_another_node_wakes(self, postgres_dsn, tmp_path):
        import threading

        from hermes_actors.adapters.outbox import Outbox, OutboxAdapter

        gateways, outboxes = [], []
        try:
            for n in range(2):
                outbox = Outbox()
                gw = Gateway(tmp_path / f"node{n}", _config(postgres_dsn),
                             adapters=[OutboxAdapter("webhook", outbox)])
                outbox.bind(lambda gw=gw: gw.store)
                gw.start()
                gateways.append(gw)
                outboxes.append(outbox)
            _wait_balanced(gateways)
            owner, other = gateways
            source = next(SessionSource("webhook", chat_id=str(c)) for c in range(100)
                          if owner.cluster.serves(owner.store.session_key_for(
                              SessionSource("webhook", chat_id=str(c)))))
            owner.submit(MessageEvent(source=source, text="first"))  # the nodes listen now
            assert [r["text"] for r in outboxes[1].wait("webhook", source.chat_id, 0,
                                                        timeout=60)] == ["echo: first"]
            after = outboxes[1].head()
            result: list = []
            waiter = threading.Thread(target=lambda: result.append(
                outboxes[1].wait("webhook", source.chat_id, after, timeout=120)))
            waiter.start()
            other.submit(MessageEvent(source=source, text="second"))  # answered by the owner
            waiter.join(30)  # unheard, the long poll would wait its whole 120 s
            assert not waiter.is_alive()
            assert [r["text"] for r in result[0]] == ["echo: second"]
        finally:
            for gw in gateways:
                gw.stop(drain_timeout=5)
            for outbox in outboxes:
                outbox.close()


class TestPausedInsideAWrite:
    """A node paused inside a write holds its fence's share lock on a lease row; the server
    ends that transaction after ``lease_ttl`` idle (the writer's
    ``idle_in_transaction_session_timeout``), so another node can take the shard."""

    def test_the_lock_goes_and_the_shard_is_taken(self, nodes):
        (first,), _ = nodes(1)
        assert first.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
        shard, epoch = 0, first.cluster.tenure(0)
        # A connection set up as the writer's, stopped between its fence and its COMMIT.
        stuck = first.store.backend._server.connect(writer=True)
        stuck.execute("BEGIN")
        stuck.execute("SELECT cluster_fence(%s, %s, %s)", (shard, first.store.node_id, epoch))
        first.cluster.manager.halt()  # and the node renews nothing any more
        gateways, _ = nodes(1)
        second = gateways[1]
        assert second.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30), \
            second.stats()["cluster"]
        assert stuck.closed or stuck.broken or _ended(stuck)


def _ended(conn) -> bool:
    """Whether the server ended ``conn``'s session (the next statement fails)."""
    import psycopg

    try:
        conn.execute("SELECT 1")
    except psycopg.Error:
        return True
    return False


class TestFence:
    """A write of a tenure that ended is refused by the database, fails only its own op
    list, is counted, and makes the node drop the shard."""

    def test_stale_epoch_refused_in_the_database(self, nodes):
        (gw,), _ = nodes(1)
        assert gw.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
        gw.submit(_message("9", 0))
        key = gw.store.session_key_for(_message("9", 0).source)
        assert gw.wait_idle(30)
        shard = gw.cluster.shard_of(key)
        epoch = gw.cluster.tenure(shard)
        backend = gw.store.backend
        flags = SetRoutingFlags(key, None, None, False, False, False, None)
        with pytest.raises(FencedError) as refused:
            backend.apply([FenceShard(shard, gw.store.node_id, epoch + 1), flags])
        assert (refused.value.shard, refused.value.epoch) == (shard, epoch + 1)
        assert backend.apply([FenceShard(shard, gw.store.node_id, epoch), flags])[1] == 1

    def test_one_fence_a_tenure_in_a_group_commit(self, nodes):
        """Lists of one tenure committed together share one check (it holds the lease row
        until the commit); a list of an ended tenure among them still fails alone."""
        (gw,), _ = nodes(1)
        assert gw.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
        gw.submit(_message("9", 0))
        assert gw.wait_idle(30)
        key = gw.store.session_key_for(_message("9", 0).source)
        shard = gw.cluster.shard_of(key)
        epoch, node = gw.cluster.tenure(shard), gw.store.node_id
        flags = SetRoutingFlags(key, None, None, False, False, False, None)
        writer = gw.store.backend._writer
        fenced = [FenceShard(shard, node, epoch), flags]
        assert [ok for ok, _r in writer.apply_group([fenced, list(fenced)])] == [True, True]
        stale = [FenceShard(shard, node, epoch + 1), flags]
        done = writer.apply_group([fenced, stale, list(fenced)])
        assert [ok for ok, _r in done] == [True, False, True]
        assert isinstance(done[1][1], FencedError)

    def test_refused_write_drops_the_shard(self, nodes):
        (gw,), _ = nodes(1)
        assert gw.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
        gw.submit(_message("9", 0))
        assert gw.wait_idle(30)
        key = gw.store.session_key_for(_message("9", 0).source)
        shard = gw.cluster.shard_of(key)
        # Another tenure begins behind this node's back (as after a pause past lease_ttl).
        gw.store.backend.sql("UPDATE shard_leases SET epoch = epoch + 1 WHERE shard = %s",
                             (shard,))
        with pytest.raises(FencedError):
            gw.store.mark_resume_pending(key, "restart_timeout")
        fence = gw.store.fence.statistics()
        assert fence.refused_by_database == 1
        assert gw.cluster.wait_for(lambda s: s.lost == 1, timeout=10)
        assert not gw.cluster.serves(key)
        with pytest.raises(FencedError):  # not even sent any more
            gw.store.mark_resume_pending(key, "restart_timeout")
        assert gw.store.fence.statistics().refused_locally == 1


class TestOutage:
    """During an outage of the database server a node's passes refuse at once instead of
    waiting for a connection (the gateway is being replaced: its stop must not wait)."""

    def test_a_pass_refuses_at_once(self, nodes):
        import time

        (gw,), _ = nodes(1)
        assert gw.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
        gw.outage.set()
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            gw.cluster.catch_up()
        assert time.monotonic() - started < 1.0


class TestOperatorViews:
    """``/metrics`` counts a node's shards and fenced writes; ``stats()`` names the node."""

    def test_metrics_and_stats(self, nodes):
        from hermes_actors.adapters.http_metrics import GatewayMetrics

        (gw,), _ = nodes(1)
        assert gw.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
        text = GatewayMetrics(gw).render().decode()
        assert f"hermes_cluster_shards_owned {float(SHARDS)}" in text
        assert 'hermes_cluster_fenced_writes_total{where="database"} 0.0' in text
        assert gw.stats()["cluster"]["node_id"] == gw.store.node_id


class TestShardReads:
    """The database filters the inbox and the routing rows by shard exactly as Python
    does (``cluster_shard`` in SQL, ``ShardSet`` in Python)."""

    def test_sql_filter_matches_python(self, nodes):
        from hermes_actors.cluster.shards import ShardSet

        (gw,), _ = nodes(1)
        assert gw.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
        for chat in range(12):
            gw.submit(_message(str(chat), 0))
        assert gw.wait_idle(30)
        backend = gw.store.backend
        for key in range(12):  # unconsumed rows of several sessions
            backend.apply([AcceptEvent(f"x{key}", f"k{key}", "{}", False, 1.0)])
        for wanted in ({0}, {1, 3}, set(range(SHARDS))):
            shards = ShardSet(SHARDS, frozenset(wanted))
            rows = backend.shard_routing_rows(SHARDS, sorted(wanted))
            assert [r.session_key for r in rows] == sorted(
                r.session_key for r in backend.routing_rows() if shards(r.session_key))
            assert backend.shard_pending_inbox(SHARDS, sorted(wanted)) == [
                (k, p) for k, p in backend.pending_inbox() if shards(k)]
            # unparsed, with the ids (a pass parses only what it has not dispatched)
            assert [(k, i) for k, i, _p in backend.shard_pending_rows(
                SHARDS, sorted(wanted))] == [(k, f"x{k[1:]}") for k, _p in
                                             backend.pending_inbox() if shards(k)]


class TestStuckLoopAcrossNodes:
    """A session's consecutive interrupted restarts are counted per session in the shared
    database, whichever node it was interrupted on: interrupted on node A, then on B, then
    on A again (restarted on its home), it is suspended by the node that recovers it next,
    although no single node saw it interrupted three times."""

    def test_interrupted_on_a_then_b_then_a_is_suspended(self, postgres_dsn, tmp_path):
        config = load_config({
            "store": {"backend": "postgres", "dsn": postgres_dsn, "pool_size": 2},
            "cluster": {"enabled": True, "shards": SHARDS, "lease_ttl": 2, "heartbeat": 0.2},
            "agent": {"kind": "scripted", "auto_continue_freshness": 0},
            "busy_input_mode": "queue",
        }, env={})
        adapter = InMemoryAdapter("telegram")
        message = _message("77", 0)
        homes = [tmp_path / "a", tmp_path / "b", tmp_path / "a", tmp_path / "b"]
        running: list[Gateway] = []
        try:
            previous = None
            for n, home in enumerate(homes):
                gw = Gateway(home, config, adapters=[adapter])
                gw.start()
                running.append(gw)
                # the node alone serves every shard once the crashed one's leases expired
                assert gw.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30), \
                    gw.stats()["cluster"]
                if previous is not None:
                    previous.stop(drain_timeout=0)  # its writes are refused: nothing moves
                    running.remove(previous)
                key = gw.store.session_key_for(message.source)
                counts = gw.store.session_restarts()
                if n == len(homes) - 1:
                    break
                assert counts.get(key, 0) == n  # the interruptions on the other nodes
                gw.submit(MessageEvent(source=message.source, text=f"sleep 6{n}"))
                wait_until(lambda gw=gw, key=key: _marked(gw, key), 30, 0.05,
                           "the turn running")
                gw.cluster.manager.halt()  # a crash: nothing more written, leases expire
                previous = gw
            assert gw.store.get(key).suspended, gw.store.get(key)
            assert key not in gw.store.session_restarts()  # the count removed with it
            assert gw.stats()["supervisor"]["suspensions"] == 1
            gw.submit(MessageEvent(source=message.source, text="hi"))
            assert gw.wait_idle(30)
            assert gw.store.get(key).auto_reset_reason == "suspended"
            assert _replies(adapter, "77") == ["echo: hi"]
        finally:
            for gw in running:
                gw.stop(drain_timeout=0)

    def test_a_successful_turn_resets_the_shared_count(self, postgres_dsn, tmp_path):
        config = load_config({
            "store": {"backend": "postgres", "dsn": postgres_dsn, "pool_size": 2},
            "cluster": {"enabled": True, "shards": SHARDS, "lease_ttl": 2, "heartbeat": 0.2},
            "agent": {"kind": "scripted", "auto_continue_freshness": 0},
        }, env={})
        adapter = InMemoryAdapter("telegram")
        source = _message("78", 0).source
        first = Gateway(tmp_path / "a", config, adapters=[adapter])
        first.start()
        second = None
        try:
            assert first.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
            key = first.store.session_key_for(source)
            first.submit(MessageEvent(source=source, text="sleep 60"))
            wait_until(lambda: _marked(first, key), 30, 0.05, "the turn running")
            first.cluster.manager.halt()
            second = Gateway(tmp_path / "b", config, adapters=[adapter])
            second.start()
            assert second.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
            assert second.store.session_restarts() == {key: 1}
            second.submit(MessageEvent(source=source, text="hi"))
            assert second.wait_idle(30)
            assert _replies(adapter, "78") == ["echo: hi"]
            assert second.store.session_restarts() == {}  # not consecutive any more
        finally:
            first.stop(drain_timeout=0)
            if second is not None:
                second.stop(drain_timeout=0)


def _marked(gw: Gateway, key: str) -> bool:
    rows = gw.store.backend.sql("SELECT active_turn_token FROM routing WHERE session_key = %s",
                                (key,))
    return bool(rows and rows[0][0])


class TestHandoverDeliveries:
    """A handover waits for the shard's deliveries in flight: a notice the old owner is
    sending when the shard goes is sent once, not again by the new owner's ledger sweep."""

    def test_a_notice_being_sent_is_sent_once(self, postgres_dsn, tmp_path):
        adapter = SlowFirstAnswer()
        gateways: list[Gateway] = []
        try:
            a = Gateway(tmp_path / "a", _config(postgres_dsn), adapters=[adapter])
            a.start()
            gateways.append(a)
            assert a.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
            # a chat in one of the shards the second node takes (the highest)
            source = next(s for s in (SessionSource("telegram", chat_id=str(c), user_id="u")
                                      for c in range(200))
                          if a.cluster.shard_of(a.store.session_key_for(s)) == SHARDS - 1)
            key = a.store.session_key_for(source)
            a.submit(MessageEvent(source=source, text="/help"))
            assert adapter.entered.wait(30)  # A's notice actor is sending the answer
            b = Gateway(tmp_path / "b", _config(postgres_dsn), adapters=[adapter])
            b.start()
            gateways.append(b)
            # the other shard is handed over; the chat's waits for the send
            assert a.cluster.wait_for(lambda s: s.handovers == 1 and s.settling == 1,
                                      timeout=30), a.cluster.statistics()
            assert not b.cluster.serves(key) and adapter.texts() == []
            adapter.release.set()
            assert b.cluster.wait_for(lambda s: s.serving == SHARDS // 2, timeout=30)
            assert b.cluster.serves(key)  # recovered: B's ledger sweep has run
            [answer] = adapter.texts(source.chat_id)
            assert answer.startswith("/new") and a.cluster.statistics().settling == 0
        finally:
            adapter.release.set()
            for gw in gateways:
                gw.stop(drain_timeout=5)


class _PartialAgent:
    """An agent that, interrupted, stops *soon* (when the test lets it) with its partial
    answer (``TurnResult("partial: ...", "interrupted")``); a continuation after a restart
    answers ``resumed: <message>``; anything else is echoed."""

    def __init__(self, entered, interrupted, finish) -> None:
        self.entered, self.interrupted, self.finish = entered, interrupted, finish

    def run_turn(self, request):
        from hermes_actors.agents.base import TurnResult

        if request.message.startswith("[System note:"):
            last = next(m["content"] for m in reversed(request.history)
                        if m.get("role") == "user")
            return TurnResult(reply=f"resumed: {last}")
        if request.message == "slow":
            self.entered.set()
            assert self.interrupted.wait(30)
            assert self.finish.wait(30)
            return TurnResult(reply="partial: slow", status="interrupted")
        return TurnResult(reply=f"echo: {request.message}")

    def interrupt(self, reason=None) -> None:
        self.interrupted.set()

    def release_clients(self) -> None:
        pass

    def close(self) -> None:
        pass


class TestTenureRegained:
    """A node whose local deadline passed (its lease round held up past ``lease_ttl``)
    loses its shards and takes them back at once under new epochs. A turn of the old
    tenure still finishing then is not the new tenure's: its answer must not go out on top
    of the recovery's continuation of the same message (the user would get both)."""

    def test_a_turn_of_the_old_tenure_writes_nothing(self, postgres_dsn, tmp_path):
        import threading

        from hermes_actors.testing import FakeClock

        entered, interrupted, finish = (threading.Event() for _ in range(3))
        adapter = InMemoryAdapter("telegram")
        clock = FakeClock()
        gw = Gateway(tmp_path / "a", _config(postgres_dsn), adapters=[adapter], clock=clock,
                     agent_factory=lambda context: _PartialAgent(entered, interrupted,
                                                                 finish))
        gw.start()
        try:
            assert gw.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
            source = SessionSource("telegram", chat_id="5", user_id="u5")
            key = gw.store.session_key_for(source)
            shard = gw.cluster.shard_of(key)
            gw.submit(MessageEvent(source=source, text="slow"))
            assert entered.wait(30)
            before = gw.cluster.tenure(shard)
            gained = gw.cluster.statistics().gained
            clock.advance(gw.config.cluster.lease_ttl + 1)  # every local deadline passes
            assert interrupted.wait(30)  # lost: the turn is told to stop
            # ... and the node takes its shards back, recovering them: the marked turn is
            # continued
            assert gw.cluster.wait_for(lambda s: s.gained >= gained + SHARDS, timeout=30)
            assert gw.cluster.tenure(shard) not in (None, before)
            assert adapter.wait_for(1, 30), adapter.texts()
            assert adapter.texts("5") == ["resumed: slow"]
            finish.set()  # the old tenure's turn ends now, with its partial answer
            fence = gw.store.fence
            wait_until(lambda: fence.statistics().refused_locally >= 1
                        or len(adapter.texts("5")) > 1, 30, 0.05, "the old turn's end")
            assert adapter.texts("5") == ["resumed: slow"]
        finally:
            finish.set()
            gw.stop(drain_timeout=5)


class _HeldOutbox:
    """An outbox whose first append waits until ``release`` is set (a node paused between
    the claim of a reply and its send)."""

    def __new__(cls):
        import threading

        from hermes_actors.adapters.outbox import Outbox

        class Held(Outbox):
            def append(self, *args, **kwargs):
                if not self.entered.is_set():
                    self.entered.set()
                    assert self.release.wait(60)
                return super().append(*args, **kwargs)

        outbox = Held()
        outbox.entered, outbox.release = threading.Event(), threading.Event()
        return outbox


class TestLateOutcome:
    """A node paused between the claim of a reply and its send comes back after the new
    owner redelivered the reply (``♻️ Recovered reply``): its send is refused, and the
    failure it records must not undo the new owner's ``delivered``, or the next ledger
    sweep redelivers the reply once more (the user gets the recovered reply twice)."""

    def test_the_stale_outcome_changes_nothing(self, postgres_dsn, tmp_path):
        from hermes_actors.adapters.outbox import Outbox, OutboxAdapter
        from hermes_actors.runtime.delivery import RECOVERED_PREFIX

        held = _HeldOutbox()
        a = Gateway(tmp_path / "a", _config(postgres_dsn),
                    adapters=[OutboxAdapter("webhook", held)])
        held.bind(lambda: a.store)
        a.start()
        b = None
        try:
            assert a.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
            source = SessionSource("webhook", chat_id="7")
            a.submit(MessageEvent(source=source, text="hello"))
            assert held.entered.wait(30)  # recorded and claimed; the send waits
            a.cluster.manager.halt()  # the node is gone for the cluster (a pause)
            outbox = Outbox()
            b = Gateway(tmp_path / "b", _config(postgres_dsn),
                        adapters=[OutboxAdapter("webhook", outbox)])
            outbox.bind(lambda: b.store)
            b.start()
            assert b.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
            sql = "SELECT text FROM outbox WHERE chat_id = '7' ORDER BY cursor"
            assert [t for (t,) in b.store.backend.sql(sql)] == [
                RECOVERED_PREFIX + "echo: hello"]
            held.release.set()  # the paused node goes on: its send is refused
            wait_until(lambda: a.store.fence.statistics().refused_locally >= 1,
                       30, 0.05, "the paused node's send refused")
            assert a.wait_idle(30)  # (its outcome recorded)
            b.housekeeping_tick()  # a ledger sweep of the new owner
            assert [t for (t,) in b.store.backend.sql(sql)] == [
                RECOVERED_PREFIX + "echo: hello"]
            states = b.store.backend.sql("SELECT state FROM deliveries")
            assert states == [("delivered",)]
        finally:
            held.release.set()
            for gw in (a, b):
                if gw is not None:
                    gw.stop(drain_timeout=5)


class TestNoticeAfterTheShardWent:
    """A notice still queued when its shard goes is refused by the fence: that is one
    warning line, as for a turn, not an error with a traceback as if something broke."""

    def test_one_line(self, postgres_dsn, tmp_path, caplog):
        import logging

        adapter = SlowFirstAnswer()
        gw = Gateway(tmp_path / "a", _config(postgres_dsn), adapters=[adapter])
        gw.start()
        try:
            assert gw.cluster.wait_for(lambda s: s.serving == SHARDS, timeout=30)
            source = SessionSource("telegram", chat_id="3", user_id="u3")
            gw.submit(MessageEvent(source=source, text="/help"))
            assert adapter.entered.wait(30)  # the first answer is being sent
            gw.submit(MessageEvent(source=source, text="/help"))
            notices = gw.services.notices
            wait_until(lambda: notices.sending(lambda key: True) == 2, 30, 0.05,
                       "the second queued")
            gw.cluster.manager.halt()  # the shard goes
            caplog.set_level(logging.WARNING, logger="hermes_actors.delivery")
            adapter.release.set()
            wait_until(lambda: notices.sending(lambda key: True) == 0, 30, 0.05,
                       "the notices done")
            assert gw.store.fence.statistics().refused_locally >= 1
            failed = [r for r in caplog.records if "notice" in r.getMessage()]
            assert failed and all(r.exc_info is None and r.levelno == logging.WARNING
                                  for r in failed), [(r.levelname, r.getMessage())
                                                     for r in failed]
        finally:
            adapter.release.set()
            gw.stop(drain_timeout=5)
