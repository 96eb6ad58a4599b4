"""Step 4 of the dual write: produce a batch's planned records to the table's log, and flush.

Each Spark task produces its share in input order (per key: keyed records go to one task and one log
partition), tags every record with its task attempt, flushes, and reports the offsets it wrote; the
driver merges those reports into the batch's offsets, task attempts and record count.

The records never leave the JVM. A small Java class shipped with the package
(``java/LogProducer.java``, a function over the partitions of Spark's own rows, ``InternalRow``) is
built into the wheel's ``java/log-producer.jar`` (in a source checkout: compiled once with ``javac``
into the local cache; :mod:`airflow_logstore.javac`), added to the
Spark context (``addJar``: executors fetch it from the driver, nothing is installed on them) and applied
through py4j to the rows of the frame's plan (``LogProducer.internalRows``: no conversion to ``Row``
objects). Each task borrows an idempotent Java ``KafkaProducer``
(``acks=all``, never transactional; kept per executor JVM and configuration, dropped on any error),
sends every (key, value) with the batch's headers, keeps the first and last acknowledged offset per
partition in the delivery callback, flushes, fails unless every record was acknowledged, and returns
one JSON line. Why this design: the earlier path encoded JSON in the JVM, moved every record into a
Python worker (``mapInArrow``) and made one ``Producer.produce`` call plus one Python delivery
callback per record (about 106,000 records/s); ``produce_batch`` cannot carry headers, which are part
of the record format. Here Python runs once per batch on the driver.

What stays as it was:

- partitioning: keyed records use the Java client's built-in partitioner, ``murmur2(key)`` made
  positive modulo the partition count, which is what librdkafka's ``murmur2_random``
  (:data:`airflow_logstore.core.codec.PRODUCER_PARTITIONER`, used by every Python producer of the
  project) computes for a key; records without a key go to any partition (sticky, not random);
- headers: the driver encodes the batch's set with :func:`encode_headers` (writer, epoch, batch,
  log-only: the same for every record) and the task header is filled in per task with
  :func:`task_identity`'s format (``LogProducer.taskIdentity``): the bytes are those of
  ``encode_headers(RecordMeta(..., task, ...))`` (a test compares them);
- the pause points ``produce:started`` / ``produce:flushed`` and ``fail_once("produce:flushed")``
  follow :mod:`airflow_logstore.pause`'s file protocol in the executor; the driver passes the points a
  test named (:func:`pause_settings`), since a local-mode executor is the driver's own JVM;
- secrets: the connection's SASL settings become the Java client's ``sasl.jaas.config``
  (:func:`java_client_options`); they travel in the task closure and are never logged.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_logstore.core import ranges
from airflow_logstore.core.codec import H_TASK, RecordMeta, encode_headers
from airflow_logstore.exceptions import KafkaUnavailableError
from airflow_logstore.javac import LOG_PRODUCER
from airflow_logstore.write.planning import (
    AFTER_VALUE_COLUMN,
    APPENDED_COLUMN,
    BEFORE_VALUE_COLUMN,
    KEY_COLUMN,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The Java class that produces one task's records (``java/LogProducer.java`` in this package).
PRODUCER_CLASS = LOG_PRODUCER.class_name
#: Its write-through (produce while the rows are appended to the table), a nested class.
WRITE_THROUGH_CLASS = PRODUCER_CLASS + "$WriteThrough"
#: Classes whose jars ``LogProducer`` compiles against in a source checkout (found where the driver's
#: JVM loaded them; the wheel's build uses ``versions.JAVA_COMPILE_ARTIFACTS``).
_COMPILE_AGAINST = (
    "org.apache.kafka.clients.producer.KafkaProducer",
    "org.apache.spark.TaskContext",  # Spark's core (JavaRDD)
    "org.apache.spark.api.java.function.FlatMapFunction",
    "org.apache.spark.sql.Row",  # Spark's SQL API (Dataset, the types)
    "org.apache.spark.sql.catalyst.InternalRow",  # Catalyst (GenericInternalRow)
    "org.apache.spark.sql.classic.SparkSession",  # Spark SQL (the classic Dataset's plan)
    "org.apache.spark.internal.Logging",  # Spark's common utilities (a parent of the classic classes)
    "scala.Option",
)
#: Producer settings of the dual write (the connection's may add security; these always win).
_PRODUCER_SETTINGS = {
    "enable.idempotence": "true",
    "acks": "all",
    "max.in.flight.requests.per.connection": "5",
    "linger.ms": "20",
    "batch.size": "1000000",
    "buffer.memory": "134217728",
    "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
    "value.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
}


@dataclass(frozen=True)
class BatchProduceContext:
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


def in_produce_order(changes: DataFrame) -> DataFrame:
    """The changes' records to produce, as they are planned: spread over the producing tasks, all of a key
    in one, per key in input order (:func:`airflow_logstore.write.planning.plan_row_kinds`): no shuffle,
    no sort. Each row is a change: its key and its two record values (either may be null)."""
    return changes.select(KEY_COLUMN, BEFORE_VALUE_COLUMN, AFTER_VALUE_COLUMN)


def produce_records(changes: DataFrame, ctx: BatchProduceContext) -> TaskReports:
    """Produce the records of every planned change (:func:`airflow_logstore.write.planning.
    write_through_rows`: a key and two record values), one Spark task per partition of ``changes`` (one
    Spark job), and merge what its tasks report."""
    ordered = in_produce_order(changes)
    spark = ordered.sparkSession
    with produce_failures_named(ctx):
        return task_reports(spark, log_producer(spark, ctx).produce(ordered._jdf))


#: ``LogProducer``'s message for a task whose records the broker did not acknowledge (``Deliveries.check``)
NOT_ACKNOWLEDGED = re.compile(r"\d+ of \d+ records to '[^']*' were not acknowledged[^\n]*")


@contextmanager
def produce_failures_named(ctx: BatchProduceContext) -> Iterator[None]:
    """A Spark job that failed because a producing task's records were not acknowledged (the broker is
    gone, or did not answer within the delivery timeout) raises :class:`KafkaUnavailableError` naming
    the batch, the topic and Kafka's error, instead of the JVM's stack trace; other failures as they are.
    """
    from airflow_logstore.table.commit_retry import java_causes

    try:
        yield
    except Exception as exc:
        text = "\n".join([str(exc), *(cause.message for cause in java_causes(exc))])
        found = NOT_ACKNOWLEDGED.search(text)
        if found is None:
            raise
        raise KafkaUnavailableError(
            f"Kafka did not acknowledge the log records of batch {ctx.batch_id} of writer "
            f"'{ctx.writer_id}': {found.group(0)}"
        ) from exc


#: Iceberg write options of a write-through: the rows are written where they are produced, so the
#: tasks that produce are the write's own (no exchange may come between them and the writer).
WRITE_THROUGH_OPTIONS = {"distribution-mode": "none", "fanout-enabled": "true"}


@dataclass(frozen=True)
class TaskReports:
    """What a batch's producing tasks reported: the records they produced, the changes they read, the
    no-op deletes among them (changes with no record)."""

    produced: Produced
    changes: int
    noop_deletes: int
    #: the partition of each report, sorted (a partition reported twice is listed twice)
    partitions: tuple[int, ...] = ()


def task_reports(spark: SparkSession, reports: Any) -> TaskReports:
    """Merge the tasks' reports (a Java list of JSON lines, one per task), fetched in one py4j call."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    joined = str(jvm.java.lang.String.join("\n", reports))  # a report is one line
    found = [json.loads(report) for report in joined.split("\n")] if joined else []
    changes, noops = sum(r["changes"] for r in found), sum(r["noop_deletes"] for r in found)
    partitions = tuple(sorted(int(str(r["task"]).split(".")[0]) for r in found))
    return TaskReports(merge_task_reports(found), changes, noops, partitions)


def write_through(rows: DataFrame, ctx: BatchProduceContext, table: str, tasks: int) -> TaskReports:
    """Produce every record of ``rows`` (:func:`airflow_logstore.write.planning.write_through_rows`) and
    append the rows marked appended to ``table`` (a branch), in one Spark job: each task sends its
    records while its rows are written, flushes when its input ends, then its writer commits.

    Each task adds its report to an accumulator after its flush; Spark merges a task's update only when
    the task succeeded, once per partition, so the reports name exactly the task attempts whose rows
    were written (T1). Reports of other partitions than ``rows``'s ``tasks`` (one each) fail the batch
    before any commit.

    :param tasks: the partitions of ``rows``, as planned (asking ``rows`` itself would run its shuffle:
        with adaptive execution, a frame's RDD is only known once its stages ran).
    """
    from pyspark.sql import DataFrame as PyDataFrame
    from pyspark.sql.types import StructType

    spark = rows.sparkSession
    sc = spark.sparkContext
    assert sc._jsc is not None
    reports = sc._jsc.sc().collectionAccumulator("logstore-write-through")
    names = rows.schema.names
    appended = StructType(rows.schema.fields[names.index(APPENDED_COLUMN) + 1 :])  # the table's columns
    schema = spark._jsparkSession.parseDataType(appended.json())
    function = (
        java_class(spark, WRITE_THROUGH_CLASS)
        .getConstructors()[0]
        .newInstance(java_arguments(spark, log_producer(spark, ctx), reports, schema))
    )
    writer = PyDataFrame(function.written(rows._jdf), spark).writeTo(table)
    for key, value in WRITE_THROUGH_OPTIONS.items():
        writer = writer.option(key, value)
    with produce_failures_named(ctx):
        writer.append()
    reported = task_reports(spark, reports.value())
    check_one_report_each(reported, tasks, ctx.batch_id)
    return reported


def check_one_report_each(reported: TaskReports, tasks: int, batch_id: int) -> None:
    """Fail the batch, before its commit, unless each of its ``tasks`` partitions reported exactly once."""
    if reported.partitions != tuple(range(tasks)):
        raise RuntimeError(
            f"the write-through of batch {batch_id} ran {tasks} tasks but has reports of partitions "
            f"{list(reported.partitions)} (one per partition expected), so its records are not "
            "accounted for; the batch is not committed and a retry writes it again"
        )


def log_producer(spark: SparkSession, ctx: BatchProduceContext) -> Any:
    """The ``LogProducer`` of one batch, a py4j object of the driver's JVM."""
    headers = encode_headers(RecordMeta(ctx.writer_id, ctx.epoch, ctx.batch_id, "", log_only=ctx.log_only))
    [task_header] = [i for i, (name, _) in enumerate(headers) if name == H_TASK]
    sc = spark.sparkContext
    jvm = sc._jvm
    assert jvm is not None
    settings = jvm.java.util.HashMap()
    for key, value in java_producer_settings(ctx.kafka_config).items():
        settings.put(key, value)
    names, values = jvm.java.util.ArrayList(), jvm.java.util.ArrayList()
    for name, encoded in headers:
        names.add(name)
        values.add(encoded.decode("utf-8"))
    points = jvm.java.util.HashMap()
    for key, value in pause_settings(spark).items():
        points.put(key, value)
    [constructor] = producer_class(spark).getConstructors()
    return constructor.newInstance(
        java_arguments(spark, ctx.topic, settings, names, values, task_header, points)
    )


def java_arguments(spark: SparkSession, *arguments: Any) -> Any:
    """A Java ``Object[]`` of ``arguments`` (for a reflected constructor)."""
    sc = spark.sparkContext
    gateway, jvm = sc._gateway, sc._jvm
    assert gateway is not None and jvm is not None
    array = gateway.new_array(jvm.java.lang.Object, len(arguments))
    for i, argument in enumerate(arguments):
        array[i] = argument
    return array


#: The variables of :mod:`airflow_logstore.pause` (tests only).
TEST_POINT_VARIABLES = ("LOGSTORE_PAUSE_AT", "LOGSTORE_PAUSE_DIR", "LOGSTORE_FAIL_ONCE_AT")


def pause_settings(spark: SparkSession) -> dict[str, str]:
    """The pause and failure points a test named for the executors, as the driver sees them.

    ``spark.executorEnv.*`` reaches the executors' environments on a cluster, but in local mode the
    executor is the driver's JVM, started before that setting was read, so the producer gets them here.
    """
    conf = spark.conf  # the context's settings too, read one by one (getConf() copies them all)
    found = {n: conf.get(f"spark.executorEnv.{n}", None) or os.environ.get(n) for n in TEST_POINT_VARIABLES}
    return {name: value for name, value in found.items() if value}


def java_producer_settings(kafka_config: Mapping[str, Any]) -> dict[str, str]:
    """The Java producer's settings: the connection's servers and security, idempotent, ``acks=all``."""
    from airflow_logstore.log.kafka_client import java_client_options

    settings = {
        "bootstrap.servers": str(kafka_config["bootstrap.servers"]),
        **java_client_options(kafka_config),
    }
    timeout = kafka_config.get("message.timeout.ms") or kafka_config.get("delivery.timeout.ms") or 60000
    settings["delivery.timeout.ms"] = str(timeout)
    settings["request.timeout.ms"] = str(min(30000, int(timeout) - 100))
    settings["max.block.ms"] = str(timeout)  # waiting for the topic's metadata counts as delivery
    settings["compression.type"] = str(kafka_config.get("compression.type", "lz4"))
    settings.update(_PRODUCER_SETTINGS)
    return settings


#: Per Spark context (by id, with the context itself so that the id cannot be reused while it is held):
#: the class loader of ``LogProducer``'s jar, compiled against that context's driver jars and added to it.
_LOADED: dict[int, tuple[Any, Any]] = {}
_LOADING = threading.Lock()


def producer_class(spark: SparkSession) -> Any:
    """``LogProducer``'s class in the driver's JVM, its jar found or compiled and added to the Spark
    context once per context (later batches look nothing up)."""
    return java_class(spark, PRODUCER_CLASS)


def java_class(spark: SparkSession, name: str) -> Any:
    """A class of ``LogProducer.java`` (``name``: ``LogProducer`` or one of its nested classes) in the
    driver's JVM; the jar is found or compiled and added to the Spark context once per context."""
    sc = spark.sparkContext
    jvm = sc._jvm
    assert jvm is not None
    with _LOADING:
        context, loader = _LOADED.get(id(sc._jsc), (None, None))
        if context is not sc._jsc:
            jar = producer_jar(spark)
            sc._jsc.sc().addJar(str(jar))  # executors fetch it from the driver before they run a task
            parent = jvm.java.lang.Thread.currentThread().getContextClassLoader()
            urls = sc._gateway.new_array(jvm.java.net.URL, 1)  # type: ignore[union-attr]
            urls[0] = jvm.java.io.File(str(jar)).toURI().toURL()
            loader = jvm.java.net.URLClassLoader(urls, parent)
            _LOADED[id(sc._jsc)] = (sc._jsc, loader)
        return jvm.java.lang.Class.forName(name, True, loader)


def producer_jar(spark: SparkSession) -> Path:
    """``LogProducer``'s jar: the one built into the wheel, else compiled once with ``javac`` against
    the jars of the driver's Kafka client and Spark (a source checkout)."""
    from airflow_logstore.settings import local_settings

    shipped = LOG_PRODUCER.shipped()
    if shipped is not None:
        return shipped
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    classpath = []
    for name in _COMPILE_AGAINST:
        found = jvm.java.lang.Class.forName(name, False, loader)
        location = found.getProtectionDomain().getCodeSource().getLocation()
        classpath.append(str(jvm.java.io.File(location.toURI()).getPath()))
    return LOG_PRODUCER.jar(":".join(dict.fromkeys(classpath)), local_settings())


def merge_task_reports(reports: Iterable[Mapping[str, Any]]) -> Produced:
    """The batch's offsets (per partition, the span over every task's), task attempts and count."""
    reports = list(reports)
    offsets = ranges.merge_spans(report["offsets"] for report in reports)
    tasks = frozenset(report["task"] for report in reports)
    return Produced(offsets, tasks, sum(report["count"] for report in reports))
