"""Where a dual write's CPU goes: per run, the CPU seconds of the Spark JVM's threads by kind, of the Kafka
broker and of the Python driver, beside the run's wall time (Linux: read from /proc).

    .venv/bin/python -m bench.cpu_breakdown --rows 1000000 --runs 4

The same writes as ``bench.dual_write_bench`` (a primary-key table, 1M inserts from Parquet, the real
``DualWriter``), dual mode only, each run on its own copy of the input after a 20,000-row warm-up. On a
2-core machine a run is CPU-bound: the threads that are not the Spark tasks' (the JIT compiler, the
producers' network threads, the broker) take CPU the tasks wait for, so each figure counts in the wall
time. The first run of a process carries most of the JIT's work.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import machine, save
from bench.dual_write_bench import copies_of, generate, run_mode

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: Thread kinds of the Spark JVM, by the start of the thread's name (first match wins; Linux keeps the
#: first 15 characters of a thread's name).
KINDS = (
    ("Executor task launch worker", "spark tasks"),
    ("C1 CompilerThre", "JIT compiler"),
    ("C2 CompilerThre", "JIT compiler"),
    ("kafka-producer-network-thread", "producer network threads"),
    ("GC Thread", "GC"),
    ("G1 ", "GC"),
    ("Thread-", "py4j (driver planning)"),
)


def cpu_seconds(stat_path: Path) -> float:
    """User plus system CPU of a process or thread, from its ``stat`` file."""
    fields = stat_path.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def kind(name: str) -> str:
    for prefix, label in KINDS:
        if name.startswith(prefix[:15]):
            return label
    return "other JVM threads"


def threads_by_kind(pid: int) -> dict[str, float]:
    """CPU seconds of the live threads of ``pid``, by kind (a thread that ended is not counted)."""
    found: dict[str, float] = defaultdict(float)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            found[kind(name)] += cpu_seconds(task / "stat")
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def snapshot(jvm: int, broker: int) -> dict[str, float]:
    found = threads_by_kind(jvm)
    found["Kafka broker"] = cpu_seconds(Path(f"/proc/{broker}/stat"))
    found["Python driver"] = cpu_seconds(Path(f"/proc/{os.getpid()}/stat"))
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()

    from airflow_logstore.spark.session import build_spark_session
    from airflow_logstore.testing.environment import logstore_environment

    runs: list[dict[str, Any]] = []
    with logstore_environment() as env:
        spark = build_spark_session("bench-cpu-breakdown")
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
        broker_pid = env.broker.pid()
        assert broker_pid is not None, "the broker is not running"
        workdir = env.scratch("bench-cpu")
        copies = iter(copies_of(generate(spark, args.rows, workdir / "input"), args.runs))
        run_mode(env, spark, "dual", str(generate(spark, 20_000, workdir / "warm")), 20_000)
        for n in range(args.runs):
            before, started = snapshot(jvm_pid, broker_pid), time.perf_counter()
            result = run_mode(env, spark, "dual", next(copies), args.rows)
            wall, after = time.perf_counter() - started, snapshot(jvm_pid, broker_pid)
            used = {k: round(after[k] - before.get(k, 0.0), 2) for k in after}
            runs.append({"run": n + 1, "write_s": result["seconds"], "wall_s": round(wall, 2), "cpu_s": used})
            print(runs[-1], flush=True)
        spark.stop()

    later = runs[1:] or runs
    kinds = sorted(
        {k for r in runs for k in r["cpu_s"]}, key=lambda k: -sum(r["cpu_s"].get(k, 0) for r in later)
    )
    print(f"\n{args.rows} rows, {args.runs} runs, {machine()}")
    print("CPU seconds per run (run 1, then the median of the later runs):\n")
    print("| | run 1 | later runs (median) |\n|---|---|---|")
    median_write = statistics.median(r["write_s"] for r in later)
    print(f"| write (wall, s) | {runs[0]['write_s']} | {median_write:.2f} |")
    for k in kinds:
        first = runs[0]["cpu_s"].get(k, 0.0)
        print(f"| {k} | {first:.2f} | {statistics.median(r['cpu_s'].get(k, 0.0) for r in later):.2f} |")
    save("cpu_breakdown", {"rows": args.rows, "machine": machine(), "runs": runs})


if __name__ == "__main__":
    main()
