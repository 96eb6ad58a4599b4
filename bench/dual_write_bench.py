"""Dual write vs Iceberg-only write vs Kafka-only produce, on the same generated input, in one run.

    .venv/bin/python -m bench.dual_write_bench --rows 1000000 --runs 3 --compare-python

Each mode writes the same Parquet input (a primary-key table, inserts) into a fresh table with the real
job code (DualWriter, emit modes ``file,log`` / ``file`` / ``log``), interleaved over ``--runs`` rounds
after a small warm-up. Reports wall time, rows/s and the peak RSS of the whole process tree (driver,
JVM, Python workers), and the ratio dual / slower single-store path. ``--compare-python`` adds the
log paths again with the former per-record Python producer (:mod:`bench.python_produce`), in the same
rounds, so before and after are measured side by side.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import machine, measure, save

MODES = {"kafka-only": "log", "iceberg-only": "file", "dual": "file,log"}
PYTHON_MODES = {"kafka-only (python produce)": "log", "dual (python produce)": "file,log"}


def generate(spark: Any, rows: int, path: Path) -> str:
    from pyspark.sql import functions as F

    frame = spark.range(1, rows + 1).select(
        F.col("id").cast("long").alias("id"),
        F.concat(F.lit("customer-"), (F.col("id") % 10007).cast("string")).alias("name"),
        (F.col("id") * 7 % 100000).cast("long").alias("amount"),
    )
    frame.repartition(4).write.mode("overwrite").parquet(str(path))
    return str(path)


def run_mode(env: Any, spark: Any, mode: str, data: str, rows: int) -> dict[str, Any]:
    from airflow_logstore.core.properties import parse_emit_mode
    from airflow_logstore.spark.dual_write import open_writer
    from airflow_logstore.testing.tables import make_table

    handle = make_table(
        env,
        schema="id long, name string, amount long",
        primary_key=("id",),
        properties={"log-store.partitions": "3"},
        prefix="bench",
    )
    writer = open_writer(spark, str(handle.name), writer_id=f"bench-{mode.split()[0]}")
    writer.emit_mode = parse_emit_mode({**MODES, **PYTHON_MODES}[mode], writer.config)
    with measure() as result, producer_of(mode):
        batch = writer.write_path(data, 1)
    assert batch.rows_in == rows, batch
    return {
        "mode": mode,
        "seconds": round(result.seconds, 2),
        "rows_per_s": round(rows / result.seconds),
        "peak_rss_mb": round(result.peak_rss_mb),
        "log_records": batch.log_records,
        "snapshot": batch.snapshot_id is not None,
    }


@contextmanager
def producer_of(mode: str) -> Iterator[None]:
    """The former Python producer for the ``(python produce)`` modes, else the job's own."""
    from airflow_logstore.spark import dual_write

    if mode not in PYTHON_MODES:
        yield
        return
    from bench import python_produce

    job_path = dual_write.produce_records
    dual_write.produce_records = python_produce.produce_records  # type: ignore[assignment]
    try:
        yield
    finally:
        dual_write.produce_records = job_path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--compare-python", action="store_true", help="also the former Python producer")
    args = parser.parse_args()
    modes = [*MODES, *(PYTHON_MODES if args.compare_python else ())]

    from airflow_logstore.spark.session import build_spark_session
    from airflow_logstore.testing.environment import logstore_environment

    with logstore_environment() as env:
        spark = build_spark_session("bench-dual-write")
        workdir = Path(tempfile.mkdtemp(prefix="bench-dual-"))
        data = generate(spark, args.rows, workdir / "input")
        warm = generate(spark, 20_000, workdir / "warm")
        for mode in modes:
            run_mode(env, spark, mode, warm, 20_000)
        results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
        for _ in range(args.runs):
            for mode in modes:
                results[mode].append(run_mode(env, spark, mode, data, args.rows))
                print(results[mode][-1], flush=True)
        spark.stop()

    summary = {
        mode: {
            "seconds": statistics.median(r["seconds"] for r in runs),
            "rows_per_s": statistics.median(r["rows_per_s"] for r in runs),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        }
        for mode, runs in results.items()
    }
    slower = max(summary["kafka-only"]["seconds"], summary["iceberg-only"]["seconds"])
    ratio = summary["dual"]["seconds"] / slower
    print(f"\n{args.rows} rows, {args.runs} run(s), {machine()}")
    print("| path | wall time (s) | rows/s | peak RSS (MB) |\n|---|---|---|---|")
    for mode, values in summary.items():
        print(f"| {mode} | {values['seconds']:.1f} | {values['rows_per_s']:,} | {values['peak_rss_mb']:,} |")
    print(f"\ndual / slower single path = {ratio:.2f} (goal <= 1.1)")
    if args.compare_python:
        slower = max(summary["kafka-only (python produce)"]["seconds"], summary["iceberg-only"]["seconds"])
        python_ratio = summary["dual (python produce)"]["seconds"] / slower
        print(f"with the former Python producer: dual / slower single path = {python_ratio:.2f}")
    save(
        "dual_write",
        {
            "rows": args.rows,
            "runs": args.runs,
            "machine": machine(),
            "results": results,
            "summary": summary,
            "ratio": ratio,
        },
    )


if __name__ == "__main__":
    main()
