"""Failure reports: their format, where they live, and when they end a sensor's wait."""

from __future__ import annotations

from airflow_logstore.core.failures import JobFailure, failure_path


def _failure(**changes: object) -> JobFailure:
    fields: dict[str, object] = {
        "writer_id": "logstore_pipeline",
        "batch_id": 3,
        "error_class": "BadInputError",
        "message": "row 1, column 'amount': value does not fit type bigint (file a3_bad.jsonl)",
        "retryable": False,
        "epoch": 12,
        "report_id": "r1",
        "failed_at_ms": 5_000,
    }
    fields.update(changes)
    return JobFailure(**fields)  # type: ignore[arg-type]


def test_a_report_survives_json_and_names_its_cause() -> None:
    failure = _failure()
    assert JobFailure.from_json(failure.to_json()) == failure
    assert failure.describe() == (
        "BadInputError: row 1, column 'amount': value does not fit type bigint (file a3_bad.jsonl)"
    )
    assert JobFailure.from_json({**failure.to_json(), "epoch": None}).epoch is None


def test_the_path_depends_only_on_table_writer_and_batch() -> None:
    assert (
        failure_path("s3://wh/db/orders/", "dag.task", 7)
        == "s3://wh/db/orders/logstore/failures/dag.task/7.json"
    )
    assert failure_path("file:///wh/t", "a/b c", 1) == "file:///wh/t/logstore/failures/a%2Fb%20c/1.json"


def test_only_a_permanent_failure_since_the_wait_began_ends_it() -> None:
    assert _failure().stops_wait_since(None)
    assert _failure().stops_wait_since(5_000)
    assert not _failure().stops_wait_since(5_001)  # an earlier run's failure of the same batch
    assert not _failure(retryable=True).stops_wait_since(0)  # the write is retried: keep waiting
    assert not _failure(error_class="FencedError").stops_wait_since(0)  # the newer attempt may commit
