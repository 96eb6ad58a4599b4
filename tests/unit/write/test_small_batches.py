"""The small-batch path of the dual write: which batches take it, and the driver-side answers it gives
in place of a Spark job (the validation's pass, the metadata check of the keys)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airflow_logstore.write import inputs
from airflow_logstore.write.checking import Checked, checked_rows
from airflow_logstore.write.inputs import LOCAL_RELATION, SMALL_BATCH_ROWS, local_rows, small_batch_rows
from airflow_logstore.write.planning import KeyFilter, files_may_hold


class _Plan:
    """What ``local_rows`` asks of an optimized plan through py4j: its class and its row bound."""

    def __init__(self, class_name: str, rows: int | None) -> None:
        self._class = SimpleNamespace(getName=lambda: class_name)
        self._rows = rows

    def getClass(self) -> Any:
        return self._class

    def maxRows(self) -> Any:
        return SimpleNamespace(get=lambda: self._rows)


def _frame(class_name: str, rows: int | None = None) -> Any:
    plan = _Plan(class_name, rows)
    return SimpleNamespace(
        _jdf=SimpleNamespace(queryExecution=lambda: SimpleNamespace(optimizedPlan=lambda: plan))
    )


@pytest.mark.parametrize(
    ("frame", "small"),
    [
        (_frame(LOCAL_RELATION, 30), 30),
        (_frame(LOCAL_RELATION, 0), 0),
        (_frame(LOCAL_RELATION, SMALL_BATCH_ROWS), SMALL_BATCH_ROWS),
        (_frame(LOCAL_RELATION, SMALL_BATCH_ROWS + 1), None),  # local but too large: today's path
        (_frame("org.apache.spark.sql.execution.datasources.LogicalRelation"), None),  # files
        (_frame("org.apache.spark.sql.execution.LogicalRDD"), None),  # a micro-batch, a Python list
        (_frame("org.apache.spark.sql.execution.columnar.InMemoryRelation"), None),  # a cache
    ],
)
def test_only_a_local_frame_of_at_most_the_threshold_s_rows_takes_the_small_batch_path(
    frame: Any, small: int | None
) -> None:
    assert small_batch_rows(frame) == small


def test_the_threshold_is_read_when_a_batch_is_looked_at(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "SMALL_BATCH_ROWS", 10)
    assert small_batch_rows(_frame(LOCAL_RELATION, 11)) is None
    assert local_rows(_frame(LOCAL_RELATION, 11)) == 11


@pytest.mark.parametrize(
    ("rows", "primary_key", "checked"),
    [
        ([(0, False, 7), (1, False, 8)], ["id"], Checked(2, None, True, 2)),
        ([(0, False, 7), (1, False, 7)], ["id"], Checked(2, None, False, 2)),  # a key (hash) twice
        ([(5, True, 1), (0, False, 2), (3, True, 3)], ["id"], Checked(3, 3, True, 2)),  # the first bad id
        ([(0, False), (1, False)], [], Checked(2, None, True, 2)),  # no key: each change stands alone
        ([(0, False), (1, True)], None, Checked(2, 1, None, 2)),  # keys not checked
        ([], ["id"], Checked(0, None, True, 2)),
    ],
)
def test_the_driver_s_pass_answers_as_the_java_pass_does(
    rows: list[tuple[Any, ...]], primary_key: list[str] | None, checked: Checked
) -> None:
    assert checked_rows(rows, primary_key, 2) == checked


class _Table:
    """A pyiceberg table whose scan planning finds ``files`` (or raises ``error``)."""

    def __init__(self, files: list[str], snapshot: int | None = 5, error: Exception | None = None) -> None:
        self.metadata = SimpleNamespace(current_snapshot_id=snapshot)
        self.files, self.error = files, error
        self.scans: list[tuple[Any, Any]] = []

    def scan(self, row_filter: Any, snapshot_id: Any) -> Any:
        self.scans.append((row_filter, snapshot_id))
        if self.error is not None:
            raise self.error
        return SimpleNamespace(plan_files=lambda: iter(self.files))


def test_keys_no_data_file_can_hold_are_not_in_the_table() -> None:
    table = _Table([])
    assert not files_may_hold(table, KeyFilter("id", (31, 32)))
    [(row_filter, snapshot)] = table.scans
    assert snapshot == 5  # the snapshot the batch is planned against
    assert str(row_filter.term.name) == "id" and {v.value for v in row_filter.literals} == {31, 32}


def test_keys_a_data_file_may_hold_are_looked_up() -> None:
    assert files_may_hold(_Table(["data-1.parquet"]), KeyFilter("id", (3,)))


@pytest.mark.parametrize(
    ("table", "keys", "may_hold"),
    [
        (_Table([], error=ValueError("no literal for this type")), KeyFilter("id", (1,)), True),
        (_Table(["f"]), KeyFilter("a.b", (1,)), True),  # a dotted name: not asked (a nested field there)
        (_Table(["f"], snapshot=None), KeyFilter("id", (1,)), False),  # no snapshot, no row
        (_Table(["f"]), KeyFilter("id", ()), False),  # no key at all
    ],
)
def test_what_the_metadata_cannot_tell_is_looked_up(table: _Table, keys: KeyFilter, may_hold: bool) -> None:
    assert files_may_hold(table, keys) is may_hold
