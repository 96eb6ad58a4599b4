"""Streaming dual write: a Kafka source topic through Structured Streaming with ``foreachBatch``.

Each micro-batch is one LogStore batch whose id is the micro-batch id, so a restarted query that
replays a micro-batch from its checkpoint finds it committed and skips it on both stores. The writer
id defaults to one derived from the checkpoint folder: a new checkpoint is a new writer.
Source records are JSON objects shaped like the batch input (table columns plus the change column).
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any

from airflow_logstore.exceptions import LogStoreError, OptionError, SchemaMismatchError
from airflow_logstore.write.inputs import CORRUPT_COLUMN, SMALL_BATCH_ROWS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_logstore.write.stream_monitor import StreamMonitor
    from airflow_logstore.write.writer import BatchResult, DualWriter

log = logging.getLogger(__name__)


def stream_writer_id(checkpoint: str) -> str:
    """The writer id of a streaming dual write that names none: one per checkpoint folder."""
    return "stream-" + hashlib.sha256(checkpoint.encode()).hexdigest()[:12]


#: Where Spark 4.1's Kafka source fails the first trigger of a restarted query that re-runs a
#: micro-batch planned before the restart (its offsets in the checkpoint, its commit not: the driver
#: died during the batch): building that trigger's progress, ``KafkaMicroBatchStream.metrics`` reads
#: the latest offsets, which only planning a new batch fetches (a ``NullPointerException``). It fails
#: after the batch ran and Spark committed it to the checkpoint, so the query started again goes on.
KAFKA_REPLAY_METRICS_BUG = "KafkaMicroBatchStream.metrics"


def kafka_replay_metrics_bug(exc: BaseException) -> bool:
    """Whether a failed query's error is :data:`KAFKA_REPLAY_METRICS_BUG` (its JVM stack trace, with
    its causes, names the frame)."""
    trace = str(getattr(exc, "_stackTrace", None) or exc)
    return "java.lang.NullPointerException" in trace and KAFKA_REPLAY_METRICS_BUG in trace


def _await(query: Any, deadline: float | None) -> None:
    """Wait for ``query`` to end, or until ``deadline`` (monotonic; None: no limit)."""
    if deadline is None:
        query.awaitTermination()
    else:
        query.awaitTermination(max(0.001, deadline - time.monotonic()))


def local_values(df: DataFrame, limit: int) -> DataFrame | None:
    """A micro-batch of at most ``limit`` records as a local frame of their ``value`` column (a
    ``LocalRelation``: the small-batch path of the dual write), None when it has more.

    One Spark job reads at most ``limit`` + 1 values (as ``isEmpty`` read one), in the micro-batch's
    order (Spark takes a limit's rows partition after partition, each in order: the order in which the
    row ids of the batch input number them). The values travel as bytes and come back through Arrow as
    they were: the decoding, casts and checks then run in Spark on the driver, as for any batch."""
    import pyarrow as pa

    values = [row[0] for row in df.select("value").limit(limit + 1).collect()]
    if len(values) > limit:
        return None
    spark = df.sparkSession
    return spark.createDataFrame(pa.table({"value": pa.array(values, pa.binary())}))


def decode_source(
    df: DataFrame, table_columns: list[str], change_column: str, *, local: bool = False
) -> DataFrame:
    """Kafka source rows -> the all-string input shape the batch validation expects.

    :param local: ``df`` is a small local frame (:func:`local_values`): its field names are collected in
        the driver, without a Spark job."""
    from pyspark.sql import functions as F

    parsed = df.select(
        F.col("value").cast("string").alias("_json"),
        F.from_json(F.col("value").cast("string"), "map<string,string>").alias("_m"),
    )
    if local:
        keys = {key for row in parsed.select("_m").collect() if row[0] is not None for key in row[0]}
    else:
        keys = {row[0] for row in parsed.select(F.explode(F.map_keys("_m"))).distinct().collect()}
    unknown = sorted(keys - set(table_columns) - {change_column})
    if unknown:
        raise SchemaMismatchError(
            f"source record field '{unknown[0]}' is not in the table (columns: {', '.join(table_columns)})"
        )
    present = [c for c in table_columns if c in keys]
    columns = [F.col("_m").getItem(c).alias(c) for c in present]
    if change_column in keys:
        columns.append(F.col("_m").getItem(change_column).alias(change_column))
    columns.append(F.when(F.col("_m").isNull(), F.col("_json")).alias(CORRUPT_COLUMN))
    return parsed.select(*columns)


def _trigger(writer: Any, trigger: str) -> Any:
    text = trigger.strip().lower()
    if text in ("available-now", "availablenow"):
        return writer.trigger(availableNow=True)
    if text == "once":
        return writer.trigger(once=True)
    if text.split()[0].replace(".", "", 1).isdigit():
        return writer.trigger(processingTime=trigger)
    raise OptionError("trigger", f"'{trigger}' is not available-now, once or an interval like '5 seconds'")


def run_stream(
    writer: DualWriter,
    *,
    source_topic: str,
    bootstrap: str | None,
    checkpoint: str | None,
    trigger: str = "available-now",
    timeout: float | None = None,
    max_offsets_per_trigger: int | None = None,
    monitor: StreamMonitor | None = None,
) -> list[BatchResult]:
    """Run the streaming dual write until the source is drained (available-now/once) or ``timeout``.

    :param monitor: writes the application's heartbeat and stops the query on a stop request (its
        creator closes it once this returns or raises); with it, the micro-batches are counted and
        logged in a line a minute by the monitor, and none is returned (a run of days would keep one
        result per micro-batch)
    :raises: a micro-batch's own error (its class says whether a retry can help), else ``LogStoreError``
    """
    from pyspark.errors import StreamingQueryException

    if not checkpoint:
        raise OptionError("checkpoint", "a streaming dual write needs a checkpoint folder")
    spark = writer.spark
    servers = bootstrap or writer.config.bootstrap_servers
    if not servers:
        raise OptionError("source-bootstrap", "no Kafka servers for the source topic")
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", source_topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    from airflow_logstore.log.kafka_client import java_client_options

    for key, value in java_client_options(writer.handle.kafka_extra).items():
        reader = reader.option(f"kafka.{key}", value)
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    source = reader.load()
    table_columns = [f.name for f in spark.table(writer.handle.spark_name()).schema.fields]
    results: list[BatchResult] = []
    failures: list[BaseException] = []

    def each_batch(df: DataFrame, batch_id: int) -> None:
        # at most SMALL_BATCH_ROWS + 1 records read first (also: is the micro-batch empty?); a larger
        # micro-batch is cached, as every micro-batch was before the small-batch path
        small = local_values(df, SMALL_BATCH_ROWS)
        batch = small if small is not None else df.persist()  # small: the dual write's steps in the driver
        try:
            if small is not None and small.isEmpty():
                return
            raw = decode_source(batch, table_columns, writer.change_column, local=small is not None)
            result = writer.write_frame(raw, int(batch_id))
            if monitor is not None:  # a long run: counted and summed up by the monitor, not kept
                monitor.batch_done(int(batch_id), result)
            else:
                log.info("micro-batch %s: %s", batch_id, result.to_dict())
                results.append(result)
        except BaseException as exc:
            failures.append(exc)  # the query reports it wrapped; the driver raises it as it is
            raise
        finally:
            if small is None:
                batch.unpersist()

    def start() -> Any:
        query = _trigger(
            source.writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint), trigger
        ).start()
        if monitor is not None:
            monitor.attach(query)
            if monitor.stop_requested:  # asked while the query was (re)started: obeyed at once
                query.stop()
        return query

    deadline = None if timeout is None else time.monotonic() + timeout
    query = start()
    try:
        try:
            _await(query, deadline)
        except StreamingQueryException as exc:
            if failures or not kafka_replay_metrics_bug(exc):
                raise
            # the replayed micro-batch ran (and its commit is in the checkpoint): go on, once
            log.warning(
                "the restarted query's first micro-batch (a replay) ended in Spark's Kafka source "
                "metrics bug (%s); starting the query again from its checkpoint",
                KAFKA_REPLAY_METRICS_BUG,
            )
            query = start()
            _await(query, deadline)
    except StreamingQueryException as exc:
        if failures:
            raise failures[-1] from None
        message = exc.getMessage() if hasattr(exc, "getMessage") else exc
        raise LogStoreError(f"the streaming dual write failed: {message}") from None
    finally:
        if query.isActive:
            query.stop()
    return results
