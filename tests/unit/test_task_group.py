"""logstore_batch: one call gives the create → write → wait → publish → read chain, wired."""

from __future__ import annotations

import pendulum
import pytest
from airflow.sdk import DAG

from airflow_logstore.operators.create_table import LogStoreCreateTableOperator
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.operators.publish import LogStorePublishVisibleOffsetsOperator
from airflow_logstore.operators.read import LogStoreReadOperator
from airflow_logstore.sensors.snapshot_commit import SnapshotCommitSensor
from airflow_logstore.task_group import TASK_IDS, logstore_batch


def dag(dag_id: str = "orders") -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))


def test_one_call_gives_the_whole_chain_with_its_ids() -> None:
    with dag() as d:
        group = logstore_batch(
            table="db.orders",
            input_path="/data/orders.jsonl",
            batch_id="{{ dag_run.conf['batch'] }}",
            schema="id int, amount long",
            primary_key=["id"],
            properties={"log-store.enabled": "true"},
        )
    ids = {f"logstore_batch.{name}" for name in TASK_IDS}
    assert set(d.task_ids) == ids and set(group.children) == ids
    task = {name: d.get_task(f"logstore_batch.{name}") for name in TASK_IDS}
    assert isinstance(task["create_table"], LogStoreCreateTableOperator)
    assert isinstance(task["dual_write"], LogStoreDualWriteOperator)
    assert isinstance(task["wait_for_snapshot"], SnapshotCommitSensor)
    assert isinstance(task["publish_visible_offsets"], LogStorePublishVisibleOffsetsOperator)
    assert isinstance(task["read"], LogStoreReadOperator)
    up = {name: {t.rsplit(".", 1)[1] for t in task[name].upstream_task_ids} for name in TASK_IDS}
    assert up == {
        "create_table": set(),
        "dual_write": {"create_table"},
        "wait_for_snapshot": {"create_table"},
        "publish_visible_offsets": {"dual_write", "wait_for_snapshot"},
        "read": {"publish_visible_offsets"},
    }


def test_the_sensor_waits_for_the_writes_own_batch_writer_and_task() -> None:
    with dag() as d:
        logstore_batch(table="db.orders", input_path="/in", batch_id=3, group_id="load")
    write, wait = d.get_task("load.dual_write"), d.get_task("load.wait_for_snapshot")
    assert wait.write_task_id == write.task_id == "load.dual_write"  # a killed write ends the wait
    # the writer id the write uses by default, known to the sensor before either runs
    assert wait.writer_id == write.writer_id == "{{ dag.dag_id }}.load.dual_write"
    assert wait.batch_id == write.batch_id == 3 and wait.table == write.table == "db.orders"
    assert wait.deferrable is True and wait.poke_before_defer is False
    assert "create_table" not in {t.rsplit(".", 1)[1] for t in d.task_ids}  # no schema: the table exists


def test_retries_where_a_retry_can_help_and_the_read_of_the_sensors_snapshot() -> None:
    with dag() as d:
        logstore_batch(
            table="db.orders", input_path="/in", batch_id=1, schema="id int", retries=3, read_mode="file"
        )
    retries = {t.task_id.rsplit(".", 1)[1]: t.retries for t in d.tasks}
    assert retries == {
        "create_table": 3,  # a broker outage; a bad property fails at once, retries or not
        "dual_write": 3,
        "wait_for_snapshot": 0,  # it waits for the write, whose retries it sees
        "publish_visible_offsets": 3,
        "read": 3,
    }
    read = d.get_task("logstore_batch.read")
    assert read.mode == "file"
    assert "ti.xcom_pull(task_ids='logstore_batch.wait_for_snapshot')" in read.snapshot_id


def test_two_batches_in_one_dag_and_a_group_without_a_read() -> None:
    with dag() as d:
        first = logstore_batch(table="db.a", input_path="/a", batch_id=1, group_id="a", read_mode=None)
        second = logstore_batch(table="db.b", input_path="/b", batch_id=1, group_id="b")
        first >> second
    assert "a.read" not in d.task_ids and "b.read" in d.task_ids
    assert d.get_task("b.dual_write").upstream_task_ids == {"a.publish_visible_offsets"}
    assert d.get_task("b.wait_for_snapshot").writer_id == "{{ dag.dag_id }}.b.dual_write"


def test_unprefixed_ids_and_a_given_writer() -> None:
    with dag() as d:
        logstore_batch(
            table="db.orders", input_path="/in", batch_id=1, writer_id="ingest", prefix_group_id=False
        )
    assert set(d.task_ids) == {"dual_write", "wait_for_snapshot", "publish_visible_offsets", "read"}
    assert d.get_task("wait_for_snapshot").writer_id == d.get_task("dual_write").writer_id == "ingest"
    assert d.get_task("wait_for_snapshot").write_task_id == "dual_write"


def test_a_misspelt_argument_is_refused() -> None:
    with dag(), pytest.raises(TypeError, match="input_pth"):
        logstore_batch(table="db.orders", input_pth="/in", batch_id=1)  # type: ignore[call-arg]


@pytest.mark.parametrize("emit_mode", ["log", " LOG ", "log,"])
def test_a_log_only_write_is_refused_when_the_dag_is_parsed(emit_mode: str) -> None:
    """A log-only batch commits no snapshot: the group's sensor would wait out its whole timeout."""
    with dag(), pytest.raises(ValueError, match="emit_mode 'log' commits no snapshot"):
        logstore_batch(table="db.orders", input_path="/in", batch_id=1, emit_mode=emit_mode)
