"""The dual write: every batch goes to the table's Kafka log and to the Iceberg table, in that order.

Per batch (writer W, epoch E, batch B), :meth:`DualWriter.write_frame` runs the README's steps:

1. skip when (W, B) is already committed (ledger or live snapshot): retries write nothing anywhere;
2. read and validate the input (bad rows fail the batch before anything is written; :mod:`.inputs`);
3. plan the row kinds against the table's current rows (``core.batch_plan`` semantics; :mod:`.planning`);
4. produce every record (idempotent producer, ``acks=all``, no transactions) and flush (:mod:`.producing`);
5. commit by compare-and-set on ``main`` (MERGE for key tables, append otherwise) with the snapshot
   summary ``logstore.*``; a newer epoch of W fences this attempt (:mod:`.committing`);
6. record the commit in the control topic's ledger.

Kill points for tests (:func:`~airflow_logstore.pause.kill_point`): ``write:after-log`` of a batch dies
after its records are flushed, ``write:after-commit`` right after its Iceberg commit; both by SIGKILL,
with no cleanup.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.closing import Closing
from airflow_logstore.core.commit import attempt_refs
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.properties import EMIT_FILE, EMIT_LOG, LogStoreConfig, format_emit_mode
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.pause import kill_point
from airflow_logstore.table import staged_commit
from airflow_logstore.table.catalog import CatalogSpec
from airflow_logstore.table.schema import primary_key_of
from airflow_logstore.table.tables import LogStoreTable, merged_state
from airflow_logstore.write.checking import Changes, validated_changes
from airflow_logstore.write.committing import BatchRows, CommitTarget, branch_table, commit_batch
from airflow_logstore.write.inputs import REREAD_FORMATS, read_raw, resolved_format, small_batch_rows
from airflow_logstore.write.planning import (
    BatchPlan,
    KeyFilter,
    KeysAbsent,
    appended_changes,
    changes_final,
    deletes_in,
    files_may_hold,
    key_filter,
    plan_row_kinds,
    table_rows,
    worth_a_key_filter,
)
from airflow_logstore.write.producing import (
    NOTHING_PRODUCED,
    BatchProduceContext,
    Produced,
    produce_records,
    task_identity,
    write_through,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

    from airflow_logstore.publish.publisher import Publisher, PublishReport

__all__ = ["BatchResult", "DualWriter", "open_writer", "task_identity"]

#: The emit mode of a dual write (both stores).
DUAL = frozenset({EMIT_FILE, EMIT_LOG})

log = logging.getLogger(__name__)


@dataclass(frozen=True)
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

    def counted(self, rows_in: int, noop_deletes: int) -> BatchResult:
        return replace(self, rows_in=rows_in, noop_deletes=noop_deletes)

    def produced(self, produced: Produced) -> BatchResult:
        return replace(self, log_records=produced.count, offsets=produced.offsets_for_result())

    def skipped_for(self, done: CommitInfo) -> BatchResult:
        """This batch reported as already committed (by the writer's ``done.epoch``): nothing written."""
        log.info(
            "batch %s of writer %s is already committed (epoch %s, snapshot %s): skipped",
            done.batch_id,
            done.writer_id,
            done.epoch,
            done.snapshot_id,
        )
        return replace(
            self,
            skipped=True,
            epoch=done.epoch,
            snapshot_id=done.snapshot_id,
            offsets={str(p): list(s) for p, s in done.offsets.items()},
        )


class DualWriter(Closing):
    """Writes batches of one table for one writer attempt (one epoch)."""

    #: publishes right after each batch this writer commits (``publish_after_commit``)
    publisher: Publisher | None = None
    #: the report of the last publish after a commit (None: none yet, or it failed)
    last_publish: PublishReport | None = None

    def __init__(
        self,
        spark: SparkSession,
        handle: LogStoreTable,
        *,
        writer_id: str,
        emit_mode: frozenset[str] | None = None,
        change_column: str = "op",
        missing_as_null: bool = False,
        publish_after_commit: bool = False,
    ) -> None:
        self.spark = spark
        #: a nullable column an input lacks is null (False: an insert or update without it is a bad row)
        self.missing_as_null = missing_as_null
        self.handle = handle
        self.writer_id = writer_id
        self.change_column = change_column
        table = handle.load()
        self.config: LogStoreConfig = handle.config(table)
        self.emit_mode = emit_mode or (DUAL if self.config.enabled else frozenset({EMIT_FILE}))
        self.primary_key = primary_key_of(table.schema())
        self.epoch = 0
        self.control_topic_id: str | None = None  # the control topic's id the epoch was claimed in
        #: the Kafka client settings of the table's log, gathered once with ``config`` (none without a log)
        self.kafka_config: dict[str, Any] = {}
        if self.config.enabled:
            side = handle.log_side_of(self.config)
            self.control, self.kafka_config = side.control, side.kafka_config
            self.control_topic_id = self.control.topic_id()
            self.epoch = self.control.claim_epoch(writer_id, owner=f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
            self.control.check_claim(self.control.read(), writer_id, self.epoch, self.control_topic_id)
            staged_commit.fence(handle, writer_id, self.epoch)  # the epoch is in force from here on
        if publish_after_commit and self.config.enabled:  # one long-lived publisher for every batch
            from airflow_logstore.publish.publisher import Publisher

            self.publisher = Publisher(handle)
        log.info(
            "writer %s of %s starts epoch %s (emit mode %s)",
            writer_id,
            handle.name,
            self.epoch,
            format_emit_mode(self.emit_mode),
        )

    # -- state ---------------------------------------------------------------------------------------

    def read_control(self) -> ControlState:
        """The control topic's state (an empty state when the table has no log)."""
        return self.control.read() if self.config.enabled else ControlState()

    def decision_control(self) -> ControlState:
        """The control state a commit attempt decides on: :meth:`read_control`, checked to come from the
        topic this epoch was claimed in and to hold the claim (``ControlTopic.check_claim``)."""
        state = self.read_control()
        if self.config.enabled:
            self.control.check_claim(state, self.writer_id, self.epoch, self.control_topic_id)
        return state

    def state(self, table: Table | None = None) -> ControlState:
        """The control state merged with ``table``'s snapshot summaries (default: ``main`` loaded now)."""
        return merged_state(self.handle.load() if table is None else table, self.read_control())

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
        fmt = resolved_format(self.spark, path, input_format)
        raw = read_raw(self.spark, path, fmt)
        batch = batch_id if batch_id is not None else self.next_batch_id()
        return self.write_frame(raw, batch, reread=fmt in REREAD_FORMATS)

    def write_frame(self, raw: DataFrame, batch_id: int, *, reread: bool = False) -> BatchResult:
        """Write one batch (the module's steps 1 to 6); a batch already committed writes nothing.

        :param reread: ``raw`` reads files that do not change while the batch runs, in a format cheap to
            read again (:data:`~airflow_logstore.write.inputs.REREAD_FORMATS`): each step computes the
            batch's changes from them instead of a cache. Otherwise (any other frame: a micro-batch, a
            query, text files) the validated changes are cached for the batch.

        A small batch whose rows the driver holds (:func:`~airflow_logstore.write.inputs.small_batch_rows`:
        a local frame of at most ``SMALL_BATCH_ROWS`` rows, as a streaming micro-batch is made) takes the
        small-batch path: the same steps and commit, but its validation, counts and key filter are
        evaluated in the driver (no Spark job each), and the table is not read for its keys when the
        table's metadata shows that no data file can hold them (:func:`~.planning.files_may_hold`).
        """
        started = time.monotonic()
        result = BatchResult(
            str(self.handle.name), self.writer_id, batch_id, self.epoch, format_emit_mode(self.emit_mode)
        )
        table = self.handle.load()  # main as it is now: the batch is checked and planned against it
        done = self.state(table).committed(self.writer_id, batch_id)  # 1
        if done is not None:
            return result.skipped_for(done)
        schema = self.spark.table(self.handle.spark_name()).schema
        local = small_batch_rows(raw) is not None
        if local:
            log.info("batch %s: a small local batch, checked and planned in the driver", batch_id)
        # the keys are checked: a batch that changes each once may skip the plan (_write_direct)
        changes = validated_changes(
            raw,
            schema,
            self.primary_key,
            self.change_column,
            cache=not reread,
            check_keys=True,
            missing_as_null=self.missing_as_null,
            local=local,
        )  # 2
        try:
            keys = self._keys(changes, table, local)
            # a small batch's keys that no data file can hold: the table holds none (no lookup to read)
            holds_none = local and keys is not None and not files_may_hold(table, keys)
            plan = self._plan(changes.frame, None if holds_none else self._target(table), keys)  # 3
            try:
                planned_at = table.metadata.current_snapshot_id
                absent = None if plan.holds_keys() else KeysAbsent(planned_at)
                if absent is not None and self.emit_mode == DUAL:
                    written = self._write_through(plan, changes, result, absent)  # 4 to 6
                elif absent is not None and changes.keys_once:
                    written = self._write_direct(plan, changes, result, absent)  # 4 to 6
                else:
                    written = self._write_planned(plan.persisted(), result, absent, local)  # 4 to 6
            finally:
                plan.unpersist()
        finally:
            changes.unpersist()
        return replace(written, seconds=round(time.monotonic() - started, 3))

    def _publish(self, batch_id: int) -> None:
        """Publish right after this writer's commit (``publish_after_commit``). It is the same publish
        as every other (idempotent, monotonic, bounded by the state it reads), so a writer publishing
        is as safe as a publish task. A failed one fails no batch (the batch is committed): the next
        publish, this writer's or another's, moves the watermark past it."""
        if self.publisher is None:
            return
        self.last_publish = None
        try:
            self.last_publish = self.publisher.publish()
        except Exception as exc:
            log.warning(
                "batch %s is committed, but publishing right after it failed (%s: %s); the next publish "
                "makes it visible",
                batch_id,
                type(exc).__name__,
                exc,
            )

    def close(self) -> None:
        """Let go of the writer's publisher (its Kafka clients), if it has one."""
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None

    def _target(self, table: Table) -> DataFrame | None:
        """The table's rows as of ``table``'s current snapshot (None: it holds none)."""
        if table_rows(table) == 0:  # also when it has no snapshot
            return None
        snapshot_id = table.metadata.current_snapshot_id
        return self.spark.sql(f"SELECT * FROM {self.handle.spark_name()} VERSION AS OF {snapshot_id}")

    def _keys(self, changes: Changes, table: Table, local: bool = False) -> KeyFilter | None:
        """Where the batch's keys can be in the table (None: anywhere, or not worth finding out).
        ``local``: the changes are a small local frame (found in the driver, without a job)."""
        if not self.primary_key or not worth_a_key_filter(table_rows(table), changes.rows):
            return None
        return key_filter(changes.frame, self.primary_key, local=local)

    def _plan(self, changes: DataFrame, target: DataFrame | None, keys: KeyFilter | None) -> BatchPlan:
        """Plan the row kinds; the lookup of the batch's keys in the table is cached (read for
        :meth:`BatchPlan.holds_keys` and by the plan). The plan's frames are built when a step reads
        them."""
        return plan_row_kinds(
            changes, target, self.primary_key, keys, self._tasks(), self.config.data_format
        ).lookup_cached()

    def _tasks(self) -> int:
        """The Spark tasks of the plan (and of the produce): the cluster's parallelism. Each task sends
        its keys' records to their log partitions, whatever their number."""
        return max(1, self.spark.sparkContext.defaultParallelism)

    def _write_planned(
        self, plan: BatchPlan, result: BatchResult, absent: KeysAbsent | None, local: bool = False
    ) -> BatchResult:
        """Produce the planned records, commit the batch to the table, record the commit.

        :param plan: the plan, cached: counted, produced and merged (or appended) each from one computation.
        :param absent: the plan found none of the batch's keys in the table (None: it found some).
        :param local: a small batch: when it is produced, its changes and no-op deletes are counted by
            the producing tasks (as a write-through's are) instead of by a job of their own.
        """
        batch_id = result.batch_id
        rows = BatchRows(plan.final, plan.keys, absent) if EMIT_FILE in self.emit_mode else None
        if local and EMIT_LOG in self.emit_mode:  # counted by the producing tasks
            reported = produce_records(plan.through, self._produce_context(batch_id))
            counted = result.counted(reported.changes, reported.noop_deletes)
            return self._commit_logged(counted, reported.produced, rows)
        counts = plan.count()
        counted = result.counted(counts.changes, counts.noop_deletes)
        produced = (
            produce_records(plan.through, self._produce_context(batch_id)).produced
            if EMIT_LOG in self.emit_mode
            else NOTHING_PRODUCED
        )
        return self._commit_logged(counted, produced, rows)

    def _write_direct(
        self, plan: BatchPlan, changes: Changes, result: BatchResult, absent: KeysAbsent
    ) -> BatchResult:
        """A single-store write of a batch that changes each key once (or has no key), none of its keys
        in the table: no change has a before-image, so the plan is not built, cached or counted.

        A log-only write produces the write-through's rows (as :meth:`_through`'s) from the input's
        partitions, in one Spark job that also counts the changes and no-op deletes. A file-only write
        commits the changes as they are (appended, or merged if ``main`` moved since the plan), and its
        no-op deletes are its deletes. Only the frames the write reads are built (each is driver work)."""
        if EMIT_LOG in self.emit_mode:
            reported = produce_records(straight_rows(plan, changes), self._produce_context(result.batch_id))
            counted = result.counted(reported.changes, reported.noop_deletes)
            return self._commit_logged(counted, reported.produced, None)
        counted = result.counted(changes.rows, deletes_in(changes.frame))
        final = changes_final(changes.frame, plan.columns)
        return self._commit_logged(counted, NOTHING_PRODUCED, BatchRows(final, plan.keys, absent))

    def _write_through(
        self, plan: BatchPlan, changes: Changes, result: BatchResult, absent: KeysAbsent
    ) -> BatchResult:
        """A dual write of a batch the table appends (none of its keys in the table, or no key): its
        records are produced while its rows are written to a staging branch, in one Spark job over the
        plan or, for a batch that changes each key once, over its changes (:meth:`_through`; not cached:
        read once), and a commit attempt that appends commits those files.
        The staging branch is attempt 0's of this batch and epoch: a newer epoch's fence removes it with
        the other attempt refs."""
        batch_id = result.batch_id
        staged = attempt_refs(self.writer_id, batch_id, self.epoch, 0).branch
        try:
            staged_commit.open_staging(self.handle, staged)
            table = branch_table(self.handle.spark_name(), staged)
            rows, tasks, final = self._through(plan, changes)
            written = write_through(rows, self._produce_context(batch_id), table, tasks)
            log.info("batch %s: written through to %s", batch_id, staged)
            counted = result.counted(written.changes, written.noop_deletes)
            return self._commit_logged(counted, written.produced, BatchRows(final, plan.keys, absent, staged))
        finally:
            staged_commit.drop_staging(self.handle, staged)

    def _through(self, plan: BatchPlan, changes: Changes) -> tuple[DataFrame, int, DataFrame]:
        """The write-through's rows, their tasks, and the final rows a commit attempt merges if its
        append does not hold. A batch that changes each key once (or a table without a key) goes
        straight from its input's partitions: none of its keys is in the table, so no change has a
        before-image and no record depends on another change, and no shuffle or per-key window is
        needed (the plan's frames are not even built). Any other batch goes through the plan's window
        (all of a key in one task, in input order)."""
        if changes.keys_once:  # found by the validation's pass
            # the changes' partitions, as the validation's pass counted them
            return straight_rows(plan, changes), changes.tasks, changes_final(changes.frame, plan.columns)
        return plan.through, plan.tasks, plan.final

    def _commit_logged(self, counted: BatchResult, produced: Produced, rows: BatchRows | None) -> BatchResult:
        """Steps 5 and 6 once the batch's records are flushed: commit its rows, record the commit.

        :param rows: what the commit writes; None when the emit mode writes no file (log only)."""
        if (rows is None) != (EMIT_FILE not in self.emit_mode):
            raise AssertionError(f"rows {rows!r} for emit mode {format_emit_mode(self.emit_mode)}")
        batch_id = counted.batch_id
        logged = counted.produced(produced)
        log.info("batch %s: %s log records flushed, offsets %s", batch_id, produced.count, logged.offsets)
        kill_point("write:after-log", batch_id)
        commit = self._commit_info(batch_id, produced)
        if rows is None:
            recorded = self._record(logged, commit)
        else:
            landed = commit_batch(self._commit_target(), rows, commit)
            kill_point("write:after-commit", batch_id)
            recorded = self._record(replace(logged, snapshot_id=landed.snapshot_id), landed)
        if not recorded.skipped:  # at once: before the batch's clean-up (a staging branch dropped)
            self._publish(batch_id)
        return recorded

    def _record(self, result: BatchResult, commit: CommitInfo) -> BatchResult:
        """Step 6: record the commit in the ledger, unless an older attempt's commit of the batch won."""
        if commit.epoch != self.epoch:
            return result.skipped_for(commit)
        if self.config.enabled and (EMIT_FILE in self.emit_mode or commit.record_count):
            self.control.record_commit(commit.to_json(), self.writer_id, commit.batch_id)
        return result

    def _commit_info(self, batch_id: int, produced: Produced) -> CommitInfo:
        return CommitInfo(
            writer_id=self.writer_id,
            batch_id=batch_id,
            epoch=self.epoch,
            offsets=dict(produced.offsets),
            tasks=produced.tasks,
            record_count=produced.count,
            emit_mode=format_emit_mode(self.emit_mode),
            control_topic_id=self.control_topic_id,
        )

    # -- the log -------------------------------------------------------------------------------------

    def _produce_context(self, batch_id: int) -> BatchProduceContext:
        topic, _, _ = self.config.require_log()  # a table without a log fails here, naming it
        return BatchProduceContext(
            topic,
            self.kafka_config,
            self.writer_id,
            self.epoch,
            batch_id,
            log_only=EMIT_FILE not in self.emit_mode,
        )

    # -- the table -----------------------------------------------------------------------------------

    def _commit_target(self) -> CommitTarget:
        return CommitTarget(
            self.handle, self.writer_id, self.epoch, tuple(self.primary_key), self.decision_control
        )


def straight_rows(plan: BatchPlan, changes: Changes) -> DataFrame:
    """The records' rows of a batch that changes each key once, none of its keys in the table: each
    change as an insert or a delete, from the input's partitions (no before-image: no shuffle, no window)."""
    return appended_changes(changes.frame, plan.columns, plan.primary_key, plan.data_format)


def open_writer(
    spark: SparkSession,
    table: str,
    *,
    catalog: CatalogSpec | None = None,
    kafka_extra: Mapping[str, Any] | None = None,
    writer_id: str = "logstore-cli",
    emit_mode: frozenset[str] | None = None,
    change_column: str = "op",
    missing_as_null: bool = False,
    publish_after_commit: bool = False,
) -> DualWriter:
    """A writer of ``table`` (see :class:`DualWriter`).

    :param publish_after_commit: publish the watermark right after each batch the writer commits, with
        one long-lived publisher (close the writer to let go of its Kafka clients): a long-running writer's
        batches become visible without waiting for a separate publish.
    """
    handle = LogStoreTable.open(table, catalog, kafka_extra)
    return DualWriter(
        spark,
        handle,
        writer_id=writer_id,
        emit_mode=emit_mode,
        change_column=change_column,
        missing_as_null=missing_as_null,
        publish_after_commit=publish_after_commit,
    )
