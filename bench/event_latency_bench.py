"""Commit → downstream run start through a real Airflow: the event-driven visibility path (issue 38).

    .venv/bin/python -m bench.event_latency_bench --batches 8 --every 20

A real local Airflow (api-server, scheduler, dag-processor, triggerer; LocalExecutor, SQLite) runs the
example DAGs ``logstore_publish`` and ``logstore_downstream`` on one table. The benchmark commits
``--batches`` batches with the real dual write (``DualWriter`` in its own Spark session, as a writer
that does not publish by itself: the streaming writer, ``logstore write``), one every ``--every``
seconds, and measures per batch, from the Iceberg commit's time:

- the commit trigger's event (its ``observed_at_ms``), in the triggerer;
- the watermark move that made the batch visible (the control record's broker time): the publish, a
  task of a ``logstore_publish`` run;
- the start of the ``logstore_downstream`` run whose read covers the batch.

Results: ``bench/results/event_latency.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from bench.latency_bench import percentile

REPO = Path(__file__).resolve().parents[1]


def dags_for(table: str, folder: Path) -> None:
    """logstore_publish and logstore_downstream on ``table`` only."""
    tables = 'TABLES = ["demo.orders", "demo.orders_stream"]'
    for name in ("logstore_publish.py", "logstore_downstream.py"):
        source = (REPO / "dags" / name).read_text()
        assert source.count(tables) == 1, f"dags/{name} no longer lists its tables as expected"
        (folder / name).write_text(source.replace(tables, f"TABLES = [{table!r}]"))


def summarize(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_s": round(percentile(values, 0.5), 2),
        "max_s": round(max(values), 2) if values else None,
        "min_s": round(min(values), 2) if values else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--every", type=float, default=20.0, help="seconds between two commits")
    args = parser.parse_args()

    from airflow_logstore.spark.session import build_spark_session
    from airflow_logstore.table.tables import snapshot_commits
    from airflow_logstore.write.writer import open_writer
    from bench.common import machine, save
    from logstore_dev.services.airflow_local import LocalAirflow
    from logstore_dev.testing.environment import free_port_pair, logstore_environment
    from logstore_dev.testing.tables import make_table, write_jsonl
    from tests.integration.test_airflow_e2e import _runs, _time, _watermark_moves

    with logstore_environment() as env:
        handle = make_table(env, prefix="events")
        table = str(handle.name)
        work = env.scratch("bench-events")
        dags = work / "dags"
        dags.mkdir()
        dags_for(table, dags)
        airflow = LocalAirflow(env.settings, dags, port=free_port_pair(), home=work / "airflow")
        spark = build_spark_session("bench-events")
        writer = open_writer(spark, table, writer_id="events")
        try:
            airflow.up(timeout=300)
            for dag_id in ("logstore_publish", "logstore_downstream"):
                airflow.wait_for_dag(dag_id, timeout=240)
            time.sleep(10)  # the triggerer picks the watchers up
            for batch in range(1, args.batches + 1):
                rows = [{"id": batch * 100 + i, "name": f"b{batch}", "amount": i} for i in range(10)]
                writer.write_path(str(write_jsonl(work / f"b{batch}.jsonl", rows)), batch)
                time.sleep(args.every)
            deadline = time.time() + 300
            while time.time() < deadline:
                done = [r for r in _runs(airflow, "logstore_downstream") if r["state"] == "success"]
                if _covered(airflow, handle, done, args.batches):
                    break
                time.sleep(2)
            commits = {c.batch_id: c for c in snapshot_commits(handle.load()) if c.writer_id == "events"}
            moves = _watermark_moves(handle)
            runs = [r for r in _runs(airflow, "logstore_downstream") if r["state"] == "success"]
            windows = [(r, _window_end(airflow, handle, r)) for r in runs]
            to_visible, to_start, visible_to_start = [], [], []
            for _batch, commit in sorted(commits.items()):
                committed = (commit.timestamp_ms or 0) / 1000
                last = {p: span[1] for p, span in commit.offsets.items()}
                visible = next(at for at, mark in moves if all(mark.get(p, -1) >= o for p, o in last.items()))
                run = next(r for r, end in windows if all(end.get(p, 0) > o for p, o in last.items()))
                started = _time(run["start_date"]).timestamp()
                to_visible.append(visible / 1000 - committed)
                to_start.append(started - committed)
                visible_to_start.append(started - visible / 1000)
            payload = {
                "machine": machine(),
                "batches": args.batches,
                "every_s": args.every,
                "downstream_runs": len(runs),
                "commit_to_visible": summarize(to_visible),
                "visible_to_downstream_start": summarize(visible_to_start),
                "commit_to_downstream_start": summarize(to_start),
            }
            print(json.dumps(payload, indent=2))
            print(f"saved to {save('event_latency', payload)}")
        finally:
            airflow.down()
            spark.stop()
            shutil.rmtree(work, ignore_errors=True)


def _window_end(airflow: Any, handle: Any, run: dict[str, Any]) -> dict[int, int]:
    task = "read_" + str(handle.name).replace(".", "_")
    found = airflow.get(
        f"/api/v2/dags/logstore_downstream/dagRuns/{run['dag_run_id']}/taskInstances/{task}"
        "/xcomEntries/return_value?deserialize=true"
    )
    value = found["value"]
    value = json.loads(value) if isinstance(value, str) else value
    return {int(p): o for p, o in value["window"]["to"].items()}


def _covered(airflow: Any, handle: Any, runs: list[dict[str, Any]], batches: int) -> bool:
    from airflow_logstore.table.tables import snapshot_commits

    commits = [c for c in snapshot_commits(handle.load()) if c.writer_id == "events"]
    if len(commits) < batches:
        return False
    ends = [_window_end(airflow, handle, r) for r in runs]
    last: dict[int, int] = {}
    for c in commits:
        for p, (_, o) in c.offsets.items():
            last[p] = max(last.get(p, -1), o)
    return any(all(end.get(p, 0) > o for p, o in last.items()) for end in ends)


if __name__ == "__main__":
    main()
