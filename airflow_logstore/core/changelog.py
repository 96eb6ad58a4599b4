"""Applying a changelog: the two ways consumers fold +I/-U/+U/-D records into a table, and normalize.

- **retract** (Flink's changelog semantics): ``+I``/``+U`` add the row, ``-U``/``-D`` retract that exact
  row. Order-insensitive; a reversal cancels exactly the record it reverses.
- **upsert**: per key the last record wins; ``+I``/``+U`` set the row, ``-U``/``-D`` delete the key.

Reconciliation writes its reversals so that the whole log, in order, gives the Iceberg table's state
under both (see ``core.reconcile``). :class:`Normalizer` is Paimon's "normalize" operator for
eventual reads: keyed state that drops duplicates, so a downstream sees each change once.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_logstore.core.codec import RowKind, row_identity

Key = Hashable
Row = dict[str, Any]


def freeze(row: Row) -> tuple[tuple[str, Any], ...]:
    """The row's identity: two rows are one row exactly when every value is the same
    (:func:`~airflow_logstore.core.codec.row_identity`: a row with NaN equals itself, ``-0.0`` is
    not ``0.0``)."""
    return row_identity(row)


@dataclass
class RetractResult:
    state: dict[Key, Row] = field(default_factory=dict)
    anomalies: dict[Key, dict[tuple[tuple[str, Any], ...], int]] = field(default_factory=dict)


def apply_retract(records: Iterable[tuple[Key, RowKind, Row]]) -> RetractResult:
    """Fold records with retract semantics; keys whose rows do not net to exactly one are anomalies."""
    weights: dict[Key, dict[tuple[tuple[str, Any], ...], int]] = {}
    seen: dict[tuple[tuple[str, Any], ...], Row] = {}
    for key, kind, row in records:
        rows = weights.setdefault(key, {})
        frozen = freeze(row)
        seen.setdefault(frozen, row)
        rows[frozen] = rows.get(frozen, 0) + (1 if kind.is_addition else -1)
    result = RetractResult()
    for key, rows in weights.items():
        live = {r: w for r, w in rows.items() if w != 0}
        if not live:
            continue
        if len(live) == 1 and next(iter(live.values())) == 1:
            result.state[key] = dict(seen[next(iter(live))])
        else:
            result.anomalies[key] = live
    return result


def apply_upsert(records: Iterable[tuple[Key, RowKind, Row]]) -> dict[Key, Row]:
    """Fold records with upsert semantics (last record per key wins)."""
    state: dict[Key, Row] = {}
    for key, kind, row in records:
        if kind.is_addition:
            state[key] = dict(row)
        else:
            state.pop(key, None)
    return state


class Normalizer:
    """Deduplicate an at-least-once changelog per key with keyed state (Paimon's normalize).

    Emits a clean changelog: an addition equal to the key's current row is a duplicate and dropped; an
    addition that differs emits ``+I`` or ``-U``/``+U`` against the state; ``-D`` of the current row
    emits ``-D``; other retractions (``-U`` halves, stale or duplicate deletes) are absorbed.
    Memory grows with the number of distinct keys: that is its cost.

    Its counts add up: records out = ``fed`` - ``dropped`` - ``absorbed`` + ``added``, where ``absorbed``
    are ``-U`` halves of the current row (the following ``+U`` emits the pair from the state) and
    ``added`` the ``-U`` halves emitted from the state (an addition that changes a key's row).
    """

    def __init__(self) -> None:
        self.state: dict[Key, tuple[tuple[tuple[str, Any], ...], Row]] = {}  # key -> (identity, row)
        self.fed = 0
        self.dropped = 0
        self.absorbed = 0
        self.added = 0

    def feed(self, key: Key, kind: RowKind, row: Row) -> list[tuple[RowKind, Row]]:
        self.fed += 1
        frozen = freeze(row)
        held = self.state.get(key)
        current = held[0] if held is not None else None
        if kind.is_addition:
            if current == frozen:
                self.dropped += 1
                return []
            self.state[key] = (frozen, row)
            if held is None:
                return [(RowKind.INSERT, row)]
            self.added += 1
            return [(RowKind.UPDATE_BEFORE, dict(held[1])), (RowKind.UPDATE_AFTER, row)]
        if kind is RowKind.DELETE and current == frozen:
            del self.state[key]
            return [(RowKind.DELETE, row)]
        if kind is RowKind.UPDATE_BEFORE and current == frozen:
            self.absorbed += 1
            return []  # the following +U of the pair carries the change
        self.dropped += 1
        return []
