"""Reconciliation as a PySpark job, for big backlogs (``spark_jobs/reconcile.py``).

The driver does everything that needs one owner — the lease, the safe point, the control state, the
gaps, the fence checks and the progress record — through
:func:`airflow_logstore.reconcile.reconciler.reconcile`; this module only replaces where the scan and
the produce run (:class:`SparkEngine`):

- **scan**: Spark's Kafka source reads each partition's window ([position, safe point)); it makes one
  task per Kafka partition, reading it in offset order, and each task runs the same
  :class:`~airflow_logstore.core.reconcile.PartitionPlanner` as the Python engine. Per Arrow batch the
  headers are classified vectorized (one decode per distinct header set); only the records that matter
  (not committed, keys with redundant records, the lookback range) are fed to the planner one by one;
- **produce**: after the driver's fence check, the planned reversals and reasserts are produced by
  executors, all records of one Kafka partition by one task, in planned order, and flushed.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_logstore.core import ranges
from airflow_logstore.core import reconcile as core
from airflow_logstore.core.codec import RecordType, decode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.exceptions import LogStoreError, RecordDecodeError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from airflow_logstore.log.deadletter import DeadRecord
    from airflow_logstore.reconcile.reconciler import Offsets, PlanResult, ScanJob
    from airflow_logstore.table.tables import LogStoreTable

log = logging.getLogger(__name__)

PLANNED_SCHEMA = (
    "kind string, partition int, seq long, key binary, value binary, record_type string, source long, "
    "reverses_offset long, pair_half int, pair string, stats string, dead_offset long, dead_reason string, "
    "dead_headers string"
)
DELIVERY_SCHEMA = "partition int, first long, last long, count long, error string"


@dataclass(frozen=True)
class PlanContext:
    """What executors need to plan (shipped in the task closure)."""

    state: ControlState
    starts: dict[int, int]
    ends: dict[int, int]
    lookback: dict[int, tuple[int, int]]


# --- executors: plan ---------------------------------------------------------------------------------------


def _signatures(headers: pa.Array) -> pa.Array:
    """One binary per row that is equal exactly when the rows' header lists are equal (null: none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(headers) == 0:
        return pa.array([], pa.binary())
    flat = pc.list_flatten(headers)
    names = pc.cast(flat.field("key"), pa.binary())
    values = pc.fill_null(flat.field("value"), b"")
    elements = pc.binary_join_element_wise(names, b"\x00", values, b"\x00")
    rows = pa.ListArray.from_arrays(headers.offsets, elements, mask=headers.is_null())
    return pc.binary_join(rows, b"\x01")


def _pairs(raw: Any) -> list[tuple[str, bytes]] | None:
    return None if raw is None else [(h["key"], h["value"]) for h in raw]


def _headers_json(headers: Sequence[tuple[str, Any]] | None) -> str:
    return json.dumps(
        [[name, None if value is None else base64.b64encode(value).decode()] for name, value in headers or []]
    )


class ArrowPartitionScan:
    """Feeds one Kafka partition's Arrow batches to a planner, the common records in bulk."""

    def __init__(self, ctx: PlanContext, partition: int) -> None:
        self.partition = partition
        self.planner = core.PartitionPlanner(
            partition,
            ctx.starts[partition],
            ctx.ends[partition],
            core.Classifier(ctx.state),
            ctx.lookback.get(partition),
        )
        self.lookback = ctx.lookback.get(partition)
        self.dead: list[dict[str, Any]] = []
        self.last_offset = -1

    def feed(self, batch: pa.RecordBatch) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        offsets = batch.column("offset")
        first = offsets[0].as_py()
        increasing = len(batch) == 1 or pc.all(pc.greater(offsets[1:], offsets[:-1])).as_py()
        if first <= self.last_offset or not increasing:
            raise LogStoreError(f"partition {self.partition}: records are not in offset order in this task")
        self.last_offset = offsets[-1].as_py()
        headers_column = batch.column("headers")
        encoded = pc.dictionary_encode(_signatures(headers_column))
        codes = encoded.indices
        found, first_rows = np.unique(pc.fill_null(codes, -1).to_numpy(), return_index=True)
        # per distinct header set: decode once; the planner's classifier says where its records are
        # committed (the others, and rows without decodable headers, are fed one by one)
        lows: list[int | None] = [None] * len(encoded.dictionary)
        highs: list[int | None] = [None] * len(encoded.dictionary)
        for code, row in zip(found.tolist(), first_rows.tolist(), strict=True):
            if code < 0:
                continue  # rows without headers: fed one by one (dead letters)
            try:
                meta = decode_headers(_pairs(headers_column[row].as_py()))
            except RecordDecodeError:
                continue  # fed one by one (dead letters)
            committed_offsets = self.planner.classify.committed_offsets(meta, self.partition)
            if committed_offsets is not None:
                lows[code], highs[code] = committed_offsets
        committed = pc.fill_null(
            pc.and_(
                pc.greater_equal(offsets, pc.take(pa.array(lows, pa.int64()), codes)),
                pc.less_equal(offsets, pc.take(pa.array(highs, pa.int64()), codes)),
            ),
            False,
        )
        interesting = pc.invert(committed)
        if self.lookback is not None:
            interesting = pc.or_(
                interesting,
                pc.and_(
                    pc.greater_equal(offsets, self.lookback[0]), pc.less_equal(offsets, self.lookback[1])
                ),
            )
        keys = batch.column("key")
        candidates = list(self.planner.tracked_keys())
        if pc.any(interesting).as_py():
            candidates.extend(k for k in pc.filter(keys, interesting).to_pylist() if k is not None)
        if candidates:
            known = pc.fill_null(pc.is_in(keys, value_set=pa.array(candidates, pa.binary())), False)
            interesting = pc.or_(interesting, known)
        chosen = pc.indices_nonzero(interesting)
        if len(batch) > len(chosen):
            self.planner.observe_committed(len(batch) - len(chosen), first)
        for row in batch.take(chosen).to_pylist():
            headers = _pairs(row["headers"])
            reason = self.planner.observe(row["offset"], row["key"], headers, row["value"])
            if reason is not None:
                self.dead.append({**row, "reason": reason, "headers": _headers_json(headers)})

    def rows(self) -> Iterator[dict[str, Any]]:
        plan = self.planner.finish()
        yield {"kind": "stats", "partition": self.partition, "stats": json.dumps(plan.stats.to_dict())}
        for seq, out in enumerate(plan.iter_outputs()):
            yield {
                "kind": "output",
                "partition": out.partition,
                "seq": seq,
                "key": out.key,
                "value": out.value,
                "record_type": out.record_type.value,
                "source": out.source,
                "reverses_offset": out.reverses[1] if out.reverses else None,
                "pair_half": out.pair_half,
                "pair": json.dumps(out.pair) if out.pair is not None else None,
            }
        for dead in self.dead:
            yield {
                "kind": "dead",
                "partition": self.partition,
                "key": dead["key"],
                "value": dead["value"],
                "dead_offset": dead["offset"],
                "dead_reason": dead["reason"],
                "dead_headers": dead["headers"],
            }


def plan_batches(batches: Iterable[pa.RecordBatch], ctx: PlanContext) -> Iterator[pa.RecordBatch]:
    """Executor side: one task's Kafka rows (one partition, offset order) -> stats, outputs, dead letters."""
    import pyarrow as pa

    scans: dict[int, ArrowPartitionScan] = {}
    for batch in batches:
        if batch.num_rows == 0:
            continue
        partitions = set(batch.column("partition").to_pylist())
        for partition in partitions:
            part = batch if len(partitions) == 1 else batch.filter(_equals(batch, partition))
            scan = scans.get(partition)
            if scan is None:
                scan = scans[partition] = ArrowPartitionScan(ctx, partition)
            scan.feed(part)
    for scan in scans.values():
        out = list(scan.rows())
        for start in range(0, len(out), 10000):
            yield pa.RecordBatch.from_pylist(out[start : start + 10000], schema=_planned_arrow_schema())


def _equals(batch: pa.RecordBatch, partition: int) -> Any:
    import pyarrow.compute as pc

    return pc.equal(batch.column("partition"), partition)


def _planned_arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("kind", pa.string()),
            ("partition", pa.int32()),
            ("seq", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("record_type", pa.string()),
            ("source", pa.int64()),
            ("reverses_offset", pa.int64()),
            ("pair_half", pa.int32()),
            ("pair", pa.string()),
            ("stats", pa.string()),
            ("dead_offset", pa.int64()),
            ("dead_reason", pa.string()),
            ("dead_headers", pa.string()),
        ]
    )


# --- executors: produce ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReversalProduceContext:
    """What an executor task needs to produce its share of a run's reversals (shipped in the task closure):
    the log topic, the Kafka settings, and the lease and run its records are tagged with."""

    topic: str
    kafka_config: dict[str, Any]
    lease_id: int
    run: int


def _planned_output(row: Mapping[str, Any]) -> core.Output:
    """A record the plan wrote, as the row the scan stage returned."""
    offset = row["reverses_offset"]
    reverses = (row["partition"], offset) if offset is not None else None
    record_type = RecordType(row["record_type"])
    pair = tuple(json.loads(row["pair"])) if row["pair"] is not None else None
    return core.Output(
        row["partition"],
        row["key"],
        row["value"],
        record_type,
        row["source"],
        reverses,
        row["pair_half"] or 0,
        pair,  # type: ignore[arg-type]
    )


def produce_batches(
    batches: Iterable[pa.RecordBatch], ctx: ReversalProduceContext
) -> Iterator[pa.RecordBatch]:
    """Executor side: produce one task's planned records (whole Kafka partitions, in planned order)."""
    import pyarrow as pa

    from airflow_logstore.log.kafka_client import DeliveryTracker, produce_each, producer
    from airflow_logstore.pause import fail_once

    tracker = DeliveryTracker()
    prod = producer(ctx.kafka_config, **{"linger.ms": 20})
    outputs = (_planned_output(row) for batch in batches for row in batch.to_pylist())
    records = ((out.key, out.value, out.partition, out.headers(ctx.lease_id, ctx.run)) for out in outputs)
    sent = produce_each(prod, ctx.topic, records, tracker)
    remaining = prod.flush(120)
    fail_once("reconcile:produce-flushed")  # tests: fails after its records are out; Spark retries it
    error = None
    if tracker.error is not None:
        error = tracker.error.str()
    elif remaining or tracker.delivered < sent:
        error = f"{sent - tracker.delivered} of {sent} records were not acknowledged"
    rows = [
        {"partition": p, "first": first, "last": last, "count": 0, "error": error}
        for p, (first, last) in sorted(tracker.offsets.items())
    ]
    rows.append({"partition": -1, "first": -1, "last": -1, "count": tracker.delivered, "error": error})
    yield pa.RecordBatch.from_pylist(
        rows,
        schema=pa.schema(
            [
                ("partition", pa.int32()),
                ("first", pa.int64()),
                ("last", pa.int64()),
                ("count", pa.int64()),
                ("error", pa.string()),
            ]
        ),
    )


# --- the driver ------------------------------------------------------------------------------------------


def _dead_record(row: Any) -> DeadRecord:
    """A planned dead-letter row as the record it was."""
    from airflow_logstore.log.deadletter import DeadRecord

    return DeadRecord(
        int(row["partition"]),
        int(row["dead_offset"]),
        key=None if row["key"] is None else bytes(row["key"]),
        value=None if row["value"] is None else bytes(row["value"]),
        headers=[
            (name, None if v is None else base64.b64decode(v)) for name, v in json.loads(row["dead_headers"])
        ],
    )


class SparkEngine:
    """Scan and produce with Spark executors; the reconciler's driver logic is unchanged."""

    name = "spark"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def plan(self, job: ScanJob) -> PlanResult:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from airflow_logstore.log.deadletter import DeadLetterTopic
        from airflow_logstore.log.kafka_client import java_client_options
        from airflow_logstore.reconcile.reconciler import PlanResult

        busy = sorted(p for p in job.ends if job.starts[p] < job.ends[p])
        stats: dict[int, core.PartitionStats] = {}
        planned = None
        if busy:
            options = {
                "kafka.bootstrap.servers": job.kafka_config["bootstrap.servers"],
                "assign": json.dumps({job.topic: busy}),
                "startingOffsets": json.dumps({job.topic: {str(p): job.starts[p] for p in busy}}),
                "endingOffsets": json.dumps({job.topic: {str(p): job.ends[p] for p in busy}}),
                "includeHeaders": "true",
                "failOnDataLoss": "false",  # retention may delete records meanwhile: reported as gaps
            }
            for key, value in java_client_options(job.handle.kafka_extra).items():
                options[f"kafka.{key}"] = value
            ctx = PlanContext(job.state, dict(job.starts), dict(job.ends), dict(job.lookback))
            raw = (
                self.spark.read.format("kafka")
                .options(**options)
                .load()
                .select("partition", "offset", "key", "value", "headers")
            )
            planned = raw.mapInArrow(lambda batches: plan_batches(batches, ctx), PLANNED_SCHEMA).persist(
                StorageLevel.MEMORY_AND_DISK
            )
            dead = None
            if not job.dry_run:
                dead = DeadLetterTopic(job.kafka_config, job.dead_letter_topic, job.replication_factor)
            for row in planned.where(F.col("kind") != "output").toLocalIterator():
                if row["kind"] == "stats":
                    partition_stats = core.PartitionStats.from_dict(json.loads(row["stats"]))
                    if partition_stats.partition in stats:
                        raise LogStoreError(
                            f"partition {partition_stats.partition} was split across Spark tasks; "
                            "reconciliation needs each Kafka partition in one task"
                        )
                    stats[partition_stats.partition] = partition_stats
                elif dead is not None:
                    dead.add(job.topic, _dead_record(row), row["dead_reason"])
            if dead is not None:
                dead.flush()
        for p in job.ends:  # partitions without records (or whose records are all gone)
            if p not in stats:
                stats[p] = core.PartitionStats(p, job.starts[p], job.ends[p], next_position=job.ends[p])
        ordered = [stats[p] for p in sorted(stats)]
        count = sum(s.reversed + 2 * s.reasserted + s.reasserts_completed for s in ordered)
        if planned is not None and (job.dry_run or count == 0):
            planned.unpersist()  # nothing will be produced from it
            planned = None
        return PlanResult(ordered, count, planned)

    def produce(self, job: ScanJob, result: PlanResult, lease_id: int, run: int) -> Offsets:
        from pyspark.sql import functions as F

        from airflow_logstore.exceptions import KafkaUnavailableError

        planned = result.outputs
        ctx = ReversalProduceContext(
            job.topic, {k: v for k, v in job.kafka_config.items() if not callable(v)}, lease_id, run
        )
        outputs = planned.where(F.col("kind") == "output")
        tasks = max(1, min(len(job.ends), self.spark.sparkContext.defaultParallelism))
        ordered = outputs.repartition(tasks, "partition").sortWithinPartitions("partition", "seq")
        reports = ordered.mapInArrow(lambda batches: produce_batches(batches, ctx), DELIVERY_SCHEMA).collect()
        planned.unpersist()
        errors = sorted({r["error"] for r in reports if r["error"]})
        delivered = sum(r["count"] for r in reports if r["partition"] == -1)
        if errors or delivered != result.output_count:
            raise KafkaUnavailableError(
                f"writing reversals to '{job.topic}': {delivered} of {result.output_count} delivered"
                + (f" ({'; '.join(errors)})" if errors else "")
            )
        delivered_spans = ({r["partition"]: (r["first"], r["last"])} for r in reports if r["partition"] >= 0)
        return ranges.merge_spans(delivered_spans)


# --- the job ------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    from airflow_logstore.spark.results import add_report_id

    p = argparse.ArgumentParser(prog="reconcile", description="Reconcile a LogStore table's log with Spark")
    p.add_argument("--table", required=True)
    p.add_argument("--dry-run", action="store_true", help="report only; write nothing")
    p.add_argument("--lease-ttl", type=float, default=None, help="lease time-to-live in seconds")
    add_report_id(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark_jobs/reconcile.py``: the reconciler with its scan in Spark; its report as
    the result (:func:`~airflow_logstore.spark.results.run_table_job`)."""
    from airflow_logstore.reconcile.reconciler import DEFAULT_LEASE_TTL_S, reconcile
    from airflow_logstore.spark.results import run_table_job

    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def run(spark: Any, handle: LogStoreTable) -> dict[str, Any]:
        report = reconcile(
            handle,
            dry_run=args.dry_run,
            lease_ttl_s=args.lease_ttl or DEFAULT_LEASE_TTL_S,
            engine=SparkEngine(spark),
        )
        return report.to_dict()

    return run_table_job("reconcile", args.table, args.report_id, run)
