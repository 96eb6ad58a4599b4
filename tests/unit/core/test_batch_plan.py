"""Planning a batch of CDC-style input rows: log records, final state, no-op deletes, bad input."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_logstore.core.batch_plan import apply_final, normalize_change, plan_batch
from airflow_logstore.core.changelog import apply_retract, apply_upsert
from airflow_logstore.core.codec import RowKind
from airflow_logstore.exceptions import BadInputError

INS, UB, UA, DEL = RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE
PK = ["id"]
OLD = {"id": 1, "v": "old"}
NEW = {"id": 1, "v": "new"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "I"),
        ("insert", "I"),
        ("INSERT", "I"),
        (" i ", "I"),
        ("c", "I"),
        ("create", "I"),
        ("+I", "I"),
        ("update", "U"),
        ("U", "U"),
        ("upsert", "U"),
        ("+U", "U"),
        ("delete", "D"),
        ("d", "D"),
        ("-D", "D"),
    ],
)
def test_normalize_change(value: Any, expected: str) -> None:
    assert normalize_change(value) == expected


@pytest.mark.parametrize("value", ["", "remove", "-U", "x", 1, "+D"])
def test_normalize_change_rejects_unknown_kinds(value: Any) -> None:
    with pytest.raises(BadInputError) as info:
        normalize_change(value, row=4, column="change")
    assert str(info.value) == (
        f"row 4, column 'change': unknown change kind '{value}' "
        "(expected insert, update, delete, upsert or I/U/D)"
    )
    assert (info.value.row, info.value.column) == (4, "change")


# The docstring's table: change x (key has a row | key has no row).
@pytest.mark.parametrize(
    ("op", "current", "records", "final"),
    [
        ("insert", {(1,): OLD}, [(UB, OLD), (UA, NEW)], NEW),
        ("update", {(1,): OLD}, [(UB, OLD), (UA, NEW)], NEW),
        ("upsert", {(1,): OLD}, [(UB, OLD), (UA, NEW)], NEW),
        ("insert", {}, [(INS, NEW)], NEW),
        ("update", {}, [(INS, NEW)], NEW),
        ("delete", {(1,): OLD}, [(DEL, OLD)], None),
        ("delete", {}, [], None),
    ],
)
def test_semantics_table(
    op: str, current: dict[tuple[Any, ...], dict[str, Any]], records: list[Any], final: dict[str, Any] | None
) -> None:
    plan = plan_batch([{**NEW, "op": op}], PK, current)
    assert plan.records == records
    assert plan.final == {(1,): final}
    assert plan.noop_deletes == (1 if op == "delete" and not current else 0)


def test_delete_emits_the_before_image_not_the_input_row() -> None:
    plan = plan_batch([{"id": 1, "v": "whatever", "op": "D"}], PK, {(1,): OLD})
    assert plan.records == [(DEL, OLD)]


def test_change_column_is_dropped_from_rows() -> None:
    plan = plan_batch([{"id": 1, "v": "a", "op": "I"}], PK, {})
    assert plan.records == [(INS, {"id": 1, "v": "a"})]
    plan = plan_batch([{"id": 1, "v": "a", "kind": "I", "op": "kept"}], PK, {}, change_column="kind")
    assert plan.records == [(INS, {"id": 1, "v": "a", "op": "kept"})]


def test_missing_change_column_means_insert() -> None:
    plan = plan_batch([{"id": 1, "v": "a"}, {"id": 1, "v": "b"}], PK, {})
    assert plan.records == [(INS, {"id": 1, "v": "a"}), (UB, {"id": 1, "v": "a"}), (UA, {"id": 1, "v": "b"})]


@pytest.mark.parametrize(
    ("ops", "current", "records", "final"),
    [
        # insert then update then delete of a new key
        (
            [("I", "a"), ("U", "b"), ("D", "zzz")],
            {},
            [(INS, "a"), (UB, "a"), (UA, "b"), (DEL, "b")],
            None,
        ),
        # delete of an existing key, then insert again
        ([("D", "x"), ("I", "c")], {(1,): "old"}, [(DEL, "old"), (INS, "c")], "c"),
        # delete twice: the second is a no-op
        ([("D", "x"), ("D", "y")], {(1,): "old"}, [(DEL, "old")], None),
        # two updates chain through the intermediate row
        ([("U", "a"), ("U", "b")], {(1,): "old"}, [(UB, "old"), (UA, "a"), (UB, "a"), (UA, "b")], "b"),
        # delete then update: the update inserts
        ([("D", "x"), ("U", "d")], {(1,): "old"}, [(DEL, "old"), (INS, "d")], "d"),
    ],
)
def test_chained_changes_of_one_key(
    ops: list[tuple[str, str]],
    current: dict[tuple[int], str],
    records: list[tuple[RowKind, str]],
    final: str | None,
) -> None:
    rows = [{"id": 1, "v": v, "op": op} for op, v in ops]
    plan = plan_batch(rows, PK, {key: {"id": 1, "v": v} for key, v in current.items()})
    assert plan.records == [(kind, {"id": 1, "v": v}) for kind, v in records]
    assert plan.final == {(1,): None if final is None else {"id": 1, "v": final}}


def test_noop_deletes_are_counted() -> None:
    rows = [{"id": n, "op": "D"} for n in (1, 2, 3, 2)]
    plan = plan_batch(rows, PK, {(2,): {"id": 2}})
    assert plan.records == [(DEL, {"id": 2})]
    assert plan.noop_deletes == 3
    assert plan.final == {(1,): None, (2,): None, (3,): None}


def test_composite_keys_and_untouched_keys() -> None:
    current = {(1, "eu"): {"id": 1, "r": "eu", "v": 0}, (1, "us"): {"id": 1, "r": "us", "v": 0}}
    plan = plan_batch([{"id": 1, "r": "eu", "v": 1, "op": "U"}], ["id", "r"], current)
    assert plan.records == [(UB, current[(1, "eu")]), (UA, {"id": 1, "r": "eu", "v": 1})]
    assert plan.final == {(1, "eu"): {"id": 1, "r": "eu", "v": 1}}


def test_plan_does_not_mutate_current_state() -> None:
    current = {(1,): dict(OLD)}
    plan_batch([{**NEW, "op": "U"}, {"id": 1, "op": "D"}], PK, current)
    assert current == {(1,): OLD}


def test_keyless_tables_are_insert_only() -> None:
    rows: list[dict[str, Any]] = [{"v": 1}, {"v": 1, "op": "insert"}, {"v": 2, "op": "+I"}]
    plan = plan_batch(rows, [], {})
    assert plan.records == [(INS, {"v": 1}), (INS, {"v": 1}), (INS, {"v": 2})]
    assert plan.final == {}
    assert plan.noop_deletes == 0


@pytest.mark.parametrize("op", ["update", "delete", "U", "D", "upsert"])
def test_keyless_tables_refuse_update_and_delete(op: str) -> None:
    with pytest.raises(BadInputError) as info:
        plan_batch([{"v": 1}, {"v": 2, "op": op}], [], {})
    assert str(info.value) == "row 2, column 'op': tables without a primary key accept inserts only"


def test_bad_change_kind_names_row_and_column() -> None:
    rows = [{"id": 1, "_change": "I"}, {"id": 2, "_change": "I"}, {"id": 3, "_change": "merge"}]
    with pytest.raises(BadInputError) as info:
        plan_batch(rows, PK, {}, change_column="_change")
    assert str(info.value).startswith("row 3, column '_change': unknown change kind 'merge'")
    assert (info.value.row, info.value.column) == (3, "_change")


@pytest.mark.parametrize(
    ("row", "column"),
    [({"v": 1}, "id"), ({"id": None, "v": 1}, "id"), ({"id": 1, "r": None}, "r")],
)
def test_missing_key_names_row_and_column(row: dict[str, Any], column: str) -> None:
    with pytest.raises(BadInputError) as info:
        plan_batch([{"id": 9, "r": "x"}, row], ["id", "r"], {})
    assert str(info.value) == f"row 2, column '{column}': primary key value is missing"
    assert (info.value.row, info.value.column) == (2, column)


def test_falsy_key_values_are_keys() -> None:
    plan = plan_batch([{"id": 0, "r": ""}], ["id", "r"], {})
    assert plan.records == [(INS, {"id": 0, "r": ""})]


def test_apply_final() -> None:
    table = {(1,): {"id": 1, "v": "a"}, (2,): {"id": 2, "v": "b"}}
    result = apply_final(
        table, {(1,): None, (2,): {"id": 2, "v": "c"}, (3,): {"id": 3, "v": "d"}, (4,): None}
    )
    assert result == {(2,): {"id": 2, "v": "c"}, (3,): {"id": 3, "v": "d"}}
    assert table == {(1,): {"id": 1, "v": "a"}, (2,): {"id": 2, "v": "b"}}  # not mutated


def test_records_replayed_give_the_final_table() -> None:
    """The planned log, folded with either consumer semantics, equals the table after apply_final."""
    table = {(k,): {"id": k, "v": f"t{k}"} for k in range(1, 6)}
    rows = [
        {"id": 1, "v": "x", "op": "U"},
        {"id": 2, "op": "D"},
        {"id": 6, "v": "n", "op": "I"},
        {"id": 6, "v": "n2", "op": "U"},
        {"id": 7, "op": "D"},
        {"id": 3, "op": "D"},
        {"id": 3, "v": "back", "op": "I"},
        {"id": 1, "v": "y", "op": "upsert"},
    ]
    plan = plan_batch(rows, PK, table)
    expected = apply_final(table, plan.final)
    initial = [((k[0],), INS, row) for k, row in table.items()]
    log = initial + [((row["id"],), kind, row) for kind, row in plan.records]
    assert apply_upsert(log) == expected
    retract = apply_retract(log)
    assert retract.anomalies == {}
    assert retract.state == expected
    assert plan.noop_deletes == 1
