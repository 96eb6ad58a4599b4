"""How fast can a client take records off the broker on this machine? librdkafka (confluent-kafka, what
the readers and the reconciler use) against the Java client, side by side, on one topic.

    .venv/bin/python -m bench.consume_bench --records 1000000 --rounds 3

A question for issue 18 (items 3 and 4: log reads at 500,000 records/s, reconciliation at 1,000,000):
is the Python client the bound, so that a bulk scan in the JVM would pay off? One partition is filled
with ``--records`` records of the real shape (a JSON value of about 70 bytes, five ``logstore.*``
headers); then, alternating in each round:

- ``python consume``: ``kafka_client.scan`` batches of 50,000 messages, nothing else done with them;
- ``python consume + fields``: the same, calling ``offset()``, ``key()``, ``value()``, ``headers()``;
- ``java count``: the Java consumer (``bench/java/ConsumeScan.java``), counting only;
- ``java to Python``: the Java consumer writing every record (length-prefixed) to a pipe that this
  process reads to the end (what a bulk scan process would cost before decoding).

Both clients fetch 4 MB per partition (the reconciler's scan settings). Java times are measured inside
the JVM (its start-up, about 1 s, is reported apart).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from typing import Any

from airflow_logstore.reconcile.scan import SCAN_CONSUMER_SETTINGS
from bench.common import machine, save

HEADERS = [
    ("logstore.writer", b"writer-1"),
    ("logstore.epoch", b"3"),
    ("logstore.batch", b"17"),
    ("logstore.task", b"0.12"),
    ("logstore.type", b"data"),
]
VALUE = b'{"kind":"+I","row":{"id":123456,"name":"customer-1234","amount":98765}}'
FETCH = SCAN_CONSUMER_SETTINGS["max.partition.fetch.bytes"]  # the Java client fetches as much


def fill(config: dict[str, Any], topic: str, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {**config, "linger.ms": 50, "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000}
    )
    for i in range(records):
        producer.produce(topic, VALUE, str(i).encode(), headers=HEADERS)
        if i % 100_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def python_scan(config: dict[str, Any], topic: str, records: int, fields: bool) -> float:
    from airflow_logstore.log import kafka_client

    consumer = kafka_client.consumer(config, **SCAN_CONSUMER_SETTINGS)
    started = time.perf_counter()
    seen = 0
    for batch in kafka_client.scan(consumer, topic, {0: 0}, {0: records}, batch_size=50_000):
        if fields:
            for message in batch:
                message.offset(), message.key(), message.value(), message.headers()
        seen += len(batch)
    seconds = time.perf_counter() - started
    consumer.close()
    assert seen == records, seen
    return seconds


def java_scan(classpath: str, bootstrap: str, topic: str, records: int, write: bool) -> tuple[float, float]:
    """(seconds inside the JVM, seconds in all with the JVM's start)."""
    command = ["java", "-cp", classpath, "bench.ConsumeScan", bootstrap, topic, str(records), str(FETCH)]
    started = time.perf_counter()
    process = subprocess.Popen(
        [*command, "write" if write else "count"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    streamed = 0
    while chunk := process.stdout.read(1 << 20):
        streamed += len(chunk)
    stderr = process.stderr.read().decode() if process.stderr else ""
    assert process.wait() == 0, stderr
    total = time.perf_counter() - started
    count, seconds = stderr.split()[-2:]
    assert int(count) == records, stderr
    assert streamed > 0 if write else streamed == 0
    return float(seconds), total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from pathlib import Path

    from airflow_logstore.jars import kafka_jars
    from airflow_logstore.javac import compiled_classes
    from airflow_logstore.log import kafka_client
    from airflow_logstore.settings import local_settings
    from logstore_dev.testing.environment import logstore_environment

    jars = ":".join(str(p) for p in sorted(kafka_jars().glob("*.jar")))
    source = (Path(__file__).parent / "java" / "ConsumeScan.java").read_text()
    classes = compiled_classes(
        "consume-scan", "bench.ConsumeScan", source, jars, local_settings(), purpose="the bench"
    )
    classpath = f"{jars}:{classes}"
    results: dict[str, list[float]] = {}
    starts: list[float] = []
    with logstore_environment() as env:
        config = {"bootstrap.servers": env.bootstrap}
        topic = "consume-bench"
        kafka_client.ensure_topic(config, topic, partitions=1, replication_factor=1, topic_configs={})
        fill(config, topic, args.records)
        for _ in range(args.rounds):
            results.setdefault("python consume", []).append(python_scan(config, topic, args.records, False))
            results.setdefault("python consume + fields", []).append(
                python_scan(config, topic, args.records, True)
            )
            for label, write in (("java count", False), ("java to Python", True)):
                inside, total = java_scan(classpath, env.bootstrap, topic, args.records, write)
                results.setdefault(label, []).append(inside)
                starts.append(total - inside)
            print({k: v[-1] for k, v in results.items()}, flush=True)
    rates = {label: args.records / statistics.median(times) for label, times in results.items()}
    print(f"\n{args.records:,} records, {args.rounds} rounds, {machine()}")
    print("| client | records/s (median) |\n|---|---|")
    for label, rate in rates.items():
        print(f"| {label} | {rate:,.0f} |")
    print(f"\nJVM start and connect, median: {statistics.median(starts):.2f} s")
    save("consume", {"machine": machine(), "records": args.records, "seconds": results, "rates": rates})


if __name__ == "__main__":
    main()
