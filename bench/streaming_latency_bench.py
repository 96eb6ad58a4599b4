"""Source topic → readers, end to end, with the supervised streaming writer (issue 38).

    .venv/bin/python -m bench.streaming_latency_bench --records 2400 --rate 60

The streaming dual write runs as ``LogStoreStreamingDualWriteOperator`` runs it (a detached
``spark-submit``, ``local[2]``, micro-batches back to back unless ``--interval``), from a source topic a
producer writes at a steady rate (each record's id its number, its produce time noted). In the same
process, beside it:

- an eventual follower: source produce → the change reaches an eventual reader;
- a publisher driven by the table's commit trigger (``LogStoreCommitTrigger.poll_once`` every 0.1 s,
  then ``publish_visible_offsets``: what ``logstore_publish`` does, without Airflow's scheduling hop;
  ``--publish writer``: none, the application publishes after each commit, ``publish_after_commit``)
  and a consistent follower: source produce → the change reaches a consistent reader.

A warm-up of ``--warmup`` records first (the application's JVM and Python workers, the first producer
ids); the figures are over the records after it. Results: ``bench/results/streaming_latency.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

from bench.latency_bench import percentile


def summarize(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 0.5) * 1000, 1),
        "p99_ms": round(percentile(values, 0.99) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1) if values else None,
    }


def follow_into(
    handle: Any, consistency: str, seen: dict[int, float], stop: threading.Event
) -> threading.Thread:
    """Note when each id first reaches a follower of ``consistency``."""
    from airflow_logstore.read.follow import follow
    from airflow_logstore.read.reader import LogReader

    def run() -> None:
        for record in follow(
            LogReader(handle, consistency=consistency), "earliest", stop=stop, poll_timeout=0.05
        ):
            seen.setdefault(int(record.row["id"]), time.time())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def publisher(table: str, stop: threading.Event, published: list[float]) -> threading.Thread:
    """Publish when the commit trigger's poll finds new commits (what logstore_publish's runs do)."""
    from airflow_logstore.publish.publisher import publish_visible_offsets
    from airflow_logstore.table.tables import LogStoreTable
    from airflow_logstore.triggers.table_events import LogStoreCommitTrigger

    trigger = LogStoreCommitTrigger(table=table, poll_interval=0.1)
    handle = LogStoreTable.open(table)

    def run() -> None:
        while not stop.is_set():
            if trigger.poll_once():
                publish_visible_offsets(handle)
                published.append(time.time())
            stop.wait(0.1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def produce(bootstrap: str, topic: str, ids: range, rate: float, produced: dict[int, float]) -> None:
    from airflow_logstore.log import kafka_client

    producer = kafka_client.producer(kafka_client.client_config(bootstrap), **{"linger.ms": 0})
    started = time.time()
    for n, i in enumerate(ids):
        due = started + n / rate
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        produced[i] = time.time()
        producer.produce(topic, value=json.dumps({"id": i, "name": f"n{i}", "amount": i}).encode())
        producer.poll(0)
    assert producer.flush(30) == 0


def wait_for(ids: range, seen: dict[int, float], timeout: float) -> None:
    deadline = time.time() + timeout
    while not all(i in seen for i in ids) and time.time() < deadline:
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2400)
    parser.add_argument("--rate", type=float, default=60.0, help="source records per second")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--interval", default="0 seconds", help="the streaming trigger interval")
    parser.add_argument(
        "--publish",
        choices=("trigger", "writer"),
        default="trigger",
        help="trigger: a publisher on the commit trigger; writer: the application publishes after commits",
    )
    args = parser.parse_args()

    from airflow.sdk.exceptions import TaskDeferred

    from airflow_logstore.log import kafka_client
    from airflow_logstore.operators.streaming_write import LogStoreStreamingDualWriteOperator
    from airflow_logstore.table import streams
    from airflow_logstore.table.reports import read_result
    from bench.common import machine, save
    from logstore_dev.testing.environment import logstore_environment
    from logstore_dev.testing.tables import make_table

    os.environ.setdefault(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"})
    )
    with logstore_environment() as env:
        handle = make_table(env, prefix="stream_latency")
        table = str(handle.name)
        source = env.unique("source")
        config = kafka_client.client_config(env.bootstrap)
        kafka_client.ensure_topic(config, source, partitions=1, replication_factor=1, topic_configs={})
        stop = threading.Event()
        eventual: dict[int, float] = {}
        consistent: dict[int, float] = {}
        published: list[float] = []
        threads = [
            follow_into(handle, "eventual", eventual, stop),
            follow_into(handle, "consistent", consistent, stop),
        ]
        if args.publish == "trigger":
            threads.append(publisher(table, stop, published))
        operator = LogStoreStreamingDualWriteOperator(
            task_id="stream",
            table=table,
            source_topic=source,
            checkpoint=str(env.scratch("checkpoint")),
            writer_id="bench-stream",
            trigger_interval=args.interval,
            heartbeat_interval=2.0,
            publish_after_commit=args.publish == "writer",
        )
        try:
            operator.execute({})
        except TaskDeferred as deferred:
            report_id = deferred.trigger.report_id
        produced: dict[int, float] = {}
        warm = range(1, args.warmup + 1)
        produce(env.bootstrap, source, warm, args.rate, produced)
        wait_for(warm, consistent, 600)
        measured = range(args.warmup + 1, args.warmup + args.records + 1)
        started = time.time()
        produce(env.bootstrap, source, measured, args.rate, produced)
        wait_for(measured, consistent, 300)
        wait_for(measured, eventual, 30)
        elapsed = time.time() - started
        streams.request_stop(handle.load(), report_id)
        deadline = time.time() + 120
        result = None
        while result is None and time.time() < deadline:
            result = read_result(handle.load(), report_id)
            time.sleep(0.5)
        stop.set()
        for thread in threads:
            thread.join(10)
        from airflow_logstore.table.tables import snapshot_commits

        during = [
            c
            for c in snapshot_commits(handle.load())
            if started <= (c.timestamp_ms or 0) / 1000 <= started + elapsed
        ]
        eventual_s = [eventual[i] - produced[i] for i in measured if i in eventual]
        consistent_s = [consistent[i] - produced[i] for i in measured if i in consistent]
        payload = {
            "machine": machine(),
            "records": args.records,
            "rate_per_s": args.rate,
            "trigger_interval": args.interval,
            "publish": args.publish,
            "micro_batches": (result or {}).get("batches"),
            "commits_while_measured": len(during),
            "commit_interval_mean_s": round(elapsed / len(during), 2) if during else None,
            "publishes": len(published),
            "missing": {
                "eventual": sum(i not in eventual for i in measured),
                "consistent": sum(i not in consistent for i in measured),
            },
            "source_to_eventual": summarize(eventual_s),
            "source_to_consistent": summarize(consistent_s),
        }
        print(json.dumps(payload, indent=2))
        print(f"saved to {save('streaming_latency', payload)}")


if __name__ == "__main__":
    main()
