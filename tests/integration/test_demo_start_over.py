"""The demo starts over on every run: an earlier demo's table, files and topics are removed first."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.exceptions import NoSuchTableError

from airflow_logstore.log import kafka_client
from airflow_logstore.log.deadletter import dead_letter_topic_name
from airflow_logstore.table.tables import create_table
from logstore_dev.demo import start_over
from logstore_dev.testing.environment import LogStoreTestEnv
from logstore_dev.testing.tables import DEFAULT_SCHEMA, make_table


def test_start_over_removes_table_files_and_topics(env: LogStoreTestEnv) -> None:
    handle = make_table(env, prefix="demo")
    config = handle.config()
    topic, _, control_topic = config.require_log()
    kafka = handle.kafka_config(config)
    dead_letters = dead_letter_topic_name(topic)
    kafka_client.ensure_topic(kafka, dead_letters, partitions=1, replication_factor=1, topic_configs={})
    handle.control().claim_epoch("demo-writer")
    assert "demo-writer" in handle.control().read().epochs
    location = Path(handle.load().location().removeprefix("file://"))
    assert list(location.rglob("*.json")), "the new table has no metadata file to remove"

    removed = start_over(str(handle.name))

    assert removed == [str(handle.name), topic, control_topic, dead_letters]
    with pytest.raises(NoSuchTableError):
        handle.load()
    assert not list(location.rglob("*.json")), "the table's metadata files were left behind"
    for name in (topic, control_topic, dead_letters):
        assert kafka_client.describe_topic(kafka, name) is None, f"topic {name} still exists"
    assert start_over(str(handle.name)) == []  # nothing left: a second call removes nothing

    # the same name can be created again and starts empty: no snapshot, no epoch, no commit
    create_table(handle, DEFAULT_SCHEMA, primary_key=("id",), properties=env.log_properties(topic))
    assert handle.load().current_snapshot() is None
    state = handle.control().read()
    assert not state.epochs and not state.commits
