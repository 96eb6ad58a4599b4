"""A real Airflow (api-server, scheduler, dag-processor, triggerer) runs logstore_pipeline end to end.

The run is triggered through the REST API with a conf, as the UI's trigger form does.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from airflow_logstore.publish.publisher import is_visible
from airflow_logstore.read.reader import read_log
from airflow_logstore.services.airflow_local import LocalAirflow
from airflow_logstore.table.tables import LogStoreTable, snapshot_commits
from airflow_logstore.testing.environment import REPO_ROOT, free_port_pair
from airflow_logstore.testing.tables import write_jsonl

pytestmark = pytest.mark.airflow_e2e


@pytest.fixture(scope="module")
def airflow(env, tmp_path_factory):
    dags = tmp_path_factory.mktemp("dags")
    for dag in ("logstore_pipeline.py",):
        shutil.copy(REPO_ROOT / "dags" / dag, dags / dag)
    shutil.copytree(REPO_ROOT / "dags" / "data", dags / "data")
    service = LocalAirflow(env.settings, dags, port=free_port_pair(), home=tmp_path_factory.mktemp("airflow"))
    try:
        service.up(timeout=240)
        yield service
    finally:
        service.down()


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
    assert {k: v["state"] for k, v in tis.items()} == {
        "create_table": "success",
        "dual_write": "failed",
        "wait_for_snapshot": "failed",
        "publish_visible_offsets": "upstream_failed",
        "read": "upstream_failed",
    }
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
