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

from airflow_logstore.exceptions import KafkaUnavailableError
from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.operators.create_table import LogStoreCreateTableOperator
from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
from airflow_logstore.operators.publish import LogStorePublishVisibleOffsetsOperator
from airflow_logstore.reader import read_log
from airflow_logstore.services.local import BrokerOptions, LocalBroker, free_ports
from airflow_logstore.testing.tables import write_jsonl

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
        with _Watch() as watch:
            xcom = write.execute({})
        published = LogStorePublishVisibleOffsetsOperator(
            task_id="p", table=table, kafka_config_id="kafka_sasl"
        ).execute({})
    finally:
        logging.getLogger().removeHandler(capture)

    assert watch.samples > 5 and watch.found == [], watch.found
    assert xcom["log_records"] == 10 and xcom["snapshot_id"] is not None
    for value in (created, xcom, published):
        assert SECRET not in json.dumps(value, default=str)
    assert not any(SECRET in message for message in capture.messages)
    assert not any(SECRET in line for line in write._submit_hook.captured)  # the spark-submit output

    handle = LogStoreHook(kafka_config_id="kafka_sasl").table(table)
    assert len(read_log(handle, consistency="transactional").records) == 10
    assert len(read_log(handle, consistency="eventual").records) == 10


def test_spark_kafka_source_authenticates_from_the_connection(
    env, spark, sasl_broker: LocalBroker, connections: None, tmp_path: Path
) -> None:
    from airflow_logstore import kafka_client
    from airflow_logstore.spark.dual_write import DualWriter
    from airflow_logstore.spark.streaming import run_stream
    from airflow_logstore.tables import create_table

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
