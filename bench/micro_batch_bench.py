"""Where a streaming micro-batch's dual write spends its time, step by step, in process (issue 38).

    LOGSTORE_CACHE=$PWD/.cache .venv/bin/python -m bench.micro_batch_bench --batches 8 --mode new

A keyed table on the embedded default; ``--batches`` micro-batches of ``--rows`` records shaped like
the Kafka source's (a ``value`` column of JSON bytes), decoded and written as the streaming application's
``each_batch`` does: a micro-batch of at most ``SMALL_BATCH_ROWS`` records is read once into a local
frame (the small-batch path), a larger one is cached. ``--mode new`` inserts new keys in every batch (the
streaming benchmark's case: a write-through); ``--mode update`` updates the previous batch's keys (the
plan and its merge). Each step is timed by wrapping the function that does it; a step called inside
another is counted in both. Prints each batch's time and steps, and the mean of the batches after the
first two (warm-up).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from bench.common import TIMES, timed


def instrument() -> None:
    from airflow_logstore.table import staged_commit
    from airflow_logstore.write import planning, streaming, writer

    wrapped: list[tuple[Any, list[str]]] = [
        (
            writer,
            [
                "validated_changes",
                "key_filter",
                "files_may_hold",
                "small_batch_rows",
                "commit_batch",
                "write_through",
                "produce_records",
                "plan_row_kinds",
            ],
        ),
        (writer.DualWriter, ["state", "_record", "_target"]),
        (planning.BatchPlan, ["holds_keys", "persisted", "count", "lookup_cached"]),
        (staged_commit, ["open_staging", "drop_staging"]),
        (streaming, ["decode_source"]),
    ]
    for owner, names in wrapped:
        for name in names:
            if hasattr(owner, name):
                setattr(owner, name, timed(name, getattr(owner, name)))


def _values(batch: int, rows: int, mode: str) -> list[tuple[bytes]]:
    base = batch * rows if mode == "new" else rows
    op = "insert" if mode == "new" or batch == 1 else "update"
    return [
        (json.dumps({"id": base + i, "name": f"n{batch}.{i}", "amount": i + batch, "op": op}).encode(),)
        for i in range(rows)
    ]


class BenchWriter(NamedTuple):
    spark: Any
    handle: Any
    writer: Any
    columns: list[str]


@contextmanager
def bench_writer(app_name: str) -> Iterator[BenchWriter]:
    """A keyed table on the embedded default and one writer of it, in a Spark session of its own
    (stopped at the end), with the table's columns as the streaming application decodes them."""
    from airflow_logstore.spark.session import build_spark_session
    from airflow_logstore.write.writer import open_writer
    from logstore_dev.testing.environment import logstore_environment
    from logstore_dev.testing.tables import make_table

    with logstore_environment() as env:
        spark = build_spark_session(app_name)
        try:
            handle = make_table(env)
            writer = open_writer(spark, str(handle.name), writer_id="bench")
            columns = [f.name for f in spark.table(handle.spark_name()).schema.fields]
            yield BenchWriter(spark, handle, writer, columns)
        finally:
            spark.stop()


def micro_batch(
    spark: Any, writer: Any, columns: list[str], batch: int, rows: int, mode: str, *, small_path: bool = False
) -> tuple[float, float, Any]:
    """One micro-batch as the streaming application's ``each_batch`` writes it: the seconds to read it
    (into a local frame when it is small: the small-batch path), the seconds to decode and write it, and
    the writer's result.

    :param small_path: the caller measures the small-batch path: fail if the micro-batch does not take it
    """
    from airflow_logstore.write import streaming

    frame = spark.createDataFrame(_values(batch, rows, mode), "value binary")
    started = time.perf_counter()
    small = streaming.local_values(frame, streaming.SMALL_BATCH_ROWS)
    if small_path and small is None:
        raise AssertionError(f"a micro-batch of {rows} rows did not take the small-batch path")
    if small is None:
        frame = frame.persist()
    read = time.perf_counter()
    if small is not None:
        raw = streaming.decode_source(small, columns, writer.change_column, local=True)
    else:
        raw = streaming.decode_source(frame, columns, writer.change_column)
    result = writer.write_frame(raw, batch)
    frame.unpersist()
    return read - started, time.perf_counter() - read, result


def run(batches: int, rows: int, mode: str, say: Callable[[str], None] = print) -> float:
    instrument()
    with bench_writer("micro-batch-bench") as (spark, _, writer, columns):
        totals = []
        for batch in range(1, batches + 1):
            TIMES.clear()
            read_s, write_s, result = micro_batch(spark, writer, columns, batch, rows, mode)
            totals.append(read_s + write_s)
            seconds = sorted(((sum(calls), name) for name, calls in TIMES.items()), reverse=True)
            steps = " ".join(f"{name}={total:.2f}" for total, name in seconds)
            say(f"batch {batch}: {totals[-1]:.2f}s, {result.log_records} log records; {steps}")
    warm = totals[2:] or totals
    mean = sum(warm) / len(warm)
    say(f"mode {mode}, {rows} rows: mean {mean:.2f}s per micro-batch (batches 3 to {batches})")
    return mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--rows", type=int, default=30)
    parser.add_argument("--mode", choices=("new", "update"), default="new")
    args = parser.parse_args()
    run(args.batches, args.rows, args.mode)


if __name__ == "__main__":
    main()
