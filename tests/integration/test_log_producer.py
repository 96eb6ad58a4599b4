"""The dual write's log producer (a Java Spark task, ``airflow_logstore/write/java/LogProducer.java``) on
the real broker and the real Spark: its headers, its partitions, its reports and its failures."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

from airflow_logstore.core.codec import RecordMeta, encode_headers
from airflow_logstore.exceptions import KafkaUnavailableError
from airflow_logstore.log.kafka_client import consumer, ensure_topic, partition_offsets, producer
from airflow_logstore.read.reader import read_log
from airflow_logstore.write.planning import AFTER_VALUE_COLUMN, BEFORE_VALUE_COLUMN, KEY_COLUMN
from airflow_logstore.write.producing import (
    BatchProduceContext,
    log_producer,
    produce_records,
    producer_class,
    task_identity,
)
from logstore_dev.testing.tables import make_table

#: A planned change with one record (the after-image's), as produce_records reads it.
SCHEMA = f"{KEY_COLUMN} binary, {BEFORE_VALUE_COLUMN} binary, {AFTER_VALUE_COLUMN} binary"


def _context(env: Any, topic: str, **kafka: Any) -> BatchProduceContext:
    return BatchProduceContext(topic, {"bootstrap.servers": env.bootstrap, **kafka}, "java-w", 3, 5, False)


@pytest.mark.parametrize(
    ("writer", "log_only", "task"),
    [("w", False, task_identity(0, 0)), ("wrïter ü 名", True, task_identity(12, 123456789012))],
)
def test_headers_are_the_bytes_of_encode_headers(env, spark, writer: str, log_only: bool, task: str) -> None:
    ctx = BatchProduceContext("topic", {"bootstrap.servers": env.bootstrap}, writer, 7, 42, log_only)
    java = [(str(name), bytes(value)) for name, value in log_producer(spark, ctx).headerPairs(task)]
    assert java == encode_headers(RecordMeta(writer, 7, 42, task, log_only=log_only))


def test_task_identity_is_the_same_in_both_languages(spark) -> None:
    gateway = spark.sparkContext._gateway
    [method] = [m for m in producer_class(spark).getMethods() if m.getName() == "taskIdentity"]
    arguments = gateway.new_array(gateway.jvm.java.lang.Object, 2)
    arguments[0], arguments[1] = 3, 9876543210  # an Integer and a Long
    assert str(method.invoke(None, arguments)) == task_identity(3, 9876543210)


def test_keys_land_where_librdkafka_murmur2_puts_them_and_reports_match_the_log(env, spark) -> None:
    """Keyed records: the Java client's partitioner agrees with every Python producer of the project
    (librdkafka's murmur2_random), so per-key order holds whichever client wrote; the tasks' reports
    (count, first and last offset per partition) are what the log holds."""
    handle = make_table(env, properties={"log-store.partitions": "5"})
    topic, _, _ = handle.config().require_log()
    keys = [f'{{"id":{i}}}'.encode() for i in range(300)] + ["ключ ü".encode(), b"\x00\xff"]
    rows = [(key, None, b'{"kind":"+I","row":{}}') for key in keys]
    spread = spark.createDataFrame(rows, SCHEMA).repartition(3, KEY_COLUMN)  # as a plan is spread
    reported = produce_records(spread, _context(env, topic))
    produced = reported.produced

    assert produced.count == len(keys) and len(produced.tasks or ()) == 3
    assert (reported.changes, reported.noop_deletes, len(reported.partitions)) == (len(keys), 0, 3)
    # the same keys through the Python client, to a topic of as many partitions
    scratch = f"{topic}-python"
    ensure_topic(handle.kafka_config(), scratch, partitions=5, replication_factor=1, topic_configs={})
    python_partition: dict[bytes, int] = {}
    client = producer(handle.kafka_config())
    for key in keys:
        client.produce(
            scratch, b"", key, on_delivery=lambda e, m: python_partition.__setitem__(m.key(), m.partition())
        )
    assert client.flush(30) == 0

    records = read_log(handle, consistency="eventual").records
    assert {r.key: r.partition for r in records} == python_partition
    spans: dict[int, list[int]] = defaultdict(list)
    for record in records:
        spans[record.partition].append(record.offset)
    assert produced.offsets == {p: (min(o), max(o)) for p, o in spans.items()}
    assert {r.meta.task for r in records} == produced.tasks


def test_a_task_fails_when_its_records_are_not_acknowledged(env, spark) -> None:
    """Within its timeout, not one timeout per record: each send to a topic whose metadata never comes
    waits ``max.block.ms`` (the 2 s delivery timeout) and reports to the callback instead of throwing;
    the task stops at the first such failure, so its error counts one record sent (before, all 30 were
    sent, 2 s each, per attempt). The Spark job's failure reaches the writer as a KafkaUnavailableError
    naming the topic and Kafka's error."""
    ctx = _context(env, "no-such-topic-anywhere", **{"message.timeout.ms": 2000})
    frame = spark.createDataFrame([(b"k%d" % i, None, b"v") for i in range(30)], SCHEMA)
    with pytest.raises(
        KafkaUnavailableError, match="1 of 1 records to 'no-such-topic-anywhere' were not acknowledged"
    ):
        produce_records(frame.repartition(1), ctx)


def _java_producers(spark: Any) -> int:
    """The Kafka producers alive in the Spark JVM (local mode: the executors' too), by their network
    threads: in the test workers the only Java producers are the log producer's."""
    threads = spark.sparkContext._jvm.java.lang.Thread.getAllStackTraces().keySet().toArray()
    return sum(1 for thread in threads if thread.getName().startswith("kafka-producer-network-thread"))


def test_idle_producers_are_closed_and_a_later_task_gets_a_new_one(env, spark) -> None:
    """A task gives its producer back for the next task of the JVM; one unused for the idle time (here
    3 s, by default 60 s) is closed, with its connections: an executor that produced once does not
    keep clients (nor their reconnect warnings once a broker is gone). A later task produces with a new
    one."""
    handle = make_table(env)
    topic, _, _ = handle.config().require_log()
    system = spark.sparkContext._jvm.java.lang.System
    system.setProperty("airflow_logstore.producer.idle.ms", "3000")
    try:
        for round_ in range(2):
            frame = spark.createDataFrame([(b"k%d" % i, None, b"v") for i in range(5)], SCHEMA)
            assert produce_records(frame.repartition(1), _context(env, topic)).produced.count == 5
            assert _java_producers(spark) >= 1  # given back, kept for the next task
            deadline = time.monotonic() + 30
            while _java_producers(spark) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _java_producers(spark) == 0, f"round {round_}: the idle producer was not closed"
    finally:
        system.clearProperty("airflow_logstore.producer.idle.ms")
    cons = consumer(handle.kafka_config())
    try:
        ends = partition_offsets(cons, topic, handle.config().partitions)
    finally:
        cons.close()
    assert sum(end - start for start, end in ends.values()) == 10  # both rounds' records are in the log
