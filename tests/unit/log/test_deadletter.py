"""Dead letters go to the table's dead-letter topic (buffered, counted), never to a local file."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_logstore.log import deadletter
from airflow_logstore.log.deadletter import DeadLetterTopic, dead_letter_topic_name


class _Message:
    def partition(self) -> int:
        return 2

    def offset(self) -> int:
        return 7

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"not ours"

    def headers(self) -> list[tuple[str, Any]]:
        return []


def test_dead_letters_are_buffered_counted_and_produced_to_the_tables_dead_letter_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    produced: list[tuple[str, int | None, list[dict[str, Any]]]] = []

    def flush(self: DeadLetterTopic) -> None:
        if self._entries:
            produced.append((self.topic, self.replication_factor, list(self._entries)))
            self._entries = []

    monkeypatch.setattr(DeadLetterTopic, "flush", flush)
    dead = DeadLetterTopic.for_log({"bootstrap.servers": "k:9092"}, "db.orders", None)
    dead.flush_every = 2
    assert dead.topic == dead_letter_topic_name("db.orders") == "db.orders.logstore-dlq"
    for _ in range(3):
        dead.add("db.orders", _Message(), "record has no LogStore headers")
    assert dead.count == 3 and len(produced) == 1 and len(produced[0][2]) == 2  # flushed every 2
    dead.flush()
    assert sum(len(entries) for _, _, entries in produced) == 3
    assert produced[0][2][0]["partition"] == 2 and produced[0][2][0]["offset"] == 7
    assert produced[0][1] is None  # the broker's default replication


def test_no_dead_letter_file_under_a_local_folder() -> None:
    assert not hasattr(deadletter, "DeadLetterFile")


def test_a_record_known_by_its_parts_makes_the_entry_a_consumed_message_makes() -> None:
    """The one adapter the Spark read job, the reconcile job and the JVM scan hand over."""
    parts = deadletter.DeadRecord(2, 7, key=b"k", value=b"not ours")
    by_parts = deadletter.dead_letter_entry("db.orders", parts, "why")
    by_message = deadletter.dead_letter_entry("db.orders", _Message(), "why")
    assert {**by_parts, "dead_lettered_at_ms": 0} == {**by_message, "dead_lettered_at_ms": 0}
    with_headers = deadletter.DeadRecord(0, 1, headers=[("logstore.v", b"\x01"), ("empty", None)])
    entry = deadletter.dead_letter_entry("t", with_headers, "why")
    assert entry["key"] is None and entry["value"] is None
    assert entry["headers"] == [["logstore.v", "AQ=="], ["empty", None]]
