"""Dual write vs Iceberg-only write vs Kafka-only produce, on the same generated input, in one run.

    .venv/bin/python -m bench.dual_write_bench --rows 1000000 --runs 3

Each mode writes the same Parquet input (a primary-key table, inserts) into a fresh table with the real
job code (DualWriter, emit modes ``file,log`` / ``file`` / ``log``), interleaved over ``--runs`` rounds
after a small warm-up. Every write reads its own copy of the input (another path): a batch is read,
checked and cached as a new batch would be, never answered by what an earlier batch of the same path left
cached. Reports wall time, rows/s and the peak RSS of the whole process tree (driver, JVM, Python
workers), and the ratio dual / slower single-store path.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
from pathlib import Path
from typing import Any

from bench.common import machine, measure, save

MODES = {"kafka-only": "log", "iceberg-only": "file", "dual": "file,log"}
CODEC_PROPERTY = "write.parquet.compression-codec"


def generate(spark: Any, rows: int, path: Path) -> str:
    from pyspark.sql import functions as F

    frame = spark.range(1, rows + 1).select(
        F.col("id").cast("long").alias("id"),
        F.concat(F.lit("customer-"), (F.col("id") % 10007).cast("string")).alias("name"),
        (F.col("id") * 7 % 100000).cast("long").alias("amount"),
    )
    frame.repartition(4).write.mode("overwrite").parquet(str(path))
    return str(path)


def copies_of(data: str, count: int) -> list[str]:
    """``count`` copies of the input folder ``data``, each under a path of its own."""
    source = Path(data)
    copies = [source.with_name(f"{source.name}-{n}") for n in range(count)]
    for copy in copies:
        shutil.copytree(source, copy)
    return [str(copy) for copy in copies]


def run_mode(
    env: Any, spark: Any, mode: str, data: str, rows: int, codec: str | None = None
) -> dict[str, Any]:
    from airflow_logstore.core.properties import parse_emit_mode
    from airflow_logstore.write.writer import open_writer
    from logstore_dev.testing.tables import make_table

    properties = {"log-store.partitions": "3"}
    if codec:
        properties[CODEC_PROPERTY] = codec
    handle = make_table(
        env,
        schema="id long, name string, amount long",
        primary_key=("id",),
        properties=properties,
        prefix="bench",
    )
    writer = open_writer(spark, str(handle.name), writer_id=f"bench-{mode.split()[0]}")
    writer.emit_mode = parse_emit_mode(MODES[mode], writer.config)
    with measure() as result:
        batch = writer.write_path(data, 1)
    assert batch.rows_in == rows, batch
    snapshot = handle.load().current_snapshot()
    summary = snapshot.summary if snapshot is not None else None
    return {
        "mode": mode,
        "seconds": round(result.seconds, 2),
        "rows_per_s": round(rows / result.seconds),
        "peak_rss_mb": round(result.peak_rss_mb),
        "log_records": batch.log_records,
        "snapshot": batch.snapshot_id is not None,
        # the size of the table's data files (0: a Kafka-only write)
        "files_mb": round(int(summary.get("total-files-size") or 0) / 1e6, 1) if summary else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--codec", default=None, help=f"the tables' {CODEC_PROPERTY} (default: Iceberg's, zstd)"
    )
    args = parser.parse_args()
    modes = list(MODES)

    from airflow_logstore.spark.session import build_spark_session
    from logstore_dev.testing.environment import logstore_environment

    with logstore_environment() as env:
        spark = build_spark_session("bench-dual-write")
        workdir = env.scratch("bench-dual")
        copies = iter(copies_of(generate(spark, args.rows, workdir / "input"), len(modes) * args.runs))
        warm = generate(spark, 20_000, workdir / "warm")
        for mode in modes:
            run_mode(env, spark, mode, warm, 20_000, args.codec)
        results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
        for _ in range(args.runs):
            for mode in modes:
                results[mode].append(run_mode(env, spark, mode, next(copies), args.rows, args.codec))
                print(results[mode][-1], flush=True)
        spark.stop()

    summary = {
        mode: {
            "seconds": statistics.median(r["seconds"] for r in runs),
            "rows_per_s": statistics.median(r["rows_per_s"] for r in runs),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "files_mb": statistics.median(r["files_mb"] for r in runs),
        }
        for mode, runs in results.items()
    }
    slower = max(summary["kafka-only"]["seconds"], summary["iceberg-only"]["seconds"])
    ratio = summary["dual"]["seconds"] / slower
    print(f"\n{args.rows} rows, {args.runs} run(s), codec {args.codec or 'default'}, {machine()}")
    print("| path | wall time (s) | rows/s | peak RSS (MB) | data files (MB) |\n|---|---|---|---|---|")
    for mode, values in summary.items():
        print(
            f"| {mode} | {values['seconds']:.1f} | {values['rows_per_s']:,} | {values['peak_rss_mb']:,} "
            f"| {values['files_mb']} |"
        )
    print(f"\ndual / slower single path = {ratio:.2f} (goal <= 1.1)")
    save(
        "dual_write",
        {
            "rows": args.rows,
            "runs": args.runs,
            "codec": args.codec,
            "machine": machine(),
            "results": results,
            "summary": summary,
            "ratio": ratio,
        },
    )


if __name__ == "__main__":
    main()
