"""How operators turn a failure into the right Airflow exception: fail at once, or let Airflow retry.

Errors that a retry cannot fix (see ``retryable`` in :mod:`airflow_logstore.exceptions`) raise
``AirflowFailException`` with the cause as the message; retryable ones are raised as they are, so the
task's ``retries`` apply. A failed Spark job is judged by the failure report it left next to the table
(:mod:`airflow_logstore.core.failures`), never by its output. A dual write that fails for good leaves a
final report of its batch (:func:`report_final_failure`), which ends its sensor's wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_logstore.exceptions import JobFailedError, classify, first_line

if TYPE_CHECKING:
    from airflow_logstore.core.failures import JobFailure
    from airflow_logstore.table.tables import LogStoreTable

log = logging.getLogger(__name__)


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
    attempt = what if failure.epoch is None else f"{what}, epoch {failure.epoch}"
    if failure.retryable:
        error = JobFailedError(failure.error_class, failure.message, retryable=True)
        error.add_note(f"{attempt} failed; Airflow may retry it")
        return error
    return AirflowFailException(f"{failure.describe()} ({attempt}: not retried, a retry cannot fix it)")


def job_failure(
    handle: LogStoreTable,
    *,
    what: str,
    report_id: str,
    submit_error: Exception,
    writer_id: str | None = None,
    batch_id: int | None = None,
) -> Exception:
    """The exception for a failed job (``what``, e.g. ``compaction of db.orders``): its own report's
    cause (found by batch when writer and batch are given, else by ``report_id``), else the submit
    error, shortened."""
    from airflow_logstore.table.reports import read_attempt_failure

    try:
        failure = read_attempt_failure(handle.load(), report_id, writer_id=writer_id, batch_id=batch_id)
    except Exception as exc:  # cannot read the report: the submit error stands, Airflow retries
        failure = None
        submit_error.add_note(f"the failure report could not be read: {first_line(exc)}")
    if failure is not None:
        return failure_exception(failure, what)
    return AirflowException(
        f"{what}: the Spark job failed without a failure report (it may have been killed, or could not "
        f"reach the table); see the Spark output above. {first_line(submit_error, 300)}"
    )


def fails_for_good(error: BaseException, context: Any, retries: int | None) -> bool:
    """Whether Airflow ends the task failed on ``error`` instead of retrying it: ``AirflowFailException``,
    or any error on the last try (``context["ti"]``'s ``try_number`` past its ``max_tries``; outside a
    task run, without a task instance, only ``AirflowFailException``)."""
    if isinstance(error, AirflowFailException):
        return True
    ti = context.get("ti") if hasattr(context, "get") else None
    try_number = getattr(ti, "try_number", None)
    if try_number is None:
        return False
    max_tries = getattr(ti, "max_tries", None)
    return not retries or int(try_number) > int(retries if max_tries is None else max_tries)


def report_final_failure(
    handle: LogStoreTable, *, writer_id: str, batch_id: int, report_id: str | None, error: BaseException
) -> str | None:
    """Best effort: leave a final, non-retryable report of the batch, whose task failed for good, so
    that a sensor waiting for the batch stops waiting (:meth:`JobFailure.stops_wait_since`).

    The attempt's own report when it left one, else one made from ``error`` (the cause that
    :func:`fail_fast` wrapped, if any). A report that is already final stays as it is: a fenced
    attempt's report never ends a wait, since the newer attempt that fenced it may still commit.
    """
    from airflow_logstore.table.reports import failure_of, read_attempt_failure, report_failure

    try:
        table = handle.load()
        own = (
            read_attempt_failure(table, report_id, writer_id=writer_id, batch_id=batch_id)
            if report_id
            else None
        )
    except Exception as exc:  # a missing table has nothing to write next to (and ends the wait itself)
        log.warning("no final failure report of batch %s: %s", batch_id, first_line(exc))
        return None
    if own is not None and not own.retryable:
        return None
    cause = error.__cause__ if isinstance(error, AirflowFailException) and error.__cause__ else error
    failure = own or failure_of(
        cause, writer_id=writer_id, batch_id=batch_id, epoch=None, report_id=report_id
    )
    if failure.retryable:
        failure = replace(failure, message=f"{failure.message} (the task's last try: not retried again)")
    final = replace(failure, retryable=False, failed_at_ms=int(time.time() * 1000))
    return report_failure(table, final)
