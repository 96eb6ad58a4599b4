"""An Airflow retry of every LogStore operator is harmless: each runs twice in a row, nothing doubles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_logstore.operators.create_table import LogStoreCreateTableOperator
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.operators.publish import LogStorePublishVisibleOffsetsOperator
from airflow_logstore.read.reader import read_log
from airflow_logstore.table.tables import LogStoreTable
from logstore_dev.testing.tables import fold_log, table_state, write_jsonl


@pytest.fixture
def spark_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))


def _twice(operator) -> tuple[dict, dict]:
    return operator.execute({}), operator.execute({})


def test_every_operator_twice(env, spark_connection: None, tmp_path: Path) -> None:
    from airflow_logstore.operators.compaction import LogStoreCompactionOperator
    from airflow_logstore.operators.reconcile import LogStoreReconcileOperator

    name = env.unique("retry")
    table = f"retries.{name}"
    create = LogStoreCreateTableOperator(
        task_id="create",
        table=table,
        schema="id int, name string, amount long",
        primary_key=["id"],
        properties=env.log_properties(f"{name}_log"),
    )
    first, second = _twice(create)
    assert first["created"] and first["topic_created"]
    assert (
        not second["created"] and not second["topic_created"] and second["partitions"] == first["partitions"]
    )

    rows = [{"id": i, "name": f"n{i}", "amount": i} for i in range(1, 31)]
    updates = [{"id": i, "name": f"u{i}", "amount": -i, "op": "update"} for i in range(1, 31, 3)]
    handle = LogStoreTable.open(table)
    for batch, data in ((1, rows), (2, updates)):
        write = LogStoreDualWriteOperator(
            task_id="write",
            table=table,
            batch_id=batch,
            writer_id="retry-writer",
            input_path=str(write_jsonl(tmp_path / f"b{batch}.jsonl", data)),
        )
        done, again = _twice(write)
        assert not done["skipped"] and again["skipped"]
        assert again["snapshot_id"] == done["snapshot_id"] and again["epoch"] == done["epoch"]
        assert again["offsets"] == done["offsets"]
    snapshots = len(handle.load().snapshots())
    records = len(read_log(handle, consistency="eventual").records)
    # the empty base snapshot the table got before its first staged commit, then one per batch
    assert snapshots == 3 and records == 30 + 2 * len(updates)

    published, republished = _twice(LogStorePublishVisibleOffsetsOperator(task_id="publish", table=table))
    assert published["advanced"] and not republished["advanced"]
    assert republished["watermark_after"] == published["watermark_after"]

    reconciled, rereconciled = _twice(LogStoreReconcileOperator(task_id="reconcile", table=table))
    assert rereconciled["reversed"] == 0

    compacted, recompacted = _twice(LogStoreCompactionOperator(task_id="compact", table=table))
    expected = {k: (v["name"], v["amount"]) for k, v in table_state(handle).items()}
    assert len(expected) == 30
    assert {
        k: (v["name"], v["amount"])
        for k, v in fold_log(read_log(handle, consistency="consistent"), ["id"]).items()
    } == expected
    assert len(read_log(handle, consistency="eventual").records) == records + reconciled["reversed"]
    assert compacted is not None and recompacted is not None
