"""Compaction: full-table read time and file count before vs after compacting a 50-batch table, and
compaction throughput, measured side by side in one run.

    LOGSTORE_CACHE=.cache nice -n 5 .venv/bin/python -m bench.compaction_bench --batches 50

The table is a LogStore table written with the real dual writer (``DualWriter.write_frame``): every
batch inserts ``--inserts`` new keys and updates / deletes random existing keys, the CDC shape that
leaves many small data files and position-delete files (merge-on-read). Then:

- full-table read, ``--repeat`` times each (median; one warm-up first): the library's file read
  (pyiceberg ``scan().to_arrow()``, what ``logstore read --mode file`` does) and a Spark scan of every
  column (``count``/``sum``/``hash``, pinned to the snapshot with ``versionAsOf``);
- one policy-driven compaction (:func:`airflow_logstore.compaction.compact_job.run_compaction`, default
  table policy): bytes rewritten, seconds, bytes/s;
- the same reads again. The result goes to ``bench/results/compaction.json`` and, with ``--markdown``,
  into the "## Compaction" section of BENCHMARKS.md (only that section is touched).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import machine, save

FRAME_SCHEMA = "id long, name string, amount long, op string"
SECTION = "## Compaction"
ROOT = Path(__file__).resolve().parents[1]


def batches(
    count: int, inserts: int, updates: int, deletes: int, seed: int = 7
) -> list[list[tuple[Any, ...]]]:
    """Deterministic CDC batches: inserts of new keys, updates and deletes of random live keys."""
    rng = random.Random(seed)
    live: list[int] = []
    next_key = 1
    result = []
    for number in range(1, count + 1):
        rows: list[tuple[Any, ...]] = []
        if live:
            touched = rng.sample(live, min(len(live), updates + deletes))
            for key in touched[:updates]:
                rows.append((key, f"u{number}-{key}", number, "update"))
            for key in touched[updates:]:
                rows.append((key, None, None, "delete"))
            gone = set(touched[updates:])
            live = [key for key in live if key not in gone]
        for key in range(next_key, next_key + inserts):
            rows.append((key, f"customer-{key % 10007}-{number}", key * 7 % 100_000, "insert"))
        live.extend(range(next_key, next_key + inserts))
        next_key += inserts
        result.append(rows)
    return result


def timed(action: Callable[[], Any], repeat: int) -> tuple[float, list[float], Any]:
    action()  # warm-up (JIT, file system cache, Python workers)
    runs, value = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        value = action()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs), runs, value


def read_times(spark: Any, handle: Any, repeat: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from airflow_logstore.read.reader import read_file

    snapshot_id = handle.load().current_snapshot().snapshot_id
    columns = ["id", "name", "amount"]

    # The compaction committed through another session: drop this session's cached table metadata.
    spark.catalog.refreshTable(handle.spark_name())

    def spark_scan() -> tuple[int, int, int]:
        frame = spark.read.option("versionAsOf", str(snapshot_id)).table(handle.spark_name())
        row = frame.agg(F.count("*"), F.sum("amount"), F.sum(F.hash(*columns).cast("long"))).collect()[0]
        return int(row[0]), int(row[1] or 0), int(row[2] or 0)

    def file_read() -> int:
        return int(read_file(handle, snapshot_id).num_rows)

    pyiceberg_s, pyiceberg_runs, rows = timed(file_read, repeat)
    spark_s, spark_runs, spark_result = timed(spark_scan, repeat)
    assert spark_result[0] == rows, (spark_result, rows)
    return {
        "snapshot_id": snapshot_id,
        "rows": rows,
        "checksum": spark_result[1:],
        "pyiceberg_read_s": round(pyiceberg_s, 3),
        "pyiceberg_runs_s": [round(r, 3) for r in pyiceberg_runs],
        "spark_read_s": round(spark_s, 3),
        "spark_runs_s": [round(r, 3) for r in spark_runs],
    }


def scale_throughput(spark: Any, env: Any, appends: int, rows: int) -> dict[str, Any]:
    """Rewrite throughput where bytes, not per-job overhead, dominate: ``appends`` Spark appends of
    ``rows`` rows each (no log: the rewrite does not care who wrote the files), then one compaction."""
    from pyspark.sql import functions as F

    from airflow_logstore.compaction.compact_job import run_compaction
    from airflow_logstore.compaction.policy import CompactionOptions
    from logstore_dev.testing.tables import make_table

    handle = make_table(
        env, schema="id long, name string, amount long", primary_key=("id",), log=False, prefix="scale"
    )
    for number in range(appends):
        first = number * rows + 1
        frame = spark.range(first, first + rows).select(
            F.col("id"),
            F.concat(F.lit("customer-"), (F.col("id") % 10007).cast("string"), F.lit(f"-{number}")).alias(
                "name"
            ),
            (F.col("id") * 7 % 100_000).alias("amount"),
        )
        frame.coalesce(1).writeTo(handle.spark_name()).append()
    # Forced: a throughput measurement, whatever the policy thinks of the file count.
    options = CompactionOptions(force=True, expire_snapshots=False, remove_orphans=False)
    report = run_compaction(spark, handle, options)
    rewrite = report.rewrite
    return {
        "appends": appends,
        "rows": appends * rows,
        "before": report.before,
        "after": report.after,
        "status": report.status,
        "rewrite_s": rewrite.get("seconds"),
        "bytes_rewritten": rewrite.get("bytes_rewritten"),
        "bytes_per_second": rewrite.get("bytes_per_second"),
        "rows_per_second": round(appends * rows / rewrite["seconds"]) if rewrite.get("seconds") else None,
    }


def markdown(result: dict[str, Any]) -> str:
    b, a, c = result["before"], result["after"], result["compaction"]
    rw = c["rewrite"]

    def ratio(key: str) -> str:
        return f"{b[key] / a[key]:.1f}x" if a[key] else "n/a"

    mib = 1024 * 1024
    lines = [
        SECTION,
        "",
        f"Command: `{result['command']}`",
        "",
        f"Machine: {result['machine']}; load average {result['load_before']} at the start, "
        f"{result['load_after']} at the end (the machine is shared: absolute numbers are noisy, the "
        "before/after ratios were measured side by side in the same run).",
        "",
        f"Table: {result['batches']} dual-write batches (each {result['inserts']} inserts, "
        f"{result['updates']} updates and {result['deletes']} deletes of random live keys; "
        f"{b['rows']} rows at the end), Iceberg v2 merge-on-read, default `self-optimizing.*` policy. "
        f"Writing it took {result['write_s']:.0f} s. Reads: median of {result['repeat']} after one warm-up.",
        "",
        "| | before compaction | after compaction | speed-up |",
        "|---|---|---|---|",
        f"| data files | {b['data_files']} | {a['data_files']} | |",
        f"| delete files | {b['delete_files']} | {a['delete_files']} | |",
        f"| bytes (data + delete) | {b['bytes'] / mib:.2f} MiB | {a['bytes'] / mib:.2f} MiB | |",
        f"| full read, pyiceberg (`logstore read --mode file`) | {b['pyiceberg_read_s']:.3f} s | "
        f"{a['pyiceberg_read_s']:.3f} s | **{ratio('pyiceberg_read_s')}** |",
        f"| full read, Spark scan of every column | {b['spark_read_s']:.3f} s | {a['spark_read_s']:.3f} s | "
        f"**{ratio('spark_read_s')}** |",
        "",
        f"Compaction ({c['status']}; {'; '.join(c['decision']['reasons'])}): "
        f"{rw.get('data_files_rewritten')} data files ({rw.get('bytes_rewritten', 0) / mib:.2f} MiB) "
        f"rewritten into {rw.get('data_files_added')} in {rw.get('seconds', 0):.2f} s: "
        f"**{(rw.get('bytes_per_second') or 0) / mib:.2f} MiB/s** of data files "
        f"rewritten, {result['rows_per_s']:,.0f} rows/s ({result['input_bytes_per_s'] / mib:.2f} MiB/s "
        f"counting the delete files read and dropped); the whole run (policy, rewrite, dangling deletes, "
        f'expiry and orphan scans) took {c["seconds"]["total"]:.2f} s. Goal "read at least 2x faster": '
        f"pyiceberg {ratio('pyiceberg_read_s')}, Spark {ratio('spark_read_s')}.",
        "",
    ]
    scale = result.get("scale")
    if scale:
        sb, sa = scale["before"], scale["after"]
        lines += [
            f"On a table this small the rewrite's fixed cost (Spark jobs, commit) dominates its time. At a "
            f"larger size, in the same run: {scale['appends']} Spark appends of "
            f"{scale['rows'] // scale['appends']:,} rows ({sb['data_files']} files, "
            f"{sb['data_bytes'] / mib:.1f} MiB) compacted into {sa['data_files']} file(s) in "
            f"{scale['rewrite_s']:.2f} s: **{(scale['bytes_per_second'] or 0) / mib:.2f} MiB/s**, "
            f"{scale['rows_per_second']:,} rows/s.",
            "",
        ]
    return "\n".join(lines)


def update_section(path: Path, text: str) -> None:
    """Replace the "## Compaction" section of ``path`` (or append it); other sections stay as they are."""
    content = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = content.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == SECTION), None)
    if start is None:
        new = content.rstrip("\n") + "\n\n" + text
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        new = "".join(lines[:start]) + text + ("\n" if end < len(lines) else "") + "".join(lines[end:])
    path.write_text(new if new.endswith("\n") else new + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--inserts", type=int, default=2000)
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--deletes", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale-appends", type=int, default=50, help="0: skip the larger throughput table")
    parser.add_argument("--scale-rows", type=int, default=40_000)
    parser.add_argument("--markdown", default=None, help="write the section into this file (BENCHMARKS.md)")
    args = parser.parse_args()

    from airflow_logstore.compaction.compact_job import run_compaction
    from airflow_logstore.compaction.policy import CompactionOptions
    from airflow_logstore.spark.session import build_spark_session
    from airflow_logstore.write.writer import open_writer
    from logstore_dev.testing.environment import logstore_environment
    from logstore_dev.testing.tables import make_table

    load_before = tuple(round(x, 2) for x in os.getloadavg())
    with logstore_environment() as env:
        spark = build_spark_session("bench-compaction")
        try:
            handle = make_table(
                env, schema="id long, name string, amount long", primary_key=("id",), prefix="bench"
            )
            writer = open_writer(spark, str(handle.name), writer_id="bench-compaction")
            started = time.perf_counter()
            for number, rows in enumerate(batches(args.batches, args.inserts, args.updates, args.deletes), 1):
                writer.write_frame(spark.createDataFrame(rows, FRAME_SCHEMA), number)
                print(f"batch {number}/{args.batches} written", file=sys.stderr, flush=True)
            write_s = time.perf_counter() - started

            before = read_times(spark, handle, args.repeat)
            report = run_compaction(spark, handle, CompactionOptions())
            after = read_times(spark, handle, args.repeat)
            scale = (
                scale_throughput(spark, env, args.scale_appends, args.scale_rows)
                if args.scale_appends
                else None
            )
        finally:
            spark.stop()
    assert before["rows"] == after["rows"] and before["checksum"] == after["checksum"], (before, after)
    rewrite = report.rewrite
    input_bytes = report.before["data_bytes"] + report.before["delete_bytes"]
    result = {
        "command": "LOGSTORE_CACHE=.cache nice -n 5 .venv/bin/python -m bench.compaction_bench "
        + " ".join(sys.argv[1:]),
        "machine": machine(),
        "load_before": load_before,
        "load_after": tuple(round(x, 2) for x in os.getloadavg()),
        "batches": args.batches,
        "inserts": args.inserts,
        "updates": args.updates,
        "deletes": args.deletes,
        "repeat": args.repeat,
        "write_s": round(write_s, 1),
        "before": {**report.before, **before},
        "after": {**report.after, **after},
        "compaction": report.to_dict(),
        "scale": scale,
        "input_bytes_per_s": input_bytes / rewrite["seconds"] if rewrite.get("seconds") else 0,
        "rows_per_s": report.before["data_records"] / rewrite["seconds"] if rewrite.get("seconds") else 0,
    }
    save("compaction", result)
    text = markdown(result)
    print(text)
    if args.markdown:
        update_section(Path(args.markdown), text)


if __name__ == "__main__":
    main()
