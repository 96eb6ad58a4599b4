"""The write-through (issue 18, item 2): a dual write of a batch the table appends produces its records
while its rows are written to a staging branch, in one Spark job, and its commit appends those files.

Checked on the real broker, Spark and Iceberg: the table and the log hold the batch exactly once, the
records keep per-key order, the no-op deletes are counted, the snapshot summary names the task attempts
whose records are in the log, and no staging branch is left behind (the next epoch's fence removes the
one a crashed attempt left)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.core.changes import apply_final, plan_batch
from airflow_logstore.core.commit import STAGE_PREFIX
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read.reader import read_log
from airflow_logstore.spark import committing, dual_write
from airflow_logstore.spark.dual_write import open_writer
from airflow_logstore.spark.results import parse_result
from airflow_logstore.table.tables import snapshot_commits
from airflow_logstore.testing.tables import eventual_log, fold_log, make_table, table_state, write_jsonl

#: New keys, with changes of a key inside the batch: 7 is inserted then deleted, 5 inserted then
#: updated, 99 deleted without a row (a no-op delete).
BATCH: list[dict[str, Any]] = [
    *({"id": i, "name": f"n{i}", "amount": i} for i in range(1, 31)),
    {"id": 5, "name": "n5-b", "amount": 55, "op": "update"},
    {"id": 7, "op": "delete"},
    {"id": 99, "op": "delete"},
]


def _expected(rows: list[dict[str, Any]], key: list[str]) -> tuple[dict[Any, dict[str, Any]], int]:
    """The table after ``rows`` on an empty table, and how many log records they make."""
    full = [{"name": None, "amount": None, **row} for row in rows]
    planned = plan_batch(full, key, {})
    return apply_final({}, planned.final), len(planned.records)


def _plain(state: dict[Any, dict[str, Any]]) -> dict[Any, tuple[Any, Any]]:
    return {key: (row["name"], row["amount"]) for key, row in state.items()}


def _stage_refs(handle: Any) -> list[str]:
    return [ref for ref in handle.load().metadata.refs if ref.startswith(STAGE_PREFIX)]


def _no_other_write(monkeypatch: Any) -> None:
    """Fail the test if the batch's records or rows went any other way than the write-through."""

    def other_way(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the batch was not written through")

    monkeypatch.setattr(dual_write, "produce_records", other_way)
    monkeypatch.setattr(committing, "write_branch", other_way)


@pytest.mark.parametrize("key", [["id"], []], ids=["key-table", "no-key"])
def test_a_batch_the_table_appends_is_written_through(env, spark, tmp_path: Path, monkeypatch, key) -> None:
    handle = make_table(env, primary_key=tuple(key))
    batch = BATCH if key else [row for row in BATCH if "op" not in row]
    expected, records = _expected(batch, key)
    _no_other_write(monkeypatch)

    result = open_writer(spark, str(handle.name), writer_id="through").write_path(
        str(write_jsonl(tmp_path / "b1.jsonl", batch)), 1
    )

    assert (result.rows_in, result.log_records) == (len(batch), records)
    assert result.noop_deletes == (1 if key else 0)
    if key:
        assert _plain(table_state(handle)) == _plain(expected)
    else:
        assert Counter(row["id"] for row in table_state(handle).values()) == Counter(r["id"] for r in batch)
    assert _stage_refs(handle) == []  # the staging branch went with the commit
    [commit] = [c for c in snapshot_commits(handle.load()) if c.writer_id == "through"]
    eventual = eventual_log(handle)
    assert {r.meta.task for r in eventual.records} == commit.tasks  # the summary names the producers
    assert commit.record_count == len(eventual.records) == records
    for partition, (first, last) in commit.offsets.items():
        offsets = sorted(r.offset for r in eventual.records if r.partition == partition)
        assert (offsets[0], offsets[-1]) == (first, last)
    publish_visible_offsets(handle)
    consistent = read_log(handle, consistency="transactional")
    assert len(consistent.records) == records
    if key:  # per key in input order: the log folds to the table
        assert _plain(fold_log(consistent, key)) == _plain(table_state(handle))


def test_a_batch_with_keys_the_table_holds_is_merged_not_written_through(
    env, spark, tmp_path: Path, monkeypatch: Any
) -> None:
    handle = make_table(env)
    writer = open_writer(spark, str(handle.name), writer_id="merge")
    writer.write_path(str(write_jsonl(tmp_path / "b1.jsonl", BATCH)), 1)
    calls: list[str] = []
    real = dual_write.produce_records

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append("produce")
        return real(*args, **kwargs)

    monkeypatch.setattr(dual_write, "produce_records", counted)
    second = [{"id": 1, "name": "n1-b", "amount": 2, "op": "update"}, {"id": 40, "name": "n40"}]
    result = writer.write_path(str(write_jsonl(tmp_path / "b2.jsonl", second)), 2)
    assert calls == ["produce"] and result.log_records == 3  # -U/+U of 1, +I of 40
    state = _plain(table_state(handle))
    assert state[(1,)] == ("n1-b", 2) and state[(40,)] == ("n40", None)
    assert _stage_refs(handle) == []


def test_a_crashed_write_through_leaves_its_staging_branch_to_the_next_epochs_fence(env, tmp_path) -> None:
    handle = make_table(env)
    path = write_jsonl(tmp_path / "b1.jsonl", BATCH)
    base = ["--table", str(handle.name), "--writer-id", "crashy", "--input", str(path), "--batch-id", "1"]
    crashed = env.run_job("dual_write.py", [*base, "--crash-at", "after-log:1"])
    assert crashed.returncode in (-9, 137), crashed.stderr[-3000:]
    dead_epoch = handle.control().read().latest_epoch("crashy")
    [left] = _stage_refs(handle)  # the rows were staged, the records flushed, nothing committed
    assert left.endswith(f"_1_{dead_epoch}_0") and not snapshot_commits(handle.load())

    restarted = env.run_job("dual_write.py", base)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    result = parse_result(restarted.stdout)
    assert result is not None and result["epoch"] > dead_epoch
    assert _stage_refs(handle) == []  # fenced away with the dead epoch's attempt refs
    expected, records = _expected(BATCH, ["id"])
    assert _plain(table_state(handle)) == _plain(expected)
    by_epoch = Counter(r.meta.epoch for r in eventual_log(handle).records)
    assert by_epoch == {dead_epoch: records, result["epoch"]: records}  # the dead copy awaits reconciliation
    publish_visible_offsets(handle)
    consistent = read_log(handle, consistency="transactional")
    assert {r.meta.epoch for r in consistent.records} == {result["epoch"]}
    assert _plain(fold_log(consistent, ["id"])) == _plain(expected)


def test_a_write_through_short_of_a_task_report_fails_before_any_commit(
    env, spark, tmp_path: Path, monkeypatch: Any
) -> None:
    """The driver checks the reports against the plan's partitions (one report each) before it commits:
    a write-through told of one more task than reported (as if a successful task's report were lost)
    fails, and the batch is in no snapshot of ``main`` and leaves no staging branch."""
    real = dual_write.write_through

    def one_task_more(rows: Any, ctx: Any, table: str, tasks: int) -> Any:
        return real(rows, ctx, table, tasks + 1)

    monkeypatch.setattr(dual_write, "write_through", one_task_more)
    handle = make_table(env)
    writer = open_writer(spark, str(handle.name), writer_id="short")
    tasks = spark.sparkContext.defaultParallelism  # the plan's
    reported = re.escape(str(list(range(tasks))))
    with pytest.raises(RuntimeError, match=f"reports of partitions {reported} for its {tasks + 1} tasks"):
        writer.write_path(str(write_jsonl(tmp_path / "b1.jsonl", BATCH)), 1)
    assert snapshot_commits(handle.load()) == [] and table_state(handle) == {}
    assert _stage_refs(handle) == []


#: New keys, each changed once: inserts, an update of a key the table does not hold (an insert), a
#: delete of a key that has no row (a no-op delete).
ONCE: list[dict[str, Any]] = [
    *({"id": i, "name": f"n{i}", "amount": i} for i in range(1, 31)),
    {"id": 40, "name": "n40", "amount": 40, "op": "update"},
    {"id": 99, "op": "delete"},
]


def _written_rows(monkeypatch: Any) -> list[Any]:
    """The rows each write-through of the test gets (recorded, then written as they are)."""
    real, seen = dual_write.write_through, []

    def recorded(rows: Any, ctx: Any, table: str, tasks: int) -> Any:
        seen.append(rows)
        return real(rows, ctx, table, tasks)

    monkeypatch.setattr(dual_write, "write_through", recorded)
    return seen


def _shuffles(rows: Any) -> bool:
    return "Exchange" in rows._jdf.queryExecution().executedPlan().toString()


def test_a_batch_that_changes_each_key_once_is_written_through_from_its_input_partitions(
    env, spark, tmp_path: Path, monkeypatch: Any
) -> None:
    """No change of such a batch has a before-image (the table holds none of its keys) and no record
    depends on another change: its rows go from the input's partitions to the log and the staging
    branch with no shuffle and no per-key window. The log and the table hold it exactly once."""
    handle = make_table(env)
    written = _written_rows(monkeypatch)
    _no_other_write(monkeypatch)
    expected, records = _expected(ONCE, ["id"])

    result = open_writer(spark, str(handle.name), writer_id="once").write_path(
        str(write_jsonl(tmp_path / "b1.jsonl", ONCE)), 1
    )

    [rows] = written
    assert not _shuffles(rows)
    assert (result.rows_in, result.log_records, result.noop_deletes) == (len(ONCE), records, 1)
    assert _plain(table_state(handle)) == _plain(expected)
    [commit] = [c for c in snapshot_commits(handle.load()) if c.writer_id == "once"]
    eventual = eventual_log(handle)
    assert {r.meta.task for r in eventual.records} == commit.tasks
    assert commit.record_count == len(eventual.records) == records == len(ONCE) - 1
    publish_visible_offsets(handle)
    assert _plain(fold_log(read_log(handle, consistency="transactional"), ["id"])) == _plain(expected)


def test_a_batch_that_changes_a_key_twice_takes_the_per_key_window(
    env, spark, tmp_path: Path, monkeypatch: Any
) -> None:
    handle = make_table(env)
    written = _written_rows(monkeypatch)
    open_writer(spark, str(handle.name), writer_id="twice").write_path(
        str(write_jsonl(tmp_path / "b1.jsonl", BATCH)), 1
    )
    [rows] = written
    assert _shuffles(rows)
    assert _plain(table_state(handle)) == _plain(_expected(BATCH, ["id"])[0])


def test_the_batch_checks_catch_a_check_that_misses_a_repeated_key(
    env, spark, tmp_path: Path, monkeypatch: Any
) -> None:
    """The planted bug: every batch is taken for one that changes each key once. The write-through test
    of a batch with keys changed twice (inserted then updated, inserted then deleted) then fails."""
    monkeypatch.setattr(dual_write, "keys_changed_once", lambda *args: True)
    with pytest.raises(AssertionError):
        test_a_batch_the_table_appends_is_written_through(env, spark, tmp_path, monkeypatch, ["id"])


def test_keys_changed_once_finds_a_repeat_in_a_task_and_across_tasks(spark, monkeypatch: Any) -> None:
    from pyspark.sql import functions as F

    from airflow_logstore.spark import keys_once
    from airflow_logstore.spark.keys_once import keys_changed_once

    def frame(ids: list[int], tasks: int) -> Any:
        return spark.createDataFrame([(i, f"n{i}") for i in ids], "id long, name string").coalesce(tasks)

    def once(ids: list[int], tasks: int = 2, key: tuple[str, ...] = ("id",)) -> bool:
        return keys_changed_once(frame(ids, tasks), len(ids), key)

    assert once(list(range(1000)))
    assert not once([*range(1000), 3], tasks=1)  # within one task
    across = [*range(1000), 7]
    assert not once(across, tasks=2)  # the two 7s in different tasks:
    sevens = frame(across, 2).where("id = 7").select(F.spark_partition_id()).collect()
    assert len({row[0] for row in sevens}) == 2
    assert once([1, 1], key=())  # a table without a key: each change stands alone
    assert once([1, 2], key=("id", "name"))
    assert not once([1, 1], key=("id", "name"))
    monkeypatch.setattr(keys_once, "KEYS_ONCE_LIMIT", 999)
    assert not once(list(range(1000)))  # too many to check: taken as repeating
