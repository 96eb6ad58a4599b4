"""The dual-write operator turns a failed spark-submit and the job's failure report into the right error.

The catalog and table are real (SQLite, pyiceberg, no log); only the edge to Spark is faked: ``submit``
leaves the report a real job would leave, then fails as SparkSubmitHook does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_logstore.exceptions import BadInputError, JobFailedError, KafkaUnavailableError
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.table.reports import failure_of, report_failure
from airflow_logstore.table.tables import LogStoreTable

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
        input_path="/in/a3_bad.jsonl",
        batch_id=3,
        writer_id=WRITER,
        jars="",
    )


def _raised(run: Callable[[], Any]) -> BaseException:
    with pytest.raises(Exception) as caught:
        run()
    return caught.value


def test_bad_input_fails_without_retry_and_names_the_row(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_submit(monkeypatch, handle, BAD_ROW)
    error = _raised(lambda: _operator().execute({}))
    assert type(error) is AirflowFailException
    assert str(error).startswith(
        "BadInputError: row 1, column 'amount': value does not fit type bigint (file a3_bad.jsonl)"
    )
    assert "spark-submit" not in str(error) and error.__cause__ is None and error.__suppress_context__
    assert "batch 3 of db.orders by writer 'logstore_pipeline'" in str(error) and "epoch 12" in str(error)
    assert len(calls) == 1 and "--report-id" in calls[0]


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
