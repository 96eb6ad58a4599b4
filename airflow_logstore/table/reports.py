"""Write and read failure reports and job results with the table's own FileIO (local folder, S3, ...
as the warehouse), so they reach the submitter wherever the job's driver ran."""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.failures import JobFailure, failure_path, job_failure_path, result_path
from airflow_logstore.exceptions import JobFailedError, classify, first_line

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def _write_json(table: Table, path: str, data: Any) -> str:
    with table.io.new_output(path).create(overwrite=True) as out:
        out.write(json.dumps(data, sort_keys=True, default=str).encode())
    return path


def _read_json(table: Table, path: str) -> Any | None:
    source = table.io.new_input(path)
    if not source.exists():
        return None
    with source.open() as stream:
        return json.loads(stream.read())


def write_failure(table: Table, failure: JobFailure) -> str:
    """Write (or overwrite) the report of ``failure``; return its path."""
    return _write_json(table, failure.path(table.location()), failure.to_json())


def read_failure(table: Table, writer_id: str, batch_id: int) -> JobFailure | None:
    """The latest report of (writer, batch), or None when no attempt reported a failure."""
    data = _read_json(table, failure_path(table.location(), writer_id, batch_id))
    return None if data is None else JobFailure.from_json(data)


def read_attempt_failure(
    table: Table, report_id: str, *, writer_id: str | None = None, batch_id: int | None = None
) -> JobFailure | None:
    """The report of the attempt submitted with ``report_id`` (of a batch when writer and batch are
    given), or None when that attempt left none (a batch's report may be another attempt's)."""
    if writer_id is not None and batch_id is not None:
        failure = read_failure(table, writer_id, batch_id)
    else:
        data = _read_json(table, job_failure_path(table.location(), report_id))
        failure = None if data is None else JobFailure.from_json(data)
    return failure if failure is not None and failure.report_id == report_id else None


def write_result(table: Table, report_id: str, result: Any) -> str:
    """Write the result of the job submitted with ``report_id``; return its path."""
    return _write_json(table, result_path(table.location(), report_id), result)


def read_result(table: Table, report_id: str) -> Any | None:
    """The result the job submitted with ``report_id`` wrote, or None when there is none."""
    return _read_json(table, result_path(table.location(), report_id))


def delete_result(table: Table, report_id: str) -> None:
    """Best effort: remove a result once its submitter has it (a leftover is only a small file)."""
    path = result_path(table.location(), report_id)
    try:
        table.io.delete(path)
    except Exception as exc:
        log.warning("could not delete the job result %s: %s", path, first_line(exc))


def failure_of(
    exc: BaseException,
    *,
    writer_id: str | None,
    batch_id: int | None,
    epoch: int | None,
    report_id: str | None,
    job: str = "dual_write",
) -> JobFailure:
    """The report of an attempt that raised ``exc`` (a job's reported failure keeps its own cause)."""
    error_class, retryable = classify(exc)
    message = first_line(exc)
    if isinstance(exc, JobFailedError):
        error_class, message = exc.error_class, first_line(Exception(exc.message))
    return JobFailure(
        writer_id=writer_id,
        batch_id=batch_id,
        error_class=error_class,
        message=message,
        retryable=retryable,
        epoch=epoch,
        report_id=report_id,
        failed_at_ms=int(time.time() * 1000),
        job=job,
    )


def report_failure(table: Table | None, failure: JobFailure) -> str | None:
    """Best effort: write the report; a report that cannot be written is logged, never raised."""
    if table is None:
        log.warning("no failure report for %s: the table could not be loaded", failure.describe())
        return None
    try:
        path = write_failure(table, failure)
    except Exception as exc:  # the original failure matters more than its report
        log.warning("could not write the failure report (%s): %s", first_line(exc), failure.describe())
        return None
    log.info("failure report written to %s", path)
    return path
