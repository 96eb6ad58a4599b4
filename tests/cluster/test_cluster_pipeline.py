"""The example DAGs, unchanged, on the cluster profile: triggered through Airflow's REST API, inputs and
warehouse on S3, the REST catalog, three brokers, Spark standalone in client mode.

Only connections and variables differ from the embedded default (LocalCluster.airflow_env).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow_logstore.core.batch_plan import apply_final, plan_batch
from airflow_logstore.publish.publisher import is_visible
from airflow_logstore.read.reader import read_log
from airflow_logstore.table.tables import LogStoreTable, snapshot_commits
from logstore_dev.services.cluster import LocalCluster
from logstore_dev.testing.environment import REPO_ROOT
from logstore_dev.testing.secrets import Places, find_canaries
from logstore_dev.testing.tables import fold_log, table_state
from tests.environments import executor_python

from .conftest import CANARIES

COLUMNS = ("customer", "amount", "status")


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def expected_state(*batches: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """The table after the batches, computed from the inputs alone (the oracle of the single-node tests)."""
    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rows in batches:
        full = [{**dict.fromkeys(COLUMNS), **row} for row in rows]
        state = apply_final(state, plan_batch(full, ["id"], state).final)
    return {key[0]: tuple(row[c] for c in COLUMNS) for key, row in state.items()}


def plain(state: dict[Any, dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    return {row["id"]: tuple(row[c] for c in COLUMNS) for row in state.values()}


def _run(cluster: LocalCluster, dag_id: str, conf: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    airflow = cluster.service("airflow")
    airflow.wait_for_dag(dag_id, timeout=240)
    run_id = airflow.trigger(dag_id, conf)
    state = airflow.wait_for_run(dag_id, run_id, timeout=900)
    tis = airflow.task_instances(dag_id, run_id)
    assert state == "success", {k: v["state"] for k, v in tis.items()}
    return run_id, tis


def test_pipeline_reconcile_and_compaction_on_the_cluster(cluster: LocalCluster, s3_upload) -> None:
    data = REPO_ROOT / "dags" / "data"
    table = "cluster.orders"
    batches = []
    runs: list[tuple[str, str, dict[str, Any]]] = []  # (dag, run, task instances): their logs are checked
    for batch in (1, 2, 3):
        source = data / f"orders_batch_{batch}.jsonl"
        batches.append(_rows(source))
        uri = s3_upload(source, f"inputs/orders/batch-{batch}.jsonl")
        run_id, tis = _run(
            cluster,
            "logstore_pipeline",
            {"table": table, "input_path": uri, "batch_id": batch, "read_mode": "hybrid"},
        )
        runs.append(("logstore_pipeline", run_id, tis))
        assert {k: v["state"] for k, v in tis.items()} == dict.fromkeys(
            ("create_table", "dual_write", "wait_for_snapshot", "publish_visible_offsets", "read"), "success"
        )
        assert is_visible(
            LogStoreTable.open(table, kafka_extra=cluster.kafka_extra()), "logstore_pipeline", batch
        )

    handle = LogStoreTable.open(table, kafka_extra=cluster.kafka_extra())
    assert handle.load().location().startswith("s3://")
    assert [(c.writer_id, c.batch_id) for c in snapshot_commits(handle.load())] == [
        ("logstore_pipeline", 1),
        ("logstore_pipeline", 2),
        ("logstore_pipeline", 3),
    ]
    expected = expected_state(*batches)
    assert plain(table_state(handle)) == expected
    assert plain(fold_log(read_log(handle, consistency="consistent"), ["id"])) == expected

    runs.append(("logstore_reconcile", *_run(cluster, "logstore_reconcile", {"table": table})))
    runs.append(("logstore_compaction", *_run(cluster, "logstore_compaction", {"table": table})))
    assert plain(table_state(handle)) == expected
    assert plain(fold_log(read_log(handle, consistency="consistent"), ["id"])) == expected
    assert plain(fold_log(read_log(handle, consistency="eventual"), ["id"])) == expected

    # no secret of the cluster in any task log of these runs, as Airflow serves them and as files
    airflow = cluster.service("airflow")
    texts = {
        f"{dag}/{run}/{task}": airflow.task_log(dag, run, task, ti.get("try_number") or 1)
        for dag, run, tis in runs
        for task, ti in tis.items()
        if ti.get("map_index", -1) == -1  # mapped ones are in the folder below
    }
    find_canaries(
        CANARIES.values(),
        Places(texts=texts, dirs={"task-log": [Path(airflow.home) / "logs"]}, processes=True),
    ).assert_clean(require=("text", "task-log", "cmdline"))

    # every job sent the workers' own Python (pyspark and the executors' list only) to its executors
    assert cluster.python == str(executor_python())
    submitted = {name: text for name, text in texts.items() if "Spark-Submit cmd" in text}
    assert any(name.endswith("/dual_write") for name in submitted), sorted(texts)
    for name, text in submitted.items():
        assert f"spark.pyspark.python={cluster.python}" in text, name
