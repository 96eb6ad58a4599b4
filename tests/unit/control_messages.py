"""A control topic's Kafka message, as the fake consumers of the unit tests hand it out."""

from __future__ import annotations

from typing import Any

from airflow_logstore.core import control


class ControlMessage:
    """A confluent-kafka message of the control topic: its offset, key, encoded value (a tombstone for
    None), no error, and the broker's append time 1,000 ms + its offset."""

    def __init__(self, offset: int, key: str, value: dict[str, Any] | None) -> None:
        self._offset, self._key, self._value = offset, key, value

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key.encode()

    def value(self) -> bytes | None:
        return control.encode(self._value)

    def error(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (2, 1_000 + self._offset)  # LogAppendTime
