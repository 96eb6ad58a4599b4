"""Step 4 of the dual write: produce a batch's planned records to the table's log, and flush.

Each Spark task produces its share in input order (per key: keyed records go to one task and one log
partition), tags every record with its task attempt, flushes, and reports the offsets it wrote; the
driver merges those reports into the batch's offsets, task attempts and record count.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_logstore.core import ranges
from airflow_logstore.core.codec import RecordMeta, encode_headers
from airflow_logstore.pause import fail_once, pause_point
from airflow_logstore.spark.inputs import ROW_COLUMN
from airflow_logstore.spark.planning import KEY_COLUMN, SUB_COLUMN, VALUE_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

#: The schema of one task's report (:func:`produce_partition`).
REPORT_SCHEMA = "task string, count long, offsets string"


@dataclass(frozen=True)
class ProduceContext:
    """Everything an executor task needs to produce its records (shipped in the task closure)."""

    topic: str
    kafka_config: dict[str, Any]
    writer_id: str
    epoch: int
    batch_id: int
    log_only: bool


@dataclass(frozen=True)
class Produced:
    """What a batch put in the log: per partition (first, last) offset, the task attempts, the count.

    ``tasks`` is None when the batch wrote no log at all (emit mode ``file``).
    """

    offsets: Mapping[int, tuple[int, int]]
    tasks: frozenset[str] | None
    count: int

    def offsets_for_result(self) -> dict[str, list[int]]:
        """The offsets as the batch result reports them: ``{"<partition>": [first, last]}``, sorted."""
        return {str(p): list(span) for p, span in sorted(self.offsets.items())}


NOTHING_PRODUCED = Produced({}, None, 0)


def task_identity(partition_id: int, task_attempt_id: int) -> str:
    """The tag of one Spark task attempt's records: ``<partition>.<task attempt id>``.

    The task attempt id is unique within the application; the attempt *number* is not (Spark counts
    it from 0 again when it resubmits a stage after a fetch failure), so a partial first run of a
    task would share its tag with the run that committed.
    """
    return f"{partition_id}.{task_attempt_id}"


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


def produce_tasks(log_partitions: int, parallelism: int) -> int:
    """How many Spark tasks produce a batch: one per log partition, at most the cluster's parallelism."""
    return max(1, min(log_partitions, parallelism))


def in_produce_order(records: DataFrame, tasks: int, keyed: bool) -> DataFrame:
    """The records spread over ``tasks`` (all of a key in one task) and in input order within each."""
    spread = records.repartition(tasks, KEY_COLUMN) if keyed else records.repartition(tasks)
    return spread.sortWithinPartitions(ROW_COLUMN, SUB_COLUMN).select(KEY_COLUMN, VALUE_COLUMN)


def produce_records(records: DataFrame, ctx: ProduceContext, tasks: int, keyed: bool) -> Produced:
    """Produce every planned record (one Spark job) and merge what its tasks report."""
    reports = (
        in_produce_order(records, tasks, keyed)
        .mapInArrow(lambda batches: produce_partition(batches, ctx), REPORT_SCHEMA)
        .collect()
    )
    return merge_task_reports(report.asDict() for report in reports)


def merge_task_reports(reports: Iterable[Mapping[str, Any]]) -> Produced:
    """The batch's offsets (per partition, the span over every task's), task attempts and count."""
    reports = list(reports)
    offsets = ranges.merge_spans(json.loads(report["offsets"]) for report in reports)
    tasks = frozenset(report["task"] for report in reports)
    return Produced(offsets, tasks, sum(report["count"] for report in reports))
