"""Each edge that takes a consistency accepts Paimon's name ``transactional`` beside ours, in any case,
and hands on ``consistent``: a read function's parameter (``LogReader``, hence ``read_log``, ``run_read``
and the operators), the CLI's ``read --consistency`` and the Spark read job's ``--consistency``. The
table properties and the Spark source's option are in tests/unit/core/test_properties.py and
tests/unit/read/test_source.py."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from airflow_logstore.cli import build_parser
from airflow_logstore.core.properties import Consistency, parse_table_properties
from airflow_logstore.exceptions import OptionError
from airflow_logstore.read import read_job
from airflow_logstore.read.reader import LogReader

PROPERTIES = {"log-store.enabled": "true", "log-store.topic": "t", "log-store.address": "k:1"}


class _Table:
    def schema(self) -> Schema:
        return Schema(NestedField(1, "id", LongType(), required=True), identifier_field_ids=[1])


class _Handle:
    """What ``LogReader`` asks of a table handle before it reads (no catalog, no broker)."""

    name = "ns.t"

    def load(self) -> _Table:
        return _Table()

    def config(self, table: Any) -> Any:
        return parse_table_properties(PROPERTIES)  # eventual by default

    def log_side_of(self, config: Any) -> Any:
        return SimpleNamespace(kafka_config={"bootstrap.servers": "k:1"}, control=None)


def _reader(**options: Any) -> LogReader:
    return LogReader(_Handle(), dead_letter=object(), **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["transactional", "Transactional", "consistent", Consistency.CONSISTENT])
def test_a_read_parameter_takes_both_names_of_consistent(name: Any) -> None:
    reader = _reader(consistency=name)
    assert reader.consistency is Consistency.CONSISTENT
    assert reader.new_report().consistency == "consistent"  # what XComs and the CLI's JSON carry


def test_a_read_parameter_names_a_bad_consistency() -> None:
    with pytest.raises(
        OptionError, match=r"option 'consistency': 'strong' is not one of consistent, eventual"
    ):
        _reader(consistency="strong")
    assert _reader().consistency is Consistency.EVENTUAL  # none given: the table's


@pytest.mark.parametrize("name", ["transactional", "TRANSACTIONAL", "consistent"])
def test_the_cli_read_option_takes_both_names_of_consistent(name: str) -> None:
    assert build_parser().parse_args(["read", "ns.t", "--consistency", name]).consistency == "consistent"


@pytest.mark.parametrize("name", ["transactional", "Consistent"])
def test_the_spark_read_jobs_option_takes_both_names_of_consistent(name: str) -> None:
    args = read_job.parser().parse_args(["--table", "ns.t", "--mode", "log", "--consistency", name])
    assert args.consistency == "consistent"


def test_the_consistency_argument_type_gives_argparse_the_parsers_message() -> None:
    assert read_job.consistency_argument("Transactional") == "consistent"
    with pytest.raises(argparse.ArgumentTypeError, match=r"'strong' is not one of consistent, eventual"):
        read_job.consistency_argument("strong")


def test_a_bad_consistency_option_is_argparses_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    for parse in (
        lambda: build_parser().parse_args(["read", "ns.t", "--consistency", "strong"]),
        lambda: read_job.parser().parse_args(["--table", "ns.t", "--consistency", "strong"]),
    ):
        with pytest.raises(SystemExit):
            parse()
        assert "'strong' is not one of consistent, eventual or transactional" in capsys.readouterr().err
