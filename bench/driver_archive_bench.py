"""What the Spark drivers' class archive saves: a short Iceberg job's driver, with and without it.

    LOGSTORE_CACHE=$PWD/.cache .venv/bin/python -m bench.driver_archive_bench --runs 3

Builds the archive first if there is none (``airflow_logstore/spark/driver_archive.py``). Each run is a
new driver process (``local[1]``, the LogStore session settings and jars, an embedded catalog of its own)
that starts, creates an Iceberg table, inserts and appends a row and counts them: the start and the
first writes every short job pays. Runs alternate, without and with the archive, side by side. Per run
it notes the wall time from the process's start to its last query, and the CPU seconds of the driver's
JVM and of the Python processes (the driver and its Python workers) until then.

Median, minimum and maximum per figure, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the driver each run starts (in its own process): prints its figures as one JSON line
DRIVER = """
import json, sys, time
import psutil
from airflow_logstore.spark import driver_archive
if sys.argv[1] == "without":
    driver_archive.driver_archive = lambda settings=None: None
from airflow_logstore.spark.session import build_spark_session
spark = build_spark_session("archive-bench", master="local[1]")
spark.sql("create namespace if not exists logstore.bench")
spark.sql("create table logstore.bench.t (id bigint, v string) using iceberg")
spark.sql("insert into logstore.bench.t values (1, 'a'), (2, 'b')")
spark.createDataFrame([(3, "c")], "id long, v string").writeTo("logstore.bench.t").append()
assert spark.table("logstore.bench.t").count() == 3
me = psutil.Process()
cpu = {"jvm": 0.0, "python": 0.0}
for p in [me, *me.children(recursive=True)]:
    t = p.cpu_times()
    cpu["jvm" if p.name() == "java" else "python"] += t.user + t.system
print(json.dumps({"wall": time.time() - float(sys.argv[2]), **cpu}))
spark.stop()
"""


def run_once(mode: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="archive-bench-") as home:
        (Path(home) / "catalog").mkdir()
        env = {**os.environ, "LOGSTORE_HOME": home}
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, mode, str(time.time())],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    if done.returncode != 0:
        raise SystemExit(f"the {mode} driver failed: {done.stderr[-3000:]}")
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1]
    return dict(json.loads(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each (alternating)")
    args = parser.parse_args()
    from airflow_logstore.spark.driver_archive import build_driver_archive

    started = time.monotonic()
    archive = build_driver_archive()
    if archive is None:
        raise SystemExit("the archive could not be built (its log is in the jars cache)")
    size = archive.stat().st_size / 1e6
    print(f"archive {archive} ({size:.0f} MB), ready in {time.monotonic() - started:.0f}s")
    results: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    for n in range(args.runs):
        for mode in ("without", "with"):
            results[mode].append(run_once(mode))
            print(f"run {n + 1} {mode}: {json.dumps({k: round(v, 1) for k, v in results[mode][-1].items()})}")
    load = os.getloadavg()[0]
    print(f"\n{args.runs} runs each, load average at the end {load:.1f}")
    print(f"{'figure (s)':<14}{'without: median (min-max)':<30}{'with: median (min-max)':<30}ratio")
    for figure in ("wall", "jvm", "python"):
        cells = []
        for mode in ("without", "with"):
            values = [r[figure] for r in results[mode]]
            cells.append(f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})")
        ratio = statistics.median(r[figure] for r in results["with"]) / statistics.median(
            r[figure] for r in results["without"]
        )
        print(f"{figure:<14}{cells[0]:<30}{cells[1]:<30}{ratio:.2f}")


if __name__ == "__main__":
    main()
