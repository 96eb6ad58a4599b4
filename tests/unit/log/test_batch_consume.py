"""``kafka_client.scan`` (vectorized) yields what a per-message reference scan yields, same consumer."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest
from confluent_kafka import KafkaError

from airflow_logstore.exceptions import KafkaUnavailableError
from airflow_logstore.log import kafka_client
from tests.unit.log.test_topic_scan import _Consumer, _Error, _Message


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


def _reference(polls: Sequence[Sequence[_Message]], start: dict[int, int], end: dict[int, int]) -> list[Any]:
    """What the scan must yield, one message at a time: each poll's records below their partition's end,
    until every partition reached its end, or until a poll brings none (with no idle time allowed and
    no position known, the scan counts every partition as reached then)."""
    pending = {p: end[p] for p in end if start.get(p, 0) < end[p]}
    batches = []
    for poll in polls:
        if not pending:
            break
        batch = []
        for message in poll:
            if message.error() is not None:
                continue
            stop = pending.get(message.partition())
            if stop is not None and message.offset() < stop:
                batch.append(message)
                if message.offset() >= stop - 1:
                    del pending[message.partition()]
        if not batch:
            break
        batches.append(batch)
    return _view(batches)


@pytest.mark.parametrize("seed", range(60))
def test_scan_equals_the_per_message_reference(seed: int) -> None:
    polls, start, end = _script(random.Random(seed))
    got = _view(list(kafka_client.scan(_Consumer(polls), "t", start, end, idle_timeout=0.0)))  # type: ignore[arg-type]
    assert got == _reference(polls, start, end)


def test_the_reference_catches_a_planted_off_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan that keeps each partition's end offset too (``<=``) differs from the reference."""
    original = kafka_client._in_range

    def keeps_the_end(messages, topic, pending, following, skipped):  # type: ignore[no-untyped-def]
        return original(messages, topic, {p: stop + 1 for p, stop in pending.items()}, following, skipped)

    monkeypatch.setattr(kafka_client, "_in_range", keeps_the_end)
    differ = 0
    for seed in range(60):
        polls, start, end = _script(random.Random(seed))
        got = _view(list(kafka_client.scan(_Consumer(polls), "t", start, end, idle_timeout=0.0)))  # type: ignore[arg-type]
        differ += got != _reference(polls, start, end)
    assert differ > 0


def test_errors_raise_and_idling_ends_at_the_position() -> None:
    failure = _Message(0, -1, _Error(KafkaError._TRANSPORT))
    with pytest.raises(KafkaUnavailableError, match="reading 't' failed"):
        list(kafka_client.scan(_Consumer([[failure]]), "t", {0: 0}, {0: 2}))  # type: ignore[arg-type]
    cons = _Consumer([[_Message(0, 0)]], positions={0: 3})
    got = _view(list(kafka_client.scan(cons, "t", {0: 0}, {0: 3}, idle_timeout=0.0)))  # type: ignore[arg-type]
    assert got == [[(0, 0)]]
    with pytest.raises(KafkaUnavailableError, match="no progress reading 't'"):
        list(kafka_client.scan(_Consumer([], positions={0: 1}), "t", {0: 0}, {0: 3}, idle_timeout=0.0))  # type: ignore[arg-type]
