"""Where a publish's time goes, step by step (issue 37: the committed feed's tail).

    .venv/bin/python -m bench.publish_steps_bench --batches 60

An append-only table with the committed feed; ``--batches`` batches of 10 rows are written one after
another by the real job code (``DualWriter`` in a local Spark session), and each is published at once
(``publish_visible_offsets``, what the publish task does). Each step of the publish is timed by wrapping
the function that does it (the wrappers add microseconds); the figures are p50 / p99 / max per step over
the publishes. The feed's token is taken alternately the current way (one metadata request, then
``init_transactions``: :func:`~airflow_logstore.log.kafka_client.init_transactions`) and the way before
(``init_transactions`` alone), side by side in one run. Results: ``bench/results/publish_steps.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench.common import TIMES, timed
from bench.latency_bench import percentile, summarize


class TimedProducer:
    """A transactional producer whose transaction calls are timed."""

    STEPS = ("init_transactions", "begin_transaction", "commit_transaction")

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._producer, name)
        return timed(f"feed: {name}", attribute) if name in self.STEPS else attribute


def instrument() -> None:
    from airflow_logstore.log import control_topic
    from airflow_logstore.publish import feed, publisher

    publisher.kafka_client.partition_offsets = timed(
        "log end offsets", publisher.kafka_client.partition_offsets
    )
    control_topic.ControlTopic.read = timed(  # type: ignore[method-assign]
        "control state read", control_topic.ControlTopic.read
    )
    publisher.scan_watermark = timed("watermark scan", publisher.scan_watermark)
    feed.FeedCopier.copy = timed("feed copy (all)", feed.FeedCopier.copy)  # type: ignore[method-assign]
    publisher.maybe_checkpoint = timed("checkpoint", publisher.maybe_checkpoint)
    feed.read_progress = timed("feed: progress read", feed.read_progress)
    feed._copy = timed("feed: scan, produce, commit", feed._copy)
    new_producer = feed.kafka_client.transactional_producer
    feed.kafka_client.transactional_producer = lambda *a, **k: TimedProducer(new_producer(*a, **k))
    with_metadata = feed.kafka_client.init_transactions
    turn = [0]

    def alternating(prod: Any, timeout: float) -> None:
        """Every other publish takes the token as before (``init_transactions`` alone), side by side."""
        turn[0] += 1
        if turn[0] % 2:
            timed("feed: token, metadata first (kafka_client.init_transactions)", with_metadata)(
                prod, timeout
            )
        else:
            timed("feed: token, init_transactions alone (before)", prod.init_transactions)(timeout)

    feed.kafka_client.init_transactions = alternating


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=60)
    args = parser.parse_args()

    from airflow_logstore.publish.publisher import publish_visible_offsets
    from airflow_logstore.spark.session import build_spark_session
    from airflow_logstore.write.writer import open_writer
    from bench.common import machine, save
    from logstore_dev.testing.environment import logstore_environment
    from logstore_dev.testing.tables import make_table, write_jsonl

    instrument()
    with logstore_environment() as env:
        spark = build_spark_session("bench-publish-steps")
        handle = make_table(
            env, prefix="steps", primary_key=(), properties={"log-store.committed-feed.enabled": "true"}
        )
        writer = open_writer(spark, str(handle.name), writer_id="steps")
        work = env.scratch("bench-publish-steps")
        for batch in range(1, args.batches + 1):
            rows = [{"id": batch * 100 + i, "name": "x", "amount": i} for i in range(10)]
            writer.write_path(str(write_jsonl(work / f"b{batch}.jsonl", rows)), batch)
            started = time.perf_counter()
            publish_visible_offsets(handle)
            TIMES["whole publish"].append(time.perf_counter() - started)
        spark.stop()
    steps = {
        name: summarize(values)
        for name, values in sorted(TIMES.items(), key=lambda item: -percentile(item[1], 0.99))
    }
    payload = {"machine": machine(), "batches": args.batches, "steps": steps}
    print(json.dumps(payload, indent=2))
    print(f"saved to {save('publish_steps', payload)}")


if __name__ == "__main__":
    main()
