"""Folding a changelog with retract and upsert semantics, and normalizing an at-least-once log."""

from __future__ import annotations

import itertools
import random
from decimal import Decimal
from typing import Any

import pytest

from airflow_logstore.core.changelog import Normalizer, apply_retract, apply_upsert, freeze
from airflow_logstore.core.codec import RowKind
from logstore_dev.testing.values import exact_row

INS, UB, UA, DEL = RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE


def row(key: int, value: Any) -> dict[str, Any]:
    return {"id": key, "v": value}


# A clean changelog: key 1 inserted, updated twice; key 2 inserted and deleted; key 3 inserted.
CLEAN = [
    (1, INS, row(1, "a")),
    (2, INS, row(2, "x")),
    (1, UB, row(1, "a")),
    (1, UA, row(1, "b")),
    (3, INS, row(3, "z")),
    (2, DEL, row(2, "x")),
    (1, UB, row(1, "b")),
    (1, UA, row(1, "c")),
]
CLEAN_STATE = {1: row(1, "c"), 3: row(3, "z")}


def test_freeze_is_order_insensitive() -> None:
    assert freeze({"a": 1, "b": 2}) == freeze({"b": 2, "a": 1}) == (("a", 1), ("b", 2))


# --- retract ---------------------------------------------------------------------------------------


def test_retract_folds_a_clean_changelog() -> None:
    result = apply_retract(CLEAN)
    assert result.state == CLEAN_STATE
    assert result.anomalies == {}


def test_retract_is_order_insensitive() -> None:
    rng = random.Random(7)
    for _ in range(50):
        shuffled = CLEAN[:]
        rng.shuffle(shuffled)
        result = apply_retract(shuffled)
        assert result.state == CLEAN_STATE
        assert result.anomalies == {}


def test_reversal_cancels_exactly_the_record_it_reverses() -> None:
    duplicate = (1, UA, row(1, "c"))
    reversal = (1, UA.reversed(), row(1, "c"))
    assert apply_retract([*CLEAN, duplicate]).anomalies == {1: {freeze(row(1, "c")): 2}}
    result = apply_retract([*CLEAN, duplicate, reversal])
    assert result.state == CLEAN_STATE and result.anomalies == {}


@pytest.mark.parametrize(
    ("records", "anomaly"),
    [
        ([(1, INS, row(1, "a")), (1, INS, row(1, "a"))], {freeze(row(1, "a")): 2}),
        ([(1, DEL, row(1, "a"))], {freeze(row(1, "a")): -1}),
        ([(1, UB, row(1, "a"))], {freeze(row(1, "a")): -1}),
        ([(1, INS, row(1, "a")), (1, UA, row(1, "b"))], {freeze(row(1, "a")): 1, freeze(row(1, "b")): 1}),
        (
            [(1, INS, row(1, "a")), (1, DEL, row(1, "b"))],
            {freeze(row(1, "a")): 1, freeze(row(1, "b")): -1},
        ),
    ],
    ids=["duplicate-insert", "delete-of-nothing", "lone-update-before", "two-rows", "wrong-retraction"],
)
def test_retract_anomalies(records: list[Any], anomaly: dict[Any, int]) -> None:
    result = apply_retract([*records, (9, INS, row(9, "ok"))])
    assert result.anomalies == {1: anomaly}
    assert result.state == {9: row(9, "ok")}


def test_retract_fully_cancelled_key_is_absent() -> None:
    result = apply_retract([(1, INS, row(1, "a")), (1, DEL, row(1, "a"))])
    assert result.state == {} and result.anomalies == {}


def test_retract_state_rows_are_fresh_dicts() -> None:
    result = apply_retract([(1, INS, row(1, "a"))])
    assert result.state == {1: {"id": 1, "v": "a"}}
    assert isinstance(result.state[1], dict)


# --- upsert ----------------------------------------------------------------------------------------


def test_upsert_folds_a_clean_changelog() -> None:
    assert apply_upsert(CLEAN) == CLEAN_STATE


def test_upsert_last_record_per_key_wins() -> None:
    records = [
        (1, INS, row(1, "a")),
        (1, UA, row(1, "b")),
        (2, INS, row(2, "x")),
        (2, DEL, row(2, "whatever")),
    ]
    assert apply_upsert(records) == {1: row(1, "b")}


def test_upsert_update_before_deletes_until_the_update_after() -> None:
    assert apply_upsert([(1, INS, row(1, "a")), (1, UB, row(1, "a"))]) == {}
    assert apply_upsert([(1, INS, row(1, "a")), (1, UB, row(1, "a")), (1, UA, row(1, "b"))]) == {
        1: row(1, "b")
    }


def test_upsert_is_order_sensitive_and_tolerates_duplicates() -> None:
    assert apply_upsert([(1, UA, row(1, "b")), (1, INS, row(1, "a"))]) == {1: row(1, "a")}
    assert apply_upsert([*CLEAN, *CLEAN]) == CLEAN_STATE
    assert apply_upsert([(1, DEL, row(1, "a"))]) == {}


def test_upsert_copies_rows() -> None:
    source = row(1, "a")
    state = apply_upsert([(1, INS, source)])
    source["v"] = "mutated"
    assert state == {1: row(1, "a")}


# --- normalizer ------------------------------------------------------------------------------------


def feed_all(normalizer: Normalizer, records: list[Any]) -> list[tuple[Any, RowKind, dict[str, Any]]]:
    out: list[tuple[Any, RowKind, dict[str, Any]]] = []
    for key, kind, value in records:
        out.extend((key, k, r) for k, r in normalizer.feed(key, kind, value))
    return out


def test_normalizer_passes_a_clean_changelog_through() -> None:
    normalizer = Normalizer()
    assert feed_all(normalizer, CLEAN) == CLEAN
    assert normalizer.dropped == 0
    assert {k: row for k, (_, row) in normalizer.state.items()} == CLEAN_STATE


def test_normalizer_drops_exact_duplicates_of_a_retried_batch() -> None:
    batch = [(1, UB, row(1, "a")), (1, UA, row(1, "b")), (2, DEL, row(2, "x")), (4, INS, row(4, "n"))]
    setup = [(1, INS, row(1, "a")), (2, INS, row(2, "x"))]
    normalizer = Normalizer()
    first = feed_all(normalizer, setup + batch)
    dropped_before = normalizer.dropped
    retried = feed_all(normalizer, batch)
    assert first == setup + batch
    assert retried == []
    assert normalizer.dropped - dropped_before == 4
    assert apply_retract(first).state == {1: row(1, "b"), 4: row(4, "n")}


def test_normalizer_turns_a_repeated_insert_with_new_values_into_an_update() -> None:
    normalizer = Normalizer()
    assert normalizer.feed(1, INS, row(1, "a")) == [(INS, row(1, "a"))]
    assert normalizer.feed(1, INS, row(1, "b")) == [(UB, row(1, "a")), (UA, row(1, "b"))]
    assert normalizer.feed(1, UA, row(1, "c")) == [(UB, row(1, "b")), (UA, row(1, "c"))]
    assert normalizer.dropped == 0


def test_normalizer_emits_against_state_for_update_after_of_unknown_key() -> None:
    normalizer = Normalizer()
    assert normalizer.feed(1, UA, row(1, "b")) == [(INS, row(1, "b"))]


def test_normalizer_absorbs_stale_retractions() -> None:
    normalizer = Normalizer()
    normalizer.feed(1, INS, row(1, "b"))
    assert normalizer.feed(1, UB, row(1, "a")) == []  # stale -U (of an older row)
    assert normalizer.feed(1, DEL, row(1, "a")) == []  # stale delete
    assert normalizer.feed(2, DEL, row(2, "x")) == []  # delete of an unknown key
    assert normalizer.feed(2, UB, row(2, "x")) == []
    assert normalizer.dropped == 4
    assert normalizer.feed(1, DEL, row(1, "b")) == [(DEL, row(1, "b"))]
    assert normalizer.feed(1, DEL, row(1, "b")) == []  # duplicate delete
    assert normalizer.dropped == 5
    assert normalizer.state == {}


def test_normalizer_and_retract_compare_rows_exactly() -> None:
    """A row holding NaN is equal to itself (Python's ``nan != nan`` made its delete count as stale and
    its duplicate as a change), and ``-0.0`` is another value than ``0.0`` (``==`` says equal)."""
    nan_row = {"id": 1, "v": float("nan"), "d": Decimal("1.50")}
    normalizer = Normalizer()
    assert normalizer.feed(1, INS, nan_row) == [(INS, nan_row)]
    assert normalizer.feed(1, INS, {"id": 1, "v": float("nan"), "d": Decimal("1.50")}) == []  # a duplicate
    [(kind, deleted)] = normalizer.feed(1, DEL, {"id": 1, "v": float("nan"), "d": Decimal("1.50")})
    assert kind is DEL and exact_row(deleted) == exact_row(nan_row)
    assert normalizer.state == {}
    assert normalizer.feed(2, INS, row(2, 0.0)) == [(INS, row(2, 0.0))]
    assert normalizer.feed(2, UA, row(2, -0.0)) == [(UB, row(2, 0.0)), (UA, row(2, -0.0))]  # a change
    assert normalizer.dropped == 1
    retracted = apply_retract([(1, INS, nan_row), (1, DEL, dict(nan_row)), (2, INS, row(2, 0.0))])
    assert retracted.state == {2: row(2, 0.0)} and not retracted.anomalies
    assert apply_retract([(2, INS, row(2, 0.0)), (2, DEL, row(2, -0.0))]).anomalies  # they do not cancel


def test_normalizer_update_before_of_current_row_is_silent_not_dropped() -> None:
    normalizer = Normalizer()
    normalizer.feed(1, INS, row(1, "a"))
    assert normalizer.feed(1, UB, row(1, "a")) == []
    assert normalizer.dropped == 0
    assert normalizer.feed(1, UA, row(1, "a")) == []  # a no-op update pair emits nothing
    assert normalizer.dropped == 1


def test_normalizer_output_folds_identically_under_both_semantics() -> None:
    """At-least-once input (every record possibly twice), normalized, is a clean changelog."""
    rng = random.Random(3)
    for _ in range(30):
        noisy = list(itertools.chain.from_iterable([r] * rng.randint(1, 3) for r in CLEAN))
        out = feed_all(Normalizer(), noisy)
        retract = apply_retract(out)
        assert retract.anomalies == {}
        assert retract.state == CLEAN_STATE == apply_upsert(out)


@pytest.mark.parametrize("seed", range(20))
def test_normalizer_counts_add_up_to_what_it_returns(seed: int) -> None:
    """Records out = fed - dropped - absorbed + added, on any changelog (duplicates, stale and repeated
    retractions, pairs): the numbers ``logstore read --normalize`` prints add up."""
    rng = random.Random(seed)
    normalizer = Normalizer()
    out = 0
    for _ in range(300):
        key = rng.randrange(5)
        kind = rng.choice([INS, UB, UA, DEL])
        out += len(normalizer.feed(key, kind, row(key, rng.choice("abc"))))
    assert normalizer.fed == 300
    assert out == normalizer.fed - normalizer.dropped - normalizer.absorbed + normalizer.added
    assert normalizer.dropped and normalizer.absorbed and normalizer.added  # every term was exercised
