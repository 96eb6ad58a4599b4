"""How a PySpark job reports back: its ``--report-id``, its result line and the result next to the table.

Each job prints one JSON result line (for a person at the console) and, when its submitter passed
``--report-id``, writes the same result next to the table (:func:`emit_result`): an operator reads it
there, because the driver's output is lost in cluster deploy mode.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
