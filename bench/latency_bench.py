"""Visibility latency over many batches, in one run, side by side:

1. produce → visible to an eventual reader (a follower tailing the log);
2. Iceberg commit → visible to a consistent reader through the library path (a publish, and a consistent
   follower). ``--publish`` says which publish: ``writer`` (the default: the writer publishes right after
   each commit, ``open_writer(..., publish_after_commit=True)``, one long-lived ``Publisher``), ``woken``
   (a long-lived ``Publisher`` in a thread, woken when a batch's write returns) or ``poll`` (the old
   path: a thread that polls the table every 50 ms and runs a one-shot ``publish_visible_offsets`` when a
   new snapshot appears);
3. produce → visible on the table's committed feed (``log-store.committed-feed.enabled``) to a plain
   ``read_committed`` consumer of ``<topic>.committed`` (confluent-kafka only), copied by the same publishes;
4. the baseline: a Kafka *transactional* producer (how Paimon's log system gave ``read_committed``
   consumers exactly-once, at the cost of a transaction per checkpoint) committing at the same batch
   interval (measured over dual-write batches after a warm-up), read with ``isolation.level=read_committed``,
   running beside the dual writes in the same process and time window.

    .venv/bin/python -m bench.latency_bench --batches 200 --rows 10 [--publish writer|woken|poll]

Batches are written by the real dual-write code (DualWriter, a local Spark session), ``--rows`` rows each.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

#: the first dual-write batches are slower (Spark and Python workers warm up); the transactional baseline
#: commits at the mean interval of the next INTERVAL_BATCHES, the steady state, and starts after them
WARMUP_BATCHES = 5
INTERVAL_BATCHES = 5


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summarize(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 0.5) * 1000, 1),
        "p99_ms": round(percentile(values, 0.99) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
    }


class Publisher(threading.Thread):
    """Publishes the watermark in a thread: ``poll``, a one-shot publish whenever polling the table
    (every 50 ms) shows a new snapshot (what the sensor + publish task do); ``woken``, a long-lived
    publisher woken by :attr:`wake` (set when a batch's write returned).

    Keeps each publish's time, and the part of it spent on the control checkpoint and the feed's copy,
    to show where the consistent path's tail comes from."""

    def __init__(self, handle: Any, mode: str) -> None:
        super().__init__(daemon=True)
        self.handle, self.mode = handle, mode
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.seconds: list[float] = []
        self.checkpoint_seconds: list[float] = []

    def keep(self, report: Any) -> None:
        self.seconds.append(report.seconds)
        if report.checkpoint is not None:
            self.checkpoint_seconds.append(report.seconds)

    def run(self) -> None:
        from airflow_logstore.publish.publisher import Publisher, publish_visible_offsets

        if self.mode == "woken":
            with Publisher(self.handle) as publisher:
                while not self.stop.is_set():
                    if self.wake.wait(0.5):
                        self.wake.clear()
                        self.keep(publisher.publish())
            return
        seen = None
        while not self.stop.is_set():
            snapshot = self.handle.load().current_snapshot()
            current = snapshot.snapshot_id if snapshot else None
            if current != seen:
                self.keep(publish_visible_offsets(self.handle))
                seen = current
            self.stop.wait(0.05)


def follow_into(
    handle: Any, consistency: str, sink: dict[int, float], stop: threading.Event, per_record: list[float]
) -> threading.Thread:
    """Record, per batch, when its last record arrived."""
    from airflow_logstore.read.follow import follow
    from airflow_logstore.read.reader import LogReader

    def run() -> None:
        for record in follow(LogReader(handle, consistency=consistency), "earliest", stop=stop):
            now = time.time()
            sink[record.meta.batch_id] = now
            per_record.append(now - record.timestamp_ms / 1000)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def feed_into(
    handle: Any, sink: dict[int, float], stop: threading.Event, per_record: list[float]
) -> threading.Thread:
    """A plain read_committed consumer of the committed feed: per batch when its last record arrived,
    per record its age since it was produced (a copy keeps its original's timestamp)."""
    from confluent_kafka import Consumer, TopicPartition

    config = handle.config()
    topic, _ = config.feed_topics()
    consumer = Consumer(
        {
            "bootstrap.servers": config.bootstrap_servers,
            "group.id": f"{topic}-bench",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(config.partitions)])

    def run() -> None:
        while not stop.is_set():
            for message in consumer.consume(1000, 0.05):
                if message.error() is None:
                    now = time.time()
                    batch = int(dict(message.headers() or [])["batch-id"])
                    sink[batch] = now
                    per_record.append(now - message.timestamp()[1] / 1000)
        consumer.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def transactional_baseline(bootstrap: str, batches: int, rows: int, interval: float) -> list[float]:
    """Produce ``rows`` per transaction, commit every ``interval`` s; latency seen by read_committed."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from airflow_logstore.log import kafka_client

    topic = f"txn-baseline-{int(time.time())}"
    config = kafka_client.client_config(bootstrap)
    kafka_client.ensure_topic(config, topic, partitions=3, replication_factor=1, topic_configs={})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx", "linger.ms": 5})
    producer.init_transactions(30)
    latencies: list[float] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-g",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            for message in consumer.consume(1000, 0.05):
                if message.error() is None:
                    latencies.append(time.time() - message.timestamp()[1] / 1000)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    for batch in range(batches):
        producer.begin_transaction()
        for row in range(rows):
            producer.produce(topic, key=f"{row}".encode(), value=f"{batch}".encode())
        time.sleep(interval)  # the work between checkpoints
        producer.commit_transaction(30)
    deadline = time.time() + 30
    while len(latencies) < batches * rows and time.time() < deadline:
        time.sleep(0.1)
    stop.set()
    reader.join(5)
    consumer.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument(
        "--primary-key",
        action="store_true",
        help="a primary-key table (each batch a MERGE, slower as the table grows); default: append-only",
    )
    parser.add_argument(
        "--publish",
        choices=("writer", "woken", "poll"),
        default="writer",
        help="writer: the writer publishes after each commit; woken: a long-lived publisher thread woken "
        "by each write; poll: a one-shot publish per new snapshot, polled every 50 ms (the old path)",
    )
    args = parser.parse_args()

    from airflow_logstore.spark.session import build_spark_session
    from airflow_logstore.write.writer import open_writer
    from bench.common import machine, save
    from logstore_dev.testing.environment import logstore_environment
    from logstore_dev.testing.tables import make_table, write_jsonl

    with logstore_environment() as env:
        spark = build_spark_session("bench-latency")
        # append-only by default: the batch interval stays constant over hundreds of batches
        handle = make_table(
            env,
            prefix="latency",
            primary_key=("id",) if args.primary_key else (),
            properties={"log-store.committed-feed.enabled": "true"},
        )
        writer = open_writer(
            spark, str(handle.name), writer_id="latency", publish_after_commit=args.publish == "writer"
        )
        work = env.scratch("bench-latency")
        stop = threading.Event()
        eventual_seen: dict[int, float] = {}
        consistent_seen: dict[int, float] = {}
        eventual_records: list[float] = []
        consistent_records: list[float] = []
        feed_seen: dict[int, float] = {}
        feed_records: list[float] = []
        threads = [
            follow_into(handle, "eventual", eventual_seen, stop, eventual_records),
            follow_into(handle, "consistent", consistent_seen, stop, consistent_records),
            feed_into(handle, feed_seen, stop, feed_records),
        ]
        publisher = Publisher(handle, args.publish)
        if args.publish != "writer":
            publisher.start()
        committed_at: dict[int, float] = {}
        produced_at: dict[int, float] = {}
        durations: list[float] = []
        baseline: list[float] = []
        baseline_thread: threading.Thread | None = None
        interval = 0.0
        for batch in range(1, args.batches + 1):
            rows = [
                {"id": (batch * args.rows + i) % 5000, "name": f"b{batch}", "amount": i}
                for i in range(args.rows)
            ]
            path = write_jsonl(work / f"b{batch}.jsonl", rows)
            started = time.time()
            result = writer.write_path(str(path), batch)
            durations.append(time.time() - started)
            if args.publish == "writer" and writer.last_publish is not None:
                publisher.keep(writer.last_publish)
            publisher.wake.set()
            assert result.snapshot_id is not None, f"batch {batch} committed no snapshot"
            snapshot = handle.load().snapshot_by_id(result.snapshot_id)
            assert snapshot is not None
            committed_at[batch] = snapshot.timestamp_ms / 1000
            produced_at[batch] = started
            if batch == min(WARMUP_BATCHES + INTERVAL_BATCHES, args.batches):
                # the baseline runs beside the dual writes, at their measured batch interval
                interval = statistics.mean(durations[-INTERVAL_BATCHES:])
                baseline_thread = threading.Thread(
                    target=lambda every=interval: baseline.extend(
                        transactional_baseline(env.bootstrap, args.batches, args.rows, every)
                    ),
                    daemon=True,
                )
                baseline_thread.start()
            if batch % 20 == 0:
                print(f"batch {batch}/{args.batches}", flush=True)
        deadline = time.time() + 60
        while min(len(consistent_seen), len(feed_seen)) < args.batches and time.time() < deadline:
            time.sleep(0.1)
        stop.set()
        publisher.stop.set()
        writer.close()
        if publisher.is_alive():
            publisher.join(10)
        for thread in threads:
            thread.join(10)
        if baseline_thread is not None:
            baseline_thread.join()
        spark.stop()

    commit_to_consistent = [
        consistent_seen[b] - committed_at[b] for b in committed_at if b in consistent_seen
    ]
    commit_to_feed = [feed_seen[b] - committed_at[b] for b in committed_at if b in feed_seen]
    produce_to_eventual = eventual_records
    report = {
        "batches": args.batches,
        "publish": args.publish,
        "rows_per_batch": args.rows,
        "table": "primary key (MERGE per batch)" if args.primary_key else "append-only",
        "machine": machine(),
        "mean_batch_seconds": round(statistics.mean(durations), 2),
        "baseline_commit_interval_seconds": round(interval, 2),
        "produce_to_eventual_reader": summarize(produce_to_eventual),
        "commit_to_consistent_reader": summarize(commit_to_consistent),
        "consistent_records_age_since_produce": summarize(consistent_records),
        "commit_to_committed_feed": summarize(commit_to_feed),
        "committed_feed_records_age_since_produce": summarize(feed_records),
        "kafka_transactions_read_committed": summarize(baseline),
        "publish_seconds": summarize(publisher.seconds),
        "publish_seconds_with_a_checkpoint": summarize(publisher.checkpoint_seconds),
        "missing_consistent_batches": args.batches - len(commit_to_consistent),
        "missing_feed_batches": args.batches - len(commit_to_feed),
    }
    for key, value in report.items():
        print(f"{key}: {value}")
    save("latency", report)


if __name__ == "__main__":
    main()
