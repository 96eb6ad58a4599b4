"""Where records that cannot be decoded go: never dropped silently, always counted.

One place for every reader (Python or Spark, on any host) and the reconciler: the Kafka topic
``<log topic>.logstore-dlq`` (:func:`dead_letter_topic_name`, created on first use with the table's
replication, by default the broker's), one JSON entry per record keyed by ``partition:offset`` (a
re-read writes the same keys again, so consumers can deduplicate).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from typing import Any


class DeadRecord:
    """A record known by its parts (a Spark row, a chunk of the JVM scan) with the accessors of a consumed
    ``confluent_kafka.Message`` that :func:`dead_letter_entry` reads: one adapter for every reader."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_value")

    def __init__(
        self,
        partition: int,
        offset: int,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = list(headers)

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, Any]]:
        return self._headers


def dead_letter_entry(topic: str, message: Any, reason: str) -> dict[str, Any]:
    def b64(value: bytes | None) -> str | None:
        return None if value is None else base64.b64encode(value).decode("ascii")

    headers = message.headers() or []
    return {
        "topic": topic,
        "partition": message.partition(),
        "offset": message.offset(),
        "reason": reason,
        "key": b64(message.key()),
        "value": b64(message.value()),
        "headers": [[name, b64(value) if isinstance(value, bytes) else value] for name, value in headers],
        "dead_lettered_at_ms": int(time.time() * 1000),
    }


class DeadLetterTopic:
    """Produces dead-lettered records to a Kafka topic (created on first use).

    Entries are buffered and produced by :meth:`flush` (at the latest every ``flush_every`` entries);
    :attr:`count` counts every entry added.
    """

    def __init__(
        self,
        kafka_config: dict[str, Any],
        topic: str,
        replication_factor: int | None = None,
        flush_every: int = 1000,
    ) -> None:
        self.kafka_config = kafka_config
        self.topic = topic
        self.replication_factor = replication_factor
        self.flush_every = flush_every
        self.count = 0
        self._entries: list[dict[str, Any]] = []

    @classmethod
    def for_log(
        cls, kafka_config: dict[str, Any], log_topic: str, replication_factor: int | None = None
    ) -> DeadLetterTopic:
        """The dead-letter topic of a table's log topic."""
        return cls(kafka_config, dead_letter_topic_name(log_topic), replication_factor)

    def add(self, topic: str, message: Any, reason: str) -> None:
        self._entries.append(dead_letter_entry(topic, message, reason))
        self.count += 1
        if len(self._entries) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        if not self._entries:
            return
        from airflow_logstore.log import kafka_client

        kafka_client.ensure_topic(
            self.kafka_config,
            self.topic,
            partitions=1,
            replication_factor=self.replication_factor,
            topic_configs={"retention.ms": "-1"},
        )
        tracker = kafka_client.DeliveryTracker()
        prod = kafka_client.producer(self.kafka_config)
        for entry in self._entries:
            prod.produce(
                self.topic,
                key=f"{entry['partition']}:{entry['offset']}".encode(),
                value=json.dumps(entry).encode(),
                on_delivery=tracker,
            )
        kafka_client.flush(prod, tracker, len(self._entries), f"dead-letter topic '{self.topic}'")
        self._entries = []


def dead_letter_topic_name(log_topic: str) -> str:
    return f"{log_topic}.logstore-dlq"
