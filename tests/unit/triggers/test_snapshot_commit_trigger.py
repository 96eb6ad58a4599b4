"""The trigger's loop, driven by a fake clock and sleep against a real SQLite catalog that can go away.

No test sleeps: the trigger's ``sleep`` is a pause point that moves the clock and lets the test act
(take the catalog away, bring it back, commit the batch) between two polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy.exc
from airflow.sdk.exceptions import AirflowFailException
from airflow.triggers.base import TriggerEvent

from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.exceptions import BadInputError, KafkaUnavailableError
from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.sensors.snapshot_commit import SnapshotCommitSensor
from airflow_logstore.settings import local_settings
from airflow_logstore.table.catalog import embedded_catalog
from airflow_logstore.table.reports import failure_of, report_failure
from airflow_logstore.table.tables import LogStoreTable, create_table
from airflow_logstore.triggers.snapshot_commit import SnapshotCommitTrigger

WRITER = "logstore_pipeline"


class Catalog:
    """The edge to the catalog, switched off and on by the test."""

    def __init__(self, handle: LogStoreTable) -> None:
        self.handle = handle
        self.down = False
        self.loads = 0

    def table(self, name: str) -> Any:
        return SimpleNamespace(name=self.handle.name, load=self.load)

    def load(self) -> Any:
        self.loads += 1
        if self.down:
            raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("unable to open database file"))
        return self.handle.load()

    def commit(self, batch_id: int) -> None:
        info = CommitInfo(WRITER, batch_id, 7, offsets={0: (0, 0)}, record_count=1)
        rows = pa.table(
            {"id": [1], "amount": [5]},
            schema=pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("amount", pa.int64())]),
        )
        self.handle.load().append(rows, snapshot_properties=info.to_summary())


class Clock:
    """A fake monotonic clock; ``sleep`` moves it and runs the test's step for that pause."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.steps: dict[int, Callable[[], None]] = {}

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        step = self.steps.get(len(self.sleeps))
        if step is not None:
            step()


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Catalog:
    spec = embedded_catalog(local_settings({"LOGSTORE_HOME": str(tmp_path)}))
    handle = LogStoreTable.open("db.orders", spec)
    create_table(handle, "id int, amount long", primary_key=["id"])
    edge = Catalog(handle)
    monkeypatch.setattr(LogStoreHook, "table", edge.table)
    return edge


def _trigger(clock: Clock, **kwargs: Any) -> SnapshotCommitTrigger:
    trigger = SnapshotCommitTrigger(
        table="db.orders", writer_id=WRITER, batch_id=3, poll_interval=1, **kwargs
    )
    trigger.clock = lambda: clock.now
    trigger.sleep = clock.sleep
    return trigger


def _first_event(trigger: SnapshotCommitTrigger) -> dict[str, Any]:
    async def first() -> TriggerEvent:
        async for event in trigger.run():
            return event
        raise AssertionError("the trigger ended without an event")

    return dict(asyncio.run(first()).payload)


def test_an_unreachable_catalog_is_retried_with_backoff_until_it_answers(
    catalog: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    catalog.down = True

    def restore_and_commit() -> None:
        catalog.down = False
        catalog.commit(3)

    clock.steps[3] = restore_and_commit
    event = _first_event(_trigger(clock, timeout=1800))
    assert event["status"] == "success" and event["commit"]["batch_id"] == 3 and event["polls"] == 4
    assert clock.sleeps == [1, 2, 4]  # poll_interval doubled per failed attempt
    failed = [line for line in capsys.readouterr().out.splitlines() if "to read db.orders failed" in line]
    assert len(failed) == 3 and all("CatalogUnavailableError" in m for m in failed), failed
    assert "3 in a row); retrying in 4.0s" in failed[-1]


def test_errors_until_the_timeout_end_with_a_timeout_naming_the_last_error(catalog: Catalog) -> None:
    clock = Clock()
    catalog.down = True
    event = _first_event(_trigger(clock, timeout=10, max_backoff=4))
    assert clock.sleeps == [1, 2, 4, 3]  # capped by max_backoff, then by the time left
    assert event["status"] == "timeout" and event["polls"] == 5
    assert "after 10s (the last attempts failed: CatalogUnavailableError:" in event["message"]


def test_the_backoff_starts_over_after_a_good_poll(catalog: Catalog) -> None:
    clock = Clock()
    catalog.down = True
    clock.steps[2] = lambda: setattr(catalog, "down", False)  # up for the third poll
    clock.steps[3] = lambda: setattr(catalog, "down", True)
    clock.steps[5] = lambda: (setattr(catalog, "down", False), catalog.commit(3))
    event = _first_event(_trigger(clock, timeout=60))
    assert clock.sleeps == [1, 2, 1, 1, 2] and event["status"] == "success"


def test_a_missing_table_ends_the_wait_at_once(catalog: Catalog) -> None:
    clock = Clock()
    catalog.handle = LogStoreTable.open("db.nowhere", catalog.handle.catalog)
    event = _first_event(_trigger(clock, timeout=60))
    assert event["status"] == "error" and event["message"].startswith("TableNotFoundError: ")
    assert clock.sleeps == []
    sensor = SnapshotCommitSensor(task_id="wait", table="db.nowhere", writer_id=WRITER, batch_id="3")
    with pytest.raises(AirflowFailException) as failed:  # a retry of the sensor cannot help either
        sensor.execute_complete({}, event)
    assert str(failed.value).startswith("waiting for a snapshot of db.nowhere failed: TableNotFoundError: ")


def test_a_permanent_failure_of_the_write_ends_the_wait_naming_it(catalog: Catalog) -> None:
    clock = Clock()
    error = BadInputError("value does not fit type bigint (file a3_bad.jsonl)", row=1, column="amount")
    clock.steps[2] = lambda: report_failure(
        catalog.handle.load(), failure_of(error, writer_id=WRITER, batch_id=3, epoch=12, report_id="r")
    )
    event = _first_event(_trigger(clock, timeout=1800, not_before_ms=0))
    assert event["status"] == "failed" and clock.sleeps == [1, 1]
    assert event["message"] == (
        "the dual write of batch 3 of db.orders by writer 'logstore_pipeline' failed for good (epoch 12): "
        "BadInputError: row 1, column 'amount': value does not fit type bigint (file a3_bad.jsonl)"
    )
    assert event["failure"]["error_class"] == "BadInputError"


def test_stale_and_retryable_failures_do_not_end_the_wait(catalog: Catalog) -> None:
    table = catalog.handle.load()
    report_failure(
        table, failure_of(BadInputError("old"), writer_id=WRITER, batch_id=3, epoch=1, report_id="a")
    )
    clock = Clock()
    # the bad batch failed before this run started; then a retryable failure of this run's attempt
    clock.steps[1] = lambda: report_failure(
        table, failure_of(KafkaUnavailableError("down"), writer_id=WRITER, batch_id=3, epoch=2, report_id="b")
    )
    clock.steps[2] = lambda: catalog.commit(3)
    event = _first_event(_trigger(clock, timeout=60, not_before_ms=2**62))
    assert event["status"] == "success" and clock.sleeps == [1, 1]


def test_the_sensor_fails_without_retry_when_the_write_failed_for_good(catalog: Catalog) -> None:
    report_failure(
        catalog.handle.load(),
        failure_of(BadInputError("bad", row=1), writer_id=WRITER, batch_id=3, epoch=12, report_id="r"),
    )
    sensor = SnapshotCommitSensor(
        task_id="wait", table="db.orders", writer_id=WRITER, batch_id="3", deferrable=True, timeout=1800
    )
    started = SimpleNamespace(start_date=SimpleNamespace(timestamp=lambda: 0.0))
    with pytest.raises(
        AirflowFailException, match=r"failed for good \(epoch 12\): BadInputError: row 1: bad"
    ):
        sensor.poke({"dag_run": started})
    with pytest.raises(AirflowFailException, match=r"failed for good"):
        sensor.execute({"dag_run": started})  # the poke before deferring already sees it
    assert sensor._trigger({"dag_run": started}).not_before_ms == 0
    event = {"status": "failed", "message": "the dual write of batch 3 ... failed for good"}
    with pytest.raises(AirflowFailException, match="failed for good"):
        sensor.execute_complete({}, event)


class TaskStates:
    """Airflow's answer to the Task SDK's ``get_task_states`` (the edge the trigger asks), set by the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        self.states: dict[tuple[str, str, str, int], str] = {}
        self.queries: list[dict[str, Any]] = []
        self.error: Exception | None = None
        monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", self.get_task_states)

    def get_task_states(self, **query: Any) -> dict[str, Any]:
        self.queries.append(query)
        if self.error is not None:
            raise self.error
        found: dict[str, dict[str, Any]] = {}
        for (dag_id, run_id, task_id, map_index), state in self.states.items():
            if (
                dag_id == query["dag_id"]
                and run_id in query["run_ids"]
                and task_id in query["task_ids"]
                and map_index == query["map_index"]
            ):
                key = task_id if map_index < 0 else f"{task_id}_{map_index}"
                found.setdefault(run_id, {})[key] = state
        return found

    def set(self, state: str, task_id: str = "dual_write", map_index: int = -1) -> None:
        self.states[("pipeline", "run_1", task_id, map_index)] = state


@pytest.fixture
def task_states(monkeypatch: pytest.MonkeyPatch) -> TaskStates:
    return TaskStates(monkeypatch)


def _watching(clock: Clock, **kwargs: Any) -> SnapshotCommitTrigger:
    return _trigger(clock, dag_id="pipeline", run_id="run_1", write_task_id="dual_write", **kwargs)


def test_a_killed_write_task_ends_the_wait_naming_it(catalog: Catalog, task_states: TaskStates) -> None:
    clock = Clock()
    task_states.set("running")
    clock.steps[1] = lambda: task_states.set("up_for_retry")  # its first try was killed: a retry comes
    clock.steps[2] = lambda: task_states.set("running")
    clock.steps[3] = lambda: task_states.set("failed")  # its last try was killed: no report
    event = _first_event(_watching(clock, timeout=1800, not_before_ms=0))
    assert event["status"] == "failed" and event["polls"] == 4 and clock.sleeps == [1, 1, 1]
    assert event["message"] == (
        "the dual write of batch 3 of db.orders by writer 'logstore_pipeline' failed for good: its task "
        "'dual_write' is failed in run run_1; it left no failure report: its last try was killed or "
        "could not report (the OOM killer, a lost worker, a heartbeat timeout; see the task's log)"
    )
    assert event["failure"] == {"task_id": "dual_write", "map_index": -1, "state": "failed"}
    assert task_states.queries[-1] == {
        "dag_id": "pipeline",
        "task_ids": ["dual_write"],
        "run_ids": ["run_1"],
        "map_index": -1,
    }
    sensor = SnapshotCommitSensor(task_id="wait", table="db.orders", writer_id=WRITER, batch_id="3")
    with pytest.raises(AirflowFailException, match=r"'dual_write' is failed in run run_1"):
        sensor.execute_complete({}, event)  # the same "failed" path as a final failure report


def test_an_upstream_failure_of_the_write_task_ends_the_wait(
    catalog: Catalog, task_states: TaskStates
) -> None:
    task_states.set("upstream_failed")
    event = _first_event(_watching(Clock(), timeout=60))
    assert event["status"] == "failed" and "'dual_write' is upstream_failed" in event["message"]
    assert "it never ran: a task upstream of it failed" in event["message"]


def test_a_commit_wins_over_a_failed_write_task(catalog: Catalog, task_states: TaskStates) -> None:
    task_states.set("failed")  # killed after its commit
    catalog.commit(3)
    event = _first_event(_watching(Clock(), timeout=60))
    assert event["status"] == "success" and event["commit"]["batch_id"] == 3
    assert task_states.queries == []  # nothing to ask once the commit is there


def test_a_final_failure_report_wins_over_the_task_state(catalog: Catalog, task_states: TaskStates) -> None:
    task_states.set("failed")
    report_failure(
        catalog.handle.load(),
        failure_of(BadInputError("bad", row=1), writer_id=WRITER, batch_id=3, epoch=12, report_id="r"),
    )
    event = _first_event(_watching(Clock(), timeout=60, not_before_ms=0))
    assert event["status"] == "failed" and event["failure"]["error_class"] == "BadInputError"


def test_only_the_watched_task_instance_counts(catalog: Catalog, task_states: TaskStates) -> None:
    clock = Clock()
    task_states.set("failed", task_id="create_table")  # another task of the run
    task_states.set("failed", map_index=0)  # another map index of the writer
    task_states.states[("pipeline", "run_0", "dual_write", 2)] = "failed"  # an earlier run
    clock.steps[2] = lambda: catalog.commit(3)
    event = _first_event(_watching(clock, timeout=60, write_map_index=2))
    assert event["status"] == "success" and len(task_states.queries) == 2
    assert task_states.queries[0]["map_index"] == 2


def test_a_failing_state_query_is_retried_with_backoff(
    catalog: Catalog, task_states: TaskStates, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    task_states.error = ConnectionError("Airflow's API server is unreachable")

    def answer_failed() -> None:
        task_states.error = None
        task_states.set("failed")

    clock.steps[2] = answer_failed
    event = _first_event(_watching(clock, timeout=1800))
    assert clock.sleeps == [1, 2] and event["status"] == "failed" and event["polls"] == 3
    out = capsys.readouterr().out
    assert (
        "ServiceError: could not read the state of task 'dual_write' of run run_1 of DAG 'pipeline': " in out
    )
    assert "ConnectionError: Airflow's API server is unreachable" in out


def test_the_watching_trigger_serializes_to_plain_arguments() -> None:
    import json

    trigger = SnapshotCommitTrigger(
        table="db.t",
        writer_id="w",
        batch_id=3,
        dag_id="pipeline",
        run_id="manual__2026-01-01",
        write_task_id="dual_write",
        write_map_index=4,
    )
    path, kwargs = trigger.serialize()
    json.dumps(kwargs)
    assert kwargs["dag_id"] == "pipeline" and kwargs["run_id"] == "manual__2026-01-01"
    assert kwargs["write_task_id"] == "dual_write" and kwargs["write_map_index"] == 4
    assert SnapshotCommitTrigger(**kwargs).serialize() == (path, kwargs)
    with pytest.raises(ValueError, match="write_task_id 'dual_write' needs the dag_id and run_id"):
        SnapshotCommitTrigger(table="db.t", write_task_id="dual_write")


def test_the_sensor_watches_its_write_task_in_its_own_run(catalog: Catalog, task_states: TaskStates) -> None:
    from airflow.sdk import DAG
    from airflow.sdk.bases.operator import BaseOperator
    from airflow.sdk.exceptions import TaskDeferred

    with DAG("pipeline", schedule=None):
        BaseOperator(task_id="dual_write")
        sensor = SnapshotCommitSensor(
            task_id="wait",
            table="db.orders",
            writer_id=WRITER,
            batch_id="3",
            write_task_id="dual_write",
            deferrable=True,
            timeout=1800,
        )
        unknown = SnapshotCommitSensor(task_id="wait_2", table="db.orders", write_task_id="dual_wirte")
    context = {"ti": SimpleNamespace(dag_id="pipeline", run_id="run_1", map_index=-1)}
    task_states.set("running")
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context)
    kwargs = deferred.value.trigger.serialize()[1]
    assert (kwargs["dag_id"], kwargs["run_id"], kwargs["write_task_id"]) == (
        "pipeline",
        "run_1",
        "dual_write",
    )
    assert kwargs["write_map_index"] == -1
    task_states.set("failed")  # in poke mode (a worker) the same look
    with pytest.raises(
        AirflowFailException, match=r"batch 3 .* its task 'dual_write' is failed in run run_1"
    ):
        sensor.poke(context)
    with pytest.raises(AirflowFailException, match="write_task_id 'dual_wirte' of wait_2 is no task of DAG"):
        unknown.poke(context)


def _default_notices(logs: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in logs if "no LogStore connection configured" in e["event"]]


def test_the_embedded_default_is_named_once_per_task_not_at_every_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every poll (in a worker or in the triggerer) goes through one hook: the task log names the
    embedded default once, at INFO; the triggerer does not repeat what the deferring sensor said."""
    from airflow.sdk.exceptions import TaskDeferred
    from structlog.testing import capture_logs

    monkeypatch.setenv("LOGSTORE_HOME", str(tmp_path))
    monkeypatch.delenv("LOGSTORE_CATALOG", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_LOGSTORE_DEFAULT", raising=False)
    create_table(LogStoreTable.open("db.orders"), "id int, amount long", primary_key=["id"])
    sensor = SnapshotCommitSensor(task_id="wait", table="db.orders", writer_id=WRITER, batch_id="3")
    with capture_logs() as logs:
        assert [sensor.poke({}).is_done for _ in range(3)] == [False] * 3
    said = _default_notices(logs)
    assert len(said) == 1 and [e["log_level"] for e in logs if e["event"] in said] == ["info"], logs
    assert len([e for e in logs if "no Kafka connection configured" in e["event"]]) == 1, logs

    with capture_logs() as logs:
        event = _first_event(_trigger(Clock(), timeout=3))  # a poll a second, then its timeout
    assert event["status"] == "timeout" and event["polls"] == 4
    assert len(_default_notices(logs)) == 1, logs

    deferring = SnapshotCommitSensor(
        task_id="wait", table="db.orders", writer_id=WRITER, batch_id="3", deferrable=True
    )
    with capture_logs() as logs, pytest.raises(TaskDeferred) as deferred:
        deferring.execute({})
    assert len(_default_notices(logs)) == 1  # the poll before deferring said it
    handed = SnapshotCommitTrigger(**deferred.value.trigger.serialize()[1])
    with capture_logs() as logs:
        event = _first_event(_trigger(Clock(), timeout=2, **{"log_defaults": handed.log_defaults}))
    assert handed.log_defaults is False and event["polls"] == 3 and _default_notices(logs) == []
