"""A real Airflow (api-server, scheduler, dag-processor, triggerer) runs logstore_pipeline end to end.

The run is triggered through the REST API with a conf, as the UI's trigger form does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_logstore.publish import is_visible
from airflow_logstore.reader import read_log
from airflow_logstore.services.airflow_local import LocalAirflow
from airflow_logstore.tables import LogStoreTable, snapshot_commits
from airflow_logstore.testing.environment import REPO_ROOT, free_port_pair

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
