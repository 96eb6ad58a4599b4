"""Where a JVM log scan's time goes: its start, its frames, its end.

    LOGSTORE_CACHE=$PWD/.cache .venv/bin/python -m bench.jvm_scan_bench --records 300000 --runs 4

One table of ``--records`` committed records (``read_bench``'s synthetic writer: 3 partitions, a dead
attempt's copy of 5 %). Each run scans partition 0 from its start to its end, then all three partitions,
with :class:`~airflow_logstore.log.jvm_scan.JvmScan` as the readers do, and notes, from the call:

- ``first frame``: the JVM's start, its Kafka client's and the first frame of records;
- ``last frame``: the whole scan's records;
- ``end``: the end frame and the JVM's exit (what is left after the last record arrived).

Median, minimum and maximum per figure (seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from bench.read_bench import produce


class _Timed:
    """A scan's ``chunks()`` with the time of its first and last frame and of its end."""

    def __init__(self, scan: Any) -> None:
        self.scan = scan

    def run(self) -> dict[str, float]:
        started = time.perf_counter()
        first = last = None
        records = 0
        for chunk in self.scan.chunks():
            last = time.perf_counter() - started
            first = last if first is None else first
            records += len(chunk.offsets)
        end = time.perf_counter() - started
        return {"first frame": first or end, "last frame": last or end, "end": end, "records": records}


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()

    from airflow_logstore.log import jvm_scan, kafka_client
    from bench.common import machine, save
    from logstore_dev.testing.environment import logstore_environment
    from logstore_dev.testing.tables import make_table

    results: dict[str, Any] = {"machine": machine(), "load_before": os.getloadavg()}
    with logstore_environment() as env:
        handle = make_table(env, prefix="jvmscan")
        results["table"] = produce(handle, args.records)
        config, topic = handle.kafka_config(), str(handle.config().topic)
        cons = kafka_client.consumer(config)
        try:
            ends = {p: high for p, (_, high) in kafka_client.partition_offsets(cons, topic, 3).items()}
        finally:
            cons.close()
        scans = {"partition 0": [0], "partitions 0-2": [0, 1, 2]}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in scans}
        for _ in range(args.runs):
            for name, parts in scans.items():
                scan = jvm_scan.JvmScan(config, topic, dict.fromkeys(parts, 0), {p: ends[p] for p in parts})
                runs[name].append(_Timed(scan).run())
        results["scans"] = {
            name: {
                "records": found[0]["records"],
                **{
                    figure: _spread([run[figure] for run in found])
                    for figure in ("first frame", "last frame", "end")
                },
                "after the last frame": _spread([run["end"] - run["last frame"] for run in found]),
            }
            for name, found in runs.items()
        }
    results["load_after"] = os.getloadavg()
    save("jvm_scan", results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
