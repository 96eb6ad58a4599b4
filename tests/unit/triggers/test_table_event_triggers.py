"""The commit and visible triggers, serialized and run by Airflow's own trigger runner (tests/triggerer_loop).

The visible trigger follows a control topic the test writes (a fake follower that waits for the test's
next move, so nothing is lined up with sleeps); the commit trigger reads a real SQLite catalog the test
commits to and can take away. What the tests show: one event per advance (or per poll that found new
commits), with the offsets and commits it made visible; an error yields no event, is logged and retried
with new clients; a trigger started again from its serialized form neither repeats nor loses what the
downstream runs read (with the windows of core/windows.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import pyarrow as pa
import pytest
import sqlalchemy.exc
import structlog

from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.windows import COMMIT_EVENT, VISIBLE_EVENT, Window, run_window
from airflow_logstore.exceptions import KafkaUnavailableError
from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.pause import on_pause
from airflow_logstore.settings import local_settings
from airflow_logstore.table.catalog import embedded_catalog
from airflow_logstore.table.tables import LogStoreTable, create_table, drop_table
from airflow_logstore.triggers.assets import (
    commit_asset_name,
    logstore_commit_asset,
    logstore_visible_asset,
    visible_asset_name,
)
from airflow_logstore.triggers.table_events import (
    STATE_KEY,
    STORE_RETRY_DELAYS,
    LogStoreCommitTrigger,
    LogStoreVisibleTrigger,
)
from tests.triggerer_loop import TriggererLoop

WRITER = "w"
T = TypeVar("T")


class Control:
    """A table's control topic as the test writes it: watermark moves and ledger entries.

    ``fail`` makes the next opens and polls raise as an unreachable broker does; ``opened`` counts the
    followers the trigger built (a new one after each error)."""

    def __init__(self, watermark: dict[int, int] | None = None) -> None:
        self.state = ControlState(watermark=dict(watermark or {}))
        self.offset = 0
        self.fail = 0
        self.opened = 0
        self.triggers: list[LogStoreVisibleTrigger] = []
        self.changed = threading.Condition()
        self.topic_id = "topic-1"  # the id Kafka gave the control topic (another: created again)

    def recreate(self, watermark: dict[int, int]) -> None:
        """The table dropped and created again: a control topic of another id, offsets from the start;
        the follower on the old one fails (as ``ControlFollower`` does on a topic of another id)."""
        with self.changed:
            self.state = ControlState(watermark=dict(watermark))
            self.topic_id = "topic-2"
            self.offset += 1
            self.fail = 1
            self.changed.notify_all()

    def move(self, watermark: dict[int, int], *commits: CommitInfo) -> None:
        with self.changed:
            for commit in commits:
                self.state.commits[commit.key] = commit
            for p, o in watermark.items():
                self.state.watermark[p] = max(self.state.watermark.get(p, -1), o)
            self.offset += 1 + len(commits)
            self.changed.notify_all()

    def _maybe_fail(self) -> None:
        with self.changed:
            if self.fail:
                self.fail -= 1
                raise KafkaUnavailableError("the broker at 127.0.0.1:1 did not answer")

    def open(self, trigger: LogStoreVisibleTrigger) -> tuple[Any, list[int]]:
        self.triggers.append(trigger)
        self._maybe_fail()
        self.opened += 1
        return Follower(self), [0, 1]


class Follower:
    """What ``ControlFollower`` gives the trigger: a state, the next offset, a poll that waits."""

    def __init__(self, control: Control) -> None:
        self.control = control
        self.state = ControlState()
        self.next = 0
        self.closed = False
        self.started_topic_id = control.topic_id
        self._sync()

    def _sync(self) -> None:
        self.state = ControlState(
            commits=dict(self.control.state.commits), watermark=dict(self.control.state.watermark)
        )
        self.next = self.control.offset

    def poll(self, timeout: float = 0.0) -> bool:
        with self.control.changed:
            if self.control.offset == self.next:
                self.control.changed.wait(timeout)
        self.control._maybe_fail()  # a poll that waited fails as the broker went away meanwhile
        before = dict(self.state.watermark)
        self._sync()
        return self.state.watermark != before

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def control(monkeypatch: pytest.MonkeyPatch) -> Control:
    ctl = Control({0: 4})
    monkeypatch.setattr(LogStoreVisibleTrigger, "open_follower", lambda self: ctl.open(self))
    return ctl


@pytest.fixture
def loop() -> TriggererLoop:
    return TriggererLoop()


@pytest.fixture
def watching() -> Iterator[threading.Event]:
    """Set once a visible trigger took the watermark it starts from (its pause point)."""
    point = threading.Event()
    with on_pause("events:watching", point.set):
        yield point


def run(loop: TriggererLoop, scenario: Callable[[], Awaitable[T]]) -> T:
    """Run ``scenario`` in an event loop; stop every trigger it started when it ends."""

    async def main() -> T:
        try:
            return await scenario()
        finally:
            await loop.close()

    return asyncio.run(main())


def commit(batch: int, offsets: dict[int, tuple[int, int]]) -> CommitInfo:
    return CommitInfo(WRITER, batch, 1, offsets=offsets)


def visible(**kwargs: Any) -> LogStoreVisibleTrigger:
    return LogStoreVisibleTrigger(table="db.orders", poll_interval=0.05, max_backoff=0.2, **kwargs)


def test_both_triggers_serialize_to_their_class_and_plain_arguments() -> None:
    for trigger in (visible(), LogStoreCommitTrigger(table="db.orders", poll_interval=1.0)):
        classpath, kwargs = trigger.serialize()
        module, _, name = classpath.rpartition(".")
        cls = getattr(__import__(module, fromlist=[name]), name)
        assert cls is type(trigger)
        assert cls(**kwargs).serialize() == (classpath, kwargs)
        assert kwargs["table"] == "db.orders" and "kafka_config_id" in kwargs


def test_each_table_asset_has_its_own_watcher() -> None:
    commits, seen = logstore_commit_asset("db.orders"), logstore_visible_asset("db.orders", poll_interval=0.2)
    assert commits.name == commit_asset_name("db.orders") == "logstore.db.orders.commits"
    assert seen.name == visible_asset_name("db.orders") == "logstore.db.orders.visible"
    assert [type(w.trigger) for w in commits.watchers] == [LogStoreCommitTrigger]
    assert [type(w.trigger) for w in seen.watchers] == [LogStoreVisibleTrigger]
    assert seen.watchers[0].trigger.poll_interval == 0.2
    # another table's assets never share a trigger with these (Airflow shares by class and arguments)
    other = logstore_visible_asset("db.other").watchers[0].trigger
    assert other.serialize() != seen.watchers[0].trigger.serialize()


def test_the_visible_trigger_fires_once_per_advance_with_the_offsets_and_commits(
    control: Control, loop: TriggererLoop, watching: threading.Event
) -> None:
    async def scenario() -> list[Any]:
        trigger_id = await loop.start(visible())
        await loop.reached(watching)
        assert await loop.settle(trigger_id) == []  # the current watermark is where it starts
        control.move({0: 9, 1: 2}, commit(1, {0: (5, 9), 1: (0, 2)}))
        first = await loop.wait_for_events(trigger_id, 1)
        assert await loop.settle(trigger_id) == first  # nothing new: no event
        control.move({1: 5}, commit(2, {1: (3, 5)}))
        return await loop.wait_for_events(trigger_id, 2)

    events = run(loop, scenario)
    one, two = (e.payload for e in events)
    assert one["event"] == VISIBLE_EVENT and one["table"] == "db.orders"
    assert (one["from"], one["to"]) == ({"0": 5, "1": 0}, {"0": 10, "1": 3})
    assert one["watermark"] == {"0": 9, "1": 2} and one["commits"] == ["w/1/1"]
    assert (two["from"], two["to"], two["commits"]) == ({"0": 10, "1": 3}, {"0": 10, "1": 6}, ["w/2/1"])


def test_an_error_yields_no_event_is_logged_and_retried_with_a_new_follower(
    control: Control, loop: TriggererLoop, watching: threading.Event
) -> None:
    async def scenario() -> tuple[list[Any], list[Any]]:
        trigger_id = await loop.start(visible())
        await loop.reached(watching)
        await loop.settle(trigger_id)
        control.fail = 3  # three polls and opens in a row fail; an advance comes meanwhile
        control.move({0: 7}, commit(1, {0: (5, 7)}))
        with structlog.testing.capture_logs() as logs:
            events = await loop.wait_for_events(trigger_id, 1)
            after = await loop.settle(trigger_id)
        return events + after[1:], logs

    events, logs = run(loop, scenario)
    assert len(events) == 1  # no event for the errors; the advance once, after them
    assert (events[0].payload["from"], events[0].payload["to"]) == ({"0": 5, "1": 0}, {"0": 8, "1": 0})
    warnings = [entry for entry in logs if "no event, retrying" in str(entry.get("event"))]
    assert len(warnings) == 3, logs
    assert "KafkaUnavailableError" in str(warnings[0]) and "127.0.0.1:1" in str(warnings[0])
    trigger = control.triggers[0]
    assert control.opened == 2 and trigger.failed_attempts == 0  # a new follower after the errors


def test_a_table_dropped_and_created_again_fires_from_the_start_of_its_new_control_topic(
    control: Control, loop: TriggererLoop, watching: threading.Event
) -> None:
    """Created again, the table's offsets start again: the trigger fires for every advance on the new
    control topic from its start, its events name the new topic, and a run's window ignores the earlier
    life's events (before, the fired watermark of the old topic hid every advance below it, and the
    windows started past the new records)."""

    async def scenario() -> list[Any]:
        trigger_id = await loop.start(visible())
        await loop.reached(watching)
        await loop.settle(trigger_id)
        control.move({0: 9}, commit(1, {0: (5, 9)}))
        await loop.wait_for_events(trigger_id, 1)
        control.recreate({0: 2, 1: 1})  # a new life, already published up to 2 and 1
        return await loop.wait_for_events(trigger_id, 2)

    old, new = (e.payload for e in run(loop, scenario))
    assert old["control_topic_id"] == "topic-1" and new["control_topic_id"] == "topic-2"
    assert (new["from"], new["to"]) == ({"0": 0, "1": 0}, {"0": 3, "1": 2})
    assert run_window([new], [old]) == Window({0: 0, 1: 0}, {0: 3, 1: 2})  # not from the old life's 10
    legacy = {key: value for key, value in old.items() if key != "control_topic_id"}
    # an event of an older package names no topic: it counts, as before
    assert run_window([new], [legacy]) == Window({0: 3, 1: 0}, {0: 3, 1: 2})


def test_a_stored_watermark_of_the_tables_earlier_life_is_not_started_from(control: Control) -> None:
    store = Store({"watermark": {"0": 40}, "control_topic_id": "topic-0"})  # the old table's
    control.move({0: 8})
    with structlog.testing.capture_logs() as logs:
        events = _run_with_store(control, store, [{}])
    assert (events[0]["from"], events[0]["to"]) == ({"0": 0, "1": 0}, {"0": 9, "1": 0})
    assert any("control topic was created again" in str(entry.get("event")) for entry in logs), logs


def test_the_backoff_doubles_per_error_up_to_its_limit() -> None:
    trigger = LogStoreVisibleTrigger(table="db.t", poll_interval=0.5, max_backoff=3.0)
    assert [trigger.backoff(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_restarted_trigger_neither_repeats_nor_loses_what_runs_read(
    control: Control, loop: TriggererLoop, watching: threading.Event
) -> None:
    """Stopped and started again from its serialized form (no state store): it starts from the current
    watermark, so what was published while it was down comes with its next event; the runs' windows
    read it once."""

    async def scenario() -> list[dict[str, Any]]:
        first_id = await loop.start(visible())
        await loop.reached(watching)
        await loop.settle(first_id)
        control.move({0: 6, 1: 1}, commit(1, {0: (5, 6), 1: (0, 1)}))
        stored = [e.payload for e in await loop.wait_for_events(first_id, 1)]
        await loop.stop(first_id)  # the triggerer goes down
        control.move({0: 8}, commit(2, {0: (7, 8)}))  # published meanwhile
        second_id = await loop.start(visible())
        await loop.reached(watching)
        assert await loop.settle(second_id) == []  # the restart itself fires nothing
        control.move({1: 4}, commit(3, {1: (2, 4)}))
        stored += [e.payload for e in await loop.wait_for_events(second_id, 1)]
        return stored

    stored = run(loop, scenario)
    assert stored[1]["from"] == {"0": 9, "1": 2}  # the trigger's own view after the restart
    runs = [run_window(stored[:1], []), run_window(stored[1:], stored[:1])]
    assert runs == [Window({0: 5, 1: 0}, {0: 7, 1: 2}), Window({0: 7, 1: 2}, {0: 9, 1: 5})]


class Store:
    """Airflow's asset state store as a watcher trigger sees it (``aget``/``aset``, 3.3+)."""

    def __init__(self, value: Any = None, error: Exception | None = None, failures: int = -1) -> None:
        self.values: dict[str, Any] = {} if value is None else {STATE_KEY: value}
        self.error = error
        self.failures = failures  # reads that raise ``error`` (-1: every read)
        self.reads = 0

    async def aget(self, key: str, default: Any = None) -> Any:
        self.reads += 1
        if self.error is not None and (self.failures < 0 or self.reads <= self.failures):
            raise self.error
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def _run_with_store(control: Control, store: Store, moves: list[dict[int, int]]) -> list[dict[str, Any]]:
    """The trigger's own loop (its ``run``) with ``store`` injected as the triggerer injects it; each of
    ``moves`` is made once the trigger has opened its follower, and one event is awaited per move ({}:
    no move, the event the start itself fires)."""

    async def scenario() -> list[dict[str, Any]]:
        trigger = visible()
        trigger.asset_state_store = store
        trigger.store_retry_delays = (0.01,) * len(STORE_RETRY_DELAYS)
        events: list[dict[str, Any]] = []
        stream = trigger.run()
        try:
            for watermark in moves:
                pending = asyncio.ensure_future(stream.__anext__())
                while not control.opened and not pending.done():
                    await asyncio.sleep(0.01)  # until the follower is open (the start's own look)
                if watermark:
                    control.move(watermark)
                events.append((await asyncio.wait_for(pending, 30)).payload)
            # the triggerer asks for the next event at once: the trigger stores what it fired, then polls
            pending = asyncio.ensure_future(stream.__anext__())
            for _ in range(200):
                before = {p: o - 1 for p, o in events[-1]["from"].items()}
                kept = store.values.get(STATE_KEY) or {}
                if kept.get("watermark") == before or trigger._store is None:  # stored, or never
                    break
                await asyncio.sleep(0.01)
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        finally:
            await stream.aclose()
        return events

    return asyncio.run(scenario())


def test_with_the_asset_state_store_a_restart_fires_at_once_for_what_was_published_meanwhile(
    control: Control,
) -> None:
    store = Store({"0": 4})
    control.move({0: 8})  # published while the trigger was down
    events = _run_with_store(control, store, [{}])  # the first poll, no new move
    assert (events[0]["from"], events[0]["to"]) == ({"0": 5, "1": 0}, {"0": 9, "1": 0})
    assert store.values[STATE_KEY] == {
        "watermark": {"0": 4, "1": -1},
        "control_topic_id": "topic-1",
    }  # one behind


def test_a_restart_right_after_an_event_was_handed_over_fires_its_range_again_and_reads_it_once(
    control: Control,
) -> None:
    """The triggerer may die between taking an event and storing it: the restarted trigger (the state
    store as the first run left it, no new move) fires the last event's range again at once. If the
    first was stored, the repeat's window is empty; if it was lost, the repeat's window is its range."""
    store = Store({"0": 4})
    control.move({0: 8})
    first = _run_with_store(control, store, [{}])[0]
    control.opened = 0
    repeat = _run_with_store(control, store, [{}])[0]  # a restart: the same store, nothing moved
    assert (repeat["from"], repeat["to"]) == (first["from"], first["to"])
    stored = run_window([repeat], [first])  # the first event was stored: nothing new to read
    assert stored.start == stored.end == {0: 9, 1: 0}
    lost = run_window([repeat], [])  # the first event never reached the database: its range is read
    assert (lost.start, lost.end) == ({0: 5, 1: 0}, {0: 9, 1: 0})


def test_a_state_store_that_cannot_be_used_is_logged_and_left_alone(control: Control) -> None:
    store = Store(error=ValueError("Task has 2 concrete inlets and outlets"))
    with structlog.testing.capture_logs() as logs:
        events = _run_with_store(control, store, [{0: 6}])
    assert (events[0]["from"], events[0]["to"]) == ({"0": 5, "1": 0}, {"0": 7, "1": 0})
    assert STATE_KEY not in store.values
    assert any("not keeping the fired watermark" in str(entry.get("event")) for entry in logs), logs
    assert store.reads == 1  # several assets on one trigger: no retry can help


@pytest.mark.parametrize(
    "error", [ConnectionError("the API server is restarting"), ValueError("Expecting value: line 1 column 1")]
)
def test_a_state_store_unreachable_at_start_is_read_again_and_kept(
    control: Control, error: Exception
) -> None:
    """A store that fails its first read (the API server restarting; a ValueError too, unless it says the
    trigger is shared) is read again after a wait and used: the restart starts where the store says, not
    from the watermark of now."""
    assert min(STORE_RETRY_DELAYS) >= 5 and sum(STORE_RETRY_DELAYS) >= 60  # a restart's time, not a blink
    store = Store({"0": 4}, error=error, failures=1)
    control.move({0: 8})  # published while the trigger was down
    events = _run_with_store(control, store, [{}])
    assert store.reads == 2
    assert (events[0]["from"], events[0]["to"]) == ({"0": 5, "1": 0}, {"0": 9, "1": 0})
    assert store.values[STATE_KEY]["watermark"] == {"0": 4, "1": -1}


def test_a_state_store_unreachable_at_every_read_is_given_up_after_a_few(control: Control) -> None:
    store = Store(error=ConnectionError("refused"))
    with structlog.testing.capture_logs() as logs:
        events = _run_with_store(control, store, [{0: 6}])
    assert store.reads == len(STORE_RETRY_DELAYS) + 1
    assert (events[0]["from"], events[0]["to"]) == ({"0": 5, "1": 0}, {"0": 7, "1": 0})
    assert STATE_KEY not in store.values
    assert any("not keeping the fired watermark" in str(entry.get("event")) for entry in logs), logs


# -- the commit trigger, on a real SQLite catalog -----------------------------------------------------


class Catalog:
    """The edge to the catalog, switched off and on by the test; the control state's watermark."""

    def __init__(self, handle: LogStoreTable) -> None:
        self.handle = handle
        self.down = False
        self.watermark: dict[int, int] = {}

    def table(self, name: str) -> Any:
        return SimpleNamespace(
            name=self.handle.name,
            load=self.load,
            log_side=lambda *a: SimpleNamespace(
                control=SimpleNamespace(read=lambda: ControlState(watermark=dict(self.watermark)))
            ),
        )

    def load(self) -> Any:
        if self.down:
            raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("unable to open database file"))
        return self.handle.load()

    def commit(
        self, batch_id: int, offsets: dict[int, tuple[int, int]] | None = None, **summary: str
    ) -> None:
        info = CommitInfo(WRITER, batch_id, 7, offsets=offsets or {0: (batch_id, batch_id)}, record_count=1)
        rows = pa.table(
            {"id": [batch_id], "amount": [5]},
            schema=pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("amount", pa.int64())]),
        )
        properties = summary or info.to_summary()
        self.handle.load().append(rows, snapshot_properties=properties)


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Catalog:
    spec = embedded_catalog(local_settings({"LOGSTORE_HOME": str(tmp_path)}))
    handle = LogStoreTable.open("db.orders", spec)
    create_table(handle, "id int, amount long", primary_key=["id"])
    edge = Catalog(handle)
    monkeypatch.setattr(LogStoreHook, "table", lambda self, name: edge.table(name))
    return edge


def commits_trigger() -> LogStoreCommitTrigger:
    return LogStoreCommitTrigger(table="db.orders", poll_interval=0.02, max_backoff=0.1)


def test_the_commit_trigger_fires_at_start_for_commits_not_visible_yet(
    catalog: Catalog, loop: TriggererLoop
) -> None:
    catalog.commit(1, {0: (0, 3)})
    catalog.commit(2, {1: (0, 1)})
    catalog.watermark = {0: 3}  # batch 1 is visible, batch 2 is not

    async def scenario() -> list[Any]:
        trigger_id = await loop.start(commits_trigger())
        events = await loop.wait_for_events(trigger_id, 1)
        return await loop.settle(trigger_id) or events

    events = run(loop, scenario)
    assert len(events) == 1
    payload = events[0].payload
    assert payload["event"] == COMMIT_EVENT and payload["unpublished"] is True
    assert [(c["writer_id"], c["batch_id"]) for c in payload["commits"]] == [(WRITER, 2)]


def test_the_commit_trigger_fires_per_new_commit_never_for_other_snapshots_and_retries_errors(
    catalog: Catalog, loop: TriggererLoop
) -> None:
    catalog.commit(1)
    catalog.watermark = {0: 1}  # everything visible: no event at start

    async def scenario() -> tuple[list[Any], list[Any]]:
        trigger_id = await loop.start(commits_trigger())
        assert await loop.settle(trigger_id) == []
        catalog.commit(2)
        first = await loop.wait_for_events(trigger_id, 1)
        catalog.commit(3, **{"logstore.operation": "compaction"})  # compaction: never an event
        assert await loop.settle(trigger_id, polls=6) == first
        with structlog.testing.capture_logs() as logs:
            catalog.down = True
            await loop.settle(trigger_id, polls=6)
            catalog.down = False
            catalog.commit(4)
            events = await loop.wait_for_events(trigger_id, 2)
        return events, logs

    events, logs = run(loop, scenario)
    assert [[c["batch_id"] for c in e.payload["commits"]] for e in events] == [[2], [4]]
    assert all(e.payload["unpublished"] is False for e in events)
    assert any("CatalogUnavailableError" in str(entry) and "no event" in str(entry) for entry in logs), logs


def test_the_commit_trigger_looks_at_a_table_dropped_and_created_again_as_at_a_start(
    catalog: Catalog, loop: TriggererLoop
) -> None:
    """Created again, the table's sequence numbers start again: its first commit fires (as a commit
    not visible yet, as at a start), not only those past the old table's head."""
    for batch in (1, 2, 3):
        catalog.commit(batch)
    catalog.watermark = {0: 3}

    async def scenario() -> list[Any]:
        trigger_id = await loop.start(commits_trigger())
        assert await loop.settle(trigger_id) == []
        drop_table(catalog.handle, keep_topics=True)
        create_table(catalog.handle, "id int, amount long", primary_key=["id"])
        catalog.watermark = {}
        catalog.commit(1)
        return await loop.wait_for_events(trigger_id, 1)

    events = run(loop, scenario)
    payload = events[0].payload
    assert payload["unpublished"] is True and [c["batch_id"] for c in payload["commits"]] == [1]


def test_a_control_topic_missing_for_a_moment_does_not_make_the_trigger_forget_its_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dropping a table deletes its topics first: a follower opened in between finds no topic (no id).
    The id the fired watermark belongs to is kept, so the new topic's other id is still told apart."""
    ids = iter(["topic-1", None, "topic-2"])

    def opened(self: LogStoreVisibleTrigger) -> tuple[Any, list[int]]:
        follower = SimpleNamespace(started_topic_id=next(ids), state=ControlState(watermark={0: 7}))
        return follower, [0]

    monkeypatch.setattr(LogStoreVisibleTrigger, "open_follower", opened)
    trigger = visible()
    trigger._start()
    assert trigger._fired == {0: 7}
    trigger._start()  # the topic is gone for a moment
    assert trigger._fired == {0: 7} and trigger._topic_id == "topic-1"
    trigger._start()  # created again
    assert trigger._fired == {} and trigger._topic_id == "topic-2"
