"""Where a dual write's CPU goes: per run, the CPU seconds of the Spark JVM's threads by kind, of the Kafka
broker and of the Python driver, beside the run's wall time (Linux: read from /proc).

    .venv/bin/python -m bench.cpu_breakdown --rows 1000000 --runs 4
    .venv/bin/python -m bench.cpu_breakdown --rows 1000000 --runs 4 --modes kafka-only,dual

The same writes as ``bench.dual_write_bench`` (a primary-key table, 1M inserts from Parquet, the real
``DualWriter``), in the modes named (default: the dual write; several alternate in each run, so that
their figures are measured side by side), each run on its own copy of the input after a 20,000-row
warm-up of each mode. On a
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
from bench.dual_write_bench import MODES, copies_of, generate, run_mode

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
    parser.add_argument("--modes", default="dual", help="emit modes, comma-separated: " + ", ".join(MODES))
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(f"unknown modes {unknown}: choose from {', '.join(MODES)}")

    from airflow_logstore.spark.session import build_spark_session
    from logstore_dev.testing.environment import logstore_environment

    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with logstore_environment() as env:
        spark = build_spark_session("bench-cpu-breakdown")
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
        broker_pid = env.broker.pid()
        assert broker_pid is not None, "the broker is not running"
        workdir = env.scratch("bench-cpu")
        copies = iter(copies_of(generate(spark, args.rows, workdir / "input"), args.runs * len(modes)))
        warm = str(generate(spark, 20_000, workdir / "warm"))
        for mode in modes:
            run_mode(env, spark, mode, warm, 20_000)
        for n in range(args.runs):
            for mode in modes:
                before, started = snapshot(jvm_pid, broker_pid), time.perf_counter()
                result = run_mode(env, spark, mode, next(copies), args.rows)
                wall, after = time.perf_counter() - started, snapshot(jvm_pid, broker_pid)
                used = {k: round(after[k] - before.get(k, 0.0), 2) for k in after}
                run = {"mode": mode, "run": n + 1, "write_s": result["seconds"], "wall_s": round(wall, 2)}
                runs[mode].append({**run, "cpu_s": used})
                print(runs[mode][-1], flush=True)
        spark.stop()

    print(f"\n{args.rows} rows, {args.runs} runs, {machine()}")
    print("CPU seconds per run (run 1, then the median of the later runs), per mode:\n")
    print(table(runs))
    save("cpu_breakdown", {"rows": args.rows, "machine": machine(), "runs": runs})


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """A Markdown table: a row per thread kind, per mode the first run and the median of the later ones."""
    modes = list(runs)
    later = {mode: runs[mode][1:] or runs[mode] for mode in modes}
    kinds = sorted(
        {k for mode in modes for r in runs[mode] for k in r["cpu_s"]},
        key=lambda k: -sum(r["cpu_s"].get(k, 0) for mode in modes for r in later[mode]),
    )
    head = "".join(f" {mode}, run 1 | {mode}, later (median) |" for mode in modes)
    lines = [f"| |{head}", "|---|" + "---|---|" * len(modes)]

    def row(label: str, value: Any) -> str:
        cells = "".join(
            f" {value(runs[mode][0]):.2f} | {statistics.median(value(r) for r in later[mode]):.2f} |"
            for mode in modes
        )
        return f"| {label} |{cells}"

    lines.append(row("write (wall, s)", lambda r: r["write_s"]))
    lines += [row(kind, lambda r, kind=kind: r["cpu_s"].get(kind, 0.0)) for kind in kinds]
    lines.append(row("all CPU", lambda r: sum(r["cpu_s"].values())))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
