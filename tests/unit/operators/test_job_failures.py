"""The dual-write operator turns a failed spark-submit and the job's failure report into the right error.

The catalog and table are real (SQLite, pyiceberg, no log); only the edge to Spark is faked: ``submit``
leaves the report a real job would leave, then fails as SparkSubmitHook does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_logstore.exceptions import (
    BadInputError,
    FencedError,
    JobFailedError,
    KafkaUnavailableError,
    SchemaMismatchError,
)
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.table.reports import failure_of, read_failure, report_failure
from airflow_logstore.table.tables import LogStoreTable
from airflow_logstore.triggers.snapshot_commit import SnapshotCommitTrigger
from logstore_dev.testing.environment import REPO_ROOT

#: an input file that exists (the dual write checks its input path before spark-submit)
AN_INPUT = str(REPO_ROOT / "dags" / "data" / "orders_batch_1.jsonl")

WRITER = "logstore_pipeline"
BAD_ROW = BadInputError("value does not fit type bigint (file a3_bad.jsonl)", row=1, column="amount")


def _fake_submit(
    monkeypatch: pytest.MonkeyPatch,
    handle: LogStoreTable,
    error: BaseException | None,
    *,
    same_attempt: bool = True,
) -> list[list[str]]:
    """Make ``submit`` report ``error`` (None: no report) and fail like spark-submit; returns the calls."""
    calls: list[list[str]] = []

    def submit(self: SparkSubmitHook, application: str = "", **kwargs: Any) -> None:
        args = list(self._application_args)
        calls.append(args)
        report_id = args[args.index("--report-id") + 1] if same_attempt else "an-earlier-attempt"
        if error is not None:
            failure = failure_of(error, writer_id=WRITER, batch_id=3, epoch=12, report_id=report_id)
            report_failure(handle.load(), failure)
        raise AirflowException(
            f"Cannot execute: spark-submit --master local[2] {application}. Error code is: 1."
        )

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    return calls


def _operator(table: str = "db.orders") -> LogStoreDualWriteOperator:
    return LogStoreDualWriteOperator(
        task_id="dual_write",
        table=table,
        input_path=AN_INPUT,  # checked before spark-submit: one that exists
        batch_id=3,
        writer_id=WRITER,
        jars="",
        retries=2,
    )


def _try(number: int) -> dict[str, Any]:
    """The context of the task's try ``number`` of 3 (``retries=2``), as the task runner gives it."""
    return {"ti": SimpleNamespace(try_number=number, max_tries=2)}


def _wait_for_batch_3(since_ms: int) -> tuple[str, dict[str, Any]]:
    """One look of the sensor's trigger, which waits for batch 3 since ``since_ms``."""
    trigger = SnapshotCommitTrigger(table="db.orders", writer_id=WRITER, batch_id=3, not_before_ms=since_ms)
    return trigger.poll_once()


def _raised(run: Callable[[], Any]) -> BaseException:
    with pytest.raises(Exception) as caught:
        run()
    return caught.value


@pytest.mark.parametrize(
    "cause",
    [
        BAD_ROW,
        FencedError("writer 'logstore_pipeline' was fenced by epoch 13"),
        SchemaMismatchError("column 'amount' is long in the table, string in the input"),
    ],
    ids=type,
)
def test_bad_input_fails_without_retry_and_names_the_row(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch, cause: Exception
) -> None:
    calls = _fake_submit(monkeypatch, handle, cause)
    error = _raised(lambda: _operator().execute({}))
    assert type(error) is AirflowFailException
    assert str(error).startswith(f"{type(cause).__name__}: {cause}")
    assert "spark-submit" not in str(error) and error.__cause__ is None and error.__suppress_context__
    assert "batch 3 of db.orders by writer 'logstore_pipeline'" in str(error) and "epoch 12" in str(error)
    assert len(calls) == 1 and "--report-id" in calls[0]


def test_a_missing_input_fails_before_spark_starts_with_its_path_first(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = _fake_submit(monkeypatch, handle, BAD_ROW)
    missing = str(tmp_path / "b9.jsonl")
    write = _operator()
    write.input_path = missing
    error = _raised(lambda: write.execute(_try(1)))
    assert type(error) is AirflowFailException and calls == []  # spark-submit never ran
    assert str(error) == (
        f"BadInputError: input path '{missing}' does not exist (checked before starting Spark)"
    )
    # a final failure report: the sensor waiting for the batch ends at once with the same cause
    status, payload = _wait_for_batch_3(0)
    assert (
        status == "failed" and f"BadInputError: input path '{missing}' does not exist" in payload["message"]
    )


def test_a_transient_failure_keeps_airflow_retries(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_submit(monkeypatch, handle, KafkaUnavailableError("no broker answered at 127.0.0.1:19092"))
    error = _raised(lambda: _operator().execute({}))
    assert isinstance(error, JobFailedError) and not isinstance(error, AirflowException)
    assert error.retryable and str(error) == "KafkaUnavailableError: no broker answered at 127.0.0.1:19092"


@pytest.mark.parametrize("same_attempt", [False, True])
def test_without_its_own_report_the_job_failure_is_short_and_retried(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch, same_attempt: bool
) -> None:
    # an earlier attempt's report is not this attempt's cause; a job killed before reporting leaves none
    _fake_submit(monkeypatch, handle, BAD_ROW if not same_attempt else None, same_attempt=same_attempt)
    error = _raised(lambda: _operator().execute({}))
    assert type(error) is AirflowException
    assert "the Spark job failed without a failure report" in str(error) and len(str(error)) < 800


def test_a_missing_table_fails_before_spark_starts(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_submit(monkeypatch, handle, None)
    error = _raised(lambda: _operator("db.nowhere").execute({}))
    assert type(error) is AirflowFailException and str(error).startswith("TableNotFoundError: ")
    assert "nowhere" in str(error) and calls == []


def test_bad_table_properties_fail_before_spark_starts(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_submit(monkeypatch, handle, None)
    with handle.load().transaction() as tx:
        tx.set_properties({"log-store.enabled": "maybe"})
    error = _raised(lambda: _operator().execute({}))
    assert type(error) is AirflowFailException
    assert str(error).startswith("TablePropertyError: table property 'log-store.enabled'") and calls == []


# --- a write that fails for good ends its sensor's wait -----------------------------------------------


def test_a_transient_failure_on_the_last_try_ends_the_wait(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = int(time.time() * 1000)
    _fake_submit(monkeypatch, handle, KafkaUnavailableError("no broker answered at 127.0.0.1:19092"))
    error = _raised(lambda: _operator().execute(_try(3)))
    assert isinstance(error, JobFailedError) and error.retryable  # the task's own error is unchanged
    status, payload = _wait_for_batch_3(started)
    assert status == "failed", payload
    assert payload["message"] == (
        "the dual write of batch 3 of db.orders by writer 'logstore_pipeline' failed for good (epoch 12): "
        "KafkaUnavailableError: no broker answered at 127.0.0.1:19092 "
        "(the task's last try: not retried again)"
    )


def test_a_transient_failure_that_will_be_retried_does_not_end_the_wait(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_submit(monkeypatch, handle, KafkaUnavailableError("no broker answered at 127.0.0.1:19092"))
    for try_number in (1, 2):
        _raised(lambda: _operator().execute(_try(try_number)))  # noqa: B023 (called at once)
        assert _wait_for_batch_3(0) == ("waiting", {})
    assert read_failure(handle.load(), WRITER, 3).retryable  # type: ignore[union-attr]


def test_a_job_killed_without_a_report_on_the_last_try_ends_the_wait(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_submit(monkeypatch, handle, None)
    error = _raised(lambda: _operator().execute(_try(3)))
    assert "the Spark job failed without a failure report" in str(error)
    status, payload = _wait_for_batch_3(0)
    assert status == "failed" and "failed without a failure report" in payload["message"]
    assert payload["failure"]["retryable"] is False


def test_a_failure_before_spark_starts_ends_the_wait(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_submit(monkeypatch, handle, None)
    with handle.load().transaction() as tx:
        tx.set_properties({"log-store.enabled": "maybe"})
    error = _raised(lambda: _operator().execute(_try(1)))  # not retried: the first try is the last
    assert type(error) is AirflowFailException and calls == []
    status, payload = _wait_for_batch_3(0)
    assert status == "failed" and payload["failure"]["error_class"] == "TablePropertyError"
    assert (
        "failed for good (epoch None): TablePropertyError: table property 'log-store.enabled'"
        in (payload["message"])
    )


def test_a_fenced_attempt_never_ends_the_wait_even_on_the_last_try(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the newer attempt that fenced this one may still commit the batch
    _fake_submit(monkeypatch, handle, FencedError("writer 'logstore_pipeline' was fenced by epoch 13"))
    error = _raised(lambda: _operator().execute(_try(3)))
    assert type(error) is AirflowFailException and str(error).startswith("FencedError: ")
    assert _wait_for_batch_3(0) == ("waiting", {})
    assert read_failure(handle.load(), WRITER, 3).error_class == "FencedError"  # type: ignore[union-attr]
