"""The one topic scan (``kafka_client.scan``) against a scripted consumer: ranges, errors, idleness."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from confluent_kafka import KafkaError

from airflow_logstore.exceptions import KafkaUnavailableError
from airflow_logstore.log import kafka_client


class _Error:
    def __init__(self, code: int) -> None:
        self._code = code

    def code(self) -> int:
        return self._code

    def str(self) -> str:
        return f"error {self._code}"


class _Message:
    def __init__(self, partition: int, offset: int, error: _Error | None = None) -> None:
        self._partition, self._offset, self._error = partition, offset, error

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def error(self) -> _Error | None:
        return self._error


class _Position:
    def __init__(self, partition: int, offset: int) -> None:
        self.partition, self.offset = partition, offset


class _Consumer:
    """Hands out scripted ``consume`` results in order, then nothing; remembers what was asked."""

    def __init__(self, polls: Sequence[Sequence[Any]], positions: dict[int, int] | None = None) -> None:
        self.polls = [list(p) for p in polls]
        self.positions = positions or {}
        self.asked: list[int] = []
        self.assigned: list[tuple[int, int]] = []
        self.unassigned = False

    def assign(self, partitions: Sequence[Any]) -> None:
        self.assigned = [(tp.partition, tp.offset) for tp in partitions]

    def unassign(self) -> None:
        self.unassigned = True

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.asked.append(num_messages)
        return self.polls.pop(0) if self.polls else []

    def position(self, partitions: Sequence[Any]) -> list[_Position]:
        return [_Position(tp.partition, self.positions.get(tp.partition, -1)) for tp in partitions]


def _offsets(batches: Sequence[Sequence[_Message]]) -> list[tuple[int, int]]:
    return [(m.partition(), m.offset()) for batch in batches for m in batch]


def test_scan_yields_the_range_and_asks_for_no_more_than_is_left() -> None:
    cons = _Consumer([[_Message(0, 5), _Message(1, 0), _Message(0, 6)], [_Message(0, 7), _Message(0, 8)]])
    batches = list(kafka_client.scan(cons, "t", {0: 5, 1: 0}, {0: 8, 1: 1, 2: 0}))  # type: ignore[arg-type]
    assert _offsets(batches) == [(0, 5), (1, 0), (0, 6), (0, 7)]  # offset 8 is past the end
    assert cons.assigned == [(0, 5), (1, 0)]  # an empty window is not assigned
    assert cons.asked == [4, 1]
    assert cons.unassigned


def test_scan_raises_on_errors_and_skips_resets_only_when_asked() -> None:
    reset = _Message(0, -1, _Error(KafkaError._AUTO_OFFSET_RESET))
    with pytest.raises(KafkaUnavailableError, match=r"reading 't' partition 0: .* deleted \(retention\)"):
        list(kafka_client.scan(_Consumer([[reset]]), "t", {0: 0}, {0: 2}))  # type: ignore[arg-type]
    other = _Message(0, -1, _Error(KafkaError._MSG_TIMED_OUT))
    with pytest.raises(KafkaUnavailableError, match="reading 't' failed"):
        list(kafka_client.scan(_Consumer([[other]]), "t", {0: 0}, {0: 2}))  # type: ignore[arg-type]
    cons = _Consumer([[reset, _Message(0, 1)]])
    batches = list(kafka_client.scan(cons, "t", {0: 0}, {0: 2}, skip_reset=True))  # type: ignore[arg-type]
    assert _offsets(batches) == [(0, 1)]


def test_scan_ends_a_partition_whose_position_passed_its_end_after_idling() -> None:
    # offsets 1..2 are gone (compacted): the consumer's position is at the end, nothing more comes
    cons = _Consumer([[_Message(0, 0)]], positions={0: 3})
    batches = list(kafka_client.scan(cons, "t", {0: 0}, {0: 3}, idle_timeout=0.0))  # type: ignore[arg-type]
    assert _offsets(batches) == [(0, 0)]
    stuck = _Consumer([], positions={0: 1})
    with pytest.raises(KafkaUnavailableError, match="no progress reading 't'"):
        list(kafka_client.scan(stuck, "t", {0: 0}, {0: 3}, idle_timeout=0.0))  # type: ignore[arg-type]
