"""``batch_consume.scan_chunks`` yields what ``kafka_client.scan`` yields, from the same consumer."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest
from confluent_kafka import KafkaError

from airflow_logstore.exceptions import KafkaUnavailableError
from airflow_logstore.log import kafka_client
from airflow_logstore.log.batch_consume import scan_chunks


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
    """Scripted ``consume`` results in order, then nothing."""

    def __init__(self, polls: Sequence[Sequence[Any]], positions: dict[int, int] | None = None) -> None:
        self.polls = [list(p) for p in polls]
        self.positions = positions or {}
        self.assigned: list[tuple[int, int]] = []

    def assign(self, partitions: Sequence[Any]) -> None:
        self.assigned = [(tp.partition, tp.offset) for tp in partitions]

    def unassign(self) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        return self.polls.pop(0) if self.polls else []

    def position(self, partitions: Sequence[Any]) -> list[_Position]:
        return [_Position(tp.partition, self.positions.get(tp.partition, -1)) for tp in partitions]


def _view(batches: Sequence[Sequence[_Message]]) -> list[list[tuple[int, int]]]:
    return [[(m.partition(), m.offset()) for m in batch] for batch in batches]


def _script(rng: random.Random) -> tuple[list[list[_Message]], dict[int, int], dict[int, int]]:
    start = {p: rng.randint(0, 5) for p in range(3)}
    end = {p: start[p] + rng.randint(0, 30) for p in range(3)}
    streams = {p: [_Message(p, o) for o in range(start[p], end[p] + rng.randint(0, 5))] for p in range(3)}
    merged: list[_Message] = []
    while any(streams.values()):
        partition = rng.choice([p for p, s in streams.items() if s])
        merged.append(streams[partition].pop(0))
        if rng.random() < 0.05:
            merged.append(_Message(partition, -1, _Error(KafkaError._PARTITION_EOF)))
    polls, position = [], 0
    while position < len(merged):
        size = rng.randint(0, 12)
        polls.append(merged[position : position + size])
        position += size
    return polls, start, end


@pytest.mark.parametrize("seed", range(60))
def test_scan_chunks_equals_scan(seed: int) -> None:
    polls, start, end = _script(random.Random(seed))
    want = _view(list(kafka_client.scan(_Consumer(polls), "t", start, end, idle_timeout=0.0)))  # type: ignore[arg-type]
    got = _view(list(scan_chunks(_Consumer(polls), "t", start, end, idle_timeout=0.0)))  # type: ignore[arg-type]
    assert got == want


def test_errors_raise_and_idling_ends_at_the_position() -> None:
    failure = _Message(0, -1, _Error(KafkaError._TRANSPORT))
    with pytest.raises(KafkaUnavailableError, match="reading 't' failed"):
        list(scan_chunks(_Consumer([[failure]]), "t", {0: 0}, {0: 2}))  # type: ignore[arg-type]
    cons = _Consumer([[_Message(0, 0)]], positions={0: 3})
    got = _view(list(scan_chunks(cons, "t", {0: 0}, {0: 3}, idle_timeout=0.0)))  # type: ignore[arg-type]
    assert got == [[(0, 0)]]
    with pytest.raises(KafkaUnavailableError, match="no progress reading 't'"):
        list(scan_chunks(_Consumer([], positions={0: 1}), "t", {0: 0}, {0: 3}, idle_timeout=0.0))  # type: ignore[arg-type]
