"""The main job end to end on the embedded default: what ``./dev demo`` (``logstore demo``) runs.

1. starts the local Kafka broker and fetches Spark's jars (once);
2. runs the example DAG ``logstore_pipeline`` with Airflow (``airflow dags test``: real operators,
   spark-submit, the deferrable sensor's trigger) for batch 1;
3. simulates a failover: a writer attempt of batch 2 is SIGKILLed after its log records are flushed,
   before its Iceberg commit; then the DAG runs batch 2 (the retry) and batch 3;
4. runs the ``logstore_reconcile`` DAG, which reverses the dead attempt's records;
5. prints what happened: rows in the table, records in the log, watermark, reversals, where to look.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_logstore.services.local import LocalBroker, spark_jars
from airflow_logstore.settings import LocalSettings, local_settings

REPO_ROOT = Path(__file__).resolve().parents[1]
TABLE = "demo.orders"


def airflow_env(settings: LocalSettings, dags_folder: Path) -> dict[str, str]:
    """Environment of an Airflow that uses the embedded default (SQLite metadata DB, local Spark)."""
    home = settings.home / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_VAR_LOGSTORE_KAFKA_ADDRESS": settings.kafka_bootstrap,
        "LOGSTORE_HOME": str(settings.home),
        "LOGSTORE_CACHE": str(settings.cache),
        "LOGSTORE_KAFKA_PORT": str(settings.kafka_port),
        "PYSPARK_PYTHON": sys.executable,
    }


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


def _dags_test(dag_id: str, conf: Mapping[str, Any], env: Mapping[str, str], log_file: Path) -> None:
    done = _run(
        [sys.executable, "-m", "airflow", "dags", "test", dag_id, "-c", json.dumps(conf)],
        env,
        log_file,
        f"airflow dags test {dag_id} {json.dumps(conf)}",
    )
    if done.returncode != 0 or "state=failed" in done.stdout + done.stderr:
        raise SystemExit(f"[demo] {dag_id} failed; see {log_file}")


def run_demo(dags_folder: Path | None = None) -> dict[str, Any]:
    settings = local_settings()
    dags_folder = dags_folder or REPO_ROOT / "dags"
    data = dags_folder / "data"
    log_file = settings.home / "demo.log"
    settings.home.mkdir(parents=True, exist_ok=True)
    log_file.write_text("")
    print(f"[demo] state in {settings.home}; full output in {log_file}", flush=True)

    status = LocalBroker(settings).up()
    print(f"[demo] {status.describe()}", flush=True)
    print(f"[demo] spark jars: {len(spark_jars(settings))} in {settings.jars_dir}", flush=True)
    env = airflow_env(settings, dags_folder)
    migrated = _run([sys.executable, "-m", "airflow", "db", "migrate"], env, log_file, "airflow db migrate")
    if migrated.returncode != 0:
        raise SystemExit(f"[demo] airflow db migrate failed; see {log_file}")

    batch = {n: str(data / f"orders_batch_{n}.jsonl") for n in (1, 2, 3)}
    _dags_test("logstore_pipeline", {"table": TABLE, "input_path": batch[1], "batch_id": 1}, env, log_file)
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
            "--crash-at",
            "after-log:2",
        ],
        env,
        log_file,
        "failover: a writer attempt of batch 2 dies after its log records are flushed",
    )
    if crashed.returncode not in (-9, 137):
        raise SystemExit(f"[demo] the simulated failover did not crash as expected; see {log_file}")
    _dags_test("logstore_pipeline", {"table": TABLE, "input_path": batch[2], "batch_id": 2}, env, log_file)
    _dags_test("logstore_pipeline", {"table": TABLE, "input_path": batch[3], "batch_id": 3}, env, log_file)
    _dags_test("logstore_reconcile", {"table": TABLE}, env, log_file)
    return summarize(settings, log_file)


def summarize(settings: LocalSettings, log_file: Path) -> dict[str, Any]:
    from airflow_logstore.core.changelog import apply_retract, apply_upsert
    from airflow_logstore.core.codec import RecordType
    from airflow_logstore.reader import read_log
    from airflow_logstore.tables import LogStoreTable, show_table

    handle = LogStoreTable.open(TABLE)
    shown = show_table(handle)
    rows = handle.load().scan().to_arrow().to_pylist()
    eventual = read_log(handle, consistency="eventual")
    consistent = read_log(handle, consistency="transactional")
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
            "airflow_logs": str(settings.home / "airflow" / "logs"),
            "broker_log": str(settings.broker_dir / "broker.log"),
            "warehouse": str(settings.warehouse),
            "try": f"logstore table show {TABLE} | logstore read {TABLE} --mode hybrid --format jsonl",
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
