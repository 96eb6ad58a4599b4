"""How a PySpark job reports back: its ``--report-id``, its result line and the result next to the table.

Each job prints one JSON result line (for a person at the console) and, when its submitter passed
``--report-id``, writes the same result next to the table (:func:`emit_result`): an operator reads it
there, because the driver's output is lost in cluster deploy mode. A failed job leaves a failure
report there the same way (:func:`emit_failure`), from which its operator raises the cause.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_logstore.exceptions import LogStoreError

if TYPE_CHECKING:
    from airflow_logstore.table.catalog import CatalogSpec
    from airflow_logstore.table.tables import LogStoreTable

log = logging.getLogger(__name__)

RESULT_PREFIX = "LOGSTORE_RESULT "


def emit_result(result: Any, handle: LogStoreTable | None = None, report_id: str | None = None) -> None:
    """Print the result line; with a ``report_id``, also write the result next to ``handle``'s table.

    A result that cannot be written fails the job: its submitter would not find it.
    """
    print(RESULT_PREFIX + json.dumps(result, default=str), flush=True)
    if not report_id:
        return
    if handle is None:
        raise ValueError("a job result with a report id needs the table to write it next to")
    from airflow_logstore.table.reports import write_result

    log.info("result written to %s", write_result(handle.load(), report_id, result))


def emit_failure(
    exc: BaseException,
    *,
    job: str,
    table_name: str,
    catalog: CatalogSpec | None,
    report_id: str | None,
    handle: LogStoreTable | None = None,
    writer_id: str | None = None,
    batch_id: int | None = None,
    epoch: int | None = None,
) -> None:
    """Best effort: leave the failure report of ``job`` next to the table ``table_name`` (``handle``'s
    when the job had opened it), under its writer and batch when it wrote one, else under the
    ``report_id`` its submitter chose (none without either: nobody would look for it).

    A table that cannot be loaded (missing, unreachable) gets no report; that is only logged.
    """
    from airflow_logstore.table.reports import failure_of, report_failure
    from airflow_logstore.table.tables import LogStoreTable

    if (writer_id is None or batch_id is None) and not report_id:
        return
    table = None
    try:
        table = (handle or LogStoreTable.open(table_name, catalog)).load()
    except Exception as load_error:  # the table itself is missing or unreachable: nothing to write next to
        log.warning("table %s cannot be loaded for the failure report: %s", table_name, load_error)
    failure = failure_of(
        exc, writer_id=writer_id, batch_id=batch_id, epoch=epoch, report_id=report_id, job=job
    )
    report_failure(table, failure)


def add_report_id(parser: argparse.ArgumentParser) -> None:
    """``--report-id``: the submitter's tag of this attempt (its result and failure report)."""
    parser.add_argument(
        "--report-id",
        default=None,
        help="tag of this attempt's result and failure report next to the table (set by the operator)",
    )


def parse_result(output: str) -> dict[str, Any] | None:
    """The last result line a job printed, or None."""
    found = None
    for line in output.splitlines():
        index = line.find(RESULT_PREFIX)
        if index >= 0:
            found = json.loads(line[index + len(RESULT_PREFIX) :])
    return found


def job_session(app: str) -> Any:
    from airflow_logstore.spark.session import build_spark_session

    return build_spark_session(app)


def run_table_job(
    job: str, table_name: str, report_id: str | None, body: Callable[[Any, LogStoreTable], Any]
) -> int:
    """A table job's entry point: open the table through the job's Spark session, run ``body(spark,
    table)`` and leave its result next to the table (:func:`emit_result`). A failure leaves its report
    there instead (:func:`emit_failure`): a LogStore error prints one line and returns 1, any other is
    raised (its traceback is the job's output)."""
    from airflow_logstore.pause import kill_points
    from airflow_logstore.spark.jobconf import job_settings, spark_conf_dict
    from airflow_logstore.table.tables import LogStoreTable

    catalog: CatalogSpec | None = None
    handle: LogStoreTable | None = None
    try:
        kill_points()  # a test's LOGSTORE_KILL_AT that names no kill point fails before Spark starts
        spark = job_session(f"logstore-{job}-{table_name}")
        catalog, kafka_extra = job_settings(spark_conf_dict(spark))
        handle = LogStoreTable.open(table_name, catalog, kafka_extra)
        emit_result(body(spark, handle), handle, report_id)
    except Exception as exc:
        emit_failure(exc, job=job, table_name=table_name, catalog=catalog, report_id=report_id, handle=handle)
        if not isinstance(exc, LogStoreError):
            raise
        print(f"{job}: error: {exc}", file=sys.stderr)
        log.error("%s of %s failed: %s", job, table_name, exc)
        return 1
    return 0
