"""LogStoreReadVisibleOperator: which events it reads its window from (the read itself: integration tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowSkipException

from airflow_logstore.core.windows import Window, catch_up_payload, payload_of, run_window, visible_payload
from airflow_logstore.operators.read_visible import (
    LogStoreReadVisibleOperator,
    LogStoreVisibleCatchUpOperator,
)

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def stored(seconds: float, before: dict[int, int], after: dict[int, int], table: str = "db.orders") -> Any:
    """An asset event as Airflow stores a watcher's: its extra holds the trigger's payload."""
    payload = visible_payload(table, before, after, [0, 1], commits=[f"w/{seconds}/1"])
    return SimpleNamespace(
        timestamp=T0 + timedelta(seconds=seconds), extra={"from_trigger": True, "payload": payload}
    )


class History:
    """``inlet_events[asset]`` as the Task SDK gives it: before/ascending/limit, then the events."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.asked: dict[str, Any] = {}

    def before(self, when: str) -> History:
        self.asked["before"] = when
        return self

    def after(self, when: str) -> History:
        self.asked["after"] = when
        return self

    def ascending(self, ascending: bool = True) -> History:
        self.asked["ascending"] = ascending
        return self

    def limit(self, limit: int) -> History:
        self.asked["limit"] = limit
        return self

    def __iter__(self) -> Any:  # both bounds inclusive, as the API server's
        low = datetime.fromisoformat(self.asked["after"]) if "after" in self.asked else None
        cut = datetime.fromisoformat(self.asked["before"]) if "before" in self.asked else None
        found = sorted(
            (
                e
                for e in self.events
                if (low is None or e.timestamp >= low) and (cut is None or e.timestamp <= cut)
            ),
            key=lambda e: e.timestamp,
        )
        found = found[::-1] if not self.asked.get("ascending", True) else found
        return iter(found[: self.asked.get("limit")])


@pytest.fixture
def operator(monkeypatch: pytest.MonkeyPatch) -> LogStoreReadVisibleOperator:
    task = LogStoreReadVisibleOperator(task_id="read", table="db.orders", lookback_events=4)
    task.windows = []  # type: ignore[attr-defined]

    def read(window: Window) -> dict[str, Any]:
        task.windows.append(window)  # type: ignore[attr-defined]
        return {"records": window.size, "report": {"end": window.to_json()["to"]}}

    monkeypatch.setattr(task, "_read", read)
    return task


def context(own: list[Any], history: list[Any]) -> dict[str, Any]:
    asset = Asset.ref(name="logstore.db.orders.visible")
    return {"triggering_asset_events": {asset: own}, "inlet_events": {asset: History(history)}}


def test_the_task_reads_the_tables_visible_asset() -> None:
    task = LogStoreReadVisibleOperator(task_id="read", table="db.orders")
    # a reference: an Asset without the watcher would replace the DAG's scheduled one (and its watcher)
    assert task.inlets == [Asset.ref(name="logstore.db.orders.visible")]


def test_the_window_runs_from_where_earlier_events_reached_to_the_runs_own_last_event(
    operator: LogStoreReadVisibleOperator,
) -> None:
    earlier = [stored(1, {0: -1, 1: -1}, {0: 4, 1: 2}), stored(2, {0: 4, 1: 2}, {0: 6, 1: 2})]
    own = [stored(3, {0: 6, 1: 2}, {0: 8, 1: 5}), stored(4, {0: 8, 1: 5}, {0: 9, 1: 5})]
    result = operator.execute(context(own, earlier + own))
    assert operator.windows == [Window({0: 7, 1: 3}, {0: 10, 1: 6})]  # type: ignore[attr-defined]
    assert result["window"] == {"from": {"0": 7, "1": 3}, "to": {"0": 10, "1": 6}}
    assert result["events"] == 2 and result["commits"] == ["w/3/1", "w/4/1"] and result["records"] == 6


def test_an_event_a_restarted_trigger_repeated_reads_only_what_is_new(
    operator: LogStoreReadVisibleOperator,
) -> None:
    earlier = [stored(1, {0: -1, 1: -1}, {0: 4, 1: 2})]
    repeated = [stored(2, {0: -1, 1: -1}, {0: 6, 1: 2})]  # started from an older watermark
    operator.execute(context(repeated, earlier + repeated))
    assert operator.windows == [Window({0: 5, 1: 3}, {0: 7, 1: 3})]  # type: ignore[attr-defined]


def test_a_repeat_of_what_was_read_reads_nothing(operator: LogStoreReadVisibleOperator) -> None:
    earlier = [stored(1, {0: -1, 1: -1}, {0: 4, 1: 2})]
    repeated = [stored(2, {0: 2, 1: -1}, {0: 4, 1: 2})]
    result = operator.execute(context(repeated, earlier + repeated))
    assert result["records"] == 0 and result["window"]["from"] == result["window"]["to"]
    assert operator.windows == []  # type: ignore[attr-defined]


def test_events_stored_at_the_same_time_as_the_first_own_event_are_the_runs_own(
    operator: LogStoreReadVisibleOperator,
) -> None:
    earlier = [stored(1, {0: -1, 1: -1}, {0: 2, 1: 2})]
    own = [stored(5, {0: 2, 1: 2}, {0: 4, 1: 2}), stored(5, {0: 4, 1: 2}, {0: 6, 1: 2})]
    history = History(earlier + own)
    result = operator.execute(
        {**context(own, []), "inlet_events": {Asset.ref(name="logstore.db.orders.visible"): history}}
    )
    assert result["window"] == {"from": {"0": 3, "1": 3}, "to": {"0": 7, "1": 3}}
    assert history.asked == {
        "before": (T0 + timedelta(seconds=5)).isoformat(),
        "ascending": False,
        "limit": 4 + 2,
    }


def test_events_of_other_tables_and_other_kinds_are_not_the_runs(
    operator: LogStoreReadVisibleOperator,
) -> None:
    other = stored(2, {0: -1, 1: -1}, {0: 9, 1: 9}, table="db.other")
    commit = SimpleNamespace(
        timestamp=T0, extra={"from_trigger": True, "payload": {"event": "logstore.commit"}}
    )
    with pytest.raises(AirflowSkipException, match=r"no visible event of db\.orders"):
        operator.execute(context([other, commit], []))
    with pytest.raises(AirflowSkipException):
        operator.execute({"triggering_asset_events": {}, "inlet_events": {}})  # a manual run


# -- the catch-up: events Airflow gave no run (apache/airflow#56050) ----------------------------------------


def catch_up_context(run_after: float, history: list[Any]) -> dict[str, Any]:
    asset = Asset.ref(name="logstore.db.orders.visible")
    return {
        "dag_run": SimpleNamespace(run_after=T0 + timedelta(seconds=run_after)),
        "inlet_events": {asset: History(history)},
        "outlet_events": {asset: SimpleNamespace(extra={})},
    }


def test_the_catch_up_task_reads_and_writes_the_visible_asset_by_reference() -> None:
    task = LogStoreVisibleCatchUpOperator(task_id="catch_up", table="db.orders")
    assert task.inlets == task.outlets == [Asset.ref(name="logstore.db.orders.visible")]


def test_events_stored_after_the_run_get_an_event_whose_run_reads_exactly_them() -> None:
    """The run took the events up to its run_after (1, 2); 3 and 4 came while it ran, and Airflow would
    give them a run only with the table's next event. The catch-up emits one whose own range is empty:
    the run it brings takes 3, 4 and it, and its window is exactly 3's and 4's ranges."""
    own = [stored(1, {0: -1, 1: -1}, {0: 4, 1: 2}), stored(2, {0: 4, 1: 2}, {0: 6, 1: 2})]
    later = [stored(3, {0: 6, 1: 2}, {0: 8, 1: 2}), stored(4, {0: 8, 1: 2}, {0: 8, 1: 5})]
    other = [stored(5, {0: -1, 1: -1}, {0: 20, 1: 20}, table="db.other")]
    ctx = catch_up_context(2, own + later + other)
    task = LogStoreVisibleCatchUpOperator(task_id="catch_up", table="db.orders")
    result = task.execute(ctx)
    emitted = ctx["outlet_events"][Asset.ref(name="logstore.db.orders.visible")].extra
    assert result == {"table": "db.orders", "later_events": 2, "to": {"0": 9, "1": 6}}
    assert emitted["from"] == emitted["to"] == {"0": 9, "1": 6} and emitted["catch_up"] is True
    assert emitted["table"] == "db.orders" and emitted["commits"] == []
    nudge = SimpleNamespace(timestamp=T0 + timedelta(seconds=6), extra=emitted)  # as a task's event is stored
    next_own = [dict(payload_of(e.extra) or {}) for e in [*later, nudge]]
    window = run_window(next_own, [dict(payload_of(e.extra) or {}) for e in own])
    assert window == Window({0: 7, 1: 3}, {0: 9, 1: 6})  # from where the run's events reached: 3's and 4's
    # had another run taken 3 and 4 already, the event's run reads nothing
    assert run_window([emitted], [dict(payload_of(e.extra) or {}) for e in own + later]).empty


def test_with_no_later_event_the_catch_up_is_skipped_and_emits_nothing() -> None:
    """Events at the run's own time are the run's (Airflow's bound is inclusive), and other tables'
    are not this table's: nothing to catch up, no extra run for a quiet table."""
    own = [stored(1, {0: -1, 1: -1}, {0: 4, 1: 2}), stored(2, {0: 4, 1: 2}, {0: 6, 1: 2})]
    ctx = catch_up_context(2, [*own, stored(3, {0: -1, 1: -1}, {0: 9, 1: 9}, table="db.other")])
    with pytest.raises(AirflowSkipException, match=r"no visible event of db\.orders came after this run.s"):
        LogStoreVisibleCatchUpOperator(task_id="catch_up", table="db.orders").execute(ctx)
    assert ctx["outlet_events"][Asset.ref(name="logstore.db.orders.visible")].extra == {}


def test_a_catch_up_event_alone_brings_no_further_catch_up() -> None:
    """Runs of two DAGs on the asset, or of one DAG with max_active_runs > 1, see each other's catch-up
    events after their run_after: counting them, each would bring the next run forever. Only events of
    the trigger count."""
    own = [stored(1, {0: -1, 1: -1}, {0: 4, 1: 2})]
    nudge = SimpleNamespace(
        timestamp=T0 + timedelta(seconds=3),
        extra=catch_up_payload("db.orders", [dict(payload_of(own[0].extra) or {})]),
    )
    with pytest.raises(AirflowSkipException):
        LogStoreVisibleCatchUpOperator(task_id="catch_up", table="db.orders").execute(
            catch_up_context(1, [*own, nudge])
        )
    later = stored(4, {0: 4, 1: 2}, {0: 6, 1: 2})  # a trigger's event after it still counts
    result = LogStoreVisibleCatchUpOperator(task_id="catch_up", table="db.orders").execute(
        catch_up_context(1, [*own, nudge, later])
    )
    assert result["later_events"] == 1 and result["to"] == {"0": 7, "1": 3}


def test_a_runs_own_events_of_two_lives_of_the_table_read_the_newest_only() -> None:
    """A run took the last event of the table's earlier life and the first of its new one (dropped and
    created again meanwhile): its window is the new log's, from its start."""
    old = {**visible_payload("db.orders", {0: 900}, {0: 999}, [0]), "control_topic_id": "a"}
    new = {**visible_payload("db.orders", {0: -1}, {0: 49}, [0]), "control_topic_id": "b"}
    earlier = [{**visible_payload("db.orders", {0: -1}, {0: 900}, [0]), "control_topic_id": "a"}]
    assert run_window([old, new], earlier) == Window({0: 0}, {0: 50})
