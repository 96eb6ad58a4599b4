"""How a batch of CDC-style input rows becomes log records and a final table state.

Input rows carry an optional change kind (insert / update / delete; ``upsert`` and the one-letter
forms I/U/D are accepted too). For a primary-key table the batch is applied in input order, per key,
starting from the table's current row (the before-image):

=============  ====================  ==========================
change         key has a row         key has no row
=============  ====================  ==========================
insert/update  ``-U`` old, ``+U`` new   ``+I`` new
delete         ``-D`` old              nothing (a no-op delete, counted)
=============  ====================  ==========================

Tables without a primary key are append-only: every row is ``+I``; update and delete are refused.
The Spark job implements exactly this (``airflow_logstore.write.planning``); this module is the
reference used by tests and by small Python-side writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_logstore.core.codec import RowKind
from airflow_logstore.exceptions import BadInputError

CHANGE_ALIASES = {
    "insert": "I",
    "i": "I",
    "c": "I",
    "create": "I",
    "+i": "I",
    "update": "U",
    "u": "U",
    "upsert": "U",
    "+u": "U",
    "delete": "D",
    "d": "D",
    "-d": "D",
}


def normalize_change(value: Any, *, row: int | None = None, column: str = "op") -> str:
    """Map a change-kind value to I, U or D; None (no column) means insert."""
    if value is None:
        return "I"
    found = CHANGE_ALIASES.get(str(value).strip().lower())
    if found is None:
        raise BadInputError(
            f"unknown change kind '{value}' (expected insert, update, delete, upsert or I/U/D)",
            row=row,
            column=column,
        )
    return found


@dataclass
class BatchPlan:
    records: list[tuple[RowKind, dict[str, Any]]] = field(default_factory=list)
    final: dict[tuple[Any, ...], dict[str, Any] | None] = field(default_factory=dict)
    noop_deletes: int = 0


def plan_batch(
    rows: Iterable[Mapping[str, Any]],
    primary_key: Sequence[str],
    current: Mapping[tuple[Any, ...], Mapping[str, Any]],
    *,
    change_column: str = "op",
) -> BatchPlan:
    """Plan the log records and final per-key state of one batch (reference implementation)."""
    plan = BatchPlan()
    state: dict[tuple[Any, ...], dict[str, Any] | None] = {}
    for number, raw in enumerate(rows, start=1):
        change = normalize_change(raw.get(change_column), row=number, column=change_column)
        row = {k: v for k, v in raw.items() if k != change_column}
        if not primary_key:
            if change != "I":
                raise BadInputError(
                    "tables without a primary key accept inserts only", row=number, column=change_column
                )
            plan.records.append((RowKind.INSERT, row))
            continue
        for column in primary_key:
            if row.get(column) is None:
                raise BadInputError("primary key value is missing", row=number, column=column)
        key = tuple(row[c] for c in primary_key)
        before = state[key] if key in state else (dict(current[key]) if key in current else None)
        if change == "D":
            if before is None:
                plan.noop_deletes += 1
            else:
                plan.records.append((RowKind.DELETE, before))
            state[key] = None
        else:
            if before is None:
                plan.records.append((RowKind.INSERT, row))
            else:
                plan.records.append((RowKind.UPDATE_BEFORE, before))
                plan.records.append((RowKind.UPDATE_AFTER, row))
            state[key] = row
    plan.final = state
    return plan


def apply_final(
    table: Mapping[tuple[Any, ...], Mapping[str, Any]],
    final: Mapping[tuple[Any, ...], Mapping[str, Any] | None],
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The table after a batch's final per-key states (None deletes the key)."""
    result = {key: dict(row) for key, row in table.items()}
    for key, row in final.items():
        if row is None:
            result.pop(key, None)
        else:
            result[key] = dict(row)
    return result
