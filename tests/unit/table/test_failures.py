"""Failure reports written and read with a table's FileIO (a local warehouse here)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from airflow_logstore.exceptions import BadInputError
from airflow_logstore.table.reports import failure_of, read_failure, report_failure


def _table(location: str) -> Any:
    return SimpleNamespace(location=lambda: location, io=PyArrowFileIO())


def test_a_job_failure_is_written_next_to_the_table_and_read_back(tmp_path: Path) -> None:
    table = _table(f"file://{tmp_path}/db/orders")
    assert read_failure(table, "w", 3) is None
    error = BadInputError("value does not fit type bigint (file a3_bad.jsonl)", row=1, column="amount")
    failure = failure_of(error, writer_id="w", batch_id=3, epoch=7, report_id="r1")
    path = report_failure(table, failure)
    assert path == f"file://{tmp_path}/db/orders/logstore/failures/w/3.json"
    assert read_failure(table, "w", 3) == failure
    assert failure.describe().startswith("BadInputError: row 1, column 'amount': value does not fit")
    assert not failure.retryable and failure.epoch == 7 and failure.failed_at_ms > 0

    again = failure_of(RuntimeError("broker went away"), writer_id="w", batch_id=3, epoch=8, report_id="r2")
    report_failure(table, again)  # a later attempt's report replaces the earlier one
    assert read_failure(table, "w", 3) == again and again.retryable


def test_a_report_that_cannot_be_written_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    failure = failure_of(BadInputError("bad"), writer_id="w", batch_id=1, epoch=None, report_id=None)
    with caplog.at_level(logging.WARNING):
        assert report_failure(_table(f"file://{blocker}"), failure) is None
        assert report_failure(None, failure) is None
    assert "could not write the failure report" in caplog.text and "BadInputError: bad" in caplog.text
