"""Where records that cannot be decoded go: never dropped silently, always counted.

Readers write to a JSON-lines file (one per log topic, under ``LOGSTORE_HOME/dead-letter``); the
reconciler, whose verdicts must be shared, writes to a Kafka topic ``<log topic>.logstore-dlq`` keyed
by ``partition:offset`` (a re-run writes the same keys again, so consumers can deduplicate).
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

from airflow_logstore.settings import local_settings


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


class DeadLetterFile:
    """Appends dead-lettered records to a JSON-lines file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.count = 0

    @classmethod
    def for_topic(cls, topic: str) -> DeadLetterFile:
        return cls(local_settings().home / "dead-letter" / f"{topic}.jsonl")

    def add(self, topic: str, message: Any, reason: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(dead_letter_entry(topic, message, reason)) + "\n")
        self.count += 1


class DeadLetterTopic:
    """Produces dead-lettered records to a Kafka topic (created on first use)."""

    def __init__(
        self, kafka_config: dict[str, Any], topic: str, replication_factor: int | None = None
    ) -> None:
        self.kafka_config = kafka_config
        self.topic = topic
        self.replication_factor = replication_factor
        self.count = 0
        self._entries: list[dict[str, Any]] = []

    def add(self, topic: str, message: Any, reason: str) -> None:
        self._entries.append(dead_letter_entry(topic, message, reason))
        self.count += 1

    def flush(self) -> None:
        if not self._entries:
            return
        from airflow_logstore import kafka_client

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
