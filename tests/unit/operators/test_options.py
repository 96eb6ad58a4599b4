"""The operators' one parser for flags and numbers that may come rendered from a template."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_logstore.exceptions import OptionError
from airflow_logstore.operators._options import FALSE_WORDS, TRUE_WORDS, as_bool, as_int
from airflow_logstore.operators.compaction import LogStoreCompactionOperator
from airflow_logstore.operators.reconcile import LogStoreReconcileOperator


@pytest.mark.parametrize("value", [True, *TRUE_WORDS, "True", "TRUE", " yes ", "On", 1])
def test_true_spellings(value: Any) -> None:
    assert as_bool(value, "dry_run") is True


@pytest.mark.parametrize("value", [False, *FALSE_WORDS, "False", " NO ", "None", None, 0])
def test_false_spellings(value: Any) -> None:
    assert as_bool(value, "dry_run") is False


@pytest.mark.parametrize("value", ["maybe", "truee", "2", "y", "{{ params.dry_run }}"])
def test_any_other_value_names_the_parameter_and_the_value(value: str) -> None:
    with pytest.raises(OptionError) as error:
        as_bool(value, "remove_orphans")
    assert str(error.value) == f"option 'remove_orphans': expected true or false, got '{value}'"
    assert error.value.name == "remove_orphans" and isinstance(error.value, ValueError)


def test_numbers_blank_means_not_given() -> None:
    assert as_int("42", "orphan_age_ms") == 42 and as_int(7, "orphan_age_ms") == 7
    assert as_int(None, "orphan_age_ms") is None and as_int("  ", "orphan_age_ms") is None
    with pytest.raises(OptionError, match="option 'orphan_age_ms': must be an integer, got 'soon'"):
        as_int("soon", "orphan_age_ms")


def test_both_operators_refuse_a_bad_flag_the_same_way() -> None:
    compaction = LogStoreCompactionOperator(task_id="c", table="db.t", force="perhaps")
    with pytest.raises(OptionError, match="option 'force': expected true or false, got 'perhaps'"):
        compaction.application_args()
    reconcile = LogStoreReconcileOperator(task_id="r", table="db.t", dry_run="perhaps")
    with pytest.raises(
        AirflowFailException, match=r"^OptionError: option 'dry_run': expected true or false, got 'perhaps'"
    ):
        reconcile.execute({})  # a bad option fails the task without retries
