"""A streaming micro-batch's dual write as the table's snapshots pile up (issue 38: a long-running writer).

    LOGSTORE_CACHE=$PWD/.cache .venv/bin/python -m bench.snapshot_growth_bench --grow 250,1000 --batches 6

A streaming writer commits about once a second, and every commit adds a snapshot (and a manifest) that
stays until snapshot expiry (``history.expire.max-snapshot-age-ms``, Iceberg's default five days, applied
by compaction). This measures what that costs a micro-batch. A keyed table on the embedded default, one
writer in one Spark session: ``--batches`` micro-batches of 30 new keys (the small-batch path, as the
streaming application writes them; ``micro_batch_bench``'s steps, timed the same way), then the table is
grown by plain pyiceberg appends of one row each (a snapshot and a manifest each, as a micro-batch
commit adds) to each size of ``--grow``, and ``--batches`` micro-batches again. Reports the median
micro-batch and its slowest steps at each size, and the deep copy of the table's metadata that pyiceberg
makes for each staged change of a transaction (the writer's commits stage tens of them per batch).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from bench.common import TIMES
from bench.micro_batch_bench import bench_writer, instrument, micro_batch


def micro_batches(spark: Any, writer: Any, columns: list[str], first: int, count: int) -> dict[str, Any]:
    """``count`` micro-batches of new keys from batch id ``first``: the median and the steps' medians."""
    totals: list[float] = []
    steps: dict[str, list[float]] = {}
    for batch in range(first, first + count):
        TIMES.clear()
        # the read is not counted
        _, seconds, _ = micro_batch(spark, writer, columns, batch, 30, "new", small_path=True)
        totals.append(seconds)
        for name, calls in TIMES.items():
            steps.setdefault(name, []).append(sum(calls))
    medians = {name: round(statistics.median(values), 3) for name, values in steps.items()}
    slowest = dict(sorted(medians.items(), key=lambda item: -item[1])[:5])
    return {"median_s": round(statistics.median(totals), 3), "runs_s": [round(t, 2) for t in totals],
            "steps_median_s": slowest}  # fmt: skip


def grow(handle: Any, snapshots: int) -> float:
    """Append one-row commits until the table has ``snapshots`` snapshots; the seconds it took."""
    import pyarrow as pa

    started = time.perf_counter()
    table = handle.load()
    schema = table.schema().as_arrow()
    while len(table.metadata.snapshots) < snapshots:
        n = -len(table.metadata.snapshots) - 1  # keys no micro-batch writes
        row: dict[str, list[Any]] = {field.name: [None] for field in schema}
        row.update({"id": [n], "name": [f"filler{n}"], "amount": [0]})
        table.append(pa.table(row, schema=schema))
    return time.perf_counter() - started


def deep_copy_ms(handle: Any) -> float:
    """One deep copy of the table's metadata, as pyiceberg's transaction makes per staged change."""
    metadata = handle.load().metadata
    started = time.perf_counter()
    for _ in range(5):
        metadata.model_copy(deep=True)
    return round((time.perf_counter() - started) / 5 * 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grow", default="250,1000", help="table sizes in snapshots, comma-separated")
    parser.add_argument("--batches", type=int, default=6)
    args = parser.parse_args()

    from bench.common import machine, save

    instrument()
    results: dict[str, Any] = {"machine": machine(), "sizes": {}}
    with bench_writer("snapshot-growth-bench") as (spark, handle, writer, columns):
        micro_batches(spark, writer, columns, 1, 2)  # warm-up: the session, the first commits
        batch = 3
        sizes = [len(handle.load().metadata.snapshots)] + [int(s) for s in args.grow.split(",")]
        for size in sizes:
            grown = grow(handle, size)
            found = len(handle.load().metadata.snapshots)
            measured = micro_batches(spark, writer, columns, batch, args.batches)
            batch += args.batches
            entry = {
                "snapshots": found,
                "grown_in_s": round(grown, 1),
                "deep_copy_ms": deep_copy_ms(handle),
            }
            results["sizes"][str(found)] = {**entry, **measured}
            print(json.dumps(results["sizes"][str(found)]), flush=True)
    print(f"saved to {save('snapshot_growth', results)}")


if __name__ == "__main__":
    main()
