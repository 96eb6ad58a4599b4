"""LogStoreReadVisibleOperator: which events it reads its window from (the read itself: integration tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowSkipException

from airflow_logstore.core.windows import Window, visible_payload
from airflow_logstore.operators.read_visible import LogStoreReadVisibleOperator

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

    def ascending(self, ascending: bool = True) -> History:
        self.asked["ascending"] = ascending
        return self

    def limit(self, limit: int) -> History:
        self.asked["limit"] = limit
        return self

    def __iter__(self) -> Any:
        cut = datetime.fromisoformat(self.asked["before"])
        found = sorted((e for e in self.events if e.timestamp <= cut), key=lambda e: e.timestamp)
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
