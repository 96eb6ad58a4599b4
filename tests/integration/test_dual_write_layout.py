"""Key tables bucketed by their key (issue 18): new tables, tables created before, and the way between."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.core.batch_plan import apply_final, plan_batch
from airflow_logstore.table.layout import is_key_bucketed
from airflow_logstore.table.tables import show_table
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.tables import eventual_log, fold_log, make_table, table_state, write_jsonl

BATCHES: list[list[dict[str, Any]]] = [
    [{"id": i, "name": f"n{i}", "amount": i * 10} for i in range(1, 41)],
    [
        {"id": 1, "name": "n1-b", "amount": 11, "op": "update"},
        {"id": 2, "op": "delete"},
        {"id": 41, "name": "n41", "amount": 410, "op": "insert"},
        {"id": 41, "name": "n41-b", "amount": 411, "op": "update"},
        {"id": 99, "op": "delete"},
        {"id": 17, "name": "n17-b", "amount": 171, "op": "upsert"},
    ],
    [
        {"id": 1, "op": "delete"},
        {"id": 2, "name": "n2-again", "amount": 22, "op": "insert"},
        {"id": 30, "name": "n30-c", "amount": 33, "op": "upsert"},
    ],
]


def _expected(batches: list[list[dict[str, Any]]], key: list[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rows in batches:
        full = [{"name": None, "amount": None, **row} for row in rows]
        state = apply_final(state, plan_batch(full, key, state).final)
    return state


def _write(
    spark: Any, handle: Any, tmp_path: Path, batches: list[list[dict[str, Any]]], writer: str
) -> list[Any]:
    dual = open_writer(spark, str(handle.name), writer_id=writer)
    return [
        dual.write_path(str(write_jsonl(tmp_path / f"{writer}-{n}.jsonl", rows)), n)
        for n, rows in enumerate(batches, start=1)
    ]


def _rows(state: dict[tuple[Any, ...], dict[str, Any]]) -> dict[tuple[Any, ...], tuple[Any, Any]]:
    return {key: (row["name"], row["amount"]) for key, row in state.items()}


def test_a_key_table_bucketed_by_its_key_applies_batches_exactly(env, spark, tmp_path: Path) -> None:
    handle = make_table(env, properties={"log-store.key-buckets": "16"})
    table = handle.load()
    (field,) = table.spec().fields
    assert str(field.transform) == "bucket[16]" and field.name == "id_bucket"
    assert is_key_bucketed(table) and show_table(handle)["layout_note"] is None

    results = _write(spark, handle, tmp_path, BATCHES, "bucketed")

    assert [r.noop_deletes for r in results] == [0, 1, 0]
    assert _rows(table_state(handle)) == _rows(_expected(BATCHES, ["id"]))
    assert _rows(fold_log(eventual_log(handle), ["id"])) == _rows(table_state(handle))
    assert len({f["partition"]["id_bucket"] for f in handle.load().inspect.files().to_pylist()}) > 1


def test_a_table_created_before_the_layout_still_works_and_show_says_how_to_adopt_it(
    env, spark, tmp_path: Path
) -> None:
    handle = make_table(env, properties={"log-store.key-buckets": "0"})
    with handle.load().transaction() as tx:  # now as a table created before the setting existed
        tx.remove_properties("log-store.key-buckets")
    assert handle.load().spec().is_unpartitioned()
    note = show_table(handle)["layout_note"]
    assert note is not None
    assert f"ALTER TABLE {handle.name} ADD PARTITION FIELD bucket(16, `id`)" in note
    assert "SET TBLPROPERTIES ('log-store.key-buckets'='0')" in note
    assert make_table(env).load().properties["log-store.key-buckets"] == "0"  # new tables record it
    assert show_table(make_table(env))["layout_note"] is None

    _write(spark, handle, tmp_path, BATCHES[:2], "old-layout")
    assert _rows(table_state(handle)) == _rows(_expected(BATCHES[:2], ["id"]))

    # Adopting the layout as the note says: later batches land in buckets, older rows stay where they are.
    spark.sql(f"ALTER TABLE {handle.spark_name()} ADD PARTITION FIELD bucket(16, `id`)")
    assert show_table(handle)["layout_note"] is None
    dual = open_writer(spark, str(handle.name), writer_id="old-layout")
    result = dual.write_path(str(write_jsonl(tmp_path / "after-evolution.jsonl", BATCHES[2])), 3)
    assert not result.skipped and result.noop_deletes == 0
    assert _rows(table_state(handle)) == _rows(_expected(BATCHES, ["id"]))
    assert _rows(fold_log(eventual_log(handle), ["id"])) == _rows(table_state(handle))


@pytest.mark.parametrize("buckets", ["0", "4"])
def test_string_keys_with_quotes_and_backslashes_reach_their_rows(
    env, spark, tmp_path: Path, buckets: str
) -> None:
    """The batch's keys go into the lookup's filter and the MERGE's statement as literals.

    Both key columns are strings: a key of a string and a number fails in the key's JSON encoding
    (``to_json(array(...))`` coerces the string to the number under ANSI mode), before this change too.
    """
    handle = make_table(
        env,
        schema="region string, id string, name string, amount long",
        primary_key=("region", "id"),
        properties={"log-store.key-buckets": buckets},
    )
    awkward = ["o'brien", "back\\slash", 'dq"x', "plain", "ünï"]
    first = [{"region": r, "id": i, "name": f"{r}-{i}", "amount": 1} for r in awkward for i in ("1", "2")]
    second = [
        {"region": "o'brien", "id": "1", "name": "moved", "amount": 5, "op": "update"},
        {"region": "back\\slash", "id": "2", "op": "delete"},
        {"region": 'dq"x', "id": "3", "name": "new", "amount": 7, "op": "insert"},
        {"region": "nowhere", "id": "1", "op": "delete"},
    ]
    results = _write(spark, handle, tmp_path, [first, second], f"strings-{buckets}")
    assert results[1].noop_deletes == 1
    expected = _expected([first, second], ["region", "id"])
    assert _rows(table_state(handle)) == _rows(expected)


def test_records_and_no_op_deletes_come_from_one_computation_of_the_plan(env, spark, tmp_path: Path) -> None:
    """Issue 18: the join with the lookup and the per-key window run once per batch. ``persisted`` caches
    the changes with their before- and after-images, and both the records (produced) and the no-op
    deletes (counted) read that cache instead of computing the plan again."""
    from airflow_logstore.write.checking import validated_changes
    from airflow_logstore.write.inputs import read_raw
    from airflow_logstore.write.planning import (
        AFTER_VALUE_COLUMN,
        BEFORE_COLUMN,
        BEFORE_VALUE_COLUMN,
        noop_delete,
        plan_row_kinds,
    )

    handle = make_table(env)
    _write(spark, handle, tmp_path, BATCHES[:1], "once")
    target = spark.table(handle.spark_name())
    raw = read_raw(spark, str(write_jsonl(tmp_path / "b2.jsonl", BATCHES[1])), None)
    validated = validated_changes(raw, target.schema, ["id"], "op")
    changes = validated.frame
    plan = plan_row_kinds(changes, target, ["id"]).persisted()
    try:
        for frame in (plan.through, plan.planned.where(noop_delete())):  # produced; counted
            scans = [
                line
                for line in frame._jdf.queryExecution().executedPlan().toString().splitlines()
                if "InMemoryTableScan" in line
            ]
            assert any(BEFORE_COLUMN in line for line in scans), scans  # the planned changes, cached
        assert plan.count().noop_deletes == 1  # id 99
        values = [
            v for row in plan.through.collect() for v in (row[BEFORE_VALUE_COLUMN], row[AFTER_VALUE_COLUMN])
        ]
        kinds = Counter(json.loads(value)["kind"] for value in values if value is not None)
        assert kinds == {"-U": 3, "+U": 3, "-D": 1, "+I": 1}  # -U/+U of 1, 17 and 41; -D of 2; +I of 41
    finally:
        plan.unpersist()
        validated.unpersist()


def test_the_records_reach_the_producers_without_a_shuffle_after_the_plan(env, spark, tmp_path: Path) -> None:
    """Issue 18, item 2: the plan is spread over the producing tasks (all of a key in one) before its
    per-key window, so the produced records and the MERGE's source both read the cached plan, with no
    exchange between the cache and the producers."""
    from airflow_logstore.write.checking import validated_changes
    from airflow_logstore.write.inputs import read_raw
    from airflow_logstore.write.planning import plan_row_kinds
    from airflow_logstore.write.producing import in_produce_order

    handle = make_table(env)
    _write(spark, handle, tmp_path, BATCHES[:1], "spread")
    target = spark.table(handle.spark_name())
    raw = read_raw(spark, str(write_jsonl(tmp_path / "b2.jsonl", BATCHES[1])), None)
    validated = validated_changes(raw, target.schema, ["id"], "op")
    changes = validated.frame
    plan = plan_row_kinds(changes, target, ["id"], tasks=3).persisted()
    try:
        ordered = in_produce_order(plan.through)
        lines = ordered._jdf.queryExecution().executedPlan().toString().splitlines()
        cached = [i for i, line in enumerate(lines) if "InMemoryTableScan" in line]
        assert cached, lines
        assert not any("Exchange" in line for line in lines[: cached[0]]), lines
        assert ordered.rdd.getNumPartitions() == 3
        keys_per_task = [
            {json.loads(row[0])[0] for row in part} for part in ordered.rdd.glom().collect() if part
        ]
        assert sum(len(keys) for keys in keys_per_task) == len(set().union(*keys_per_task))  # disjoint
        final = {row["id"]: (row["name"], row["_logstore_op"]) for row in plan.final.collect()}
        assert final == {
            1: ("n1-b", "U"),
            2: (None, "D"),
            41: ("n41-b", "U"),
            99: (None, "D"),
            17: ("n17-b", "U"),
        }
        final_plan = plan.final._jdf.queryExecution().executedPlan().toString()
        assert "InMemoryTableScan" in final_plan  # the MERGE's source is the cached plan too
        assert plan.holds_keys()  # ids 1, 2 and 17 are in the table
    finally:
        plan.unpersist()
        validated.unpersist()


def _interleaved_writer(spark: Any, handle: Any, writer_id: str, between: Any) -> Any:
    """A writer that runs ``between`` (another writer's batch) between its plan and its commit
    (deterministically: in the same thread, once its records are flushed, before it commits; with a
    write-through, once its rows are staged too)."""
    from airflow_logstore.write.writer import DualWriter

    class InterleavedWriter(DualWriter):
        def _commit_logged(self, counted: Any, produced: Any, rows: Any) -> Any:
            between()
            return super()._commit_logged(counted, produced, rows)

    return InterleavedWriter(spark, handle, writer_id=writer_id)


@pytest.mark.parametrize("planted", [False, True], ids=["as-built", "planted-append-on-any-base"])
def test_a_batch_of_new_keys_is_appended_only_on_the_snapshot_it_was_planned_against(
    env, spark, tmp_path: Path, caplog: Any, monkeypatch: Any, planted: bool
) -> None:
    """Issue 18: a batch whose keys the table does not hold is appended instead of merged (no read of
    the table). That is the MERGE's result only on the snapshot planned against: when another writer
    commits one of the keys in between, the commit merges. The planted bug (append on any base) leaves
    that key twice in the table, which the check below catches."""
    import logging

    from airflow_logstore.write.planning import KeysAbsent

    if planted:
        monkeypatch.setattr(KeysAbsent, "hold_for", lambda self, base, rows: True)
    handle = make_table(env)
    _write(spark, handle, tmp_path, BATCHES[:1], "first")  # ids 1..40
    new_keys = [
        {"id": 50, "name": "a50", "amount": 1},
        {"id": 51, "name": "a51", "amount": 2},
        {"id": 52, "op": "delete"},  # of nothing, as planned
    ]
    other = [{"id": 51, "name": "b51", "amount": 3}, {"id": 52, "name": "b52", "amount": 4}]

    def other_writer_commits() -> None:
        _write(spark, handle, tmp_path, [other], "other")
        caplog.clear()  # what follows is the interleaved writer's commit

    writer = _interleaved_writer(spark, handle, "interleaved", other_writer_commits)
    with caplog.at_level(logging.INFO, logger="airflow_logstore.write.committing"):
        result = writer.write_path(str(write_jsonl(tmp_path / "new.jsonl", new_keys)), 1)
    appended = [r for r in caplog.records if "appended" in r.getMessage()]
    rows = spark.table(handle.spark_name()).where("id >= 50").collect()
    ids = sorted(row["id"] for row in rows)
    if planted:
        assert appended and ids == [50, 51, 51, 52]  # the checker catches the planted bug
        return
    assert not appended  # main moved between the plan and the commit: merged
    assert ids == [50, 51] and result.snapshot_id is not None
    assert {row["id"]: row["name"] for row in rows} == {50: "a50", 51: "a51"}  # the later commit wins
    assert result.noop_deletes == 1  # as planned: 52 had no row then; the later commit deletes it

    caplog.clear()  # nothing in between now: the same kind of batch is appended
    with caplog.at_level(logging.INFO, logger="airflow_logstore.write.committing"):
        _write(spark, handle, tmp_path, [[{"id": 60, "name": "n60", "amount": 6}]], "plain")
    assert any("appended" in r.getMessage() for r in caplog.records)
    assert spark.table(handle.spark_name()).where("id = 60").count() == 1
