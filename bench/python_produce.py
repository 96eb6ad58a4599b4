"""The dual write's former log path, kept for the benchmark only (``--compare-python``).

Every record crosses into a Python worker (``mapInArrow``) and is produced with one
``confluent_kafka.Producer.produce`` call and one Python delivery callback per record. The job uses
the Java producer (:mod:`airflow_logstore.spark.producing`); this measures what it replaced.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from airflow_logstore.core.codec import RecordMeta, encode_headers
from airflow_logstore.spark.producing import (
    ProduceContext,
    Produced,
    in_produce_order,
    merge_task_reports,
    task_identity,
)

REPORT_SCHEMA = "task string, count long, offsets string"


def produce_partition(batches: Iterable[Any], ctx: ProduceContext) -> Iterator[Any]:
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
    with shared_producer(ctx.kafka_config, **{"linger.ms": 50, "batch.size": 1_000_000}) as prod:
        records = (
            (key, value, ANY_PARTITION, headers)
            for batch in batches
            for key, value in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)
        )
        sent = produce_each(prod, ctx.topic, records, tracker)
        flush(prod, tracker, sent, f"producing batch {ctx.batch_id} to '{ctx.topic}'")
    offsets = json.dumps({str(p): list(span) for p, span in tracker.offsets.items()})
    yield pa.RecordBatch.from_pylist([{"task": task, "count": sent, "offsets": offsets}])


def produce_records(records: Any, ctx: ProduceContext) -> Produced:
    reports = (
        in_produce_order(records)
        .mapInArrow(lambda batches: produce_partition(batches, ctx), REPORT_SCHEMA)
        .collect()
    )
    return merge_task_reports(
        {**report.asDict(), "offsets": json.loads(report.offsets)} for report in reports
    )
