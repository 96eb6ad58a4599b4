"""The streaming operator on the real broker, Spark and Iceberg: a long-running Spark application that
the operator submits detached and its trigger watches (run by Airflow's trigger runner).

One application runs until a stop request: the task ends with its result. A second one, the same
writer and checkpoint (what a retry submits), claims a newer epoch and meets a source record that does
not fit the table: the task fails with the driver's own error, not retried. A third one is running when
its task is marked failed: the triggerer's ``on_kill`` stops it; and a task killed before its
application's first heartbeat stops it with the operator's own ``on_kill``. (A killed application and
its retry, with reconciliation, run in the end-to-end test against a real Airflow.)
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_logstore.log import kafka_client
from airflow_logstore.operators.streaming_write import LogStoreStreamingDualWriteOperator
from airflow_logstore.table import streams
from airflow_logstore.table.tables import LogStoreTable, snapshot_commits
from logstore_dev.testing.tables import make_table, table_state
from tests.threads import in_thread
from tests.triggerer_loop import TriggererLoop

ROWS = [{"id": i, "name": f"n{i}", "amount": i * 10} for i in range(1, 9)]


def _until(condition: Callable[[], bool], what: str, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.5)


def _produce(env: Any, topic: str, rows: list[dict[str, Any]]) -> None:
    config = kafka_client.client_config(env.bootstrap)
    kafka_client.ensure_topic(config, topic, partitions=1, replication_factor=1, topic_configs={})
    producer = kafka_client.producer(config)
    for row in rows:
        producer.produce(topic, value=json.dumps(row).encode())
    assert producer.flush(30) == 0


def _run(operator: LogStoreStreamingDualWriteOperator, act: Callable[[str], None]) -> dict[str, Any]:
    """Submit (the task defers), ``act`` on the running application, then the trigger's one event."""
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({})
    trigger = deferred.value.trigger
    act(trigger.report_id)
    loop = TriggererLoop()

    async def event() -> dict[str, Any]:
        trigger_id = await loop.start(trigger)
        try:
            return dict((await loop.wait_for_events(trigger_id, 1, timeout=240))[0].payload)
        finally:
            await loop.close()

    return asyncio.run(event())


def test_the_streaming_operator_supervises_its_application_to_a_stop_and_to_the_drivers_error(
    env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    handle = make_table(env, schema="id int, name string, amount long")
    source = env.unique("source")
    _produce(env, source, ROWS)

    def operator(source: str = source, name: str = "checkpoint") -> LogStoreStreamingDualWriteOperator:
        return LogStoreStreamingDualWriteOperator(
            task_id="stream",
            table=str(handle.name),
            source_topic=source,
            checkpoint=str(tmp_path / name),
            writer_id=f"it-stream-{name}",
            heartbeat_interval=1.0,
            poll_interval=0.5,
            startup_timeout=300,
        )

    def stop_once_written(report_id: str) -> None:
        _until(lambda: len(table_state(handle)) == len(ROWS), "the source rows committed")
        streams.request_stop(handle.load(), report_id)

    first = _run(operator(), stop_once_written)
    assert first["status"] == "stopped", first
    done = operator().execute_complete({}, first)
    assert done["status"] == "stopped" and done["batches"] >= 1 and done["stopped"] is True
    first_epoch = done["epoch"]
    assert table_state(handle) == {(r["id"],): r for r in ROWS}

    # the same writer and checkpoint again (a retry's submission): a record that does not fit
    _produce(env, source, [{"id": 99, "colour": "red"}])
    second = _run(operator(), lambda report_id: None)
    assert second["status"] == "failed", second
    with pytest.raises(AirflowFailException, match="SchemaMismatchError: source record field 'colour'"):
        operator().execute_complete({}, second)
    assert second["failure"]["epoch"] > first_epoch  # the retry claimed a newer epoch
    commits = snapshot_commits(LogStoreTable.open(str(handle.name)).load())
    assert {c.writer_id for c in commits} == {"it-stream-checkpoint"}
    assert all(c.epoch == first_epoch for c in commits)

    # a running application whose task is marked failed while deferred: on_kill stops it
    third = env.unique("source")
    _produce(env, third, ROWS[:2])
    with pytest.raises(TaskDeferred) as deferred:
        operator(third, "checkpoint-killed").execute({})  # returns once the application's heartbeat is seen
    trigger = deferred.value.trigger
    try:
        assert asyncio.run(_killed(trigger)) == []  # the task is gone: no event
        assert streams.stop_requested(handle.load(), trigger.report_id)
        _until(lambda: not _group_running(trigger.pid), "the killed task's application ended", 120)
    finally:
        if _group_running(trigger.pid):
            os.killpg(trigger.pid, signal.SIGKILL)


def test_a_task_killed_before_the_first_heartbeat_stops_the_real_application(
    env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow calls ``on_kill`` while ``execute`` still waits for the first heartbeat (the task is marked
    failed, or its worker stops it): the real spark-submit's process group ends, a stop request is left,
    and the task's error names the kill. A few seconds: the application is stopped while it starts."""
    from airflow_logstore.exceptions import JobFailedError

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    handle = make_table(env, schema="id int, name string, amount long")
    task = LogStoreStreamingDualWriteOperator(
        task_id="stream",
        table=str(handle.name),
        source_topic=env.unique("source"),
        checkpoint=str(tmp_path / "checkpoint"),
        writer_id="it-stream-killed-early",
        startup_timeout=300,
    )
    runner, outcome = in_thread(task.execute, {})
    _until(lambda: task._process is not None, "spark-submit started", 60)
    assert task._process is not None
    group = task._process.pid
    try:
        # past spark-submit's start (its properties file read): the application's Python driver runs
        _until(lambda: _driver_running(group), "the application's Python driver started", 120)
        assert streams.read_status(handle.load(), str(task._report_id)) is None  # no heartbeat yet
        task.on_kill()
        runner.join(60)
        assert not runner.is_alive()
        _until(lambda: not _group_running(group), "the killed task's application ended", 60)
    finally:
        if _group_running(group):
            os.killpg(group, signal.SIGKILL)
    # killed, not stopped by its request: an application that saw the request wrote a heartbeat first
    assert streams.read_status(handle.load(), str(task._report_id)) is None
    assert streams.stop_requested(handle.load(), str(task._report_id))
    assert isinstance(outcome.get("error"), JobFailedError), outcome
    assert "killed before the application's first heartbeat" in str(outcome["error"])


async def _killed(trigger: Any) -> list[Any]:
    """Run ``trigger`` in Airflow's trigger runner, then cancel it as a user's action on its task does
    (the runner awaits its ``on_kill``); the events it yielded."""
    loop = TriggererLoop()
    trigger_id = await loop.start(trigger)
    await loop.settle(trigger_id)
    await loop.kill(trigger_id)
    return list(loop.events.get(trigger_id, []))


def _group_running(group: int) -> bool:
    """A process of ``group`` (spark-submit's session: its JVM, the Python driver) still runs."""
    import psutil

    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == group and process.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def _driver_running(group: int) -> bool:
    """The Python driver of the application in ``group`` runs (spark-submit's JVM started it)."""
    import psutil

    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = process.info["cmdline"] or []
            if os.getpgid(process.pid) == group and cmdline and "python" in Path(cmdline[0]).name:
                return any(Path(arg).name.startswith("dual_write") for arg in cmdline[1:])
        except (ProcessLookupError, psutil.Error):
            continue
    return False
