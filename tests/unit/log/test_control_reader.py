"""A long-lived publisher's control reads (``ControlReader``) without services: each read reaches the
topic's end at call time, folds on only what is new, and reads the whole state again when it must."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_logstore.core import control
from airflow_logstore.core.control import ControlState
from airflow_logstore.log import control_topic, kafka_client
from tests.unit.control_messages import ControlMessage


class Topic:
    """The control topic as the reader sees it: its records by offset, its start, the reads made."""

    def __init__(self) -> None:
        self.records: dict[int, ControlMessage] = {}
        self.low = 0
        self.end = 0
        self.scans: list[tuple[int, int]] = []
        self.checkpoint_reads = 0

    def claim(self, writer: str) -> None:
        """A claim of ``writer``: its epoch is the claim's offset + 1."""
        self.records[self.end] = ControlMessage(self.end, control.epoch_key(writer), {"owner": "o"})
        self.end += 1


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> Topic:
    t = Topic()

    def scan(cons: Any, name: str, start: dict[int, int], end: dict[int, int]) -> Any:
        t.scans.append((start[0], end[0]))
        yield [t.records[o] for o in range(start[0], end[0]) if o in t.records]

    def latest(ctl: Any, cons: Any, control_end: int) -> tuple[ControlState, int]:
        t.checkpoint_reads += 1
        return ControlState(), 0

    monkeypatch.setattr(control_topic, "_consumer", lambda ctl: _Consumer())
    monkeypatch.setattr(kafka_client, "partition_offsets", lambda cons, name, n: {0: (t.low, t.end)})
    monkeypatch.setattr(kafka_client, "scan", scan)
    monkeypatch.setattr(control_topic, "_latest", latest)
    return t


class _Consumer:
    def close(self) -> None:
        pass


def _reader() -> control_topic.ControlReader:
    return control_topic.ControlTopic({"bootstrap.servers": "k:9092"}, "ctl").reader()


def test_each_read_reaches_the_end_at_call_time_and_folds_on_only_the_new_records(topic: Topic) -> None:
    reader = _reader()
    topic.claim("a")
    topic.claim("b")
    assert reader.read().epochs == {"a": 1, "b": 2}
    topic.claim("a")  # appended after the first read: the next read must see it
    state = reader.read()
    assert state.epochs == {"a": 3, "b": 2} and state.end_offset == 3
    assert topic.scans == [(0, 2), (2, 3)] and reader.whole_reads == 1 and topic.checkpoint_reads == 1


def test_a_gap_in_the_new_offsets_reads_the_whole_state_again(topic: Topic) -> None:
    reader = _reader()
    topic.claim("a")
    reader.read()
    topic.claim("a")
    topic.claim("b")
    del topic.records[1]  # compaction removed an offset the reader had not folded
    state = reader.read()
    assert state.epochs == {"a": 1, "b": 3}
    assert reader.whole_reads == 2 and topic.scans[-1] == (0, 3)


def test_a_shorter_topic_or_a_reset_reads_the_whole_state_again(topic: Topic) -> None:
    reader = _reader()
    topic.claim("a")
    topic.claim("a")
    reader.read()
    topic.records.clear()
    topic.end = 0
    topic.claim("b")  # the topic was re-created: it ends before what the reader folded
    assert reader.read().epochs == {"b": 1} and reader.whole_reads == 2
    reader.reset()
    assert reader.read().epochs == {"b": 1} and reader.whole_reads == 3
