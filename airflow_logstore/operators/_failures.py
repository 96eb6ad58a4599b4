"""How operators turn a failure into the right Airflow exception: fail at once, or let Airflow retry.

Errors that a retry cannot fix (see ``retryable`` in :mod:`airflow_logstore.exceptions`) raise
``AirflowFailException`` with the cause as the message; retryable ones are raised as they are, so the
task's ``retries`` apply. A failed Spark job is judged by the failure report it left next to the table
(:mod:`airflow_logstore.core.failures`), never by its output.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_logstore.exceptions import JobFailedError, classify, first_line

if TYPE_CHECKING:
    from airflow_logstore.core.failures import JobFailure
    from airflow_logstore.table.tables import LogStoreTable


@contextmanager
def fail_fast() -> Iterator[None]:
    """Raise ``AirflowFailException`` (no retry) for errors that cannot succeed on a retry."""
    try:
        yield
    except AirflowException:
        raise
    except Exception as exc:
        error_class, retryable = classify(exc)
        if retryable:
            raise
        raise AirflowFailException(f"{error_class}: {first_line(exc)}") from exc


def failure_exception(failure: JobFailure, what: str) -> Exception:
    """The task's exception for a reported failure of ``what`` (e.g. ``dual write of batch 3``)."""
    if failure.retryable:
        error = JobFailedError(failure.error_class, failure.message, retryable=True)
        error.add_note(f"{what} failed (epoch {failure.epoch}); Airflow may retry it")
        return error
    return AirflowFailException(
        f"{failure.describe()} ({what}, epoch {failure.epoch}: not retried, a retry cannot fix it)"
    )


def job_failure(
    handle: LogStoreTable, *, writer_id: str, batch_id: int, report_id: str, submit_error: Exception
) -> Exception:
    """The exception for a failed job: its own report's cause, else the submit error, shortened."""
    from airflow_logstore.table.reports import read_failure

    what = f"dual write of batch {batch_id} of {handle.name} by writer '{writer_id}'"
    try:
        failure = read_failure(handle.load(), writer_id, batch_id)
    except Exception as exc:  # cannot read the report: the submit error stands, Airflow retries
        failure = None
        submit_error.add_note(f"the failure report could not be read: {first_line(exc)}")
    if failure is not None and failure.report_id == report_id:
        return failure_exception(failure, what)
    return AirflowException(
        f"{what}: the Spark job failed without a failure report (it may have been killed, or could not "
        f"reach the table); see the Spark output above. {first_line(submit_error, 300)}"
    )
