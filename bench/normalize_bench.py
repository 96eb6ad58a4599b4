"""The cost of normalize: an eventual log read with and without per-key deduplication, side by side.

    .venv/bin/python -m bench.normalize_bench --records 500000 --keys 50000

A synthetic writer produces ``--records`` changes (inserts, then -U/+U update pairs) over ``--keys``
keys with the real codec and headers, plus a retried copy of the last 10% (the duplicates a failover
leaves). Each read runs in a fresh process so its peak RSS (ru_maxrss) is its own.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import time
from typing import Any


def produce(handle: Any, records: int, keys: int) -> int:
    from airflow_logstore.core.codec import RecordMeta, RowKind, encode_headers, encode_key, encode_value
    from airflow_logstore.log import kafka_client

    config = handle.kafka_config()
    topic = handle.config().topic
    epoch = handle.control().claim_epoch("synthetic")
    producer = kafka_client.producer(config, **{"linger.ms": 50})
    headers = encode_headers(RecordMeta("synthetic", epoch, 1, "0.0"))
    version: dict[int, int] = {}
    sent = 0
    changes: list[Any] = []
    while len(changes) < records:
        key = len(changes) % keys
        old = version.get(key)
        row = {"id": key, "name": f"v{(old or 0) + 1}", "amount": key}
        if old is None:
            changes.append((RowKind.INSERT, row))
        else:
            changes.append((RowKind.UPDATE_BEFORE, {"id": key, "name": f"v{old}", "amount": key}))
            changes.append((RowKind.UPDATE_AFTER, row))
        version[key] = (old or 0) + 1
    changes += changes[-len(changes) // 10 :]  # a retried tail: exact duplicates
    for kind, row in changes:
        while True:
            try:
                producer.produce(
                    topic, key=encode_key(row, ["id"]), value=encode_value(kind, row), headers=headers
                )
                break
            except BufferError:
                producer.poll(0.05)
        sent += 1
    producer.flush(120)
    return sent


def read_once(table: str, env: dict[str, str], normalize: bool, queue: Any) -> None:
    import os

    os.environ.update(env)
    from airflow_logstore.read.reader import LogReader, ReadReport
    from airflow_logstore.table.tables import LogStoreTable
    from bench.common import PeakMemory

    handle = LogStoreTable.open(table)
    reader = LogReader(handle, consistency="eventual", normalize=normalize)
    report = ReadReport(table, "log", "eventual", "all-kinds")

    with PeakMemory(interval=0.02) as memory:
        baseline = memory.peak
        started = time.perf_counter()
        returned = sum(1 for _ in reader.iterate("earliest", report=report))  # a streaming consumer
        seconds = time.perf_counter() - started
    queue.put(
        {
            "normalize": normalize,
            "seconds": seconds,
            "scanned": report.scanned,
            "returned": returned,
            "dropped": report.normalized_dropped,
            "records_per_s": report.scanned / seconds,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "read_memory_mb": (memory.peak - baseline) / 1024 / 1024,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()

    from bench.common import machine, save
    from logstore_dev.testing.environment import logstore_environment
    from logstore_dev.testing.tables import make_table

    with logstore_environment() as env:
        handle = make_table(env, prefix="normalize")
        sent = produce(handle, args.records, args.keys)
        context = multiprocessing.get_context("spawn")
        results = []
        for _ in range(args.runs):
            for normalize in (False, True):
                queue = context.Queue()
                process = context.Process(
                    target=read_once, args=(str(handle.name), env.env, normalize, queue)
                )
                process.start()
                results.append(queue.get(timeout=900))
                process.join()
                print(results[-1], flush=True)
    plain = [r for r in results if not r["normalize"]]
    normalized = [r for r in results if r["normalize"]]
    summary = {
        "records": sent,
        "keys": args.keys,
        "machine": machine(),
        "plain_records_per_s": round(max(r["records_per_s"] for r in plain)),
        "normalize_records_per_s": round(max(r["records_per_s"] for r in normalized)),
        "plain_peak_rss_mb": round(min(r["peak_rss_mb"] for r in plain)),
        "normalize_peak_rss_mb": round(min(r["peak_rss_mb"] for r in normalized)),
        "plain_read_memory_mb": round(min(r["read_memory_mb"] for r in plain), 1),
        "normalize_read_memory_mb": round(min(r["read_memory_mb"] for r in normalized), 1),
        "normalize_dropped_duplicates": normalized[0]["dropped"],
    }
    summary["throughput_ratio"] = round(
        summary["normalize_records_per_s"] / summary["plain_records_per_s"], 2
    )
    print(json.dumps(summary, indent=2))
    save("normalize", {"summary": summary, "runs": results})


if __name__ == "__main__":
    main()
