"""A real Airflow (api-server, scheduler, dag-processor, triggerer) runs logstore_pipeline end to end.

The run is triggered through the REST API with a conf, as the UI's trigger form does.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_logstore.publish.publisher import is_visible
from airflow_logstore.read.reader import read_log
from airflow_logstore.services.airflow_local import LocalAirflow
from airflow_logstore.table.tables import LogStoreTable, snapshot_commits
from airflow_logstore.testing.environment import REPO_ROOT, free_port_pair
from airflow_logstore.testing.tables import write_jsonl

pytestmark = pytest.mark.airflow_e2e


#: logstore_pipeline with no retries of its write, whose Spark tasks wait at a pause point (see below).
HELD_DAG = "logstore_pipeline_held"


def held_pipeline(pauses: Path) -> str:
    """logstore_pipeline's source as DAG ``HELD_DAG``: its write is not retried (a killed try is its
    last) and its Spark tasks stop at ``produce:started`` (before any record, so before any commit)
    until the test creates ``<pauses>/produce_started.release``."""
    source = (REPO_ROOT / "dags" / "logstore_pipeline.py").read_text()
    held = {
        "spark.executorEnv.LOGSTORE_PAUSE_AT": "produce:started",
        "spark.executorEnv.LOGSTORE_PAUSE_DIR": str(pauses),
    }
    for old, new in (
        ('dag_id="logstore_pipeline",', f'dag_id="{HELD_DAG}",'),
        ("retries=2,", f"retries=0, spark_conf={held!r},"),
    ):
        assert source.count(old) == 1, f"dags/logstore_pipeline.py no longer has {old!r} once"
        source = source.replace(old, new)
    return source


@pytest.fixture(scope="module")
def pauses(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pauses")


#: when the module's Airflow was started
STARTED: dict[str, datetime] = {}


@pytest.fixture(scope="module")
def airflow(env, tmp_path_factory, pauses: Path):
    dags = tmp_path_factory.mktemp("dags")
    for dag in ("logstore_pipeline.py", "logstore_reconcile.py"):
        shutil.copy(REPO_ROOT / "dags" / dag, dags / dag)
    (dags / f"{HELD_DAG}.py").write_text(held_pipeline(pauses))
    shutil.copytree(REPO_ROOT / "dags" / "data", dags / "data")
    service = LocalAirflow(env.settings, dags, port=free_port_pair(), home=tmp_path_factory.mktemp("airflow"))
    try:
        STARTED["airflow"] = datetime.now(UTC)
        service.up(timeout=240)
        yield service
    finally:
        service.down()


#: the task states of a run whose dual write failed for good: the sensor fails at once, the rest never runs
FAILED_WRITE_RUN = {
    "create_table": "success",
    "dual_write": "failed",
    "wait_for_snapshot": "failed",
    "publish_visible_offsets": "upstream_failed",
    "read": "upstream_failed",
}


def test_pipeline_triggered_through_the_rest_api(env, airflow: LocalAirflow) -> None:
    airflow.wait_for_dag("logstore_pipeline")
    table = f"e2e.{env.unique('orders')}"
    data = Path(airflow.dags_folder) / "data"
    run_id = airflow.trigger(
        "logstore_pipeline",
        {
            "table": table,
            "input_path": str(data / "orders_batch_1.jsonl"),
            "batch_id": 1,
            "read_mode": "log",
            "consistency": "transactional",
        },
    )
    state = airflow.wait_for_run("logstore_pipeline", run_id)
    tis = airflow.task_instances("logstore_pipeline", run_id)
    assert state == "success", {k: v["state"] for k, v in tis.items()}
    assert {k: v["state"] for k, v in tis.items()} == {
        "create_table": "success",
        "dual_write": "success",
        "wait_for_snapshot": "success",
        "publish_visible_offsets": "success",
        "read": "success",
    }

    # The sensor handed its wait to the triggerer: execute_complete ran after a trigger event.
    sensor_log = airflow.task_log("logstore_pipeline", run_id, "wait_for_snapshot")
    assert "polls in the triggerer" in sensor_log, sensor_log[-2000:]
    # The documented set-up (no connection): each task names the embedded default once, at INFO,
    # although the sensor polled in its worker and then every second in the triggerer.
    for task in ("create_table", "dual_write", "wait_for_snapshot"):
        said = [
            line
            for line in airflow.task_log("logstore_pipeline", run_id, task).splitlines()
            if "connection configured (" in line
        ]
        assert len(said) == 2 and all('"level": "info"' in line for line in said), (task, said)
        assert "'logstore_default' not defined" in said[0] and "'kafka_default' not defined" in said[1]

    handle = LogStoreTable.open(table)
    commits = snapshot_commits(handle.load())
    assert [(c.writer_id, c.batch_id) for c in commits] == [("logstore_pipeline", 1)]
    rows = handle.load().scan().to_arrow().to_pylist()
    assert len(rows) == 20 and sorted(r["id"] for r in rows) == list(range(1, 21))
    assert is_visible(handle, "logstore_pipeline", 1)
    consistent = read_log(handle, consistency="transactional")
    assert len(consistent.records) == 20 and all(r.meta.batch_id == 1 for r in consistent.records)


def test_a_bad_param_is_refused_before_any_task_runs(airflow: LocalAirflow) -> None:
    from airflow_logstore.exceptions import ServiceError

    with pytest.raises(ServiceError, match=r"batch_id|minimum"):
        airflow.trigger("logstore_pipeline", {"batch_id": 0})
    with pytest.raises(ServiceError, match=r"table|pattern"):
        airflow.trigger("logstore_pipeline", {"table": "orders; DROP TABLE x"})


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_a_bad_input_file_fails_its_run_at_once_and_the_next_run_goes_ahead(
    env, airflow: LocalAirflow, tmp_path: Path
) -> None:
    airflow.wait_for_dag("logstore_pipeline")
    bad = write_jsonl(
        tmp_path / "a3_bad.jsonl", [{"id": 1, "customer": "c1", "amount": "lots", "status": "new"}]
    )
    good = Path(airflow.dags_folder) / "data" / "orders_batch_1.jsonl"
    conf = {"table": f"e2e.{env.unique('bad')}", "batch_id": 1, "read_mode": "log"}
    bad_run = airflow.trigger("logstore_pipeline", {**conf, "input_path": str(bad)})
    # the same batch, fixed: queued behind the bad run (max_active_runs=1); the old failure is not its own
    next_run = airflow.trigger("logstore_pipeline", {**conf, "input_path": str(good)})

    assert airflow.wait_for_run("logstore_pipeline", bad_run) == "failed"
    tis = airflow.task_instances("logstore_pipeline", bad_run)
    assert {k: v["state"] for k, v in tis.items()} == FAILED_WRITE_RUN
    assert tis["dual_write"]["try_number"] == 1  # bad input is not retried (the task has retries=2)
    write_log = airflow.task_log("logstore_pipeline", bad_run, "dual_write")
    cause = "BadInputError: row 1, column 'amount': value does not fit type bigint (file a3_bad.jsonl)"
    assert cause in write_log and "AirflowFailException" in write_log, write_log[-3000:]
    sensor_log = airflow.task_log("logstore_pipeline", bad_run, "wait_for_snapshot")
    assert "failed for good" in sensor_log and cause in sensor_log, sensor_log[-3000:]
    write_failed = _time(tis["dual_write"]["end_date"])
    assert _time(tis["wait_for_snapshot"]["end_date"]) - write_failed < timedelta(minutes=1)

    assert airflow.wait_for_run("logstore_pipeline", next_run) == "success"
    started = _time(airflow.get(f"/api/v2/dags/logstore_pipeline/dagRuns/{next_run}")["start_date"])
    assert started - write_failed < timedelta(minutes=1)
    commits = snapshot_commits(LogStoreTable.open(conf["table"]).load())
    assert [(c.writer_id, c.batch_id) for c in commits] == [("logstore_pipeline", 1)]


def _until(condition: Callable[[], bool], what: str, timeout: float = 180.0) -> None:
    """Poll Airflow (or the Spark job it runs) until ``condition`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.5)


def test_a_killed_write_fails_its_run_at_once_and_the_next_run_goes_ahead(
    env, airflow: LocalAirflow, pauses: Path
) -> None:
    """The write's last try dies by SIGKILL (as by the OOM killer) while the sensor waits deferred:
    no failure report, yet the sensor fails at once naming the killed write, and the next run starts."""
    airflow.wait_for_dag(HELD_DAG)
    data = Path(airflow.dags_folder) / "data" / "orders_batch_1.jsonl"
    conf = {"table": f"e2e.{env.unique('killed')}", "input_path": str(data), "batch_id": 1}
    killed_run = airflow.trigger(HELD_DAG, conf)
    next_run = airflow.trigger(HELD_DAG, conf)  # queued behind it (max_active_runs=1)
    reached, release = pauses / "produce_started.reached", pauses / "produce_started.release"
    try:

        def held_and_waiting() -> bool:
            tis = airflow.task_instances(HELD_DAG, killed_run)
            return reached.exists() and tis.get("wait_for_snapshot", {}).get("state") == "deferred"

        _until(held_and_waiting, "the write held before its first record, the sensor deferred")
        write = airflow.task_instances(HELD_DAG, killed_run)["dual_write"]
        task_pid, held = int(write["pid"]), int(reached.read_text())
        assert write["state"] == "running" and write["try_number"] == 1, write
        # Airflow's supervisor runs the task in its own process group, with spark-submit and the Spark
        # driver, whose JVM (in local mode also the executor) holds the Spark task. All of them die;
        # the supervisor survives to see it.
        assert os.getpgid(task_pid) == task_pid != os.getpgrp()
        assert os.getpgid(held) == task_pid, "the held Spark task is not in the write task's process group"
        killed_at = datetime.now(UTC)
        os.killpg(task_pid, signal.SIGKILL)
    finally:
        release.touch()  # the next run's write goes through

    # not the sensor's timeout (30 min): a run ends within a minute or two of the kill
    assert airflow.wait_for_run(HELD_DAG, killed_run, timeout=120) == "failed"
    tis = airflow.task_instances(HELD_DAG, killed_run)
    assert {k: v["state"] for k, v in tis.items()} == FAILED_WRITE_RUN
    assert _time(tis["wait_for_snapshot"]["end_date"]) - killed_at < timedelta(minutes=1)
    sensor_log = airflow.task_log(HELD_DAG, killed_run, "wait_for_snapshot")
    named = (
        f"the dual write of batch 1 of {conf['table']} by writer 'logstore_pipeline' failed for good: "
        f"its task 'dual_write' is failed in run {killed_run}; it left no failure report"
    )
    assert named in sensor_log and "AirflowFailException" in sensor_log, sensor_log[-3000:]

    assert airflow.wait_for_run(HELD_DAG, next_run) == "success"
    started = _time(airflow.get(f"/api/v2/dags/{HELD_DAG}/dagRuns/{next_run}")["start_date"])
    assert started - killed_at < timedelta(minutes=1)
    commits = snapshot_commits(LogStoreTable.open(conf["table"]).load())
    assert [(c.writer_id, c.batch_id) for c in commits] == [("logstore_pipeline", 1)]


def test_the_maintenance_dag_starts_paused_and_not_due_before_its_next_time(airflow: LocalAirflow) -> None:
    """``logstore airflow up`` runs no maintenance on the demo's table: logstore_reconcile is paused,
    and its first run is due at a scheduled time after Airflow started, not at one that had passed."""
    airflow.wait_for_dag("logstore_reconcile")
    dag = airflow.get("/api/v2/dags/logstore_reconcile")
    assert dag["is_paused"] is True, dag
    assert _time(dag["next_dagrun_run_after"]) > STARTED["airflow"], dag
    assert airflow.get("/api/v2/dags/logstore_reconcile/dagRuns")["total_entries"] == 0
