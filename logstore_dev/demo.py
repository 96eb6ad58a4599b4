"""The main job end to end on the embedded default: what ``./dev demo`` (``python -m logstore_dev demo``)
runs.

1. starts the local Kafka broker and fetches Spark's jars (once); drops an earlier demo's table and topics;
2. starts a real local Airflow (api-server, scheduler, dag-processor, triggerer on 127.0.0.1) and
   triggers the example DAG ``logstore_pipeline`` through its REST API with params, as the UI's
   Trigger button does (real operators, spark-submit, the sensor deferred to the triggerer), batch 1;
3. simulates a failover: a writer attempt of batch 2 is SIGKILLed after its log records are flushed,
   before its Iceberg commit; then the DAG runs batch 2 (the retry) and batch 3;
4. triggers the ``logstore_reconcile`` DAG, which reverses the dead attempt's records;
5. stops Airflow and prints what happened: rows in the table, records in the log, watermark,
   reversals, where to look. The broker keeps running (``./dev services down`` stops it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_logstore.jars import spark_jars
from airflow_logstore.settings import EXAMPLE_DAGS, LocalSettings, local_settings
from logstore_dev.services.local import LocalBroker

if TYPE_CHECKING:
    from logstore_dev.services.airflow_local import LocalAirflow

TABLE = "demo.orders"


def _run(
    command: list[str], env: Mapping[str, str], log_file: Path, what: str
) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    print(f"[demo] {what} ...", flush=True)
    done = subprocess.run(command, env=dict(env), capture_output=True, text=True, check=False)
    with log_file.open("a") as out:
        out.write(f"\n===== {what}: {' '.join(command)}\n{done.stdout}\n{done.stderr}\n")
    print(
        f"[demo]   {'ok' if done.returncode == 0 else f'exit {done.returncode}'} in "
        f"{time.monotonic() - started:.0f}s",
        flush=True,
    )
    return done


def _trigger(airflow: LocalAirflow, dag_id: str, conf: Mapping[str, Any], log_file: Path) -> None:
    """Trigger a run through the REST API (the UI's Trigger button), wait, and say how it went."""
    started = time.monotonic()
    print(f"[demo] trigger {dag_id} {json.dumps(conf)} ...", flush=True)
    airflow.wait_for_dag(dag_id)
    paused = airflow.set_paused(dag_id, False)
    run_id = airflow.trigger(dag_id, conf)
    try:
        state = airflow.wait_for_run(dag_id, run_id, timeout=1200)
    finally:
        if paused:  # a maintenance DAG stays paused for the next ``./dev airflow up``
            airflow.set_paused(dag_id, True)
    tasks = {task: ti["state"] for task, ti in airflow.task_instances(dag_id, run_id).items()}
    with log_file.open("a") as out:
        out.write(f"===== {dag_id} {run_id}: {state} {json.dumps(tasks)}\n")
    print(
        f"[demo]   {state} in {time.monotonic() - started:.0f}s (run {run_id}; tasks "
        f"{', '.join(f'{t}={s}' for t, s in tasks.items())})",
        flush=True,
    )
    if state != "success":
        raise SystemExit(f"[demo] {dag_id} {state}; task logs in {airflow.home}/logs, UI at {airflow.url}")


def start_over(table_name: str = TABLE) -> list[str]:
    """Drop an earlier demo's table (with its files) and its topics: every demo starts at batch 1."""
    from pyiceberg.exceptions import NoSuchTableError

    from airflow_logstore.table.tables import LogStoreTable, drop_table

    try:
        dropped = drop_table(LogStoreTable.open(table_name))
    except NoSuchTableError:
        return []
    return [table_name, *dropped["topics_deleted"]]


def _archive_builder(settings: LocalSettings) -> threading.Thread | None:
    """Build the Spark drivers' class archive in a thread (once per machine: the later demos find it),
    so that the demo's Spark jobs start their drivers from it; a failed build only costs them that.
    None: nothing to build."""
    from airflow_logstore.spark.driver_archive import build_driver_archive, driver_archive

    archive = driver_archive(settings)
    if archive is None or archive.staging is None:  # no java (the demo fails later, saying so), or built
        return None

    def build() -> None:
        started = time.monotonic()
        try:
            path = build_driver_archive(settings)
        except Exception as exc:  # the demo runs without it
            path, why = None, str(exc).splitlines()[0]
        else:
            why = f"its log: {archive.path.with_suffix('.log')}"
        done = f"built in {time.monotonic() - started:.0f}s" if path else f"not built ({why})"
        print(f"[demo] the Spark drivers' class archive: {done}", flush=True)

    print("[demo] building the Spark drivers' class archive (once) beside Airflow's start", flush=True)
    thread = threading.Thread(target=build, name="driver-archive", daemon=True)
    thread.start()
    return thread


def run_demo(dags_folder: Path | None = None) -> dict[str, Any]:
    from logstore_dev.services.airflow_local import local_airflow

    settings = local_settings()
    dags_folder = dags_folder or EXAMPLE_DAGS
    data = dags_folder / "data"
    log_file = settings.home / "demo.log"
    settings.home.mkdir(parents=True, exist_ok=True)
    log_file.write_text("")
    print(f"[demo] state in {settings.home}; full output in {log_file}", flush=True)

    status = LocalBroker(settings).up()
    print(f"[demo] {status.describe()}", flush=True)
    print(f"[demo] spark jars: {len(spark_jars(settings))} in {settings.jars_dir}", flush=True)
    archive = _archive_builder(settings)  # beside Airflow's start, which mostly waits
    removed = start_over()
    if removed:
        print(f"[demo] removed the previous demo's table and topics: {', '.join(removed)}", flush=True)
    airflow = local_airflow(dags_folder)
    started = time.monotonic()
    print(f"[demo] starting Airflow (api-server, scheduler, dag-processor, triggerer) at {airflow.url} ...")
    airflow.up(timeout=300)
    print(f"[demo]   up in {time.monotonic() - started:.0f}s; logs in {airflow.home}", flush=True)
    if archive is not None:
        archive.join()
    try:
        batch = {n: str(data / f"orders_batch_{n}.jsonl") for n in (1, 2, 3)}
        _trigger(
            airflow, "logstore_pipeline", {"table": TABLE, "input_path": batch[1], "batch_id": 1}, log_file
        )
        crashed = _run(
            [
                sys.executable,
                "-m",
                "airflow_logstore.cli",
                "write",
                TABLE,
                "--input",
                batch[2],
                "--batch-id",
                "2",
                "--writer-id",
                "logstore_pipeline",
            ],
            {**airflow.env(), "LOGSTORE_KILL_AT": "write:after-log:2"},
            log_file,
            "failover: a writer attempt of batch 2 dies after its log records are flushed",
        )
        if crashed.returncode not in (-9, 137):
            raise SystemExit(f"[demo] the simulated failover did not crash as expected; see {log_file}")
        _trigger(
            airflow, "logstore_pipeline", {"table": TABLE, "input_path": batch[2], "batch_id": 2}, log_file
        )
        _trigger(
            airflow, "logstore_pipeline", {"table": TABLE, "input_path": batch[3], "batch_id": 3}, log_file
        )
        _trigger(airflow, "logstore_reconcile", {"table": TABLE}, log_file)
    finally:
        airflow.down()
    return summarize(settings, log_file, airflow.home)


def summarize(settings: LocalSettings, log_file: Path, airflow_home: Path | None = None) -> dict[str, Any]:
    from airflow_logstore.core.changelog import apply_retract, apply_upsert
    from airflow_logstore.core.codec import RecordType
    from airflow_logstore.read.reader import read_log
    from airflow_logstore.table.tables import LogStoreTable, show_table

    handle = LogStoreTable.open(TABLE)
    shown = show_table(handle)
    rows = handle.load().scan().to_arrow().to_pylist()
    eventual = read_log(handle, consistency="eventual")
    consistent = read_log(handle, consistency="consistent")
    table_state = {(r["id"],): r for r in rows}

    def fold(records: Any, upsert: bool = False) -> dict[Any, Any]:
        items = [((r.row["id"],), r.kind, r.row) for r in records]
        return apply_upsert(items) if upsert else apply_retract(items).state

    reversals = sum(1 for r in eventual.records if r.meta.record_type is RecordType.REVERSAL)
    summary = {
        "table": TABLE,
        "rows_in_table": len(rows),
        "snapshots": shown["snapshots"],
        "log_records": shown["log_store"]["records"],
        "visible_watermark": shown["log_store"]["watermark"],
        "reversals_written": reversals,
        "consistent_read_records": len(consistent.records),
        "consistent_read_equals_table": fold(consistent.records) == table_state,
        "eventual_read_converges_to_table": fold(eventual.records) == table_state
        and fold(eventual.records, upsert=True) == table_state,
        "where_to_look": {
            "demo_output": str(log_file),
            "airflow_logs": str((airflow_home or settings.home / "airflow") / "logs"),
            "broker_log": str(settings.broker_dir / "broker.log"),
            "warehouse": str(settings.warehouse),
            "try": f"logstore table show {TABLE} | logstore read {TABLE} --mode hybrid --format jsonl",
            "airflow_ui": "./dev airflow up, then http://127.0.0.1:8080 (Trigger logstore_pipeline)",
        },
    }
    print("\n[demo] what happened")
    print(f"  table {TABLE}: {summary['rows_in_table']} rows, {summary['snapshots']} snapshots")
    print(f"  log: {summary['log_records']} records; visible watermark {summary['visible_watermark']}")
    print(f"  failover: reconciliation wrote {reversals} reversal records for the dead attempt of batch 2")
    print(
        f"  consistent read: {len(consistent.records)} records, folds to the table: "
        f"{summary['consistent_read_equals_table']}"
    )
    converges = summary["eventual_read_converges_to_table"]
    print(f"  eventual read (with reversals) converges to the table: {converges}")
    print(f"  where to look: {json.dumps(summary['where_to_look'], indent=4)}")
    return summary
