"""Reconciliation throughput and memory: records scanned per second and peak RSS, 1M vs 4M records.

    LOGSTORE_CACHE=$PWD/.cache nice -n 5 .venv/bin/python -m bench.reconcile_bench --sizes 1000000,4000000

Starts a real Kafka broker (``logstore_environment``), creates one LogStore table per size (3
partitions) and fills its log with synthetic records written with the real codec, as a writer with
failovers would: batches of ``--batch`` inserts, each committed in the control topic's ledger; for
``--redundant`` of the batches (1%) a first attempt dies after producing its records and a new epoch
writes the batch again and commits. Then ``reconcile()`` (the library path the operator and the CLI
run) runs in a child process per table, from scratch, and the child's peak RSS is read with
``wait4``. Sizes run side by side in one invocation; results go to ``bench/results/reconcile.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
CHILD_ENV: dict[str, str] = {}


def fill(handle: Any, records: int, batch_size: int, redundant_ratio: float) -> dict[str, Any]:
    """Produce ``records`` log records (about ``redundant_ratio`` of them from dead attempts)."""
    from airflow_logstore.core import control
    from airflow_logstore.core.codec import RecordMeta, RowKind, encode_headers, encode_key, encode_value
    from airflow_logstore.core.summary import CommitInfo
    from airflow_logstore.log import kafka_client

    ctl = handle.control()
    config = handle.config()
    control_topic = config.control_topic
    topic = config.topic
    kafka_config = handle.kafka_config(config)
    prod = kafka_client.producer(kafka_config, **{"linger.ms": 5, "batch.size": 1_000_000})
    writer = "bench"
    epoch = ctl.claim_epoch(writer)
    batches = max(1, records // batch_size)
    dead_every = max(1, round(1 / redundant_ratio)) if redundant_ratio > 0 else 0
    produced = dead = 0
    next_id = 0
    started = time.monotonic()

    def produce_batch(batch: int, epoch: int, ids: range) -> dict[int, tuple[int, int]]:
        tracker = kafka_client.DeliveryTracker()
        headers = encode_headers(RecordMeta(writer, epoch, batch, "0.0"))
        for n in ids:
            row = {"id": n, "name": f"customer-{n % 10007}", "amount": n * 7 % 100000}
            while True:
                try:
                    prod.produce(
                        topic,
                        key=encode_key(row, ["id"]),
                        value=encode_value(RowKind.INSERT, row),
                        headers=headers,
                        on_delivery=tracker,
                    )
                    break
                except BufferError:
                    prod.poll(0.05)
        kafka_client.flush(prod, tracker, len(ids), f"bench batch {batch}")
        return tracker.offsets

    for batch in range(1, batches + 1):
        ids = range(next_id, next_id + batch_size)
        next_id += batch_size
        if dead_every and batch % dead_every == dead_every // 2:
            produce_batch(batch, epoch, ids)  # the failed attempt: produced, never committed
            dead += len(ids)
            produced += len(ids)
            epoch = ctl.claim_epoch(writer)  # the restart
        offsets = produce_batch(batch, epoch, ids)
        produced += len(ids)
        commit = CommitInfo(
            writer, batch, epoch, offsets=offsets, tasks=frozenset({"0.0"}), record_count=len(ids)
        )
        # the ledger entry the writer would append (one producer for all of them: faster set-up)
        prod.produce(
            control_topic,
            key=control.commit_key(writer, batch).encode(),
            value=control.encode(commit.to_json()),
            partition=0,
        )
    prod.flush(60)
    return {
        "records": produced,
        "redundant": dead,
        "batches": batches,
        "produce_seconds": round(time.monotonic() - started, 1),
    }


def child(table: str, workers: int | None, engine_name: str) -> None:
    """Run one reconciliation and print its report (the parent measures this process)."""
    from airflow_logstore.reconcile.reconciler import Engine, PythonEngine, reconcile
    from airflow_logstore.table.tables import LogStoreTable

    scanner = engine_name if engine_name in ("jvm", "librdkafka") else "auto"
    engine: Engine = PythonEngine(workers, scanner=scanner)
    if engine_name == "spark":
        from airflow_logstore.reconcile.reconcile_job import SparkEngine
        from airflow_logstore.spark.session import build_spark_session

        engine = SparkEngine(build_spark_session("logstore-reconcile-bench"))
    report = reconcile(LogStoreTable.open(table), engine=engine)
    print("REPORT " + json.dumps(report.to_dict()), flush=True)


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += process.memory_info().rss
    return total


def run_child(table: str, workers: int | None, engine: str = "python") -> dict[str, Any]:
    """Reconcile in a fresh child process; sample the RSS of its process tree (scan workers included)."""
    started = time.monotonic()
    command = [sys.executable, "-m", "bench.reconcile_bench", "--child", table, "--engines", engine]
    if workers is not None:
        command += ["--workers", str(workers)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, **CHILD_ENV},
    )
    peak = 0
    done = threading.Event()
    curve: list[tuple[float, int]] = []

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            rss = _tree_rss(process.pid)
            peak = max(peak, rss)
            curve.append((round(time.monotonic() - started, 1), rss >> 20))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = process.communicate()
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise SystemExit(f"reconcile child failed ({process.returncode}): {output[-2000:]}")
    line = next(line for line in output.splitlines() if line.startswith("REPORT "))
    report = json.loads(line[len("REPORT ") :])
    return {
        "wall_seconds": round(time.monotonic() - started, 1),
        "peak_rss_mb": round(peak / 1024 / 1024, 1),
        "rss_curve_mb": curve[:: max(1, len(curve) // 12)],
        "report": report,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--cases",
        default="1000000:0.01,4000000:0.01,4000000:0.0025",
        help="records:redundant-ratio, comma-separated (the last case keeps 1M's redundant count)",
    )
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="scan processes (default: automatic)")
    parser.add_argument(
        "--engines",
        default="python",
        help="python (its automatic scanner), jvm, librdkafka (python with that scanner) and/or spark; "
        "each after the first re-scans",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.workers, args.engines)
        return

    from airflow_logstore.core import control
    from airflow_logstore.table.tables import LogStoreTable, create_table
    from logstore_dev.testing.environment import logstore_environment

    cases = [(int(size), float(ratio)) for size, ratio in (c.split(":") for c in args.cases.split(","))]
    engines = args.engines.split(",")
    results: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    with logstore_environment() as env:
        tables = []
        for size, ratio in cases:
            name = env.unique("recbench")
            handle = LogStoreTable.open(f"bench.{name}")
            create_table(
                handle,
                "id long, name string, amount long",
                primary_key=["id"],
                properties=env.log_properties(
                    f"{name}_log", **{"log-store.partitions": str(args.partitions)}
                ),
            )
            filled = fill(handle, size, args.batch, ratio)
            print(f"[bench] {size}@{ratio}: produced {filled}", flush=True)
            tables.append((handle, filled, ratio))
        for number, engine in enumerate(engines):
            for handle, filled, ratio in tables:
                if number:  # scan everything again (the reversals are there now)
                    handle.control().append(control.K_RECONCILE, {"positions": {}})
                measured = run_child(str(handle.name), args.workers, engine)
                report = measured["report"]
                first = number == 0
                assert report["scanned"] >= filled["records"], (report["scanned"], filled)
                assert report["redundant"] == filled["redundant"], (report["redundant"], filled)
                if first:
                    assert report["reversed"] == filled["redundant"], (report["reversed"], filled)
                row = {
                    "engine": engine,
                    "records": report["scanned"],
                    "redundant": filled["redundant"],
                    "redundant_ratio": ratio,
                    "reversed": report["reversed"],
                    "reasserted": report["reasserted"],
                    "already_reversed": report["already_reversed"],
                    "scan_seconds": report["scan_seconds"],
                    "records_per_second": report["records_per_second"],
                    "run_seconds": report["seconds"],
                    "process_seconds": measured["wall_seconds"],
                    "peak_rss_mb": measured["peak_rss_mb"],
                    "rss_curve_mb": measured["rss_curve_mb"],
                }
                results.append(row)
                print(f"[bench] {json.dumps(row)}", flush=True)
    payload = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "command": " ".join(["python -m bench.reconcile_bench", *sys.argv[1:]]),
        "results": results,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "reconcile.json").write_text(json.dumps(payload, indent=2))
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
