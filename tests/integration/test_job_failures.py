"""Failures on the real broker, Spark and SQLite catalog: a bad input file fails its task at once with its
cause and ends the wait for its snapshot; a compaction job's failure reaches its task as its cause; a
catalog that goes away for a while only delays the wait."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_logstore.core.failures import JOB_FAILURES_DIR
from airflow_logstore.operators.compaction import LogStoreCompactionOperator
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.read.reader import read_log
from airflow_logstore.table.reports import read_failure
from airflow_logstore.table.tables import LogStoreTable
from airflow_logstore.triggers.snapshot_commit import SnapshotCommitTrigger
from logstore_dev.testing.tables import make_table, write_jsonl

SCHEMA = "id int, customer string, amount long"
WRITER = "failing_writer"


@pytest.fixture
def spark_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))


def _name(handle: LogStoreTable) -> str:
    return f"{handle.name.namespace}.{handle.name.table}"


def _trigger_events(
    trigger: SnapshotCommitTrigger, steps: dict[int, Callable[[], None]]
) -> tuple[dict, list]:
    """Run the trigger's loop; its sleeps return at once after running the test's step for that pause."""
    sleeps: list[float] = []

    async def pause(seconds: float) -> None:
        sleeps.append(seconds)
        step = steps.get(len(sleeps))
        if step is not None:
            step()

    trigger.sleep = pause

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(first()), sleeps


def test_bad_input_fails_at_once_with_its_cause_and_ends_the_wait(
    env, spark_connection: None, tmp_path: Path
) -> None:
    handle = make_table(env, schema=SCHEMA, prefix="bad")
    started_ms = int(time.time() * 1000)
    # no "amount" in the whole input: an error unless the operator's missing_as_null opts in
    rows = [{"id": 1, "customer": "ann"}, {"id": 2, "customer": "bob"}]
    write = LogStoreDualWriteOperator(
        task_id="dual_write",
        table=_name(handle),
        input_path=str(write_jsonl(tmp_path / "a3_bad.jsonl", rows)),
        batch_id=3,
        writer_id=WRITER,
    )
    with pytest.raises(AirflowFailException) as failed:
        write.execute({})
    message = str(failed.value)
    assert message.startswith(
        "BadInputError: row 1, column 'amount': value is missing: the input has no column 'amount', and "
        "missing-as-null is off (file a3_bad.jsonl)"
    ), message
    assert "spark-submit" not in message and "not retried" in message

    report = read_failure(handle.load(), WRITER, 3)
    assert report is not None and not report.retryable and report.failed_at_ms >= started_ms
    assert handle.load().snapshots() == [] and read_log(handle, consistency="eventual").records == []

    wait = SnapshotCommitTrigger(
        table=_name(handle),
        writer_id=WRITER,
        batch_id=3,
        poll_interval=1,
        timeout=1800,
        not_before_ms=started_ms,
    )
    event, sleeps = _trigger_events(wait, {})
    assert event["status"] == "failed" and sleeps == []
    assert f"by writer '{WRITER}' failed for good" in event["message"]
    assert "BadInputError: row 1, column 'amount'" in event["message"]


def test_a_missing_input_fails_its_task_before_spark_starts_naming_the_path(
    env, spark_connection: None, tmp_path: Path
) -> None:
    handle = make_table(env, schema=SCHEMA, prefix="nopath")
    missing = tmp_path / "orders" / "b1.jsonl"
    write = LogStoreDualWriteOperator(
        task_id="dual_write", table=_name(handle), input_path=missing.as_uri(), batch_id=1, writer_id=WRITER
    )
    started = time.monotonic()
    with pytest.raises(AirflowFailException) as failed:
        write.execute({})
    assert time.monotonic() - started < 3  # no Spark: the cause is the task's first and only line
    assert str(failed.value) == (
        f"BadInputError: input path '{missing.as_uri()}' does not exist (checked before starting Spark)"
    )
    report = read_failure(handle.load(), WRITER, 1)
    assert report is not None and not report.retryable and "does not exist" in report.message


def test_a_compaction_job_that_fails_in_spark_fails_its_task_with_the_cause(
    env, spark_connection: None
) -> None:
    # the table is found before Spark starts; its bad property only fails the job, inside Spark
    handle = make_table(env, schema=SCHEMA, prefix="badprop")
    with handle.load().transaction() as tx:
        tx.set_properties({"self-optimizing.target-size": "huge"})
    compact = LogStoreCompactionOperator(task_id="compact", table=_name(handle), remove_orphans=False)
    with pytest.raises(AirflowFailException) as failed:
        compact.execute({})
    message = str(failed.value)
    assert message.startswith(
        "TablePropertyError: table property 'self-optimizing.target-size': expected an integer, got 'huge'"
    ), message
    assert f"compaction of {_name(handle)}: not retried" in message
    assert "spark-submit" not in message and "Cannot execute" not in message
    reports = Path(handle.load().location().removeprefix("file://")) / JOB_FAILURES_DIR
    assert [p.name for p in reports.iterdir()] == [f"{compact._report_id}.json"]


def test_the_wait_outlasts_a_catalog_that_is_away_for_a_while(
    env, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = make_table(env, schema=SCHEMA, prefix="outage")
    good = write_jsonl(tmp_path / "good.jsonl", [{"id": 1, "customer": "ann", "amount": 5}])
    done = env.run_job(
        "dual_write.py",
        ["--table", _name(handle), "--input", str(good), "--batch-id", "1", "--writer-id", WRITER],
    )
    assert done.returncode == 0, done.stderr[-3000:]

    database = Path(handle.catalog.uri.removeprefix("sqlite:///").split("?", 1)[0])
    away = database.with_name(database.name + ".away")
    database.rename(away)
    database.mkdir()  # in its place a folder: SQLite cannot open the catalog

    def restore() -> None:
        database.rmdir()
        away.rename(database)

    wait = SnapshotCommitTrigger(
        table=_name(handle), writer_id=WRITER, batch_id=1, poll_interval=1, timeout=1800
    )
    try:
        event, sleeps = _trigger_events(wait, {3: restore})
    finally:
        if away.exists():
            restore()
    assert event["status"] == "success" and event["commit"]["batch_id"] == 1 and event["polls"] == 4
    assert sleeps == [1, 2, 4]
    failed = [
        line for line in capsys.readouterr().out.splitlines() if "failed (CatalogUnavailableError" in line
    ]
    assert len(failed) == 3, failed
