"""The dual write: every batch goes to the table's Kafka log and to the Iceberg table, in that order.

Per batch (writer W, epoch E, batch B):

1. skip when (W, B) is already committed (ledger or live snapshot): retries write nothing anywhere;
2. read and validate the input (bad rows fail the batch before anything is written);
3. plan the row kinds against the table's current rows (``core.changes`` semantics);
4. produce every record (idempotent producer, ``acks=all``, no transactions) and flush;
5. check that W has no newer epoch (a newer attempt fences this one);
6. commit the Iceberg write (MERGE for key tables, append otherwise) with the snapshot summary
   ``logstore.*`` (writer, epoch, batch, offsets, task attempts, log positions);
7. record the commit in the control topic's ledger.

Crash points for tests: ``after-log:N`` dies after batch N's records are flushed, ``after-commit:N``
right after its Iceberg commit; both by SIGKILL, with no cleanup.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.codec import RecordMeta, encode_headers
from airflow_logstore.core.commit import Verdict, decide_on, staging_branch
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.properties import EMIT_FILE, EMIT_LOG, LogStoreConfig, format_emit_mode
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import with_positions
from airflow_logstore.exceptions import CommitConflictError, FencedError, OptionError
from airflow_logstore.pause import fail_once, pause_point
from airflow_logstore.spark import staged_commit
from airflow_logstore.spark.commit_retry import backoff_seconds, is_commit_conflict
from airflow_logstore.spark.inputs import OP_COLUMN, ROW_COLUMN, read_raw, validated_changes
from airflow_logstore.table.catalog import CatalogSpec
from airflow_logstore.table.schema import primary_key_of
from airflow_logstore.table.tables import LogStoreTable, merged_state

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

KEY_COLUMN = "_logstore_key"
VALUE_COLUMN = "_logstore_value"
SUB_COLUMN = "_logstore_sub"
BEFORE_COLUMN = "_logstore_before"
SUMMARY_CONF_PREFIX = "spark.sql.iceberg.snapshot-property."
COMMIT_ATTEMPTS = 6
JSON_OPTIONS = {
    "ignoreNullFields": "false",
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "dateFormat": "yyyy-MM-dd",
}


@dataclass(frozen=True)
class CrashPoint:
    stage: str  # "after-log" or "after-commit"
    batch_id: int

    @classmethod
    def parse(cls, text: str | None) -> CrashPoint | None:
        if not text:
            return None
        stage, _, batch = text.partition(":")
        if stage not in ("after-log", "after-commit") or not batch.strip().lstrip("-").isdigit():
            raise OptionError("crash-at", f"'{text}' is not after-log:N or after-commit:N")
        return cls(stage, int(batch))

    def hit(self, stage: str, batch_id: int) -> None:
        if self.stage == stage and self.batch_id == batch_id:
            log.warning("crash injection: SIGKILL at %s of batch %s", stage, batch_id)
            os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class BatchResult:
    """What one batch did, in numbers (the operator's XCom and the CLI's output)."""

    table: str
    writer_id: str
    batch_id: int
    epoch: int
    emit_mode: str
    skipped: bool = False
    rows_in: int = 0
    log_records: int = 0
    noop_deletes: int = 0
    snapshot_id: int | None = None
    offsets: dict[str, list[int]] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ProduceContext:
    """Everything an executor task needs to produce its records (shipped in the task closure)."""

    topic: str
    kafka_config: dict[str, Any]
    writer_id: str
    epoch: int
    batch_id: int
    log_only: bool


def produce_partition(batches: Iterable[pa.RecordBatch], ctx: ProduceContext) -> Iterator[pa.RecordBatch]:
    """Executor side: produce this task's records in order, flush, report offsets per partition."""
    import pyarrow as pa
    from pyspark import TaskContext

    from airflow_logstore.log.kafka_client import (
        ANY_PARTITION,
        DeliveryTracker,
        flush,
        produce_each,
        shared_producer,
    )

    task_context = TaskContext.get()
    task = task_identity(task_context.partitionId(), task_context.taskAttemptId()) if task_context else "0.0"
    headers = encode_headers(RecordMeta(ctx.writer_id, ctx.epoch, ctx.batch_id, task, log_only=ctx.log_only))
    tracker = DeliveryTracker()
    pause_point("produce:started")  # tests: hold every task before its first record (a broker dies)
    # the Python worker keeps its producer between tasks: a new one waits ~0.5 s for its producer id
    with shared_producer(ctx.kafka_config, **{"linger.ms": 50, "batch.size": 1_000_000}) as prod:
        records = (
            (key, value, ANY_PARTITION, headers)
            for batch in batches
            for key, value in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)
        )
        sent = produce_each(prod, ctx.topic, records, tracker)
        flush(prod, tracker, sent, f"producing batch {ctx.batch_id} to '{ctx.topic}'")
    pause_point("produce:flushed")  # tests: hold tasks whose records are in the log (a worker dies)
    fail_once("produce:flushed")  # tests: this task attempt fails after its records are in the log
    offsets = json.dumps({str(p): list(span) for p, span in tracker.offsets.items()})
    yield pa.RecordBatch.from_pylist([{"task": task, "count": sent, "offsets": offsets}])


def task_identity(partition_id: int, task_attempt_id: int) -> str:
    """The tag of one Spark task attempt's records: ``<partition>.<task attempt id>``.

    The task attempt id is unique within the application; the attempt *number* is not (Spark counts
    it from 0 again when it resubmits a stage after a fetch failure), so a partial first run of a
    task would share its tag with the run that committed.
    """
    return f"{partition_id}.{task_attempt_id}"


class DualWriter:
    """Writes batches of one table for one writer attempt (one epoch)."""

    def __init__(
        self,
        spark: SparkSession,
        handle: LogStoreTable,
        *,
        writer_id: str,
        emit_mode: frozenset[str] | None = None,
        crash_at: CrashPoint | None = None,
        change_column: str = "op",
    ) -> None:
        self.spark = spark
        self.handle = handle
        self.writer_id = writer_id
        self.crash_at = crash_at
        self.change_column = change_column
        table = handle.load()
        self.config: LogStoreConfig = handle.config(table)
        self.emit_mode = emit_mode or (
            frozenset({EMIT_FILE, EMIT_LOG}) if self.config.enabled else frozenset({EMIT_FILE})
        )
        self.primary_key = primary_key_of(table.schema())
        self.epoch = 0
        self._noop_deletes: DataFrame | None = None
        if self.config.enabled:
            self.control = handle.control(self.config)
            self.epoch = self.control.claim_epoch(writer_id, owner=f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
        log.info(
            "writer %s of %s starts epoch %s (emit mode %s)",
            writer_id,
            handle.name,
            self.epoch,
            format_emit_mode(self.emit_mode),
        )

    # -- state ---------------------------------------------------------------------------------------

    def state(self) -> ControlState:
        table = self.handle.load()
        state = self.control.read() if self.config.enabled else ControlState()
        return merged_state(table, state)

    def next_batch_id(self) -> int:
        state = self.state()
        batches = [b for (w, b) in state.commits if w == self.writer_id]
        retired = state.retired.get(self.writer_id)
        if retired is not None and retired.batches:
            batches.append(retired.batches[-1][1])
        return max(batches) + 1 if batches else 1

    # -- one batch -----------------------------------------------------------------------------------

    def write_path(
        self, path: str, batch_id: int | None = None, input_format: str | None = None
    ) -> BatchResult:
        raw = read_raw(self.spark, path, input_format)
        return self.write_frame(raw, batch_id if batch_id is not None else self.next_batch_id())

    def write_frame(self, raw: DataFrame, batch_id: int) -> BatchResult:
        started = time.monotonic()
        result = BatchResult(
            str(self.handle.name), self.writer_id, batch_id, self.epoch, format_emit_mode(self.emit_mode)
        )
        done = self.state().committed(self.writer_id, batch_id)
        if done is not None:
            return _skipped(result, done)

        target = self.spark.table(self.handle.spark_name())  # main as it is now (the catalog is uncached)
        changes = validated_changes(raw, target.schema, self.primary_key, self.change_column)
        try:
            planned, final = self._plan(changes, target)
            planned = planned.persist()
            try:
                result.rows_in = changes.count()
                if self._noop_deletes is not None:
                    result.noop_deletes = self._noop_deletes.count()
                offsets, tasks, produced = (
                    self._produce(planned, batch_id) if EMIT_LOG in self.emit_mode else ({}, None, 0)
                )
                result.log_records = produced
                result.offsets = {str(p): list(s) for p, s in sorted(offsets.items())}
                log.info("batch %s: %s log records flushed, offsets %s", batch_id, produced, result.offsets)
                if self.crash_at:
                    self.crash_at.hit("after-log", batch_id)
                commit = CommitInfo(
                    writer_id=self.writer_id,
                    batch_id=batch_id,
                    epoch=self.epoch,
                    offsets=offsets,
                    tasks=tasks,
                    record_count=produced,
                    emit_mode=format_emit_mode(self.emit_mode),
                )
                if EMIT_FILE in self.emit_mode:
                    commit = self._commit(final, commit)
                    result.snapshot_id = commit.snapshot_id
                    if self.crash_at:
                        self.crash_at.hit("after-commit", batch_id)
                if commit.epoch != self.epoch:
                    _skipped(result, commit)  # an older attempt's commit of this batch won the race
                elif self.config.enabled and (EMIT_FILE in self.emit_mode or produced):
                    self.control.record_commit(commit.to_json(), self.writer_id, batch_id)
            finally:
                planned.unpersist()
        finally:
            changes.unpersist()
        result.seconds = round(time.monotonic() - started, 3)
        return result

    # -- planning ------------------------------------------------------------------------------------

    def _plan(self, changes: DataFrame, target: DataFrame) -> tuple[DataFrame, DataFrame]:
        """(log records: key, value, order; final per-key state for the MERGE)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        columns = [f.name for f in target.schema.fields]
        row_struct = F.struct(*[F.col(f"`{c}`") for c in columns])
        self._noop_deletes = None
        if not self.primary_key:
            records = changes.select(
                F.lit(None).cast("binary").alias(KEY_COLUMN),
                _value_json(F.lit("+I"), row_struct).alias(VALUE_COLUMN),
                F.col(ROW_COLUMN),
                F.lit(0).alias(SUB_COLUMN),
            )
            return records, changes.select(*[F.col(f"`{c}`") for c in columns])

        key_cols = [F.col(f"`{c}`") for c in self.primary_key]
        current = target.select(*[F.col(f"`{c}`").alias(f"_cur_{c}") for c in columns])
        condition = None
        for c in self.primary_key:
            clause = F.col(f"`{c}`") == F.col(f"_cur_{c}")
            condition = clause if condition is None else condition & clause
        cur_struct = F.struct(*[F.col(f"_cur_{c}").alias(c) for c in columns])
        joined = changes.join(current, condition, "left").select(
            *[F.col(f"`{c}`") for c in columns],
            F.col(OP_COLUMN),
            F.col(ROW_COLUMN),
            F.when(F.col(f"_cur_{self.primary_key[0]}").isNotNull(), cur_struct).alias("_table_row"),
        )
        by_key = Window.partitionBy(*key_cols).orderBy(ROW_COLUMN)
        after = F.when(F.col(OP_COLUMN) == "D", F.lit(None)).otherwise(row_struct)
        staged = joined.withColumn("_after", after).withColumn("_seq_in_key", F.row_number().over(by_key))
        staged = staged.withColumn(
            BEFORE_COLUMN,
            F.when(F.col("_seq_in_key") == 1, F.col("_table_row")).otherwise(F.lag("_after").over(by_key)),
        )
        key_json = F.to_json(F.array(*key_cols), JSON_OPTIONS).cast("binary").alias(KEY_COLUMN)
        staged = staged.select(
            key_json, F.col(ROW_COLUMN), F.col(OP_COLUMN), F.col(BEFORE_COLUMN), F.col("_after")
        )
        before, after_ = F.col(BEFORE_COLUMN), F.col("_after")
        # Each change yields (-U before, +U after), (+I after) or (-D before); a delete of a missing key none.
        retractions = staged.where(before.isNotNull()).select(
            F.col(KEY_COLUMN),
            _value_json(F.when(F.col(OP_COLUMN) == "D", F.lit("-D")).otherwise(F.lit("-U")), before).alias(
                VALUE_COLUMN
            ),
            F.col(ROW_COLUMN),
            F.lit(0).alias(SUB_COLUMN),
        )
        additions = staged.where(F.col(OP_COLUMN) != "D").select(
            F.col(KEY_COLUMN),
            _value_json(F.when(before.isNull(), F.lit("+I")).otherwise(F.lit("+U")), after_).alias(
                VALUE_COLUMN
            ),
            F.col(ROW_COLUMN),
            F.lit(1).alias(SUB_COLUMN),
        )
        records = retractions.unionByName(additions)
        self._noop_deletes = staged.where((F.col(OP_COLUMN) == "D") & before.isNull())
        last = Window.partitionBy(*key_cols).orderBy(F.col(ROW_COLUMN).desc())
        final = (
            changes.withColumn("_last", F.row_number().over(last))
            .where(F.col("_last") == 1)
            .select(*[F.col(f"`{c}`") for c in columns], F.col(OP_COLUMN))
        )
        return records, final

    # -- the log -------------------------------------------------------------------------------------

    def _produce(
        self, planned: DataFrame, batch_id: int
    ) -> tuple[dict[int, tuple[int, int]], frozenset[str], int]:
        topic, _, _ = self.config.require_log()
        ctx = ProduceContext(
            topic,
            self.handle.kafka_config(self.config),
            self.writer_id,
            self.epoch,
            batch_id,
            log_only=EMIT_FILE not in self.emit_mode,
        )
        tasks_wanted = max(1, min(self.config.partitions, self.spark.sparkContext.defaultParallelism))
        if self.primary_key:
            ordered = planned.repartition(tasks_wanted, KEY_COLUMN)
        else:
            ordered = planned.repartition(tasks_wanted)
        ordered = ordered.sortWithinPartitions(ROW_COLUMN, SUB_COLUMN).select(KEY_COLUMN, VALUE_COLUMN)
        reports = ordered.mapInArrow(
            lambda batches: produce_partition(batches, ctx), "task string, count long, offsets string"
        ).collect()
        offsets: dict[int, tuple[int, int]] = {}
        tasks = set()
        produced = 0
        for report in reports:
            tasks.add(report["task"])
            produced += report["count"]
            for partition, (first, last) in json.loads(report["offsets"]).items():
                p = int(partition)
                span = offsets.get(p)
                offsets[p] = (first, last) if span is None else (min(span[0], first), max(span[1], last))
        return offsets, frozenset(tasks), produced

    # -- the table -----------------------------------------------------------------------------------

    def _commit(self, final: DataFrame, commit: CommitInfo) -> CommitInfo:
        """Commit the batch by compare-and-set on ``main`` (:mod:`.staged_commit`); return the commit
        of this batch that is in the table afterwards (an older attempt's, if that one won).

        :raises FencedError: a newer epoch of the writer was claimed or has committed.
        """
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            base = staged_commit.load_base(self.handle)
            if attempt == 1:
                staged_commit.drop_stale_branches(base, self.writer_id, self.epoch, self.handle)
            state = merged_state(base.table, self.control.read() if self.config.enabled else ControlState())
            decision = decide_on(state, self.writer_id, commit.batch_id, self.epoch)
            pause_point("commit:decided")
            if decision.verdict is Verdict.ALREADY_COMMITTED and decision.existing is not None:
                log.info("batch %s: %s; nothing committed", commit.batch_id, decision.reason)
                return decision.existing
            if decision.verdict is Verdict.FENCED:
                raise FencedError(
                    f"writer '{self.writer_id}' epoch {self.epoch} was fenced ({decision.reason}); this "
                    "attempt stops before committing (its records are left for reconciliation)"
                )
            landed = self._try_publish(final, base, with_positions(commit, state), attempt)
            if landed is not None:
                return landed
            sleep_s = backoff_seconds(attempt)
            log.warning(
                "batch %s: main moved during commit attempt %s/%s; deciding again in %.1f s",
                commit.batch_id,
                attempt,
                COMMIT_ATTEMPTS,
                sleep_s,
            )
            time.sleep(sleep_s)
        raise CommitConflictError(
            f"Iceberg commit of batch {commit.batch_id} (writer {self.writer_id}): main moved during "
            f"{COMMIT_ATTEMPTS} commit attempts in a row, giving up"
        )

    def _try_publish(
        self, final: DataFrame, base: staged_commit.Base, commit: CommitInfo, attempt: int
    ) -> CommitInfo | None:
        """One staged commit attempt: the landed commit, or None when ``main`` moved meanwhile."""
        branch = staging_branch(self.writer_id, commit.batch_id, self.epoch, attempt)
        staged_commit.create_branch(base, branch)
        try:
            self._write_branch(final, branch, commit)
            table, head = staged_commit.branch_head(self.handle, branch)
            snapshot = table.snapshot_by_id(head)
            if snapshot is None or snapshot.parent_snapshot_id != base.snapshot_id:
                raise CommitConflictError(
                    f"staging branch {branch} does not continue base {base.snapshot_id}"
                )
            written = CommitInfo.from_summary(
                snapshot.summary.additional_properties if snapshot.summary else {}
            )
            if written is None or (written.writer_id, written.batch_id, written.epoch) != (
                self.writer_id,
                commit.batch_id,
                self.epoch,
            ):
                raise CommitConflictError(f"staging branch {branch} holds another write's summary: {written}")
            pause_point("commit:before-publish")
            staged_commit.publish(base, head, branch, self.handle)
        except Exception as exc:
            staged_commit.drop_branch(self.handle, branch)
            if staged_commit.is_lost_race(exc) or is_commit_conflict(exc):
                return None
            raise
        return replace(
            commit,
            snapshot_id=head,
            sequence_number=snapshot.sequence_number,
            timestamp_ms=snapshot.timestamp_ms,
        )

    def _write_branch(self, final: DataFrame, branch: str, commit: CommitInfo) -> None:
        """Write the batch to ``branch`` with its ``logstore.*`` summary, in a session of its own.

        Summary properties are session settings in Iceberg's Spark writes: a session used by this one
        write alone keeps a concurrent write of the application (another stream, a thread) from
        committing with them.
        """
        session = final.sparkSession.newSession()
        for key, value in commit.to_summary().items():
            session.conf.set(SUMMARY_CONF_PREFIX + key, value)
        view = f"_logstore_batch_{uuid.uuid4().hex[:12]}"
        final.createOrReplaceGlobalTempView(view)
        try:
            columns = [f.name for f in final.schema.fields if f.name != OP_COLUMN]
            session.sql(self._commit_sql(f"global_temp.{view}", columns, branch)).collect()
        finally:
            final.sparkSession.catalog.dropGlobalTempView(view)

    def _commit_sql(self, view: str, columns: list[str], branch: str) -> str:
        target = f"{self.handle.spark_name()}.`branch_{branch}`"
        quoted = [f"`{c}`" for c in columns]
        if not self.primary_key:
            return f"INSERT INTO {target} SELECT {', '.join(quoted)} FROM {view}"
        on = " AND ".join(f"t.`{c}` = s.`{c}`" for c in self.primary_key)
        updates = ", ".join(f"t.{c} = s.{c}" for c in quoted)
        values = ", ".join(f"s.{c}" for c in quoted)
        return (
            f"MERGE INTO {target} t USING {view} s ON {on} "
            f"WHEN MATCHED AND s.{OP_COLUMN} = 'D' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED AND s.{OP_COLUMN} <> 'D' THEN INSERT ({', '.join(quoted)}) VALUES ({values})"
        )


def _skipped(result: BatchResult, done: CommitInfo) -> BatchResult:
    """Report a batch that is already committed (by this writer's ``done.epoch``): nothing written."""
    log.info(
        "batch %s of writer %s is already committed (epoch %s, snapshot %s): skipped",
        done.batch_id,
        done.writer_id,
        done.epoch,
        done.snapshot_id,
    )
    result.skipped = True
    result.epoch = done.epoch
    result.snapshot_id = done.snapshot_id
    result.offsets = {str(p): list(s) for p, s in done.offsets.items()}
    return result


def _value_json(kind: Any, row: Any) -> Any:
    from pyspark.sql import functions as F

    return F.to_json(F.struct(kind.alias("kind"), row.alias("row")), JSON_OPTIONS).cast("binary")


def open_writer(
    spark: SparkSession,
    table: str,
    *,
    catalog: CatalogSpec | None = None,
    kafka_extra: Mapping[str, Any] | None = None,
    writer_id: str = "logstore-cli",
    emit_mode: frozenset[str] | None = None,
    crash_at: CrashPoint | None = None,
    change_column: str = "op",
) -> DualWriter:
    handle = LogStoreTable.open(table, catalog, kafka_extra)
    return DualWriter(
        spark,
        handle,
        writer_id=writer_id,
        emit_mode=emit_mode,
        crash_at=crash_at,
        change_column=change_column,
    )
