"""Control-state read and one publish as a table ages: 100, 1,000 and 10,000 committed batches.

    LOGSTORE_CACHE=$PWD/.cache .venv/bin/python -m bench.control_bench --batches 100,1000,10000

Starts a real Kafka broker (``logstore_environment``) and creates one LogStore table per size. Its
control topic is filled as a writer run by Airflow fills it: per batch an epoch claim (every
``spark-submit`` is a new attempt) and the ledger entry of the commit; the log holds one record per
batch. A first publish per table then scans the whole log once (as a table created before checkpoints
does on its first publish with them), settles every batch, writes the first checkpoint and then a
tombstone per retired ledger entry; a second publish checkpoints past those. Both are reported apart;
the figures below are the steady state after them. For each size, side by side in one run (the
sizes taken in turn, round after round):

- ``read``: ``ControlTopic.read()`` (what publish, consistent reads, reconciliation and every commit
  decision do first), median of 5;
- ``whole-topic read``: the read before checkpoints (fold from the first record), median of 5;
- ``publish``: one ``publish_visible_offsets`` call, median of 5.

Results go to ``bench/results/control.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.common import machine, save


def fill(handle: Any, batches: int) -> None:
    """Per batch: an epoch claim, one log record of that epoch and the ledger entry of its commit."""
    from airflow_logstore.core import control
    from airflow_logstore.core.codec import RecordMeta, encode_headers
    from airflow_logstore.core.summary import CommitInfo
    from airflow_logstore.log import kafka_client

    config = handle.config()
    prod = kafka_client.producer(handle.kafka_config(config), **{"linger.ms": 5})
    for batch in range(1, batches + 1):
        epoch = 2 * batch - 1  # the claim's offset + 1: claims and ledger entries alternate
        offset = batch - 1  # one record per batch in partition 0
        headers = encode_headers(RecordMeta("bench", epoch, batch, "0.1"))
        value = b'{"kind":"+I","row":{"id":%d}}' % batch
        prod.produce(config.topic, value=value, headers=headers, partition=0)
        commit = CommitInfo("bench", batch, epoch, offsets={0: (offset, offset)}, tasks=frozenset({"0.1"}))
        for key, record in (
            (control.epoch_key("bench"), {"writer": "bench", "owner": "bench"}),
            (control.commit_key("bench", batch), commit.to_json()),
        ):
            prod.produce(config.control_topic, key=key.encode(), value=control.encode(record), partition=0)
        prod.poll(0)
    prod.flush(60)


def whole_topic_read(ctl: Any) -> Any:
    """The read before checkpoints: fold the control topic from its first record."""
    from airflow_logstore.core import control
    from airflow_logstore.log import kafka_client

    cons = kafka_client.consumer(ctl.config)
    try:
        low, end = kafka_client.partition_offsets(cons, ctl.topic, 1)[0]
        records = []
        for batch in kafka_client.scan(cons, ctl.topic, {0: low}, {0: end}):
            for m in batch:
                record = control.decode(m.key(), m.value(), m.offset(), kafka_client.message_timestamp_ms(m))
                if record is not None:
                    records.append(record)
        return control.fold(records)
    finally:
        cons.close()


def medians(calls: dict[str, Any], rounds: int) -> dict[str, float]:
    """Round-robin over the sizes (so machine drift hits each alike); the median per size."""
    figures: dict[str, list[float]] = {size: [] for size in calls}
    for _ in range(rounds):
        for size, call in calls.items():
            started = time.perf_counter()
            call()
            figures[size].append(time.perf_counter() - started)
    return {size: statistics.median(values) for size, values in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sizes = [s.strip() for s in args.batches.split(",")]

    from airflow_logstore.publish.publisher import publish_visible_offsets
    from logstore_dev.testing.environment import logstore_environment
    from logstore_dev.testing.tables import make_table

    results: dict[str, Any] = {"machine": machine(), "sizes": {}}
    with logstore_environment() as env:
        handles = {}
        for size in sizes:
            handles[size] = make_table(env, properties={"log-store.partitions": "1"}, prefix=f"ctl{size}")
            fill(handles[size], int(size))
            started = time.perf_counter()
            first = publish_visible_offsets(handles[size])  # reads the whole topic, writes a checkpoint
            first_s = time.perf_counter() - started
            # its tombstones for the retired entries follow that checkpoint: the next publish folds them
            # into a new one, and the table is in the steady state of one that publishes every batch
            second = publish_visible_offsets(handles[size])
            results["sizes"][size] = {
                "first_publish_s": round(first_s, 4),
                "checkpoint": first.checkpoint,
                "second_checkpoint": second.checkpoint,
            }
        controls = {size: handle.control() for size, handle in handles.items()}
        reads = medians({size: ctl.read for size, ctl in controls.items()}, args.rounds)
        whole = {size: (lambda c=ctl: whole_topic_read(c)) for size, ctl in controls.items()}
        full = medians(whole, args.rounds)
        publishes = medians(
            {size: (lambda h=handle: publish_visible_offsets(h)) for size, handle in handles.items()},
            args.rounds,
        )
        for size in sizes:
            results["sizes"][size].update(
                read_s=round(reads[size], 4),
                publish_s=round(publishes[size], 4),
                full_read_s=round(full[size], 4),
            )
            figures = results["sizes"][size]
            read_ms, publish_ms = reads[size] * 1000, publishes[size] * 1000
            first_ms = figures["first_publish_s"] * 1000
            print(f"{size:>6} batches: read {read_ms:7.1f} ms  publish {publish_ms:7.1f} ms", flush=True)
            print(f"        first publish {first_ms:7.1f} ms, checkpoint {figures['checkpoint']}", flush=True)
            print(f"        whole-topic read (before checkpoints) {full[size] * 1000:7.1f} ms", flush=True)
    small, large = sizes[0], sizes[-1]
    for what in ("read_s", "publish_s", "full_read_s"):
        ratio = results["sizes"][large][what] / results["sizes"][small][what]
        results[f"{what}_ratio"] = round(ratio, 2)
        print(f"{what} {large}/{small} = {ratio:.2f}")
    print("saved", save("control", results))


if __name__ == "__main__":
    main()
