"""The write-through (issue 18, item 2): a dual write of a batch the table appends produces its records
while its rows are written to a staging branch, in one Spark job, and its commit appends those files.

Checked on the real broker, Spark and Iceberg: the table and the log hold the batch exactly once, the
records keep per-key order, the no-op deletes are counted, the snapshot summary names the task attempts
whose records are in the log, and no staging branch is left behind (the next epoch's fence removes the
one a crashed attempt left)."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.core.batch_plan import apply_final, plan_batch
from airflow_logstore.core.commit import STAGE_PREFIX
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read.reader import read_log
from airflow_logstore.table.tables import snapshot_commits
from airflow_logstore.write import committing
from airflow_logstore.write import writer as writer_module
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.tables import (
    eventual_log,
    fold_log,
    make_table,
    table_state,
    write_jsonl,
    write_parquet,
)

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

    monkeypatch.setattr(writer_module, "produce_records", other_way)
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
    consistent = read_log(handle, consistency="consistent")
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
    real = writer_module.produce_records

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append("produce")
        return real(*args, **kwargs)

    monkeypatch.setattr(writer_module, "produce_records", counted)
    second = [{"id": 1, "name": "n1-b", "amount": 2, "op": "update"}, {"id": 40, "name": "n40"}]
    result = writer.write_path(str(write_jsonl(tmp_path / "b2.jsonl", second)), 2)
    assert calls == ["produce"] and result.log_records == 3  # -U/+U of 1, +I of 40
    state = _plain(table_state(handle))
    assert state[(1,)] == ("n1-b", 2) and state[(40,)] == ("n40", None)
    assert _stage_refs(handle) == []


def test_a_transient_failure_in_a_commit_attempt_is_reported_as_itself_and_a_retry_commits_once(
    env, spark, tmp_path: Path
) -> None:
    """An error inside a commit attempt that is not a lost race (here an outage of the catalog's storage
    just before the publish) reaches the caller as itself, which a retry can fix, not as a fence,
    which no retry can (dropping the attempt's refs used to answer "fenced" whenever it removed a tag).
    The batch's second try by the same writer commits it once."""
    from airflow_logstore.exceptions import FencedError
    from airflow_logstore.pause import on_pause

    handle = make_table(env)
    path = str(write_jsonl(tmp_path / "b1.jsonl", BATCH))
    writer = open_writer(spark, str(handle.name), writer_id="flaky")

    def outage() -> None:
        raise OSError("the catalog's storage did not answer (simulated)")

    with on_pause("commit:before-publish", outage), pytest.raises(OSError, match="simulated") as raised:
        writer.write_path(path, 1)
    assert not isinstance(raised.value, FencedError)
    assert not snapshot_commits(handle.load()) and _stage_refs(handle) == []

    result = writer.write_path(path, 1)

    expected, records = _expected(BATCH, ["id"])
    assert result.snapshot_id is not None and result.log_records == records
    assert _plain(table_state(handle)) == _plain(expected)
    assert [c.batch_id for c in snapshot_commits(handle.load()) if c.writer_id == "flaky"] == [1]


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
def test_a_publish_whose_commit_state_is_unknown_is_decided_again_from_the_table(
    env, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, applied: bool
) -> None:
    """Hole 4 of issue 33: a REST catalog answers 500/502/504 with CommitStateUnknownException, also
    after it applied the publish. The attempt then decides again on a new base: the base's lineage
    holds the batch exactly when the publish applied ("already committed" by this epoch: its ledger entry
    is written), else the batch commits now. It used to be reported as a fence (the applied commit had
    removed the attempt's tag), which no retry fixes, and no ledger entry was written."""
    from pyiceberg.exceptions import CommitStateUnknownException

    from airflow_logstore.table import staged_commit

    handle = make_table(env)
    path = str(write_jsonl(tmp_path / "b1.jsonl", BATCH))
    writer = open_writer(spark, str(handle.name), writer_id="unsure")
    real_publish, calls = staged_commit.publish, []

    def publish_then_lose_the_answer(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            if applied:
                real_publish(*args, **kwargs)
            raise CommitStateUnknownException("502 Bad Gateway from the catalog (simulated)")
        real_publish(*args, **kwargs)

    monkeypatch.setattr(staged_commit, "publish", publish_then_lose_the_answer)
    result = writer.write_path(path, 1)

    assert len(calls) == (1 if applied else 2)  # applied: the second decision finds it in the table
    expected, records = _expected(BATCH, ["id"])
    assert result.snapshot_id is not None and result.log_records == records
    assert _plain(table_state(handle)) == _plain(expected)
    assert [c.batch_id for c in snapshot_commits(handle.load()) if c.writer_id == "unsure"] == [1]
    ledger = handle.control().read().committed("unsure", 1)
    assert ledger is not None and ledger.epoch == writer.epoch and _stage_refs(handle) == []


def test_a_crashed_write_through_leaves_its_staging_branch_to_the_next_epochs_fence(
    env, spark, tmp_path
) -> None:
    """The writer process dies after its records are flushed; its restart (a new attempt in the test's
    session: a new epoch) fences the dead epoch, which removes the staging branch it left."""
    handle = make_table(env)
    path = write_jsonl(tmp_path / "b1.jsonl", BATCH)
    base = ["--table", str(handle.name), "--writer-id", "crashy", "--input", str(path), "--batch-id", "1"]
    crashed = env.run_job("dual_write.py", base, extra_env={"LOGSTORE_KILL_AT": "write:after-log:1"})
    assert crashed.returncode in (-9, 137), crashed.stderr[-3000:]
    dead_epoch = handle.control().read().latest_epoch("crashy")
    [left] = _stage_refs(handle)  # the rows were staged, the records flushed, nothing committed
    assert left.endswith(f"_1_{dead_epoch}_0") and not snapshot_commits(handle.load())

    spark.catalog.refreshTable(handle.spark_name())  # the crashed process wrote behind the session's back
    result = open_writer(spark, str(handle.name), writer_id="crashy").write_path(str(path), 1)
    assert not result.skipped and result.epoch > dead_epoch
    assert _stage_refs(handle) == []  # fenced away with the dead epoch's attempt refs
    expected, records = _expected(BATCH, ["id"])
    assert _plain(table_state(handle)) == _plain(expected)
    by_epoch = Counter(r.meta.epoch for r in eventual_log(handle).records)
    assert by_epoch == {dead_epoch: records, result.epoch: records}  # the dead copy awaits reconciliation
    publish_visible_offsets(handle)
    consistent = read_log(handle, consistency="consistent")
    assert {r.meta.epoch for r in consistent.records} == {result.epoch}
    assert _plain(fold_log(consistent, ["id"])) == _plain(expected)


def test_a_write_through_short_of_a_task_report_fails_before_any_commit(
    env, spark, tmp_path: Path, monkeypatch: Any
) -> None:
    """The driver checks the reports against the plan's partitions (one report each) before it commits:
    a write-through told of one more task than reported (as if a successful task's report were lost)
    fails, and the batch is in no snapshot of ``main`` and leaves no staging branch."""
    real = writer_module.write_through

    def one_task_more(rows: Any, ctx: Any, table: str, tasks: int) -> Any:
        return real(rows, ctx, table, tasks + 1)

    monkeypatch.setattr(writer_module, "write_through", one_task_more)
    handle = make_table(env)
    writer = open_writer(spark, str(handle.name), writer_id="short")
    tasks = spark.sparkContext.defaultParallelism  # the plan's
    reported = re.escape(str(list(range(tasks))))
    with pytest.raises(RuntimeError, match=f"ran {tasks + 1} tasks but has reports of partitions {reported}"):
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
    real, seen = writer_module.write_through, []

    def recorded(rows: Any, ctx: Any, table: str, tasks: int) -> Any:
        seen.append((rows, tasks))
        return real(rows, ctx, table, tasks)

    monkeypatch.setattr(writer_module, "write_through", recorded)
    return seen


def _shuffles(rows: Any) -> bool:
    return "Exchange" in rows._jdf.queryExecution().executedPlan().toString()


@pytest.mark.parametrize("files", [0, 3], ids=["json", "parquet-3-files"])
def test_a_batch_that_changes_each_key_once_is_written_through_from_its_input_partitions(
    env, spark, tmp_path: Path, monkeypatch: Any, files: int
) -> None:
    """No change of such a batch has a before-image (the table holds none of its keys) and no record
    depends on another change: its rows go from the input's partitions to the log and the staging
    branch with no shuffle and no per-key window, in as many tasks as the input has partitions (the
    validation's count). The log and the table hold it exactly once."""
    handle = make_table(env)
    written = _written_rows(monkeypatch)
    _no_other_write(monkeypatch)
    expected, records = _expected(ONCE, ["id"])
    if files:
        path = write_parquet(spark, tmp_path / "b1.parquet", ONCE, files)
    else:
        path = write_jsonl(tmp_path / "b1.jsonl", ONCE)

    result = open_writer(spark, str(handle.name), writer_id="once").write_path(str(path), 1)

    [(rows, tasks)] = written
    assert not _shuffles(rows)
    assert tasks == rows.rdd.getNumPartitions() == max(1, files)
    assert (result.rows_in, result.log_records, result.noop_deletes) == (len(ONCE), records, 1)
    assert _plain(table_state(handle)) == _plain(expected)
    [commit] = [c for c in snapshot_commits(handle.load()) if c.writer_id == "once"]
    eventual = eventual_log(handle)
    assert {r.meta.task for r in eventual.records} == commit.tasks
    assert commit.record_count == len(eventual.records) == records == len(ONCE) - 1
    publish_visible_offsets(handle)
    assert _plain(fold_log(read_log(handle, consistency="consistent"), ["id"])) == _plain(expected)


#: A column of each type a table may have (``table.schema``), with nulls and strings of many lengths
#: (also non-ASCII).
TYPED_SCHEMA = (
    "id long, small int, share float, ratio double, price decimal(12,2), name string, raw binary, "
    "flag boolean, day date, at timestamp, local_at timestamp_ntz"
)
TYPED_COLUMNS = (
    "id",
    "CASE WHEN id % 7 = 0 THEN NULL ELSE CAST(id % 1000 AS INT) END AS small",
    "CAST(id / 7.0 AS FLOAT) AS share",
    "id / 3.0D AS ratio",
    "CAST(id * 1.25 AS DECIMAL(12,2)) AS price",
    "CASE WHEN id % 5 = 0 THEN NULL ELSE concat('näme-', repeat('x', CAST(id % 40 AS INT)), id) END AS name",
    "CASE WHEN id % 9 = 0 THEN NULL ELSE CAST(concat('b', repeat('y', CAST(id % 17 AS INT))) AS BINARY) END"
    " AS raw",
    "id % 2 = 0 AS flag",
    "date_add(DATE'2024-01-01', CAST(id % 400 AS INT)) AS day",
    "timestamp_micros(1700000000000000 + id * 1000003) AS at",
    "CAST(timestamp_micros(1600000000000000 + id * 999983) AS TIMESTAMP_NTZ) AS local_at",
)


def test_a_write_through_keeps_every_column_type(env, spark, tmp_path: Path, monkeypatch: Any) -> None:
    """The write-through hands Spark's own rows (``InternalRow``) to the table's writer, with each
    column's value read where it is in the task's input row, which Spark reuses from row to row: every
    type's values and nulls arrive as they were read, over several tasks."""
    handle = make_table(env, schema=TYPED_SCHEMA)
    frame = spark.range(0, 3000, numPartitions=3).selectExpr(*TYPED_COLUMNS)
    path = tmp_path / "typed.parquet"
    frame.write.parquet(str(path))
    _no_other_write(monkeypatch)

    result = open_writer(spark, str(handle.name), writer_id="typed").write_path(str(path), 1)

    assert (result.rows_in, result.log_records) == (3000, 3000)
    written = spark.table(handle.spark_name()).orderBy("id").collect()
    read = spark.read.parquet(str(path)).orderBy("id").collect()
    assert [r.asDict(recursive=True) for r in written] == [r.asDict(recursive=True) for r in read]


@pytest.mark.parametrize("mode", ["log", "file"])
@pytest.mark.parametrize("files", [0, 3], ids=["json", "parquet-3-files"])
def test_a_single_store_batch_that_changes_each_key_once_skips_the_plan(
    env, spark, tmp_path: Path, monkeypatch: Any, files: int, mode: str
) -> None:
    """A log-only or file-only write of such a batch reads its changes from the input's partitions with
    no shuffle, and never builds, caches or counts the plan. Log-only: one Spark job produces the
    records and counts the changes and no-op deletes; the log holds the batch once and folds to what
    the batch makes of an empty table; the table is not written. File-only: the changes are committed
    as they are (appended); the table holds the batch, the log nothing."""
    from airflow_logstore.core.properties import parse_emit_mode
    from airflow_logstore.write import planning

    handle = make_table(env)
    read: list[Any] = []
    real_produce, real_commit = writer_module.produce_records, writer_module.commit_batch

    def produced(rows: Any, ctx: Any) -> Any:
        read.append(rows)
        return real_produce(rows, ctx)

    def committed(target: Any, rows: Any, commit: Any) -> Any:
        read.append(rows.final)
        return real_commit(target, rows, commit)

    def not_counted(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the plan was counted")

    monkeypatch.setattr(writer_module, "produce_records", produced)
    monkeypatch.setattr(writer_module, "commit_batch", committed)
    monkeypatch.setattr(planning.BatchPlan, "count", not_counted)
    expected, records = _expected(ONCE, ["id"])
    if files:
        path = write_parquet(spark, tmp_path / "b1.parquet", ONCE, files)
    else:
        path = write_jsonl(tmp_path / "b1.jsonl", ONCE)
    writer = open_writer(spark, str(handle.name), writer_id=f"{mode}-once")
    writer.emit_mode = parse_emit_mode(mode, writer.config)

    result = writer.write_path(str(path), 1)

    [rows] = read
    assert not _shuffles(rows) and rows.rdd.getNumPartitions() == max(1, files)
    assert (result.rows_in, result.noop_deletes) == (len(ONCE), 1)
    eventual = eventual_log(handle)
    if mode == "file":
        assert result.log_records == 0 and eventual.records == []
        assert _plain(table_state(handle)) == _plain(expected)
        [commit] = [c for c in snapshot_commits(handle.load()) if c.writer_id == "file-once"]
        assert commit.batch_id == 1 and result.snapshot_id is not None
        return
    assert result.log_records == records == len(ONCE) - 1 == len(eventual.records)
    assert result.snapshot_id is None and table_state(handle) == {}
    assert {r.meta.task.split(".")[0] for r in eventual.records} == {str(p) for p in range(max(1, files))}
    assert _plain(fold_log(eventual, ["id"])) == _plain(expected)


def test_a_batch_that_changes_a_key_twice_takes_the_per_key_window(
    env, spark, tmp_path: Path, monkeypatch: Any
) -> None:
    handle = make_table(env)
    written = _written_rows(monkeypatch)
    open_writer(spark, str(handle.name), writer_id="twice").write_path(
        str(write_jsonl(tmp_path / "b1.jsonl", BATCH)), 1
    )
    [(rows, _)] = written
    assert _shuffles(rows)
    assert _plain(table_state(handle)) == _plain(_expected(BATCH, ["id"])[0])


def test_the_batch_checks_catch_a_check_that_misses_a_repeated_key(
    env, spark, tmp_path: Path, monkeypatch: Any
) -> None:
    """The planted bug: every batch is taken for one that changes each key once. The write-through test
    of a batch with keys changed twice (inserted then updated, inserted then deleted) then fails."""
    from airflow_logstore.write import checking

    real = checking.checked_changes

    def always_once(tagged: Any, primary_key: Any) -> Any:
        return replace(real(tagged, primary_key), keys_once=True)

    monkeypatch.setattr(checking, "checked_changes", always_once)
    with pytest.raises(AssertionError):
        test_a_batch_the_table_appends_is_written_through(env, spark, tmp_path, monkeypatch, ["id"])


def _checked(
    spark: Any, rows: list[tuple[Any, ...]], tasks: int | list[int], key: tuple[str, ...] | None
) -> Any:
    """The validation's pass over ``rows`` (id, name) in ``tasks`` partitions (or in partitions of these
    sizes), and the tagged changes."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from airflow_logstore.write.checking import checked_changes
    from airflow_logstore.write.inputs import tagged_changes

    schema = StructType([StructField("id", LongType()), StructField("name", StringType())])
    sizes = tasks if isinstance(tasks, list) else None
    if sizes is None:
        raw = spark.createDataFrame(rows, "id long, name string").coalesce(tasks)
    else:
        starts = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
        slices = [rows[a:b] for a, b in itertools.pairwise(starts)]
        parts = spark.sparkContext.parallelize(range(len(sizes)), len(sizes)).flatMap(lambda n: slices[n])
        raw = spark.createDataFrame(parts, "id long, name string")
    tagged = tagged_changes(raw, schema, list(key or ["id"]), None)
    sizes_seen = tagged.rdd.glom().map(len).collect()
    assert sizes_seen == sizes if sizes is not None else len(sizes_seen) == tasks, sizes_seen
    return checked_changes(tagged, key), tagged


def test_the_validation_pass_finds_a_repeated_key_in_a_task_and_across_tasks(spark, monkeypatch: Any) -> None:
    from pyspark.sql import functions as F

    from airflow_logstore.write import checking

    def once(
        ids: list[int], tasks: int | list[int] = 2, key: tuple[str, ...] | None = ("id",)
    ) -> bool | None:
        checked, _ = _checked(spark, [(i, f"n{i}") for i in ids], tasks, key)
        assert (checked.rows, checked.first_bad) == (len(ids), None)
        return checked.keys_once

    assert once(list(range(1000))) is True
    assert once([*range(1000), 3], tasks=1) is False  # within one task
    across = [*range(1000), 7]
    assert once(across, tasks=2) is False  # the two 7s in different tasks:
    frame = spark.createDataFrame([(i,) for i in across], "id long").coalesce(2)
    sevens = frame.where("id = 7").select(F.spark_partition_id()).collect()
    assert len({row[0] for row in sevens}) == 2
    assert once([1, 1], key=()) is True  # a table without a key: each change stands alone
    assert once([1, 1], key=None) is None  # not asked
    assert once([1, 2], key=("id", "name")) is True
    assert once([1, 1], key=("id", "name")) is False
    monkeypatch.setattr(checking, "KEYS_ONCE_LIMIT", 999)
    assert once(list(range(1000)), tasks=1) is None  # too many to check: taken as repeating
    assert once(list(range(999)), tasks=1) is True
    monkeypatch.setattr(checking, "KEYS_ONCE_LIMIT", 1100)  # each of 2 tasks may hash 550 keys
    assert once(list(range(1000)), tasks=[500, 500]) is True
    assert once(list(range(1000)), tasks=[300, 700]) is None  # one task has more: not checked


def test_the_validation_pass_counts_every_task_and_finds_the_first_bad_row(spark) -> None:
    """Rows in tasks of 450, 300 and 250, bad ones (a missing key) in the last two: the count is every
    task's, and the first bad row is the smallest bad row id of any task (as Spark's own aggregate finds
    it), whether keys are checked or not."""
    from pyspark.sql import functions as F

    from airflow_logstore.write.inputs import ERROR_COLUMN, ROW_COLUMN

    rows = [(None if i in (460, 470, 900) else i, f"n{i}") for i in range(1000)]
    for key in (("id",), None):
        checked, tagged = _checked(spark, rows, [450, 300, 250], key)
        [(first, bad)] = (
            tagged.where(F.col(ERROR_COLUMN).isNotNull()).agg(F.min(ROW_COLUMN), F.count("*")).collect()
        )
        assert bad == 3
        assert (checked.rows, checked.first_bad) == (1000, first)


def test_the_validation_pass_reads_only_the_columns_it_checks(spark, tmp_path: Path) -> None:
    """A Parquet column of the table's own type cannot hold a value that does not fit it: the pass
    reads the key (checked for nulls, hashed) and no other column. A column of another type is read
    and checked: its bad value fails the batch, naming its row and column."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from airflow_logstore.exceptions import BadInputError
    from airflow_logstore.write.checking import validated_changes
    from airflow_logstore.write.inputs import ERROR_COLUMN, ROW_COLUMN, read_raw, tagged_changes

    schema = StructType(
        [StructField("id", LongType()), StructField("name", StringType()), StructField("amount", LongType())]
    )
    same = str(tmp_path / "same.parquet")
    spark.createDataFrame([(1, "a", 10), (2, "b", 20)], "id long, name string, amount long").write.parquet(
        same
    )
    tagged = tagged_changes(read_raw(spark, same, "parquet"), schema, ["id"], None)
    passed = tagged.select(F.col(ROW_COLUMN), F.col(ERROR_COLUMN).isNotNull(), F.xxhash64("id"))
    read = re.findall(r"ReadSchema: (\S+)", passed._jdf.queryExecution().executedPlan().toString())
    assert read == ["struct<id:bigint>"], read
    assert (
        validated_changes(read_raw(spark, same, "parquet"), schema, ["id"], None, check_keys=True).rows == 2
    )

    other = str(tmp_path / "other.parquet")
    spark.createDataFrame([(1, "a", "10"), (2, "b", "x")], "id long, name string, amount string").coalesce(
        1
    ).write.parquet(other)
    with pytest.raises(BadInputError, match="value does not fit type bigint") as failed:
        validated_changes(read_raw(spark, other, "parquet"), schema, ["id"], None, check_keys=True)
    assert (failed.value.row, failed.value.column) == (2, "amount")
