"""The cost of one small batch against the size of the table, old layout and new side by side.

    flock /tmp/logstore-it.lock nice .venv/bin/python -m bench.batch_scale_bench \\
        --sizes 200000,2000000,8000000 --plot BENCHMARKS_batch_scale.png

For every size, and for each layout in turn (``unpartitioned``: a key table as created before
``log-store.key-buckets``; ``bucketed``: the default, ``bucket(16, id)``), a primary-key table
(``id long, name string, amount long``, 3 log partitions) is filled with that many rows by a plain
Spark append, then the project's own :class:`~airflow_logstore.write.writer.DualWriter` writes
``--batches`` + 1 batches of 10,000 changes: half updates of existing keys drawn uniformly at random
from the whole table, half inserts of new keys, in a shuffled order. The first batch warms the session
up and is not counted; the figure is the median wall time of the others.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import machine, save

#: log-store.key-buckets of each layout: 0 is the layout of tables created before the setting
LAYOUTS = {"unpartitioned": "0", "bucketed": "16"}
SCHEMA = "id long, name string, amount long"


def fill(spark: Any, table: str, rows: int) -> float:
    """Append ``rows`` rows (ids 1..rows) with Spark; seconds taken."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    frame = spark.range(1, rows + 1).select(
        F.col("id").cast("long").alias("id"),
        F.concat(F.lit("customer-"), (F.col("id") % 10007).cast("string")).alias("name"),
        (F.col("id") * 7 % 100000).cast("long").alias("amount"),
    )
    frame.writeTo(table).append()
    return time.perf_counter() - started


def batch_inputs(folder: Path, rows: int, batches: int, changes: int, seed: int) -> list[Path]:
    """``batches`` JSON-lines inputs: half updates of random existing keys, half inserts of new keys."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    next_new = rows + 1
    for number in range(batches):
        updates = [
            {"op": "update", "id": key, "name": f"updated-{number}", "amount": key % 997}
            for key in rng.sample(range(1, rows + 1), changes // 2)
        ]
        inserts = [
            {"op": "insert", "id": key, "name": f"new-{number}", "amount": key % 991}
            for key in range(next_new, next_new + changes - changes // 2)
        ]
        next_new += len(inserts)
        lines = updates + inserts
        rng.shuffle(lines)
        path = folder / f"batch-{number}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        paths.append(path)
    return paths


def run_layout(
    env: Any, spark: Any, layout: str, rows: int, inputs: list[Path], changes: int
) -> dict[str, Any]:
    from airflow_logstore.core.properties import SPECS_BY_KEY
    from airflow_logstore.write.writer import open_writer
    from logstore_dev.testing.tables import make_table

    properties = {"log-store.partitions": "3"}
    if "log-store.key-buckets" in SPECS_BY_KEY:  # else: code from before the setting (unpartitioned)
        properties["log-store.key-buckets"] = LAYOUTS[layout]
    handle = make_table(env, schema=SCHEMA, primary_key=("id",), properties=properties, prefix="scale")
    fill_seconds = fill(spark, handle.spark_name(), rows)
    spec = str(handle.load().spec())
    writer = open_writer(spark, str(handle.name), writer_id=f"scale-{layout}")
    seconds = []
    for batch_id, path in enumerate(inputs, start=1):
        started = time.perf_counter()
        result = writer.write_path(str(path), batch_id)
        seconds.append(round(time.perf_counter() - started, 3))
        assert result.rows_in == changes and not result.skipped, result
        assert result.log_records == changes + changes // 2, result  # -U/+U per update, +I per insert
    counted = seconds[1:]
    outcome = {
        "layout": layout,
        "rows": rows,
        "spec": spec,
        "fill_seconds": round(fill_seconds, 1),
        "warmup_seconds": seconds[0],
        "batch_seconds": counted,
        "median_seconds": round(statistics.median(counted), 2),
    }
    print(json.dumps(outcome), flush=True)
    return outcome


def plot(results: list[dict[str, Any]], path: Path, before: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.2))
    old = sorted((r["rows"], r["median_seconds"]) for r in before)
    if old:
        axes.plot(*zip(*old, strict=True), "o:", color="grey", label="before (the code of 9334aea)")
    for layout in LAYOUTS:
        points = sorted((r["rows"], r["median_seconds"]) for r in results if r["layout"] == layout)
        if points:
            axes.plot(*zip(*points, strict=True), "o-", label=f"after, {layout} table")
    axes.set_xscale("log")
    sizes = sorted({r["rows"] for r in [*results, *before]})
    axes.set_xticks(sizes, [f"{size / 1e6:g}M" for size in sizes])
    axes.minorticks_off()
    axes.set_xlabel("rows in the table")
    axes.set_ylabel("one batch of 10,000 changes (s, median of 3)")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.legend()
    axes.set_title("One batch against the size of the table")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="200000,2000000,8000000")
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--batches", type=int, default=3, help="counted batches (one more warms up)")
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--plot", type=Path, default=None, help="write a PNG plot here (needs matplotlib)")
    parser.add_argument("--name", default="batch_scale", help="results file bench/results/<name>.json")
    parser.add_argument(
        "--replot",
        default=None,
        metavar="AFTER.json[,AFTER.json...][:BEFORE.json]",
        help="only draw --plot from saved results (no run)",
    )
    args = parser.parse_args()
    if args.replot:
        after, _, before = args.replot.partition(":")
        plot(
            [r for name in after.split(",") for r in json.loads(Path(name).read_text())["results"]],
            args.plot,
            json.loads(Path(before).read_text())["results"] if before else [],
        )
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    layouts = [layout for layout in args.layouts.split(",") if layout]

    from airflow_logstore.spark.session import build_spark_session
    from logstore_dev.testing.environment import logstore_environment

    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    with logstore_environment() as env:
        spark = build_spark_session("bench-batch-scale")
        workdir = env.scratch("bench-scale")
        for rows in sizes:
            inputs = batch_inputs(workdir / str(rows), rows, args.batches + 1, args.changes, args.seed)
            for layout in layouts:
                results.append(run_layout(env, spark, layout, rows, inputs, args.changes))
        spark.stop()
    total = time.perf_counter() - started

    print(f"\n{args.changes} changes per batch, median of {args.batches}, {machine()}, {total:.0f} s in all")
    print("| rows in the table | " + " | ".join(layouts) + " |")
    print("|---|" + "---|" * len(layouts))
    by = {(r["layout"], r["rows"]): r["median_seconds"] for r in results}
    for rows in sizes:
        print(f"| {rows:,} | " + " | ".join(f"{by[(layout, rows)]:.1f} s" for layout in layouts) + " |")
    for layout in layouts:
        if (layout, sizes[0]) in by and (layout, sizes[-1]) in by:
            ratio = by[(layout, sizes[-1])] / by[(layout, sizes[0])]
            print(f"{layout}: {sizes[-1]:,} / {sizes[0]:,} = {ratio:.2f}")
    save(args.name, {"machine": machine(), "args": vars(args) | {"plot": str(args.plot)}, "results": results})
    if args.plot:
        plot(results, args.plot, before=[])


if __name__ == "__main__":
    main()
