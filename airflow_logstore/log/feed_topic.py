"""The committed feed's topics on the Kafka side: the committed topic and its progress topic.

``<topic>.committed`` has the log topic's partitions and retention; ``<topic>.committed-progress`` (one
partition, compacted) holds the feed's progress records, written only inside the feed's transactions and
read as the last *committed* one (:func:`~airflow_logstore.log.kafka_client.last_committed`), as the
control checkpoints are. See :mod:`airflow_logstore.publish.feed` for the copy.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from airflow_logstore.core.feed import decode_progress
from airflow_logstore.core.properties import LogStoreConfig
from airflow_logstore.exceptions import TopicError
from airflow_logstore.log import kafka_client

PROGRESS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "unclean.leader.election.enable": "false",
}

_ENSURED: set[tuple[str, str]] = set()  # (bootstrap servers, topic) this process created or found
_ENSURED_LOCK = threading.Lock()


def log_topic_configs(config: LogStoreConfig) -> dict[str, str]:
    """The Kafka settings of a table's log topic, which its committed feed shares."""
    return {
        "retention.ms": str(config.retention_ms),
        "cleanup.policy": "delete",
        "unclean.leader.election.enable": "false",
    }


def ensure_feed_topics(kafka_config: Mapping[str, Any], config: LogStoreConfig) -> None:
    """Create the committed topic (the log topic's partitions and retention) and the progress topic when
    missing: with the table, or at the first publish after the feed was enabled on an existing table."""
    topic, progress = config.feed_topics()
    servers = str(kafka_config.get("bootstrap.servers"))
    with _ENSURED_LOCK:
        if (servers, topic) in _ENSURED and (servers, progress) in _ENSURED:
            return
    kafka_client.ensure_topic(
        kafka_config,
        topic,
        partitions=config.partitions,
        replication_factor=config.replication_factor,
        topic_configs=log_topic_configs(config),
    )
    kafka_client.ensure_topic(
        kafka_config,
        progress,
        partitions=1,
        replication_factor=config.replication_factor,
        topic_configs=PROGRESS_TOPIC_CONFIGS,
    )
    with _ENSURED_LOCK:
        _ENSURED.update({(servers, topic), (servers, progress)})


def read_progress(config: Mapping[str, Any], progress_topic: str) -> dict[int, int]:
    """The feed's committed progress (empty: nothing copied yet)."""
    cons = kafka_client.committed_consumer(config, **{"fetch.wait.max.ms": 5})
    try:
        message = kafka_client.last_committed(cons, progress_topic)
    finally:
        cons.close()
    if message is None:
        return {}
    try:
        return decode_progress(message.value())
    except (ValueError, TypeError, KeyError) as exc:
        raise TopicError(
            f"the last committed record of '{progress_topic}' (offset {message.offset()}) is not a "
            f"committed-feed progress record ({exc}); the feed cannot tell where to go on without "
            "copying records twice"
        ) from exc
