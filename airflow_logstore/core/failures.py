"""Failure reports: what a Spark job leaves behind when a batch fails, for operators and sensors.

A job's driver may run anywhere (cluster deploy mode), so its failure is not read from its output: the
job writes a small JSON report next to the table's files, at a path that only depends on the table,
the writer and the batch (:func:`failure_path`). The operator that submitted the job finds its own
attempt's report by ``report_id``; a sensor waiting for the batch finds any report written since its
run started. A later attempt of the same batch overwrites the report.

A job without a batch (compaction, reconciliation) reports under the id its submitter chose instead
(:func:`job_failure_path`): only that submitter looks for it.

A job's result takes the same way back (:func:`result_path`): the job writes it next to the table
under the id its submitter chose, and the submitter reads it there (driver stdout is lost in
cluster deploy mode).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote

FAILURES_DIR = "logstore/failures"
RESULTS_DIR = "logstore/results"
JOB_FAILURES_DIR = "logstore/job-failures"
FENCED = "FencedError"


@dataclass(frozen=True)
class JobFailure:
    """One failed attempt of a batch (or of a job without one: ``writer_id`` and ``batch_id`` None).

    :param error_class: the LogStore error it stands for (``BadInputError``, ``KafkaUnavailableError``)
    :param retryable: whether another attempt can succeed (see :mod:`airflow_logstore.exceptions`)
    :param epoch: the attempt's epoch when it had claimed one
    :param report_id: chosen by whoever submitted the job, to recognise its own attempt
    :param failed_at_ms: wall-clock time of the failure (the driver's clock)
    """

    writer_id: str | None
    batch_id: int | None
    error_class: str
    message: str
    retryable: bool
    epoch: int | None = None
    report_id: str | None = None
    failed_at_ms: int = 0
    job: str = "dual_write"

    def describe(self) -> str:
        """``BadInputError: row 1, column 'amount': ...``"""
        return f"{self.error_class}: {self.message}"

    def stops_wait_since(self, not_before_ms: int | None) -> bool:
        """Whether a sensor that started waiting at ``not_before_ms`` must give up because of it.

        A fenced attempt never ends the wait: the newer attempt that fenced it may still commit.
        """
        if self.retryable or self.error_class == FENCED:
            return False
        return not_before_ms is None or self.failed_at_ms >= not_before_ms

    def path(self, table_location: str) -> str:
        """Where this report lives: by writer and batch, else by the submitter's report id."""
        if self.writer_id is not None and self.batch_id is not None:
            return failure_path(table_location, self.writer_id, self.batch_id)
        if self.report_id:
            return job_failure_path(table_location, self.report_id)
        raise ValueError(f"the failure report of a {self.job} job needs a writer and batch, or a report id")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobFailure:
        epoch, writer_id, batch_id = data.get("epoch"), data.get("writer_id"), data.get("batch_id")
        return cls(
            writer_id=None if writer_id is None else str(writer_id),
            batch_id=None if batch_id is None else int(batch_id),
            error_class=str(data["error_class"]),
            message=str(data["message"]),
            retryable=bool(data["retryable"]),
            epoch=None if epoch is None else int(epoch),
            report_id=data.get("report_id"),
            failed_at_ms=int(data.get("failed_at_ms", 0)),
            job=str(data.get("job", "dual_write")),
        )


def failure_path(table_location: str, writer_id: str, batch_id: int) -> str:
    """Where the report of (writer, batch) lives, under the table's location (any writer id is safe)."""
    return f"{table_location.rstrip('/')}/{FAILURES_DIR}/{quote(writer_id, safe='')}/{int(batch_id)}.json"


def job_failure_path(table_location: str, report_id: str) -> str:
    """Where the report of the job (without a batch) submitted with ``report_id`` lives."""
    if not report_id:
        raise ValueError("a job failure report needs a non-empty report id")
    return f"{table_location.rstrip('/')}/{JOB_FAILURES_DIR}/{quote(report_id, safe='')}.json"


def result_path(table_location: str, report_id: str) -> str:
    """Where the result of the job submitted with ``report_id`` lives, under the table's location."""
    if not report_id:
        raise ValueError("a job result needs a non-empty report id")
    return f"{table_location.rstrip('/')}/{RESULTS_DIR}/{quote(report_id, safe='')}.json"
