"""Pure parts of the dual-write job: task tags and the steps of a batch that need no Spark."""

from __future__ import annotations

import datetime
import os
import signal
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_logstore.core.commit import CommitDecision, Verdict
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.exceptions import CommitConflictError, FencedError, KafkaUnavailableError
from airflow_logstore.write import write_job, writer
from airflow_logstore.write.committing import branch_table, check_staged_head, settled_by, write_sql
from airflow_logstore.write.planning import KeyFilter, sql_literal
from airflow_logstore.write.producing import (
    NOTHING_PRODUCED,
    BatchProduceContext,
    Produced,
    TaskReports,
    check_one_report_each,
    merge_task_reports,
    pause_settings,
    produce_failures_named,
)
from airflow_logstore.write.streaming import kafka_replay_metrics_bug, stream_writer_id
from airflow_logstore.write.write_job import DEFAULT_WRITER_ID, dual_write_parser, job_writer_id
from airflow_logstore.write.writer import DUAL, BatchResult, DualWriter, task_identity


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # spark_jobs/dual_write.py's docstring command: no --writer-id
        (["--table", "db.orders", "--input", "orders.jsonl", "--batch-id", "7"], DEFAULT_WRITER_ID),
        (["--table", "db.orders", "--input", "orders.jsonl", "--writer-id", "nightly"], "nightly"),
        (["--table", "t", "--source-topic", "src", "--checkpoint", "/ck/a"], stream_writer_id("/ck/a")),
        (["--table", "t", "--source-topic", "src", "--checkpoint", "/ck/a", "--writer-id", "s"], "s"),
    ],
)
def test_the_job_claims_its_epoch_for_a_named_writer(argv: list[str], expected: str) -> None:
    """A left-out ``--writer-id`` is the default writer (batch) or the checkpoint's (stream), never None."""
    assert job_writer_id(dual_write_parser().parse_args(argv)) == expected
    assert stream_writer_id("/ck/a") != stream_writer_id("/ck/b")


class _QueryError(Exception):
    """A PySpark StreamingQueryException's shape: its JVM stack trace (causes included) in ``_stackTrace``."""

    def __init__(self, trace: str) -> None:
        super().__init__("[STREAM_FAILED] Query terminated with exception")
        self._stackTrace = trace


_NPE = 'java.lang.NullPointerException: Cannot invoke "scala.collection.IterableOps.map(scala.Function1)"'


@pytest.mark.parametrize(
    ("trace", "restart"),
    [
        # Spark 4.1's Kafka source, the first trigger of a query that re-ran a planned micro-batch
        (f"{_NPE}\n\tat org.apache.spark.sql.kafka010.KafkaMicroBatchStream.metrics(...)", True),
        # another NullPointerException, or another error in the same frame: the run fails as before
        (f"{_NPE}\n\tat org.apache.spark.sql.execution.streaming.runtime.ProgressContext.x(...)", False),
        (
            "org.apache.kafka.common.errors.TimeoutException\n\tat ...KafkaMicroBatchStream.metrics(...)",
            False,
        ),
    ],
)
def test_only_sparks_kafka_replay_metrics_error_restarts_the_query(trace: str, restart: bool) -> None:
    assert kafka_replay_metrics_bug(_QueryError(trace)) is restart


def test_task_tags_differ_between_a_stage_retry_and_the_first_run() -> None:
    """Spark reuses attempt number 0 when it resubmits a stage; the task attempt id is new."""
    first_run, stage_retry = task_identity(3, 17), task_identity(3, 42)
    assert first_run == "3.17" and stage_retry == "3.42"
    assert first_run != stage_retry


# -- the dual write's steps that need no Spark ---------------------------------------------------------


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _Spark:
    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = _Conf(conf)  # spark.conf: the session sees the context's settings


def test_the_java_producer_gets_the_points_a_test_named_for_the_executors(monkeypatch) -> None:
    """A local-mode executor is the driver's JVM: ``spark.executorEnv.*`` never reaches its environment,
    so the driver resolves the points (the executors' setting first, then its own environment)."""
    for name in ("LOGSTORE_PAUSE_AT", "LOGSTORE_PAUSE_DIR", "LOGSTORE_FAIL_ONCE_AT"):
        monkeypatch.delenv(name, raising=False)
    assert pause_settings(_Spark({})) == {}  # outside tests: nothing
    monkeypatch.setenv("LOGSTORE_FAIL_ONCE_AT", "produce:flushed")
    monkeypatch.setenv("LOGSTORE_PAUSE_DIR", "/from/env")
    spark = _Spark(
        {
            "spark.executorEnv.LOGSTORE_PAUSE_AT": "produce:started",
            "spark.executorEnv.LOGSTORE_PAUSE_DIR": "/x",
        }
    )
    assert pause_settings(spark) == {
        "LOGSTORE_PAUSE_AT": "produce:started",
        "LOGSTORE_PAUSE_DIR": "/x",
        "LOGSTORE_FAIL_ONCE_AT": "produce:flushed",
    }


def test_task_reports_merge_into_one_span_per_log_partition() -> None:
    produced = merge_task_reports(
        [
            {"task": "0.5", "count": 3, "offsets": {"0": [10, 11], "2": [4, 4]}},
            {"task": "1.6", "count": 2, "offsets": {"0": [7, 8]}},
            {"task": "2.7", "count": 0, "offsets": {}},
        ]
    )
    assert produced.offsets == {0: (7, 11), 2: (4, 4)}
    assert produced.tasks == frozenset({"0.5", "1.6", "2.7"})
    assert produced.count == 5
    assert produced.offsets_for_result() == {"0": [7, 11], "2": [4, 4]}


def test_a_batch_without_a_log_produced_nothing_and_names_no_task() -> None:
    assert NOTHING_PRODUCED.tasks is None and NOTHING_PRODUCED.count == 0
    assert NOTHING_PRODUCED.offsets_for_result() == {}


def test_a_key_table_merges_by_key_and_the_last_change_wins() -> None:
    sql = write_sql("cat.db.t.`branch_b`", "global_temp.v", ["id", "name"], ["id"])
    assert sql == (
        "MERGE INTO cat.db.t.`branch_b` t USING global_temp.v s ON t.`id` = s.`id` "
        "WHEN MATCHED AND s._logstore_op = 'D' THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET t.`id` = s.`id`, t.`name` = s.`name` "
        "WHEN NOT MATCHED AND s._logstore_op <> 'D' THEN INSERT (`id`, `name`) VALUES (s.`id`, s.`name`)"
    )


def test_a_table_without_a_key_appends() -> None:
    sql = write_sql(branch_table("cat.db.t", "stage_1"), "global_temp.v", ["a", "b"], [])
    assert sql == "INSERT INTO cat.db.t.`branch_stage_1` SELECT `a`, `b` FROM global_temp.v"


def test_a_batch_of_keys_the_base_does_not_hold_is_appended_without_its_deletes() -> None:
    sql = write_sql(
        "cat.db.t.`branch_b`", "global_temp.v", ["id", "name"], ["id"], "t.`id` IN (1)", append=True
    )
    assert (
        sql
        == "INSERT INTO cat.db.t.`branch_b` SELECT `id`, `name` FROM global_temp.v WHERE _logstore_op <> 'D'"
    )


@pytest.mark.parametrize(
    ("planned_at", "base", "base_rows", "appends"),
    [
        (7, 7, 100, True),  # the base is the snapshot planned against
        (7, 8, 100, False),  # main moved since: a commit in between may hold a key
        (7, 8, None, False),  # ... and its rows are unknown
        (None, 8, 0, True),  # planned on a table without a snapshot; the base holds no rows
        (7, 8, 0, True),  # whatever moved main, the base holds no rows
    ],
)
def test_a_batch_is_appended_only_on_the_base_it_was_planned_against_or_an_empty_one(
    planned_at: int | None, base: int, base_rows: int | None, appends: bool
) -> None:
    from airflow_logstore.write.planning import KeysAbsent

    assert KeysAbsent(planned_at).hold_for(base, base_rows) is appends


def test_a_decision_already_committed_returns_the_commit_in_the_table() -> None:
    existing = CommitInfo("w", 4, epoch=2, snapshot_id=99)
    decision = CommitDecision(Verdict.ALREADY_COMMITTED, "committed by epoch 2", existing)
    assert settled_by(decision, "w", 3, 4) is existing


def test_a_fenced_decision_stops_the_attempt() -> None:
    decision = CommitDecision(Verdict.FENCED, "epoch 5 of writer 'w' was claimed")
    with pytest.raises(FencedError, match="epoch 3 was fenced"):
        settled_by(decision, "w", 3, 4)


def test_a_decision_to_proceed_settles_nothing() -> None:
    assert settled_by(CommitDecision(Verdict.PROCEED, "first"), "w", 3, 4) is None


@dataclass
class _Summary:
    additional_properties: dict[str, str]


@dataclass
class _Snapshot:
    parent_snapshot_id: int | None
    summary: _Summary | None


def _head(parent: int, writer: str = "w", batch: int = 4, epoch: int = 3) -> Any:
    return _Snapshot(parent, _Summary(CommitInfo(writer, batch, epoch=epoch).to_summary()))


def test_a_staged_head_on_the_base_with_this_batch_s_summary_passes() -> None:
    check_staged_head(_head(parent=10), 10, "b", ("w", 4, 3))


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (None, "does not continue base 10"),
        (_head(parent=11), "does not continue base 10"),
        (_head(parent=10, epoch=2), "holds another write's summary"),
        (_head(parent=10, batch=5), "holds another write's summary"),
        (_Snapshot(10, None), "holds another write's summary: None"),
    ],
)
def test_a_staged_head_that_is_not_this_write_is_a_conflict(head: Any, message: str) -> None:
    with pytest.raises(CommitConflictError, match=message):
        check_staged_head(head, 10, "b", ("w", 4, 3))


class _Killed(BaseException):
    """What SIGKILL does to the writer, in this stand-in: nothing after it runs."""


@pytest.mark.parametrize(
    ("kill_at", "done", "killed"),
    [
        ("write:after-log:2", [], True),  # the records are flushed: neither the commit nor the ledger entry
        ("write:after-commit:2", ["commit"], True),  # committed: no ledger entry
        ("write:after-log:1,write:after-commit:3", ["commit", "record"], False),  # other batches
    ],
)
def test_the_writer_is_killed_at_its_kill_points(
    monkeypatch: pytest.MonkeyPatch, kill_at: str, done: list[str], killed: bool
) -> None:
    """The steps after a batch's flush (:meth:`DualWriter._commit_logged`) with ``LOGSTORE_KILL_AT``."""
    signals: list[int] = []

    def kill(pid: int, sig: int) -> None:
        signals.append(sig)
        raise _Killed

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setenv("LOGSTORE_KILL_AT", kill_at)
    steps: list[str] = []

    def commit_batch(target: Any, rows: Any, commit: CommitInfo) -> CommitInfo:
        steps.append("commit")
        return replace(commit, snapshot_id=7)

    monkeypatch.setattr(writer, "commit_batch", commit_batch)
    dual = DualWriter.__new__(DualWriter)  # only what the steps after the flush read
    dual.writer_id, dual.epoch, dual.emit_mode, dual.control_topic_id = "w", 3, DUAL, "id"
    dual.config = SimpleNamespace(enabled=True)  # type: ignore[assignment]
    dual.control = SimpleNamespace(record_commit=lambda *args: steps.append("record"))  # type: ignore[assignment]
    monkeypatch.setattr(dual, "_commit_target", lambda: None)
    produced = Produced({0: (0, 4)}, frozenset({"0.0"}), 5)
    expect: AbstractContextManager[Any] = pytest.raises(_Killed) if killed else nullcontext()
    with expect:
        dual._commit_logged(BatchResult("db.t", "w", 2, 3, "file,log"), produced, object())  # type: ignore[arg-type]
    assert steps == done and signals == ([signal.SIGKILL] if killed else [])


def test_a_bad_kill_point_fails_the_job_before_spark_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """spark-submit's entry point: one line naming the value and the kill points, exit code 1."""
    monkeypatch.setenv("LOGSTORE_KILL_AT", "after-log:2")
    monkeypatch.setenv("LOGSTORE_HOME", str(tmp_path))  # its failure report's table is looked up there
    monkeypatch.setattr(write_job, "job_session", lambda app: pytest.fail("Spark started"))
    argv = ["--table", "db.t", "--input", str(tmp_path), "--batch-id", "2"]
    assert write_job.dual_write_main(argv) == 1
    err = capsys.readouterr().err
    assert "dual_write: error: LOGSTORE_KILL_AT: 'after-log:2' is not a kill point; the kill points " in err
    assert "write:after-log:<batch>, write:after-commit:<batch>, reconcile:lease-acquired" in err


def test_batch_results_are_new_values_and_the_old_one_is_unchanged() -> None:
    started = BatchResult("db.t", "w", 4, 3, "file,log")
    counted = started.counted(rows_in=10, noop_deletes=1)
    logged = counted.produced(Produced({1: (5, 9)}, frozenset({"1.2"}), 5))
    skipped = logged.skipped_for(CommitInfo("w", 4, epoch=2, snapshot_id=7, offsets={0: (1, 2)}))
    assert (started.rows_in, started.log_records, started.skipped) == (0, 0, False)
    assert (counted.rows_in, counted.noop_deletes) == (10, 1)
    assert (logged.log_records, logged.offsets) == (5, {"1": [5, 9]})
    assert (skipped.skipped, skipped.epoch, skipped.snapshot_id) == (True, 2, 7)
    assert skipped.offsets == {"0": [1, 2]}
    assert skipped.rows_in == 10 and logged.skipped is False


# -- the batch's keys, pushed into the lookup and the MERGE (issue 18) -----------------------------------


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        (42, "42"),
        (-7, "-7"),
        (True, "true"),
        (False, "false"),
        (datetime.date(2024, 2, 29), "DATE '2024-02-29'"),
        ("plain", "'plain'"),
        ("o'brien", "'o\\'brien'"),
        ("back\\slash", "'back\\\\slash'"),
    ],
)
def test_key_values_become_spark_sql_literals(value: Any, literal: str) -> None:
    assert sql_literal(value) == literal


def test_a_key_filter_names_the_first_key_column_of_the_target() -> None:
    assert KeyFilter("id", (1, 5, 9)).sql("t") == "t.`id` IN (1, 5, 9)"
    assert KeyFilter("id", (1, 5, 9)).sql() == "`id` IN (1, 5, 9)"  # the lookup's scan filter
    assert KeyFilter("id", ()).sql("t") == "false"  # an empty batch touches no row


def test_the_merge_reads_only_the_rows_of_the_batch_s_keys() -> None:
    sql = write_sql("cat.db.t.`branch_b`", "global_temp.v", ["id", "name"], ["id"], "t.`id` IN (1, 2)")
    assert "USING global_temp.v s ON t.`id` = s.`id` AND t.`id` IN (1, 2) WHEN MATCHED" in sql
    assert write_sql("x", "v", ["a"], [], "t.`a` IN (1)") == "INSERT INTO x SELECT `a` FROM v"


def test_a_key_filter_is_worth_it_only_when_the_table_is_larger_than_the_batch() -> None:
    from airflow_logstore.write.planning import worth_a_key_filter

    assert worth_a_key_filter(2_000_000, 10_000)  # a small batch on a large table: find its keys
    assert not worth_a_key_filter(0, 10_000)  # a first load: the lookup reads nothing anyway
    assert not worth_a_key_filter(10_000, 10_000)  # reading the table costs what finding the keys does
    assert worth_a_key_filter(None, 10_000)  # unknown size: assume large


def test_table_rows_come_from_the_current_snapshot_summary() -> None:
    from types import SimpleNamespace

    from pyiceberg.table.snapshots import Operation, Summary

    from airflow_logstore.write.planning import table_rows

    def table(summary: Summary | None, *, empty: bool = False) -> Any:
        snapshot = None if empty else SimpleNamespace(summary=summary)
        return SimpleNamespace(current_snapshot=lambda: snapshot)

    assert table_rows(table(Summary(Operation.APPEND, **{"total-records": "1234"}))) == 1234
    assert table_rows(table(None, empty=True)) == 0  # no snapshot: no rows
    assert table_rows(table(Summary(Operation.APPEND))) is None  # no total: unknown
    assert table_rows(table(None)) is None


@pytest.mark.parametrize(
    "partitions",
    [(0, 1), (0, 1, 1, 2), (0, 2, 3), (0, 1, 2, 3)],
    ids=["one missing", "one twice", "one unplanned", "one more"],
)
def test_a_write_through_without_one_report_per_task_fails_before_its_commit(
    partitions: tuple[int, ...],
) -> None:
    reported = TaskReports(NOTHING_PRODUCED, changes=0, noop_deletes=0, partitions=partitions)
    with pytest.raises(RuntimeError) as raised:
        check_one_report_each(reported, tasks=3, batch_id=7)
    message = str(raised.value)
    assert "batch 7 ran 3 tasks" in message and str(list(partitions)) in message, message
    assert "not committed" in message
    check_one_report_each(TaskReports(NOTHING_PRODUCED, 0, 0, (0, 1, 2)), tasks=3, batch_id=7)


class _Java:
    """A py4j Java exception as :func:`~airflow_logstore.table.commit_retry.java_causes` walks it."""

    def __init__(self, message: str) -> None:
        self.message = message

    def getClass(self) -> Any:
        return SimpleNamespace(getName=lambda: "java.lang.IllegalStateException")

    def getMessage(self) -> str:
        return self.message

    def getCause(self) -> None:
        return None


def test_a_produce_whose_records_were_not_acknowledged_fails_naming_kafka() -> None:
    """A Spark job failed by LogProducer's delivery check is a KafkaUnavailableError naming the batch, the
    topic and Kafka's error (the job prints it, instead of the JVM's stack trace); found in the message
    (a captured Spark error) or the Java cause chain (py4j); anything else is raised as it is."""
    ctx = BatchProduceContext("t_log", {}, "w", 3, 2, False)
    check = (
        "200 of 200 records to 't_log' were not acknowledged: org.apache.kafka.common.errors."
        "TimeoutException: Topic t_log not present in metadata after 8000 ms."
    )
    spark_text = f"Job aborted due to stage failure: Task 0 in stage 20.0 failed 2 times: {check}\n\tat x"
    py4j = RuntimeError("An error occurred while calling o123.produce.")
    py4j.java_exception = _Java(check)  # type: ignore[attr-defined]
    for failure in (RuntimeError(spark_text), py4j):
        with pytest.raises(KafkaUnavailableError) as raised, produce_failures_named(ctx):
            raise failure
        assert (
            str(raised.value)
            == f"Kafka did not acknowledge the log records of batch 2 of writer 'w': {check}"
        )
        assert raised.value.__cause__ is failure
    with pytest.raises(ValueError, match="other"), produce_failures_named(ctx):
        raise ValueError("other")


def test_a_fenced_decision_that_finds_this_epoch_s_own_commit_returns_it() -> None:
    """A publish whose state was unknown had applied, and a newer epoch claimed before the attempt
    decided again: the batch is in the table by this epoch, not left to reconciliation."""
    mine = CommitInfo("w", 4, epoch=3, snapshot_id=99)
    assert settled_by(CommitDecision(Verdict.FENCED, "epoch 5 was claimed", mine), "w", 3, 4) is mine
    older = CommitInfo("w", 4, epoch=2, snapshot_id=98)
    with pytest.raises(FencedError):
        settled_by(CommitDecision(Verdict.FENCED, "epoch 5 was claimed", older), "w", 3, 4)


def test_an_unknown_commit_state_is_decided_again_and_never_a_fence() -> None:
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    from airflow_logstore.table.commit_retry import is_unknown_commit_state
    from airflow_logstore.table.staged_commit import is_lost_race

    unknown = CommitStateUnknownException("504 Gateway Timeout")
    assert is_lost_race(unknown) and is_unknown_commit_state(unknown)
    assert is_lost_race(CommitFailedException("main moved")) and not is_unknown_commit_state(
        CommitFailedException("main moved")
    )
    java = RuntimeError("org.apache.iceberg.exceptions.CommitStateUnknownException: timed out")
    assert is_unknown_commit_state(java) and not is_lost_race(ValueError("no"))
