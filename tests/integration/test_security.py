"""Kafka over SASL (PLAIN) configured only through the Airflow connection; secrets never leak."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import structlog.testing

from airflow_logstore.exceptions import KafkaUnavailableError
from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.log import kafka_client
from airflow_logstore.operators.create_table import LogStoreCreateTableOperator
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.operators.publish import LogStorePublishVisibleOffsetsOperator
from airflow_logstore.operators.reconcile import LogStoreReconcileOperator
from airflow_logstore.read.reader import read_log
from logstore_dev.services.local import BrokerOptions, LocalBroker, free_ports
from logstore_dev.testing.tables import write_jsonl

SECRET = "Sasl-S3cret-7f3a9c"
USER = "logstore"


@pytest.fixture(scope="module")
def sasl_broker(env) -> Iterator[LocalBroker]:
    # chosen together, so the SASL port is never the broker's controller port (port + 1)
    port, sasl_port = free_ports(2, consecutive=2)
    options = BrokerOptions(port=port, sasl_port=sasl_port, sasl_users={USER: SECRET})
    broker = LocalBroker(env.settings, options=options, state_dir=env.settings.home / "kafka-sasl")
    broker.up()
    yield broker
    # this process's shared producers to it go first: one left behind would log its failed reconnects
    # into later tests' stderr (test_cli checks that a write's stderr has no librdkafka lines)
    kafka_client.close_shared_producers()
    broker.down()


def _connection(password: str) -> str:
    return json.dumps(
        {
            "conn_type": "kafka",
            "extra": {
                "bootstrap.servers": "ignored:9092",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": USER,
                "sasl.password": password,
            },
        }
    )


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SASL", _connection(SECRET))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_WRONG", _connection("not-the-password"))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))


def _properties(env, broker: LocalBroker, topic: str) -> dict[str, str]:
    return {
        "log-store.enabled": "true",
        "log-store.topic": topic,
        "log-store.address": broker.sasl_bootstrap or "",
        "log-store.consistency-guarantee.enabled": "true",
    }


def test_wrong_password_fails_clearly(env, sasl_broker: LocalBroker, connections: None) -> None:
    name = env.unique("sasl_wrong")
    operator = LogStoreCreateTableOperator(
        task_id="c",
        table=f"sec.{name}",
        schema="id int, v string",
        primary_key=["id"],
        properties=_properties(env, sasl_broker, name),
        kafka_config_id="kafka_wrong",
    )
    with pytest.raises(KafkaUnavailableError, match="refused the credentials"):
        operator.execute({})
    assert not LogStoreHook().get_conn().table_exists(f"sec.{name}")  # nothing was created


class _Watch:
    """Samples every process's arguments and environment-free command line while a job runs."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.found: list[str] = []
        self.samples = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            for process in psutil.process_iter(["pid", "cmdline"]):
                cmdline = " ".join(process.info.get("cmdline") or [])
                if SECRET in cmdline:
                    self.found.append(f"{process.info['pid']}: {cmdline[:200]}")
            self.samples += 1
            self.stop.wait(0.2)

    def __enter__(self) -> _Watch:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(5)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_pipeline_over_sasl_leaks_no_secret(
    env, spark, sasl_broker: LocalBroker, connections: None, tmp_path: Path
) -> None:
    name = env.unique("sasl")
    table = f"sec.{name}"
    capture = _Capture()
    logging.getLogger().addHandler(capture)
    try:
        created = LogStoreCreateTableOperator(
            task_id="c",
            table=table,
            schema="id int, v string",
            primary_key=["id"],
            properties=_properties(env, sasl_broker, name),
            kafka_config_id="kafka_sasl",
        ).execute({})
        rows = [{"id": i, "v": f"v{i}"} for i in range(10)]
        write = LogStoreDualWriteOperator(
            task_id="w",
            table=table,
            input_path=str(write_jsonl(tmp_path / "in.jsonl", rows)),
            batch_id=1,
            writer_id="sasl-writer",
            kafka_config_id="kafka_sasl",
        )
        with (
            _Watch() as watch,
            structlog.testing.capture_logs() as structured,
        ):  # the hook logs through structlog
            xcom = write.execute({})
            reconciled = LogStoreReconcileOperator(  # the JVM scan gets the credentials on its stdin
                task_id="r", table=table, scanner="jvm", kafka_config_id="kafka_sasl"
            ).execute({})
        published = LogStorePublishVisibleOffsetsOperator(
            task_id="p", table=table, kafka_config_id="kafka_sasl"
        ).execute({})
    finally:
        logging.getLogger().removeHandler(capture)

    assert watch.samples > 5 and watch.found == [], watch.found
    assert xcom["log_records"] == 10 and xcom["snapshot_id"] is not None
    assert reconciled["status"] == "reconciled" and reconciled["scanned"] == 10
    for value in (created, xcom, published, reconciled):
        assert SECRET not in json.dumps(value, default=str)
    assert not any(SECRET in message for message in capture.messages)
    submit_output = [str(entry.get("event", "")) for entry in structured]  # spark-submit's output, logged
    assert any("SparkContext" in line for line in submit_output)
    assert not any(SECRET in line for line in submit_output)

    handle = LogStoreHook(kafka_config_id="kafka_sasl").table(table)
    assert len(read_log(handle, consistency="consistent").records) == 10
    assert len(read_log(handle, consistency="eventual").records) == 10


def test_spark_kafka_source_authenticates_from_the_connection(
    env, spark, sasl_broker: LocalBroker, connections: None, tmp_path: Path
) -> None:
    from airflow_logstore.log import kafka_client
    from airflow_logstore.table.tables import create_table
    from airflow_logstore.write.streaming import run_stream
    from airflow_logstore.write.writer import DualWriter

    name = env.unique("sasl_stream")
    handle = LogStoreHook(kafka_config_id="kafka_sasl").table(f"sec.{name}")
    create_table(
        handle, "id int, v string", primary_key=["id"], properties=_properties(env, sasl_broker, name)
    )
    source = f"{name}_source"
    config = kafka_client.client_config(sasl_broker.sasl_bootstrap or "", handle.kafka_extra)
    kafka_client.ensure_topic(config, source, partitions=1, replication_factor=1, topic_configs={})
    producer = kafka_client.producer(config)
    for i in range(5):
        producer.produce(source, value=json.dumps({"id": i, "v": "s"}).encode())
    assert producer.flush(30) == 0
    writer = DualWriter(spark, handle, writer_id="sasl-stream")
    results = run_stream(writer, source_topic=source, bootstrap=None, checkpoint=str(tmp_path / "ckpt"))
    assert sum(r.rows_in for r in results) == 5


def test_local_services_listen_on_loopback_only(env, sasl_broker: LocalBroker) -> None:
    for broker in (env.broker, sasl_broker):
        pid = broker.pid()
        assert pid is not None
        listening = [
            c for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
        ]
        assert listening, "the broker listens on nothing?"
        for connection in listening:
            address = ipaddress.ip_address(connection.laddr.ip)
            address = getattr(address, "ipv4_mapped", None) or address
            assert address.is_loopback, f"broker listens on {connection.laddr}"
    assert os.environ["LOGSTORE_HOME"] == str(env.settings.home)


# -- canaries: every secret a job carries, searched for wherever a Spark job leaves text -----------------

CATALOG_CREDENTIAL = "Catalog-credential-canary-4e1d2b"
S3_ACCESS_KEY_ID = "S3-access-key-id-canary-9b2f71"
S3_SECRET_ACCESS_KEY = "S3-secret-access-key-canary-c7a03e"
AWS_ACCESS_KEY_ID = "AWS-access-key-id-canary-5d6e88"
AWS_SECRET_ACCESS_KEY = "AWS-secret-access-key-canary-0f8a19"
#: the SASL password is the broker's real one: the job must authenticate with it
CANARIES = (
    SECRET,
    CATALOG_CREDENTIAL,
    S3_ACCESS_KEY_ID,
    S3_SECRET_ACCESS_KEY,
    AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY,
)
#: what the executors' Python processes get in their environment, as asked (spark.executorEnv.*)
EXECUTOR_ENV_CANARIES = (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)


@pytest.fixture
def canary_connections(env, monkeypatch: pytest.MonkeyPatch, connections: None) -> str:
    """A ``logstore`` connection to the test catalog carrying canary S3 keys and catalog credential."""
    from airflow_logstore.table.catalog import default_catalog

    spec = default_catalog()
    connection = {
        "conn_type": "logstore",
        "host": spec.uri,
        "password": CATALOG_CREDENTIAL,
        "extra": {
            "type": spec.type,
            "warehouse": spec.warehouse,
            "catalog_name": spec.name,
            "secret_property": "credential",  # as a REST catalog gets it (the SQLite catalog ignores it)
            "properties": {
                "s3.access-key-id": S3_ACCESS_KEY_ID,
                "s3.secret-access-key": S3_SECRET_ACCESS_KEY,
            },
        },
    }
    monkeypatch.setenv("AIRFLOW_CONN_LOGSTORE_CANARY", json.dumps(connection))
    return "logstore_canary"


def _descendants() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def _write_held_at_commit(
    env,
    broker: LocalBroker,
    logstore_conn_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra_conf: dict[str, str],
    canaries: tuple[str, ...] = CANARIES,
) -> tuple[Any, dict[str, Any], str]:
    """Run a dual write through the operator, hold its driver at ``commit:decided``, and search every
    place for the canaries while it is held (Spark UI, REST API, processes) and after (event log, task log).
    """
    from airflow.sdk.log import redact

    from airflow_logstore.pause import _file_for
    from logstore_dev.services.local import free_port
    from logstore_dev.testing.secrets import Places, ProcessWatch, Report, find_canaries, search_processes

    name = env.unique("canary")
    table = f"sec.{name}"
    LogStoreCreateTableOperator(
        task_id="c",
        table=table,
        schema="id int, v string",
        primary_key=["id"],
        properties=_properties(env, broker, name),
        logstore_conn_id=logstore_conn_id,
        kafka_config_id="kafka_sasl",
    ).execute({})
    pauses, events = tmp_path / "pauses", tmp_path / "events"
    pauses.mkdir()
    events.mkdir()
    monkeypatch.setenv("LOGSTORE_PAUSE_AT", "commit:decided")
    monkeypatch.setenv("LOGSTORE_PAUSE_DIR", str(pauses))
    port = free_port()
    write = LogStoreDualWriteOperator(
        task_id="w",
        table=table,
        input_path=str(write_jsonl(tmp_path / "in.jsonl", [{"id": i, "v": f"v{i}"} for i in range(10)])),
        batch_id=1,
        writer_id="canary-writer",
        logstore_conn_id=logstore_conn_id,
        kafka_config_id="kafka_sasl",
        spark_conf={
            "spark.ui.enabled": "true",
            "spark.ui.port": str(port),
            "spark.port.maxRetries": "0",  # the UI is on that port or the job fails
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.executorEnv.AWS_ACCESS_KEY_ID": AWS_ACCESS_KEY_ID,
            "spark.executorEnv.AWS_SECRET_ACCESS_KEY": AWS_SECRET_ACCESS_KEY,
            **extra_conf,
        },
    )
    capture = _Capture()
    loggers = [logging.getLogger(), logging.getLogger("airflow.task")]
    for logger in loggers:
        logger.addHandler(capture)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["xcom"] = write.execute({})
        except BaseException as exc:  # reported by the test thread
            outcome["error"] = exc

    report = Report()
    thread = threading.Thread(target=run, name="canary-write")
    try:
        with structlog.testing.capture_logs() as structured, ProcessWatch(canaries) as watch:
            thread.start()
            reached = _file_for("commit:decided", "reached")
            while not reached.exists():
                assert thread.is_alive(), outcome.get("error")
                thread.join(0.2)
            held = Places(spark_ui=[f"http://127.0.0.1:{port}"], processes=True)
            report.extend(find_canaries(canaries, held))
            # Environments: of the job's own processes (spark-submit, the driver, its Python workers),
            # which inherit this process's; the executors' get exactly what spark.executorEnv asks for.
            job = _descendants()
            report.extend(
                search_processes(
                    [c for c in canaries if c not in EXECUTOR_ENV_CANARIES],
                    cmdlines=False,
                    environments=True,
                    process_filter=lambda process: process.pid in job,
                )
            )
            _file_for("commit:decided", "release").touch()
            thread.join(600)
        report.extend(watch.report)
    finally:
        _file_for("commit:decided", "release").touch()
        thread.join(60)
        for logger in loggers:
            logger.removeHandler(capture)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["xcom"]["log_records"] == 10
    # What Airflow writes to the task log: every record, through its secrets masker.
    messages = [*capture.messages, *(str(entry.get("event", "")) for entry in structured)]
    task_log = "\n".join(str(redact(message)) for message in messages)
    report.extend(find_canaries(canaries, Places(dirs={"event-log": [events]}, texts={"task-log": task_log})))
    return report, outcome["xcom"], task_log


def test_no_secret_in_spark_ui_event_log_processes_or_task_log(
    env, sasl_broker: LocalBroker, canary_connections: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, xcom, task_log = _write_held_at_commit(
        env, sasl_broker, canary_connections, tmp_path, monkeypatch, extra_conf={}
    )
    report.assert_clean(require=("spark-ui", "spark-rest", "event-log", "cmdline", "environ", "text"))
    assert "SparkContext" in task_log and "LOGSTORE_RESULT" in task_log, task_log[-2000:]
    assert not any(c in json.dumps(xcom, default=str) for c in CANARIES)


def test_the_canary_check_finds_secrets_spark_was_told_not_to_redact(
    env, sasl_broker: LocalBroker, canary_connections: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same run with redaction turned off and a canary on the driver's command line: the check
    finds each secret in the UI, the REST API and the event log, and the planted one in the processes."""
    planted = "Planted-cmdline-canary-77aa"
    report, _xcom, _log = _write_held_at_commit(
        env,
        sasl_broker,
        canary_connections,
        tmp_path,
        monkeypatch,
        extra_conf={
            "spark.redaction.regex": "(?i)no-key-is-called-this",
            "spark.driver.extraJavaOptions": f"-Dlogstore.canary={planted}",
        },
        canaries=(*CANARIES, planted),
    )
    found = {(f.canary, f.kind) for f in report.findings}
    for canary in (SECRET, CATALOG_CREDENTIAL, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY, AWS_SECRET_ACCESS_KEY):
        for kind in ("spark-ui", "spark-rest", "event-log"):
            assert (canary, kind) in found, (canary, kind, report.describe())
    assert (planted, "cmdline") in found, report.describe()
