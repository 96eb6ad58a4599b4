"""PySpark 4's DataFrame debugging against a streaming micro-batch's dual write, side by side in one process.

    LOGSTORE_CACHE=$PWD/.cache .venv/bin/python -m bench.dataframe_debugging_bench --batches 20

PySpark 4 wraps every DataFrame and column call to send its Python call site to the JVM
(``spark.python.sql.dataFrameDebugging.enabled``, default true: five more Py4J round trips a call); the
project's sessions turn it off (``base_conf``). A keyed table on the embedded default, one writer, three
micro-batches of 30 new keys to warm up (``micro_batch_bench.micro_batch``), then ``--batches``
micro-batches alternating the setting (PySpark reads it once per process and keeps it: the kept value is
switched). Prints the medians of each side: the read of the micro-batch, and its decode and write.
"""

from __future__ import annotations

import argparse
import statistics

from bench.micro_batch_bench import bench_writer, micro_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()

    import pyspark.errors.utils as pyspark_errors

    with bench_writer("dataframe-debugging-bench") as (spark, _, writer, columns):
        for batch in range(1, 4):
            micro_batch(spark, writer, columns, batch, 30, "new")
        sides: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for batch in range(4, 4 + args.batches):
            debugging = batch % 2 == 0
            pyspark_errors._enable_debugging_cache = debugging  # type: ignore[assignment]  # the kept setting
            read_s, write_s, _ = micro_batch(spark, writer, columns, batch, 30, "new")
            sides[debugging].append((read_s, write_s))
    for debugging, times in sides.items():
        read = statistics.median(t[0] for t in times)
        write = statistics.median(t[1] for t in times)
        print(f"debugging {'on ' if debugging else 'off'}: read {read:.3f} s, decode and write {write:.3f} s "
              f"(medians of {len(times)} micro-batches)")  # fmt: skip


if __name__ == "__main__":
    main()
