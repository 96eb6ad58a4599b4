"""A checkpoint's retired entries are tombstoned only once readers take the checkpoint.

``commit_transaction`` returns when the coordinator decided the commit; the broker writes the markers to
the checkpoint topic after that, and a read-committed reader sees the checkpoint only then. Tombstones
written before would leave a window where a read (a publish that just returned, a stream) folds from the
older checkpoint and the tail whose tombstones it ignores (CI of stop 40).
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_logstore.core.control import ControlState
from airflow_logstore.log import control_topic, kafka_client


class _Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class _Producer:
    """A transactional producer whose commit delivers its one record at ``offset``."""

    def __init__(self, events: list[str], offset: int) -> None:
        self.events, self.offset = events, offset
        self.pending: list[Any] = []

    def begin_transaction(self) -> None:
        pass

    def produce(self, topic: str, **kwargs: Any) -> None:
        self.pending.append(kwargs["on_delivery"])

    def commit_transaction(self, timeout: float) -> None:
        self.events.append("commit")

    def poll(self, timeout: float) -> int:
        for callback in self.pending:
            callback(None, _Message(self.offset))
        self.pending.clear()
        return 0

    def purge(self) -> None:
        pass


class _Control:
    topic, config = "t-control", {"bootstrap.servers": "127.0.0.1:1"}

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def known_id(self) -> str:
        return "id-1"

    def append_tombstones(self, keys: list[str]) -> None:
        self.events.append(f"tombstones {sorted(keys)}")


class _Consumer:
    def close(self) -> None:
        pass


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Kafka faked around ``maybe_checkpoint``: a state with two watermark moves to tombstone."""
    seen: list[str] = []
    state = ControlState(end_offset=30, watermark_keys=["watermark/a", "watermark/b"])
    monkeypatch.setattr(control_topic, "read_state", lambda ctl: state)
    monkeypatch.setattr(kafka_client, "ensure_topic", lambda *a, **k: None)
    monkeypatch.setattr(kafka_client, "init_transactions", lambda prod, timeout: None)
    monkeypatch.setattr(kafka_client, "transactional_producer", lambda *a, **k: _Producer(seen, 7))
    monkeypatch.setattr(kafka_client, "committed_consumer", lambda *a, **k: _Consumer())
    return seen


def _readable_after(events: list[str], polls: int) -> Any:
    """``last_committed`` that answers the older checkpoint (offset 3) ``polls`` times, then offset 7."""
    answers = [_Message(3)] * polls + [_Message(7)]

    def last_committed(cons: Any, topic: str, partition: int = 0) -> _Message:
        events.append(f"read {answers[0].offset()}")
        return answers.pop(0) if len(answers) > 1 else answers[0]

    return last_committed


def test_tombstones_follow_the_checkpoint_being_readable(
    events: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka_client, "last_committed", _readable_after(events, 2))
    report = control_topic.maybe_checkpoint(_Control(events), ControlState(end_offset=30), {}, every=1)
    assert events == ["commit", "read 3", "read 3", "read 7", "tombstones ['watermark/a', 'watermark/b']"]
    assert report == {"through": 29, "bytes": report["bytes"], "commits": 0, "retired": 0}


def test_a_checkpoint_never_readable_in_time_leaves_its_entries(
    events: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka_client, "last_committed", _readable_after(events, 10**6))
    monkeypatch.setattr(kafka_client, "request_timeout", lambda timeout: 0.2)
    report = control_topic.maybe_checkpoint(_Control(events), ControlState(end_offset=30), {}, every=1)
    assert report is not None and "not readable in time" in report["tombstones"]
    assert not [e for e in events if e.startswith("tombstones")]


def test_await_committed_waits_for_the_offset_not_just_a_record(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[_Message | None] = [None, _Message(4), _Message(9)]
    monkeypatch.setattr(kafka_client, "last_committed", lambda cons, topic, partition=0: answers.pop(0))
    assert kafka_client.await_committed(_Consumer(), "t", 9, timeout=5.0)
    assert not answers
