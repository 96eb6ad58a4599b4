"""``logstore_batch``: one call that gives a DAG the whole chain of one LogStore batch.

::

    from airflow_logstore.task_group import logstore_batch

    with DAG("orders", schedule=None, ...):
        logstore_batch(
            table="demo.orders",
            input_path="/data/orders/{{ ds }}.jsonl",
            batch_id="{{ dag_run.conf.get('batch_id', 1) }}",
            schema="id int, customer string, amount long, status string",
            primary_key=["id"],
            properties={"log-store.enabled": "true", "log-store.topic": "orders_log", ...},
        )

gives, in a task group::

    create_table >> [dual_write, wait_for_snapshot] >> publish_visible_offsets >> read

with the ids wired for the author: the sensor waits for the batch of the write's own writer id and is
told the write's task id (a write killed for good ends the wait at once), the read of a snapshot reads
the snapshot the sensor found (from its XCom), and each task has the retries that fit it (a write or a
publish that meets a broker outage is tried again; bad input or a bad table property never is). The
sensor waits in the triggerer while the write runs, so the batch is published as soon as it commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import TaskGroup

from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.operators.create_table import LogStoreCreateTableOperator
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.operators.publish import LogStorePublishVisibleOffsetsOperator
from airflow_logstore.operators.read import LogStoreReadOperator
from airflow_logstore.sensors.snapshot_commit import SnapshotCommitSensor

#: the task ids inside the group (prefixed with the group id unless ``prefix_group_id=False``)
TASK_IDS = ("create_table", "dual_write", "wait_for_snapshot", "publish_visible_offsets", "read")


def logstore_batch(
    *,
    table: str,
    input_path: str,
    batch_id: int | str,
    group_id: str = "logstore_batch",
    prefix_group_id: bool = True,
    schema: str | None = None,
    primary_key: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    writer_id: str | None = None,
    emit_mode: str | None = None,
    input_format: str | None = None,
    change_column: str = "op",
    missing_as_null: bool = False,
    read_mode: str | None = "log",
    consistency: str | None = "consistent",
    read_start: str = "earliest",
    read_output_path: str | None = None,
    retries: int = 2,
    retry_delay: timedelta = timedelta(seconds=30),
    wait_timeout: float = 1800.0,
    poke_interval: float = 2.0,
    logstore_conn_id: str = LogStoreHook.default_conn_name,
    kafka_config_id: str | None = "kafka_default",
    spark_conn_id: str = "spark_default",
    spark_conf: Mapping[str, Any] | None = None,
    jars: str | None = None,
    python: str | None = None,
) -> TaskGroup:
    """The task group that writes one batch and makes it visible, then reads the table.

    :param table: ``namespace.table`` (templated)
    :param input_path: the batch's input: JSON lines, CSV or Parquet file or folder (templated)
    :param batch_id: the batch's id, the same on every retry of the run (templated)
    :param group_id: the group's id; the tasks are ``<group_id>.create_table`` and so on
    :param prefix_group_id: False keeps the tasks' ids unprefixed (one group per DAG then)
    :param schema: when given, the group starts with a ``create_table`` task (idempotent) with it,
        ``primary_key`` and ``properties``; else the table must exist
    :param writer_id: the writer (templated); default ``<dag_id>.<the write's task id>``, as the write
        operator's own default
    :param emit_mode: ``file,log`` (default) or ``file``: a log-only write has no snapshot to wait for
    :param missing_as_null: the write's (null into a nullable column the input lacks; default: an error)
    :param read_mode: ``file``, ``log`` or ``hybrid`` (templated); None: no ``read`` task. A file or
        hybrid read reads the batch's snapshot
    :param consistency: of a log read (templated)
    :param read_start: where a log read starts (templated)
    :param read_output_path: the read's JSON lines (templated; optional)
    :param retries: retries of the create, the write, the publish and the read (each fails at once,
        whatever its retries, on what no retry can fix: bad input, a bad table property); the sensor
        has none: it waits for the write, whose retries it sees
    :param wait_timeout: seconds the sensor waits for the batch's snapshot
    :param poke_interval: seconds between the sensor's looks at the table (in the triggerer)

    The connection and Spark parameters are the operators'.
    """
    if emit_mode is not None and "{{" not in emit_mode:
        modes = {part.strip().lower() for part in emit_mode.split(",") if part.strip()}
        if modes == {"log"}:
            raise ValueError(
                "logstore_batch: emit_mode 'log' commits no snapshot, so the group's wait for the batch's "
                "snapshot would never end; write log-only batches with LogStoreDualWriteOperator alone"
            )
    connections: dict[str, Any] = {"logstore_conn_id": logstore_conn_id, "kafka_config_id": kafka_config_id}
    spark: dict[str, Any] = {"spark_conn_id": spark_conn_id, "jars": jars, "python": python}
    with TaskGroup(
        group_id=group_id,
        prefix_group_id=prefix_group_id,
        tooltip="LogStore batch: create, write, wait for the snapshot, publish, read",
    ) as group:
        write = LogStoreDualWriteOperator(
            task_id="dual_write",
            table=table,
            input_path=input_path,
            batch_id=batch_id,
            writer_id=writer_id,
            emit_mode=emit_mode,
            input_format=input_format,
            change_column=change_column,
            missing_as_null=missing_as_null,
            spark_conf=spark_conf,
            retries=retries,
            retry_delay=retry_delay,
            **spark,
            **connections,
        )
        if writer_id is None:  # the operator's own default, known before it runs
            write.writer_id = "{{ dag.dag_id }}." + write.task_id
        wait = SnapshotCommitSensor(
            task_id="wait_for_snapshot",
            table=table,
            writer_id=write.writer_id,
            batch_id=batch_id,
            write_task_id=write.task_id,  # its last try killed (no failure report): the wait ends at once
            deferrable=True,
            poke_before_defer=False,
            poke_interval=poke_interval,
            timeout=wait_timeout,
            **connections,
        )
        publish = LogStorePublishVisibleOffsetsOperator(
            task_id="publish_visible_offsets",
            table=table,
            retries=retries,
            retry_delay=retry_delay,
            **connections,
        )
        [write, wait] >> publish
        if schema is not None:
            create = LogStoreCreateTableOperator(
                task_id="create_table",
                table=table,
                schema=schema,
                primary_key=list(primary_key),
                properties=dict(properties or {}),
                retries=retries,  # a broker or catalog outage; a bad property fails at once (fail_fast)
                retry_delay=retry_delay,
                **connections,
            )
            create >> [write, wait]
        if read_mode is not None:
            snapshot = "{{ (ti.xcom_pull(task_ids='" + wait.task_id + "') or {}).get('snapshot_id') }}"
            read = LogStoreReadOperator(
                task_id="read",
                table=table,
                mode=read_mode,
                consistency=consistency,
                start=read_start,
                snapshot_id=snapshot,
                output_path=read_output_path,
                retries=retries,
                retry_delay=retry_delay,
                **connections,
            )
            publish >> read
    return group
