"""The PySpark read job: the read modes of ``airflow_logstore.read.reader`` at Spark scale.

The log is read with Spark's Kafka source between offsets the driver computes (start position,
watermark). No record crosses into Python: the JVM groups the records by their header set (and
partition, with their offset range), the driver decodes each distinct header set once and decides it with
the one rule (``ReadFilter.decide``, once per offset segment between ``ReadFilter.breaks``), and that
small decision table is broadcast and joined back to the records by (header set, partition, offset
range). Values are parsed in the JVM with ``from_json`` against the table schema: decimals exactly,
timestamps with microseconds (the value rule of ``core.codec``). Undecodable records, and records with
a value that does not fit its column, go to the table's dead-letter topic (through the driver, like the
reconciler's) and are counted. One difference from the Python readers: a decimal with more digits
after the point than its column's scale is rounded half up by ``from_json`` (the Python readers
dead-letter it); no writer writes one.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.codec import (
    ADDITION_KINDS,
    DEBEZIUM_CREATE,
    DEBEZIUM_DELETE,
    KIND_VALUES,
    SPARK_JSON_OPTIONS,
    RecordMeta,
    decode_headers,
)
from airflow_logstore.core.properties import ChangelogMode, Consistency, parse_consistency
from airflow_logstore.core.visibility import (
    Decision,
    ReadFilter,
    opening_half,
    output_identity,
    visible_end,
)
from airflow_logstore.exceptions import LogStoreError, OptionError, RecordDecodeError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from airflow_logstore.read.reader import LogReader, SnapshotStart, StartPosition
    from airflow_logstore.table.tables import LogStoreTable

DECISION_SCHEMA = (
    "_hkey string, _p int, _lo long, _hi long, _keep boolean, _decision string, _dead_reason string, "
    "_writer_id string, _epoch long, _batch_id long, _record_type string"
)


def header_key(headers: Column) -> Column:
    """A record's header set as one string (JSON of the header array; "" without headers)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.to_json(headers), F.lit(""))


#: The lowest offset above ``after`` of a header set in a partition (None: there is none).
NextOffset = Callable[[str, int, int], "int | None"]


def decision_rows(
    groups: list[Any], read_filter: ReadFilter, next_offset: NextOffset | None = None
) -> Iterator[tuple[Any, ...]]:
    """Per (header set, partition, offset range) of the log, the rows of the decision table.

    Each header set is decoded once; its offset range is cut at the filter's breaks, and each piece is
    decided once with ``ReadFilter.rule`` (the same answer for every offset of the piece). A reconciler
    record is kept only at the lowest offset the read holds of its identity (``output_identity``): its
    first copy, as ``ReadFilter.decide`` keeps it. An eventual hybrid read counts a closing half only after
    its pair's opening half (``visibility.FirstCopies``): its lowest offset above the opening half's first
    copy, found with ``next_offset`` when that lies inside a header set's range.
    """
    decoded: list[tuple[Any, RecordMeta | None, str | None]] = []
    for group in groups:
        headers = [
            (h["key"], None if h["value"] is None else bytes(h["value"])) for h in group["headers"] or []
        ]
        try:
            decoded.append((group, decode_headers(headers), None))
        except RecordDecodeError as exc:
            decoded.append((group, None, str(exc)))
    firsts = _first_copies(decoded, read_filter, next_offset)
    for group, meta, reason in decoded:
        hkey, partition, low, high = group["_hkey"], int(group["partition"]), group["low"], group["high"]
        if meta is None:
            yield (hkey, partition, low, high, False, None, reason, None, None, None, None)
            continue
        cuts = [int(b) for b in read_filter.breaks(partition) if low < b <= high]
        identity = output_identity(meta, partition)
        if identity is not None:  # a copy's offsets are cut off from the first copy's
            first_copy = firsts.get(identity, -1)
            cuts = sorted({*cuts, *(o for o in (first_copy, first_copy + 1) if low < o <= high)})
        starts = [low, *cuts]
        for first, following in zip(starts, [*cuts, high + 1], strict=True):
            keep, decision = read_filter.rule(meta, partition, first)
            if keep and identity is not None and first != firsts.get(identity):
                keep, decision = False, Decision.DUPLICATE
            yield (
                hkey,
                partition,
                first,
                following - 1,
                keep,
                decision.value if decision else None,
                None,
                meta.writer_id,
                meta.epoch,
                meta.batch_id,
                meta.record_type.value,
            )


def _first_copies(
    decoded: list[tuple[Any, Any, Any]], read_filter: ReadFilter, next_offset: NextOffset | None = None
) -> dict[Any, int]:
    """Per reconciler record identity, the lowest offset the read keeps it at (its first copy); for an
    eventual hybrid read, a closing half's lowest offset above its opening half's first copy."""
    firsts: dict[Any, int] = {}
    closes: dict[Any, list[tuple[str, int, int, int]]] = {}  # identity -> (header set, partition, low, high)
    for group, meta, _ in decoded:
        partition, low = int(group["partition"]), int(group["low"])
        identity = output_identity(meta, partition) if meta is not None else None
        if identity is None or not read_filter.rule(meta, partition, low)[0]:
            continue
        if read_filter.pairs_halves and opening_half(identity) is not None:
            closes.setdefault(identity, []).append((group["_hkey"], partition, low, int(group["high"])))
        elif low < firsts.get(identity, low + 1):
            firsts[identity] = low
    for identity, ranges in closes.items():
        opening = firsts.get(opening_half(identity))
        if opening is None:
            continue  # the read holds no opening half of the pair: every copy is dropped
        candidates = [low for _, _, low, _ in ranges if low > opening]
        for hkey, partition, low, high in ranges:
            if low <= opening < high:  # the header set straddles the opening half: ask where it goes on
                if next_offset is None:
                    raise LogStoreError(
                        f"header set {hkey!r} of partition {partition} straddles offset {opening}: "
                        "decision_rows needs next_offset to find its next record"
                    )
                found = next_offset(hkey, partition, opening)
                if found is not None:
                    candidates.append(found)
        if candidates:
            firsts[identity] = min(candidates)
    return firsts


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

    consistent = reader.consistency is Consistency.CONSISTENT
    read_filter = reader.read_filter(consistent, hybrid, start)
    state = read_filter.state
    if state is not None and consistent:
        end = visible_end(end, state.watermark)
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
    return decide_and_parse(spark, raw, read_filter, table_schema, reader.changelog_mode)


def decide_and_parse(
    spark: SparkSession, raw: DataFrame, read_filter: ReadFilter, table_schema: Any, mode: ChangelogMode
) -> tuple[DataFrame, DataFrame]:
    """Kafka rows (partition, offset, value, headers) -> (records, dead letters); see the module doc."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    raw = raw.withColumn("_hkey", header_key(F.col("headers")))
    groups = (
        raw.groupBy("_hkey", "partition")
        .agg(F.first("headers").alias("headers"), F.min("offset").alias("low"), F.max("offset").alias("high"))
        .collect()
    )

    def next_offset(hkey: str, partition: int, after: int) -> int | None:
        """Rare: a closing half's copies straddle its pair's opening half in an eventual hybrid read."""
        where = (F.col("_hkey") == hkey) & (F.col("partition") == partition) & (F.col("offset") > after)
        found = raw.where(where).agg(F.min("offset")).first()
        return None if found is None or found[0] is None else int(found[0])

    decisions = spark.createDataFrame(list(decision_rows(groups, read_filter, next_offset)), DECISION_SCHEMA)
    joined = raw.join(
        F.broadcast(decisions),
        (raw["_hkey"] == decisions["_hkey"])
        & (raw["partition"] == decisions["_p"])
        & raw["offset"].between(decisions["_lo"], decisions["_hi"]),
    )
    envelope = StructType(  # both value formats (codec: value formats), told apart value by value
        [
            StructField("kind", StringType()),
            StructField("row", table_schema),
            StructField("op", StringType()),
            StructField("before", table_schema),
            StructField("after", table_schema),
            StructField("source", StructType([StructField("row_kind", StringType())])),
            StructField(_CORRUPT, StringType()),
        ]
    )
    text = F.col("value").cast("string")
    parsed = joined.where(F.col("_keep") | F.col("_dead_reason").isNotNull()).withColumn(
        "_change", F.from_json(text, envelope, {"columnNameOfCorruptRecord": _CORRUPT})
    )
    debezium = F.col("_change.kind").isNull() & F.col("_change.op").isNotNull()
    op = F.col("_change.op")
    created = op.isin(DEBEZIUM_CREATE, "r")
    default_kind = F.when(created, F.lit("+I")).when(op == DEBEZIUM_DELETE, F.lit("-D"))
    debezium_kind = F.coalesce(F.col("_change.source.row_kind"), default_kind)
    kind = F.when(debezium, debezium_kind).otherwise(F.col("_change.kind"))
    row = F.when(~debezium, F.col("_change.row")).when(created, F.col("_change.after"))
    row = row.otherwise(F.col("_change.before"))
    parsed = parsed.withColumn("_change_kind", kind).withColumn("_change_row", row)
    value_problem = (
        F.when(F.col("value").isNull(), F.lit("record has no value"))
        .when(debezium & ~op.isin(DEBEZIUM_CREATE, "r", DEBEZIUM_DELETE), F.lit(_NOT_A_DEBEZIUM_CHANGE))
        .when(~F.coalesce(F.col("_change_kind").isin(*KIND_VALUES), F.lit(False)), F.lit(_NOT_A_CHANGE))
        .when(debezium & (F.col("_change_kind").isin(*ADDITION_KINDS) != created), F.lit(_CONTRADICTS))
        .when(F.col("_change_row").isNull(), F.lit("value 'row' is not an object"))
        .when(F.col(f"_change.{_CORRUPT}").isNotNull(), F.lit(_DOES_NOT_FIT))
    )
    checked = parsed.withColumn("_dead_reason", F.coalesce(F.col("_dead_reason"), value_problem))
    dead = checked.where(F.col("_dead_reason").isNotNull()).select(
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        "_dead_reason",
        text.alias("_row"),
    )
    good = checked.where(F.col("_dead_reason").isNull())
    columns = [F.col(f"_change_row.`{f.name}`").alias(f.name) for f in table_schema.fields]
    records = good.select(
        *columns,
        F.col("_change_kind").alias("_kind"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        "_writer_id",
        "_epoch",
        "_batch_id",
        "_record_type",
    ).orderBy("_partition", "_offset")
    if mode is ChangelogMode.APPEND_ONLY:
        records = records.where(F.col("_kind") == "+I")
    return records, dead


_NOT_A_CHANGE = (
    'value is not a LogStore change: expected {"kind": ..., "row": {...}} or a Debezium envelope '
    '{"before": ..., "after": ..., "op": ...} (parsed in the JVM)'
)
_NOT_A_DEBEZIUM_CHANGE = "a Debezium record whose op is not c, r or d (parsed in the JVM)"
_CONTRADICTS = "a Debezium record whose source.row_kind contradicts its op (parsed in the JVM)"
#: ``from_json`` reads a value that does not fit its column (a decimal with more digits than its
#: precision, a string in a number column) as null and names the record in this column: such a record is
#: dead-lettered, as the Python readers do, never read with a null.
_CORRUPT = "_logstore_corrupt"
_DOES_NOT_FIT = "row does not fit the table schema (parsed in the JVM)"


def send_dead_letters(reader: LogReader, dead: DataFrame) -> tuple[int, str]:
    """Produce the read's dead letters to the table's dead-letter topic; (count, topic)."""
    from airflow_logstore.log.deadletter import DeadLetterTopic, DeadRecord

    topic = DeadLetterTopic.for_log(reader.kafka_config, reader.topic, reader.config.replication_factor)
    for row in dead.toLocalIterator():
        value = None if row["_row"] is None else str(row["_row"]).encode()
        record = DeadRecord(int(row["_partition"]), int(row["_offset"]), value=value)
        topic.add(reader.topic, record, row["_dead_reason"])
    topic.flush()
    return topic.count, topic.topic


def consistency_argument(text: str) -> str:
    """:func:`~airflow_logstore.core.properties.parse_consistency` as an argparse ``type=`` (this job's
    ``--consistency`` and the CLI's ``read --consistency``): the name in our vocabulary, and the parser's
    error as argparse's message (argparse hides a ValueError's own message)."""
    try:
        return parse_consistency(text).value
    except OptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    from airflow_logstore.spark.results import add_report_id

    p = argparse.ArgumentParser(prog="read_table", description="Read a LogStore table with Spark")
    p.add_argument("--table", required=True)
    p.add_argument("--mode", choices=("file", "log", "hybrid"), default="file")
    p.add_argument("--consistency", type=consistency_argument, default=None, metavar="{consistent,eventual}")
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
    from airflow_logstore.read.reader import LogReader, StartPosition, plan_hybrid
    from airflow_logstore.table.tables import LogStoreTable

    handle = LogStoreTable.open(args.table, catalog, kafka_extra)
    result: dict[str, Any] = {"table": args.table, "mode": args.mode}
    frames = []
    if args.mode == "file":
        frames.append(("file", _file_frame(spark, handle, args.snapshot_id, result)))
    else:
        reader = LogReader(handle, consistency=args.consistency, changelog_mode=args.changelog_mode)
        if args.mode == "hybrid":  # the snapshot's rows, then the log from its positions (reader.HybridPlan)
            plan = plan_hybrid(reader, args.snapshot_id)
            frames.append(("file", _file_frame(spark, handle, plan.snapshot_id, result, empty=True)))
            records = _log_frame(spark, reader, plan.log_start, plan.held, result)
        else:
            start = StartPosition.parse(args.start)
            records = _log_frame(spark, reader, start, reader.snapshot_start(start), result)
        frames.append(("log", records))
    if args.output:
        write_output(spark, frames, args.output, args.output_format)
        result["output"] = args.output
    return result


def _file_frame(
    spark: SparkSession,
    handle: LogStoreTable,
    snapshot_id: int | None,
    result: dict[str, Any],
    *,
    empty: bool = False,
) -> DataFrame:
    """The rows of snapshot ``snapshot_id`` (None: the current one, or none at all when ``empty``: a
    hybrid read of a table that had no snapshot when it was planned); counted into ``result``."""
    reader = spark.read
    if snapshot_id is not None:
        reader = reader.option("versionAsOf", str(snapshot_id))
    frame = reader.table(handle.spark_name())
    if snapshot_id is None and empty:
        frame = frame.limit(0)
    result["snapshot_id"] = snapshot_id
    result["file_rows"] = frame.count()
    return frame


def _log_frame(
    spark: SparkSession,
    reader: LogReader,
    start_at: StartPosition | dict[int, int],
    hybrid: SnapshotStart | None,
    result: dict[str, Any],
) -> DataFrame:
    """The log's records from ``start_at`` to its end now (``hybrid``: the log part of a hybrid read of
    that snapshot); the dead letters sent and everything counted into ``result``."""
    from airflow_logstore.log import kafka_client

    cons = kafka_client.consumer(reader.kafka_config)
    try:
        bounds = kafka_client.partition_offsets(cons, reader.topic, reader.config.partitions)
        start = reader.start_offsets(start_at, cons, bounds)
    finally:
        cons.close()
    end = {p: high for p, (_, high) in bounds.items()}
    records, dead = read_log_frame(spark, reader, start, end, hybrid)
    result["log_records"] = records.count()
    result["dead_lettered"], result["dead_letter_topic"] = send_dead_letters(reader, dead)
    result["consistency"] = reader.consistency.value
    return records


#: Parquet output: timestamps as Parquet's microsecond timestamps (UTC-adjusted for timestamptz), not
#: Spark's default INT96 (nanoseconds without a zone: other readers take them for local times, and
#: cannot hold years before 1677 or after 2262).
PARQUET_TIMESTAMPS = ("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")


def write_output(
    spark: SparkSession, frames: list[tuple[str, DataFrame]], output: str, output_format: str
) -> None:
    """Write each frame (file, log) to ``output`` (its subfolder when there are two), every value exactly:
    JSON by the log's value rule (``codec.SPARK_JSON_OPTIONS``), Parquet with microsecond timestamps."""
    options = SPARK_JSON_OPTIONS if output_format == "json" else {}
    key, value = PARQUET_TIMESTAMPS
    previous = spark.conf.get(key)
    spark.conf.set(key, value)
    try:
        for source, frame in frames:
            target = output if len(frames) == 1 else f"{output.rstrip('/')}/{source}"
            frame.write.mode("overwrite").format(output_format).options(**options).save(target)
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


def read_table_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the read job (``spark_apps/read_table_app.py``, ``spark_jobs/read_table.py``): 0 on
    success; the project's own errors print ``read_table: error: ...`` and return 1."""
    from airflow_logstore.spark.jobconf import job_settings, spark_conf_dict
    from airflow_logstore.spark.results import emit_result, job_session
    from airflow_logstore.table.tables import LogStoreTable

    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        spark = job_session(f"logstore-read-{args.table}")
        catalog, kafka_extra = job_settings(spark_conf_dict(spark))
        result = run(spark, args, catalog, kafka_extra)
        emit_result(result, LogStoreTable.open(args.table, catalog, kafka_extra), args.report_id)
    except LogStoreError as exc:
        print(f"read_table: error: {exc}", file=sys.stderr)
        return 1
    return 0
