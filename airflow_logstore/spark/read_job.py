"""The PySpark read job: the read modes of ``airflow_logstore.read.reader`` at Spark scale.

The log is read with Spark's Kafka source between offsets the driver computes (start position,
watermark); executors decode and classify records with the same core functions as the Python reader,
and Spark parses rows into the table's types. Undecodable records go to the table's dead-letter topic
(through the driver, like the reconciler's) and are counted.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.codec import decode_headers, decode_value
from airflow_logstore.core.properties import ChangelogMode, Consistency
from airflow_logstore.core.visibility import ReadFilter
from airflow_logstore.exceptions import RecordDecodeError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from airflow_logstore.read.reader import LogReader, SnapshotStart

DECODED_SCHEMA = (
    "_kind string, _partition int, _offset long, _writer_id string, _epoch long, _batch_id long, "
    "_record_type string, _decision string, _row string, _dead_reason string"
)


def decode_batches(batches: Iterable[pa.RecordBatch], read_filter: ReadFilter) -> Iterator[pa.RecordBatch]:
    """Executor side: Kafka rows (partition, offset, value, headers) -> decoded, classified rows."""
    import pyarrow as pa

    for batch in batches:
        out: list[dict[str, Any]] = []
        partitions = batch.column("partition").to_pylist()
        offsets = batch.column("offset").to_pylist()
        values = batch.column("value").to_pylist()
        headers = batch.column("headers").to_pylist()
        for partition, offset, value, raw_headers in zip(partitions, offsets, values, headers, strict=True):
            row: dict[str, Any] = {"_partition": partition, "_offset": offset}
            try:
                meta = decode_headers([(h["key"], h["value"]) for h in raw_headers or []])
                keep, decision = read_filter.decide(meta, partition, offset)
                if not keep:
                    continue
                kind, fields = decode_value(value)
                row.update(
                    {
                        "_kind": kind.value,
                        "_writer_id": meta.writer_id,
                        "_epoch": meta.epoch,
                        "_batch_id": meta.batch_id,
                        "_record_type": meta.record_type.value,
                        "_decision": decision.value if decision else None,
                        "_row": json.dumps(fields, default=str),
                    }
                )
            except RecordDecodeError as exc:
                row["_dead_reason"] = str(exc)
                row["_row"] = None if value is None else value.decode("utf-8", "replace")
            out.append(row)
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=_arrow_schema())


def _arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("_kind", pa.string()),
            ("_partition", pa.int32()),
            ("_offset", pa.int64()),
            ("_writer_id", pa.string()),
            ("_epoch", pa.int64()),
            ("_batch_id", pa.int64()),
            ("_record_type", pa.string()),
            ("_decision", pa.string()),
            ("_row", pa.string()),
            ("_dead_reason", pa.string()),
        ]
    )


def read_log_frame(
    spark: SparkSession,
    reader: LogReader,
    start: dict[int, int],
    end: dict[int, int],
    hybrid: SnapshotStart | None = None,
) -> tuple[DataFrame, DataFrame]:
    """(records with the table's columns and _kind/_partition/... metadata, dead letters).

    :param hybrid: the log part of a hybrid read of this snapshot.
    """
    from pyspark.sql import functions as F

    consistent = reader.consistency is Consistency.TRANSACTIONAL
    read_filter = reader.read_filter(consistent, hybrid, start)
    state = read_filter.state
    if state is not None and consistent:
        end = {p: min(end[p], state.watermark.get(p, -1) + 1) for p in end}
    start = {p: min(start[p], end[p]) for p in end}
    table_schema = spark.table(reader.handle.spark_name()).schema
    options = {
        "kafka.bootstrap.servers": reader.kafka_config["bootstrap.servers"],
        "assign": json.dumps({reader.topic: sorted(end)}),
        "startingOffsets": json.dumps({reader.topic: {str(p): o for p, o in start.items()}}),
        "endingOffsets": json.dumps({reader.topic: {str(p): o for p, o in end.items()}}),
        "includeHeaders": "true",
        "failOnDataLoss": "false",
    }
    from airflow_logstore.log.kafka_client import java_client_options

    for key, value in java_client_options(reader.handle.kafka_extra).items():
        options[f"kafka.{key}"] = value
    raw = (
        spark.read.format("kafka").options(**options).load().select("partition", "offset", "value", "headers")
    )
    decoded = raw.mapInArrow(lambda batches: decode_batches(batches, read_filter), DECODED_SCHEMA).persist()
    dead = decoded.where(F.col("_dead_reason").isNotNull()).select(
        "_partition", "_offset", "_dead_reason", "_row"
    )
    good = decoded.where(F.col("_dead_reason").isNull())
    parsed = good.withColumn("_typed", F.from_json("_row", table_schema))
    columns = [F.col(f"_typed.`{f.name}`").alias(f.name) for f in table_schema.fields]
    records = parsed.select(
        *columns, "_kind", "_partition", "_offset", "_writer_id", "_epoch", "_batch_id", "_record_type"
    ).orderBy("_partition", "_offset")
    if reader.changelog_mode is ChangelogMode.APPEND_ONLY:
        records = records.where(F.col("_kind") == "+I")
    return records, dead


class _DeadRow:
    """The message interface ``deadletter.dead_letter_entry`` reads, from a dead row of the read."""

    def __init__(self, row: Any) -> None:
        self.row = row

    def partition(self) -> int:
        return int(self.row["_partition"])

    def offset(self) -> int:
        return int(self.row["_offset"])

    def key(self) -> bytes | None:
        return None

    def value(self) -> bytes | None:
        return None if self.row["_row"] is None else str(self.row["_row"]).encode()

    def headers(self) -> list[tuple[str, Any]]:
        return []


def send_dead_letters(reader: LogReader, dead: DataFrame) -> tuple[int, str]:
    """Produce the read's dead letters to the table's dead-letter topic; (count, topic)."""
    from airflow_logstore.log.deadletter import DeadLetterTopic

    topic = DeadLetterTopic.for_log(reader.kafka_config, reader.topic, reader.config.replication_factor)
    for row in dead.toLocalIterator():
        topic.add(reader.topic, _DeadRow(row), row["_dead_reason"])
    topic.flush()
    return topic.count, topic.topic


def parser() -> argparse.ArgumentParser:
    from airflow_logstore.spark.jobs import add_report_id

    p = argparse.ArgumentParser(prog="read_table", description="Read a LogStore table with Spark")
    p.add_argument("--table", required=True)
    p.add_argument("--mode", choices=("file", "log", "hybrid"), default="file")
    p.add_argument("--consistency", choices=("transactional", "eventual"), default=None)
    p.add_argument("--changelog-mode", choices=("all-kinds", "append-only"), default=None)
    p.add_argument("--from", dest="start", default="earliest")
    p.add_argument("--snapshot-id", type=int, default=None)
    p.add_argument("--output", default=None, help="write the rows here (else only counts are printed)")
    p.add_argument("--output-format", choices=("parquet", "json"), default="parquet")
    add_report_id(p)
    return p


def run(
    spark: SparkSession, args: argparse.Namespace, catalog: Any, kafka_extra: dict[str, Any]
) -> dict[str, Any]:
    from airflow_logstore.log import kafka_client
    from airflow_logstore.read.reader import LogReader, StartPosition, snapshot_positions, snapshot_start
    from airflow_logstore.table.tables import LogStoreTable

    handle = LogStoreTable.open(args.table, catalog, kafka_extra)
    result: dict[str, Any] = {"table": args.table, "mode": args.mode}
    frames = []
    if args.mode in ("file", "hybrid"):
        table = handle.load()
        snapshot_id = args.snapshot_id
        positions: dict[int, int] = {}
        if args.mode == "hybrid":
            snapshot_id, positions = snapshot_positions(table, args.snapshot_id)
        reader_df = spark.read
        if snapshot_id is not None:
            reader_df = reader_df.option("versionAsOf", str(snapshot_id))
        file_df = reader_df.table(handle.spark_name())
        result["snapshot_id"] = snapshot_id
        result["file_rows"] = file_df.count()
        frames.append(("file", file_df))
    if args.mode in ("log", "hybrid"):
        reader = LogReader(handle, consistency=args.consistency, changelog_mode=args.changelog_mode)
        cons = kafka_client.consumer(reader.kafka_config)
        try:
            bounds = kafka_client.partition_offsets(cons, reader.topic, reader.config.partitions)
            if args.mode == "hybrid":
                start = {p: max(positions.get(p, 0), bounds[p][0]) for p in bounds}
            else:
                start_at = StartPosition.parse(args.start)
                start = reader.start_offsets(start_at, cons, bounds)
        finally:
            cons.close()
        end = {p: high for p, (_, high) in bounds.items()}
        hybrid = snapshot_start(reader.table, snapshot_id) if args.mode == "hybrid" else None
        records, dead = read_log_frame(spark, reader, start, end, hybrid or reader.snapshot_start(start_at))
        result["log_records"] = records.count()
        result["dead_lettered"], result["dead_letter_topic"] = send_dead_letters(reader, dead)
        result["consistency"] = reader.consistency.value
        frames.append(("log", records))
    if args.output:
        for source, frame in frames:
            target = args.output if len(frames) == 1 else f"{args.output.rstrip('/')}/{source}"
            frame.write.mode("overwrite").format(args.output_format).save(target)
        result["output"] = args.output
    return result
