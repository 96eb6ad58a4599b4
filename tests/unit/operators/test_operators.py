"""Operators, sensor and trigger without services: commands, templating, deferral, secrets."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSensorTimeout

from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.exceptions import OptionError
from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.operators._spark import job_path, spark_submit_hook
from airflow_logstore.operators.create_table import LogStoreCreateTableOperator
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.sensors.snapshot_commit import SnapshotCommitSensor
from airflow_logstore.spark.executors import package_zip
from airflow_logstore.table.catalog import SECRET_KEY_REGEX, CatalogSpec
from airflow_logstore.triggers.snapshot_commit import SnapshotCommitTrigger

KAFKA_SECRET = "kafka-s3cret-pw"
CATALOG_SECRET = "catalog-s3cret-credential"


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_TEST",
        json.dumps({"conn_type": "spark", "host": "spark://master:7077", "extra": {"deploy-mode": "client"}}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_SECURE",
        json.dumps(
            {
                "conn_type": "kafka",
                "extra": {
                    "bootstrap.servers": "kafka:9092",
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": "logstore",
                    "sasl.password": KAFKA_SECRET,
                },
            }
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_LOGSTORE_REST",
        json.dumps(
            {
                "conn_type": "logstore",
                "host": "http://rest:8181",
                "password": CATALOG_SECRET,
                "extra": {
                    "type": "rest",
                    "warehouse": "s3://warehouse/",
                    "properties": {"s3.endpoint": "http://minio:9000"},
                },
            }
        ),
    )


def test_hook_builds_catalog_and_kafka_settings_from_connections(connections: None) -> None:
    hook = LogStoreHook("logstore_rest", "kafka_secure")
    spec = hook.catalog_spec()
    assert spec == CatalogSpec(
        name="logstore",
        type="rest",
        uri="http://rest:8181",
        warehouse="s3://warehouse/",
        properties={"s3.endpoint": "http://minio:9000", "credential": CATALOG_SECRET},
    )
    assert hook.kafka_extra()["sasl.password"] == KAFKA_SECRET
    assert LogStoreHook.get_ui_field_behaviour()["relabeling"]["host"] == "Catalog URI"


def test_hook_falls_back_to_the_embedded_default_only_for_default_ids(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LOGSTORE_HOME", str(tmp_path))
    assert LogStoreHook().catalog_spec().uri.startswith(f"sqlite:///{tmp_path}")
    with pytest.raises(Exception, match="missing_conn"):
        LogStoreHook("missing_conn").catalog_spec()


def test_spark_submit_command_is_exact_and_carries_no_secret(connections: None) -> None:
    hook = LogStoreHook("logstore_rest", "kafka_secure")
    with spark_submit_hook(
        catalog=hook.catalog_spec(),
        kafka_extra=hook.kafka_extra(),
        conn_id="spark_test",
        name="logstore-dual-write-db.t-7",
        application_args=["--table", "db.t", "--batch-id", "7"],
        jars="/jars/iceberg.jar",
        python="/opt/venv/bin/python",
    ) as submit:
        properties_file = submit._properties_file
        command = submit._build_spark_submit_command(job_path("dual_write_app.py"))
        assert command == [
            "spark-submit",
            "--master",
            "spark://master:7077",
            "--conf",
            f"spark.redaction.regex={SECRET_KEY_REGEX}",
            "--conf",
            f"spark.sql.redaction.options.regex=(?i)url|{SECRET_KEY_REGEX.removeprefix('(?i)')}",
            "--conf",
            "spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            "--conf",
            "spark.sql.session.timeZone=UTC",
            "--conf",
            "spark.speculation=false",
            "--conf",
            "spark.sql.iceberg.merge-schema=false",
            "--conf",
            "spark.python.worker.reuse=true",
            "--conf",
            "spark.python.sql.dataFrameDebugging.enabled=false",
            "--conf",
            "spark.pyspark.python=/opt/venv/bin/python",
            "--conf",
            "spark.pyspark.driver.python=/opt/venv/bin/python",
            "--properties-file",
            properties_file,
            "--py-files",
            str(package_zip()),
            "--jars",
            "/jars/iceberg.jar",
            "--name",
            "logstore-dual-write-db.t-7",
            "--deploy-mode",
            "client",
            job_path("dual_write_app.py"),
            "--table",
            "db.t",
            "--batch-id",
            "7",
        ]
        assert not any(KAFKA_SECRET in part or CATALOG_SECRET in part for part in command)
        assert stat.S_IMODE(os.stat(properties_file).st_mode) == 0o600
        text = Path(properties_file).read_text()
        assert f"spark.logstore.kafka.sasl.password={KAFKA_SECRET}" in text
        assert f"spark.sql.catalog.logstore.credential={CATALOG_SECRET}" in text
    assert not Path(properties_file).exists()  # removed when the job is done


def test_dual_write_operator_arguments_and_templates() -> None:
    operator = LogStoreDualWriteOperator(
        task_id="w",
        table="db.t",
        input_path="/in/{{ ds }}.jsonl",
        batch_id="12",
        emit_mode="file,log",
        logstore_conn_id="does_not_exist",
    )
    assert set(operator.template_fields) >= {"table", "input_path", "batch_id"}
    assert operator.application_args("dag.w") == [
        "--table",
        "db.t",
        "--input",
        "/in/{{ ds }}.jsonl",
        "--batch-id",
        "12",
        "--writer-id",
        "dag.w",
        "--change-column",
        "op",
        "--missing-columns",
        "error",
        "--emit-mode",
        "file,log",
    ]
    opted_in = LogStoreDualWriteOperator(
        task_id="w", table="db.t", input_path="x", batch_id=1, missing_as_null=True
    )
    assert opted_in.application_args("w")[-2:] == ["--missing-columns", "null"]
    bad = LogStoreDualWriteOperator(task_id="b", table="db.t", input_path="x", batch_id="twelve")
    with pytest.raises(OptionError, match="option 'batch_id': must be an integer, got 'twelve'"):
        bad.application_args("w")


def test_create_table_operator_does_no_io_in_init() -> None:
    operator = LogStoreCreateTableOperator(
        task_id="c",
        table="db.t",
        schema="id int",
        primary_key=["id"],
        logstore_conn_id="nowhere",
        kafka_config_id="nowhere",
    )
    assert operator.template_fields == ("table", "schema", "primary_key", "properties")


def test_trigger_serializes_to_plain_arguments() -> None:
    trigger = SnapshotCommitTrigger(table="db.t", writer_id="w", batch_id=3, poll_interval=1.5, timeout=60)
    path, kwargs = trigger.serialize()
    assert path == "airflow_logstore.triggers.snapshot_commit.SnapshotCommitTrigger"
    json.dumps(kwargs)  # plain values only
    assert SnapshotCommitTrigger(**kwargs).serialize() == (path, kwargs)


def _commit() -> CommitInfo:
    return CommitInfo(
        "w", 3, 9, snapshot_id=42, sequence_number=2, timestamp_ms=1, offsets={0: (5, 9)}, record_count=5
    )


def test_sensor_pokes_and_defers(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    found: list[CommitInfo | None] = [None]
    monkeypatch.setattr("airflow_logstore.table.snapshots.find_commit", lambda handle, **kw: found[0])
    monkeypatch.setattr("airflow_logstore.table.reports.read_failure", lambda table, writer, batch: None)
    monkeypatch.setattr(LogStoreHook, "table", lambda self, name: SimpleNamespace(load=object))
    sensor = SnapshotCommitSensor(
        task_id="s", table="db.t", batch_id="3", writer_id="w", deferrable=True, poke_interval=1, timeout=30
    )
    assert not sensor.poke({})
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert deferred.value.trigger.serialize()[1]["batch_id"] == 3
    assert deferred.value.method_name == "execute_complete"

    found[0] = _commit()
    poked = sensor.poke({})
    assert (
        poked.is_done
        and poked.xcom_value["snapshot_id"] == 42
        and poked.xcom_value["offsets"] == {"0": [5, 9]}
    )
    assert sensor.execute({})["epoch"] == 9  # already committed: no deferral
    event: dict[str, Any] = {"status": "success", "commit": poked.xcom_value, "polls": 3}
    assert sensor.execute_complete({}, event)["batch_id"] == 3
    with pytest.raises(AirflowSensorTimeout, match="no matching snapshot"):  # Airflow fails it, no retry
        sensor.execute_complete(
            {}, {"status": "timeout", "message": "no matching snapshot of db.t after 30s"}
        )
    with pytest.raises(RuntimeError, match=r"waiting for a snapshot of db\.t failed"):
        sensor.execute_complete({}, {"status": "unknown"})


def test_a_retry_of_a_committed_batch_returns_its_commit_without_spark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The retry finds (writer, batch) in the table's snapshots: no input check, no spark-submit; the
    XCom is the commit's, marked skipped, as the job's own skip reports it."""
    monkeypatch.setattr("airflow_logstore.table.snapshots.find_commit", lambda handle, **kw: _commit())
    handle = SimpleNamespace(config=lambda: SimpleNamespace(enabled=True, emit_mode=None), load=object)
    monkeypatch.setattr(LogStoreDualWriteOperator, "logstore_table", lambda self, name: handle)
    monkeypatch.setattr("airflow_logstore.core.properties.parse_emit_mode", lambda mode, config: None)

    def no_spark(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("spark-submit started for a committed batch")

    monkeypatch.setattr(LogStoreDualWriteOperator, "run_job", no_spark)
    write = LogStoreDualWriteOperator(
        task_id="w", table="db.t", input_path="/gone/after/the/commit.jsonl", batch_id=3, writer_id="w"
    )
    value = write.execute({})
    assert value["skipped"] and (value["snapshot_id"], value["epoch"], value["batch_id"]) == (42, 9, 3)
    assert value["offsets"] == {"0": [5, 9]} and value["rows_in"] == 0


def test_sensor_rejects_a_non_integer_batch() -> None:
    sensor = SnapshotCommitSensor(task_id="s", table="db.t", batch_id="seven")
    with pytest.raises(ValueError, match="batch_id must be an integer, got 'seven'"):
        sensor._trigger()
