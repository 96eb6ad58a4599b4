"""Which errors are worth a retry: declared once per class, applied to foreign errors, in the README."""

from __future__ import annotations

import inspect
import re
import sqlite3

import pytest
import sqlalchemy.exc
from pyiceberg.exceptions import NoSuchTableError

from airflow_logstore import exceptions
from airflow_logstore.exceptions import (
    BadInputError,
    FencedError,
    KafkaUnavailableError,
    LogStoreError,
    classify,
    first_line,
)
from logstore_dev.testing.environment import REPO_ROOT


def _error_classes() -> dict[str, type[LogStoreError]]:
    return {
        name: cls
        for name, cls in inspect.getmembers(exceptions, inspect.isclass)
        if issubclass(cls, LogStoreError) and cls.__module__ == exceptions.__name__
    }


def test_every_error_class_declares_whether_it_is_retryable() -> None:
    undeclared = [
        name
        for name, cls in _error_classes().items()
        if "retryable" not in vars(cls) and cls is not LogStoreError
    ]
    assert undeclared == ["JobFailedError"]  # it takes the verdict of the job's error, per instance


def test_logstore_errors_answer_for_themselves() -> None:
    assert classify(BadInputError("value does not fit type bigint", row=1, column="amount")) == (
        "BadInputError",
        False,
    )
    assert classify(FencedError("epoch 3 was fenced by epoch 5")) == ("FencedError", False)
    assert classify(KafkaUnavailableError("no broker at 127.0.0.1:1")) == ("KafkaUnavailableError", True)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (NoSuchTableError("Table does not exist: demo.orders"), ("TableNotFoundError", False)),
        (
            Exception("[PATH_NOT_FOUND] Path does not exist: file:/tmp/missing.jsonl. SQLSTATE: 42K03"),
            ("BadInputError", False),
        ),
        (
            sqlalchemy.exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError("database is locked")),
            ("CatalogUnavailableError", True),
        ),
        (sqlite3.OperationalError("unable to open database file"), ("CatalogUnavailableError", True)),
        (
            RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: metadata moved"),
            ("CommitConflictError", True),
        ),
        (RuntimeError("something nobody expected"), ("RuntimeError", True)),
    ],
)
def test_foreign_errors_get_the_verdict_of_what_they_stand_for(
    error: BaseException, expected: tuple[str, bool]
) -> None:
    assert classify(error) == expected


def test_first_line_drops_the_jvm_stack_trace() -> None:
    error = RuntimeError(
        "[PATH_NOT_FOUND] Path does not exist: file:/x.\n\tat org.apache.spark.Foo(Foo.scala:1)"
    )
    assert first_line(error) == "[PATH_NOT_FOUND] Path does not exist: file:/x."
    assert len(first_line(RuntimeError("x" * 900))) == 500


def test_the_readme_table_says_what_the_classes_say() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("### Which failures are retried", 1)[1].split("\n#", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (yes|no) \|", section, flags=re.MULTILINE))
    declared = {name: "yes" if cls.retryable else "no" for name, cls in _error_classes().items()}
    declared.pop("LogStoreError")
    declared.pop("JobFailedError")
    assert rows == declared
