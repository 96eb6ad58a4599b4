"""Every operator x every kind of error: errors a retry cannot fix fail the task at once
(``AirflowFailException`` naming the cause first), transient ones are raised for Airflow's retries.

The catalog and table are real (SQLite, pyiceberg, no log). The operators that run in the worker get the
error from the library call they make; those that submit a Spark job get it the way a real job reports
it: ``submit`` runs the jobs' own failure reporting (``emit_failure``) with the error, then fails as
SparkSubmitHook does, so the task's error must come from the report, not from the command line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from pyiceberg.exceptions import NoSuchTableError

from airflow_logstore.exceptions import (
    BadInputError,
    CatalogUnavailableError,
    CommitConflictError,
    FencedError,
    KafkaUnavailableError,
    OptionError,
    SchemaMismatchError,
    TablePropertyError,
    classify,
)
from airflow_logstore.operators.compaction import LogStoreCompactionOperator
from airflow_logstore.operators.create_table import LogStoreCreateTableOperator
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.operators.publish import LogStorePublishVisibleOffsetsOperator
from airflow_logstore.operators.read import LogStoreReadOperator
from airflow_logstore.operators.reconcile import LogStoreReconcileOperator
from airflow_logstore.spark.results import emit_failure
from airflow_logstore.table.tables import LogStoreTable
from logstore_dev.testing.environment import REPO_ROOT

#: an input file that exists (the dual write checks its input path before spark-submit)
AN_INPUT = str(REPO_ROOT / "dags" / "data" / "orders_batch_1.jsonl")

PERMANENT: dict[str, BaseException] = {
    "TablePropertyError": TablePropertyError("log-store.enabled", "expected true or false, got 'maybe'"),
    "SchemaMismatchError": SchemaMismatchError("column 'amount' is long in the table, string in the input"),
    "TableNotFoundError": NoSuchTableError("Table does not exist: db.orders"),
    "BadInputError": BadInputError("value does not fit type bigint (file a.jsonl)", row=1, column="amount"),
    "FencedError": FencedError("writer 'w' was fenced by epoch 13"),
    "OptionError": OptionError("mode", "must be one of file, log, hybrid"),
}
TRANSIENT: dict[str, BaseException] = {
    "KafkaUnavailableError": KafkaUnavailableError("no broker answered at 127.0.0.1:19092"),
    "CatalogUnavailableError": CatalogUnavailableError("database is locked"),
    "CommitConflictError": CommitConflictError("the commit lost 6 races in a row"),
}


def _in_worker(target: str, operator: Callable[[], Any]) -> Callable[..., Any]:
    """An operator that runs in the worker: ``target`` (the library call it makes) raises the error."""

    def arrange(monkeypatch: pytest.MonkeyPatch, handle: LogStoreTable, error: BaseException) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise error

        monkeypatch.setattr(target, fail)
        return operator()

    return arrange


def _in_spark(operator: Callable[[], Any], **batch: Any) -> Callable[..., Any]:
    """An operator that submits a job: the job reports the error next to the table, then exits 1."""

    def arrange(monkeypatch: pytest.MonkeyPatch, handle: LogStoreTable, error: BaseException) -> Any:
        def submit(self: SparkSubmitHook, application: str = "", **kwargs: Any) -> None:
            args = list(self._application_args)
            report_id = args[args.index("--report-id") + 1]
            emit_failure(
                error,
                job=application.rsplit("/", 1)[-1].removesuffix(".py"),
                table_name="db.orders",
                catalog=handle.catalog,
                report_id=report_id,
                **batch,
            )
            raise AirflowException(
                f"Cannot execute: spark-submit --master local[2] {application}. Error code is: 1."
            )

        monkeypatch.setattr(SparkSubmitHook, "submit", submit)
        return operator()

    return arrange


OPERATORS: dict[str, Callable[..., Any]] = {
    "create_table": _in_worker(
        "airflow_logstore.table.tables.create_table",
        lambda: LogStoreCreateTableOperator(task_id="create", table="db.orders", schema="id int"),
    ),
    "publish": _in_worker(
        "airflow_logstore.publish.publisher.publish_visible_offsets",
        lambda: LogStorePublishVisibleOffsetsOperator(task_id="publish", table="db.orders"),
    ),
    "read": _in_worker(
        "airflow_logstore.read.reader.run_read",
        lambda: LogStoreReadOperator(task_id="read", table="db.orders", mode="file"),
    ),
    "reconcile": _in_worker(
        "airflow_logstore.reconcile.reconciler.reconcile",
        lambda: LogStoreReconcileOperator(task_id="reconcile", table="db.orders"),
    ),
    "reconcile-spark": _in_spark(
        lambda: LogStoreReconcileOperator(task_id="reconcile", table="db.orders", engine="spark", jars="")
    ),
    "compaction": _in_spark(
        lambda: LogStoreCompactionOperator(task_id="compact", table="db.orders", jars="")
    ),
    "dual_write": _in_spark(
        lambda: LogStoreDualWriteOperator(
            task_id="write", table="db.orders", input_path=AN_INPUT, batch_id=3, writer_id="w", jars=""
        ),
        writer_id="w",
        batch_id=3,
        epoch=12,
    ),
}


def _raised(operator: Any) -> BaseException:
    with pytest.raises(BaseException) as caught:
        operator.execute({})
    return caught.value


@pytest.mark.parametrize("cause", sorted(PERMANENT))
@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_an_error_a_retry_cannot_fix_fails_at_once_naming_its_cause(
    name: str, cause: str, handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    error = _raised(OPERATORS[name](monkeypatch, handle, PERMANENT[cause]))
    assert type(error) is AirflowFailException, repr(error)
    message = str(error)
    assert message.startswith(f"{cause}: "), message
    assert message.split(": ", 1)[1].startswith(str(PERMANENT[cause]).splitlines()[0]), message
    assert "spark-submit" not in message and "Cannot execute" not in message


@pytest.mark.parametrize("cause", sorted(TRANSIENT))
@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_a_transient_error_is_raised_for_airflow_to_retry(
    name: str, cause: str, handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    error = _raised(OPERATORS[name](monkeypatch, handle, TRANSIENT[cause]))
    assert not isinstance(error, AirflowException), repr(error)  # AirflowFailException is one
    assert classify(error) == (cause, True) or (
        classify(error)[1] and str(error).startswith(f"{cause}: ")  # the job's reported cause
    ), repr(error)
    assert "spark-submit" not in str(error)


def test_the_operators_that_submit_a_job_check_the_table_before_spark_starts(
    handle: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a missing table cannot take a failure report: it fails in the worker, before spark-submit
    submitted: list[str] = []
    monkeypatch.setattr(
        SparkSubmitHook, "submit", lambda self, application="", **kw: submitted.append(application)
    )
    for operator in (
        LogStoreCompactionOperator(task_id="compact", table="db.nowhere", jars=""),
        LogStoreReconcileOperator(task_id="reconcile", table="db.nowhere", engine="spark", jars=""),
    ):
        error = _raised(operator)
        assert type(error) is AirflowFailException and str(error).startswith("TableNotFoundError: ")
        assert "db.nowhere" in str(error) or "nowhere" in str(error)
    assert submitted == []


def test_real_permanent_errors_of_the_worker_operators(handle: LogStoreTable) -> None:
    bad_property = LogStoreCreateTableOperator(
        task_id="create", table="db.other", schema="id int", properties={"log-store.enabled": "maybe"}
    )
    assert str(_raised(bad_property)).startswith("TablePropertyError: table property 'log-store.enabled'")
    missing = LogStoreReadOperator(task_id="read", table="db.nowhere", mode="file")
    error = _raised(missing)
    assert type(error) is AirflowFailException and str(error).startswith("TableNotFoundError: ")
    bad_mode = LogStoreReadOperator(task_id="read", table="db.orders", mode="sideways")
    assert str(_raised(bad_mode)).startswith("OptionError: option 'mode': must be one of file, log, hybrid")
