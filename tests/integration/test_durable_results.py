"""Job results reach operators through the table's storage, not the driver's output (real broker, Spark,
SQLite catalog; spark-submit in local mode with its output thrown away, as in cluster deploy mode)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_logstore.core.failures import RESULTS_DIR
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.operators.reconcile import LogStoreReconcileOperator
from airflow_logstore.table.snapshots import find_commit
from airflow_logstore.table.tables import LogStoreTable
from logstore_dev.testing.tables import make_table, table_state, write_jsonl

SCHEMA = "id int, customer string, amount long"
ROWS = [{"id": i, "customer": f"c{i}", "amount": i * 10} for i in range(1, 6)]


@pytest.fixture
def driver_output_lost(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """spark-submit runs for real, but nothing it prints reaches the operator (counts the lines)."""
    lines = [0]
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))

    def discard(self: SparkSubmitHook, itr: Iterator[Any]) -> None:
        for _ in itr:
            lines[0] += 1

    monkeypatch.setattr(SparkSubmitHook, "_process_spark_submit_log", discard)
    return lines


def _name(handle: LogStoreTable) -> str:
    return f"{handle.name.namespace}.{handle.name.table}"


def _results_left(handle: LogStoreTable) -> list[str]:
    folder = Path(handle.load().location().removeprefix("file://")) / RESULTS_DIR
    return sorted(p.name for p in folder.glob("*")) if folder.exists() else []


def test_operators_get_results_from_the_table_when_the_driver_output_is_lost(
    env, driver_output_lost: list[int], tmp_path: Path
) -> None:
    handle = make_table(env, schema=SCHEMA, prefix="durable")
    folder = tmp_path / "batch-1"  # a folder without an extension, as a URI: its format comes from Hadoop FS
    folder.mkdir()
    write_jsonl(folder / "part-0.jsonl", ROWS)
    (folder / "_SUCCESS").touch()
    write = LogStoreDualWriteOperator(
        task_id="dual_write", table=_name(handle), input_path=folder.as_uri(), batch_id=1, writer_id="durable"
    )
    value = write.execute({})
    assert driver_output_lost[0] > 0  # spark-submit did print; the operator never saw it
    commit = find_commit(handle, writer_id="durable", batch_id=1)
    assert commit is not None and value["snapshot_id"] == commit.snapshot_id
    assert (value["rows_in"], value["log_records"], value["skipped"]) == (5, 5, False)
    assert value["epoch"] == commit.epoch
    assert sorted(row["id"] for row in table_state(handle).values()) == [1, 2, 3, 4, 5]

    report = LogStoreReconcileOperator(task_id="reconcile", table=_name(handle), engine="spark").execute({})
    assert report["status"] == "reconciled" and report["redundant"] == 0 and report["reversed"] == 0
    assert _results_left(handle) == []  # each result was read once, then removed
