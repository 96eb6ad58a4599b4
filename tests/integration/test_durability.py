"""Durability on the real broker: the settings LogStore topics get, epochs that survive a lost control
topic, and control records stamped by the broker (the clock leases are judged by)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_logstore.log import kafka_client
from airflow_logstore.log.control_topic import ControlTopic
from airflow_logstore.table.tables import LogStoreTable, create_table, recorded_epochs
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.tables import write_jsonl

SCHEMA = "id int, name string"


def _new_table(env: Any, prefix: str) -> LogStoreTable:
    name = env.unique(prefix)
    handle = LogStoreTable.open(f"dur.{name}")
    create_table(handle, SCHEMA, primary_key=["id"], properties=env.log_properties(f"{name}_log"))
    return handle


def _replicas(config: dict[str, Any], topic: str) -> set[int]:
    metadata = kafka_client.admin_client(config).list_topics(topic=topic, timeout=30)
    return {len(partition.replicas) for partition in metadata.topics[topic].partitions.values()}


def test_topics_get_the_brokers_replication_factor_and_safe_settings(env: Any) -> None:
    handle = _new_table(env, "settings")
    config = handle.config()
    kafka_config = handle.kafka_config(config)
    assert config.replication_factor is None  # no property: the broker decides
    assert kafka_client.broker_default_replication_factor(kafka_config) == 1  # the single test broker
    for topic in (config.topic or "", config.control_topic or ""):
        info = kafka_client.describe_topic(kafka_config, topic)
        assert info is not None
        assert _replicas(kafka_config, topic) == {1}
        assert info.configs["min.insync.replicas"] != "2", topic  # 2 of 1 replica would refuse every write
        assert info.configs["unclean.leader.election.enable"] == "false", topic
    control = kafka_client.describe_topic(kafka_config, config.control_topic or "")
    assert control is not None and control.configs["cleanup.policy"] == "compact"


def test_a_recreated_control_topic_never_hands_out_an_epoch_the_table_already_recorded(
    env: Any, spark: Any, tmp_path: Path
) -> None:
    handle = _new_table(env, "floor")
    config = handle.config()
    control_topic = config.control_topic or ""
    for _ in range(3):  # earlier attempts: the committing one gets a larger epoch than a fresh topic's first
        open_writer(spark, str(handle.name), writer_id="w")
    writer = open_writer(spark, str(handle.name), writer_id="w")
    writer.write_path(str(write_jsonl(tmp_path / "b1.jsonl", [{"id": 1, "name": "a"}])), 1)
    committed = recorded_epochs(handle.load())["w"]
    assert committed == writer.epoch >= 4

    kafka_config = handle.kafka_config(config)
    assert kafka_client.delete_topics(kafka_config, [control_topic]) == [control_topic]
    assert handle.control(config).ensure()  # recreated empty: its offsets start at 0 again
    assert handle.control(config).end_offset() == 0

    again = open_writer(spark, str(handle.name), writer_id="w")
    assert again.epoch > committed
    state = handle.control(config).read()
    assert state.latest_epoch("w") == again.epoch
    assert handle.control(config).claim_epoch("w") == again.epoch + 1  # no more filler once above


def test_the_broker_stamps_control_records_and_leases_expire_by_its_clock(env: Any) -> None:
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TopicPartition

    from airflow_logstore.reconcile.reconciler import LEASE_NAME, ReconcilerLease

    handle = _new_table(env, "stamped")
    config = handle.config()
    kafka_config = handle.kafka_config(config)
    control_topic = config.control_topic or ""
    info = kafka_client.describe_topic(kafka_config, control_topic)
    assert info is not None and info.configs["message.timestamp.type"] == "LogAppendTime"

    lease = ReconcilerLease(handle.control(config), "a", ttl_s=60)
    assert lease.acquire() is None
    lease._stop.set()  # no background renewals: the claim alone decides the expiry below
    cons = kafka_client.consumer(kafka_config)
    try:
        cons.assign([TopicPartition(control_topic, 0, 0)])
        (claim,) = [m for m in cons.consume(10, timeout=10) if m.error() is None]
    finally:
        cons.close()
    kind, stamped = claim.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME
    holder = handle.control(config).read().live_lease(LEASE_NAME)
    assert holder is not None and holder.lease_id == lease.lease_id == claim.offset() + 1
    assert holder.expires_at_ms == stamped + 60_000  # the broker's stamp, not the reconciler's clock
    lease.close()


def test_an_existing_control_topic_is_brought_to_broker_timestamps(env: Any) -> None:
    name = env.unique("legacy")
    kafka_config = kafka_client.client_config(env.bootstrap)
    control_topic = f"{name}_log.logstore-control"
    kafka_client.ensure_topic(  # as created before: producer timestamps, broker defaults
        kafka_config,
        control_topic,
        partitions=1,
        replication_factor=1,
        topic_configs={"cleanup.policy": "compact"},
    )
    assert ControlTopic(kafka_config, control_topic).ensure() is False
    info = kafka_client.describe_topic(kafka_config, control_topic)
    assert info is not None
    assert info.configs["message.timestamp.type"] == "LogAppendTime"
    assert info.configs["unclean.leader.election.enable"] == "false"
