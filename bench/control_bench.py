"""Control-state read and one publish as a table ages: 100, 1,000 and 10,000 committed batches.

    LOGSTORE_CACHE=$PWD/.cache .venv/bin/python -m bench.control_bench --batches 100,1000,10000

Starts a real Kafka broker (``logstore_environment``) and creates one LogStore table per size. Its
control topic is filled as a writer run by Airflow fills it: per batch an epoch claim (every
``spark-submit`` is a new attempt), the ledger entry of the commit and a published watermark. The log
itself holds the last batch's records only (older ones left by retention), so the figures are the
control topic's cost. For each size, side by side in one run:

- ``read``: ``ControlTopic.read()`` (what publish, consistent reads, reconciliation and every commit
  decision do first), median of 5;
- ``publish``: one ``publish_visible_offsets`` call, median of 3 (it may write a checkpoint).

Results go to ``bench/results/control.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.common import machine, save


def fill(handle: Any, batches: int) -> None:
    from airflow_logstore import kafka_client
    from airflow_logstore.core import control
    from airflow_logstore.core.codec import RecordMeta, encode_headers
    from airflow_logstore.core.summary import CommitInfo

    config = handle.config()
    kafka_config = handle.kafka_config(config)
    prod = kafka_client.producer(kafka_config, **{"linger.ms": 5})
    offset = 0
    for batch in range(1, batches + 1):
        epoch = 2 * batch - 1  # the claim's offset + 1: claims and commits alternate below
        commit = CommitInfo(
            "bench", batch, epoch, offsets={0: (offset, offset + 9)}, tasks=frozenset({"0.1"})
        )
        for key, value in (
            (control.epoch_key("bench"), {"writer": "bench", "owner": "bench"}),
            (control.commit_key("bench", batch), commit.to_json()),
        ):
            prod.produce(config.control_topic, key=key.encode(), value=control.encode(value), partition=0)
        offset += 10
        prod.poll(0)
    prod.flush(60)
    # the last batch's records, so that publish has a log to scan
    headers = encode_headers(RecordMeta("bench", 2 * batches - 1, batches, "0.1"))
    for n in range(10):
        prod.produce(config.topic, value=b'{"kind":"+I","row":{"id":%d}}' % n, headers=headers, partition=0)
    prod.flush(60)


def timed(call: Any, runs: int) -> float:
    figures = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        figures.append(time.perf_counter() - started)
    return statistics.median(figures)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="100,1000,10000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.batches.split(",")]

    from airflow_logstore.publish import publish_visible_offsets
    from airflow_logstore.testing.environment import logstore_environment
    from airflow_logstore.testing.tables import make_table

    results: dict[str, Any] = {"machine": machine(), "sizes": {}}
    with logstore_environment() as env:
        for size in sizes:
            handle = make_table(env, properties={"log-store.partitions": "1"}, prefix=f"ctl{size}")
            fill(handle, size)
            ctl = handle.control()
            publish = timed(lambda h=handle: publish_visible_offsets(h), 3)
            read = timed(ctl.read, 5)
            results["sizes"][str(size)] = {"read_s": round(read, 4), "publish_s": round(publish, 4)}
            print(
                f"{size:>6} batches: read {read * 1000:8.1f} ms   publish {publish * 1000:8.1f} ms",
                flush=True,
            )
    small, large = str(sizes[0]), str(sizes[-1])
    for what in ("read_s", "publish_s"):
        ratio = results["sizes"][large][what] / results["sizes"][small][what]
        results[f"{what}_ratio"] = round(ratio, 2)
        print(f"{what} {large}/{small} = {ratio:.2f}")
    print("saved", save("control", results))


if __name__ == "__main__":
    main()
