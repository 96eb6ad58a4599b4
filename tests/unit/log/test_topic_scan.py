"""The one topic scan (``kafka_client.scan``) against a scripted consumer: ranges, errors, idleness."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

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

    def __init__(
        self,
        polls: Sequence[Sequence[Any]],
        positions: dict[int, int] | None = None,
        silent_leaders: frozenset[int] = frozenset(),
    ) -> None:
        self.polls = [list(p) for p in polls]
        self.positions = positions or {}
        self.silent_leaders = silent_leaders  # partitions whose leader does not answer
        self.offsets_asked: list[int] = []
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
        return [_Position(tp.partition, self.positions.get(tp.partition, -1001)) for tp in partitions]

    def get_watermark_offsets(self, partition: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.offsets_asked.append(partition.partition)
        if partition.partition in self.silent_leaders:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return 0, 100


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


def test_a_partition_that_sent_nothing_is_read_only_if_its_leader_answers() -> None:
    """A partition the scan consumed nothing from has no position (librdkafka: OFFSET_INVALID). Its range
    may hold no record (only transaction markers, records compacted away): then its leader answers and
    the scan ends. If its leader does not answer (an outage), its records were never read: the scan
    raises instead of counting them as read (before, it ended without them, and a publish would have
    moved the watermark over records it never saw)."""
    markers_only = _Consumer([[_Message(0, 0)]], positions={0: 1})
    batches = list(kafka_client.scan(markers_only, "t", {0: 0, 1: 0}, {0: 1, 1: 2}, idle_timeout=0.0))  # type: ignore[arg-type]
    assert _offsets(batches) == [(0, 0)] and markers_only.offsets_asked == [1]
    unreachable = _Consumer([[_Message(0, 0)]], positions={0: 1}, silent_leaders=frozenset({1}))
    with pytest.raises(
        KafkaUnavailableError, match=r"no progress reading 't'.*targets \{1: 2\}.*did not answer"
    ):
        list(kafka_client.scan(unreachable, "t", {0: 0, 1: 0}, {0: 1, 1: 2}, idle_timeout=0.0))  # type: ignore[arg-type]


def test_a_leader_that_answers_is_given_a_grace_before_its_range_counts_as_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leader answers, but its records may still be on their way (a leader back from an outage):
    the range counts as read only after the grace, with the leader asked once; a record that comes in
    the grace is read."""
    clock = {"now": 100.0}
    monkeypatch.setattr(kafka_client.time, "monotonic", lambda: clock["now"])

    class _Late(_Consumer):
        def consume(self, num_messages: int, timeout: float) -> list[Any]:
            clock["now"] += 1.0  # each poll takes a second
            return super().consume(num_messages, timeout)

    late = _Late([[], [], [], [_Message(0, 0)]])  # nothing for 3 s, then the record
    batches = list(kafka_client.scan(late, "t", {0: 0}, {0: 1}, idle_timeout=2.0))  # type: ignore[arg-type]
    assert _offsets(batches) == [(0, 0)] and late.offsets_asked == [0]
    empty = _Late([])
    assert list(kafka_client.scan(empty, "t", {0: 0}, {0: 1}, idle_timeout=2.0)) == []  # type: ignore[arg-type]
    assert empty.offsets_asked == [0]
    assert len(empty.asked) >= 2 + 2  # the idle timeout, then the grace (min(5 s, idle timeout))


def test_a_partition_that_got_a_position_below_its_end_after_its_leader_answered_fails_not_hangs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its leader answered while it had no position; then it consumed markers only (a position below its
    end) and its leader went away: it made no progress and is not done, so the scan fails (before, it
    was neither done nor stuck, and the scan polled forever)."""
    clock = {"now": 100.0}
    monkeypatch.setattr(kafka_client.time, "monotonic", lambda: clock["now"])

    class _Markers(_Consumer):
        def consume(self, num_messages: int, timeout: float) -> list[Any]:
            clock["now"] += 1.0
            if self.offsets_asked:  # after the answer: markers consumed, the position moves to 1
                self.positions[0] = 1
            if len(self.asked) > 50:
                raise RuntimeError("the scan polls forever")
            return super().consume(num_messages, timeout)

    with pytest.raises(KafkaUnavailableError, match=r"no progress reading 't'.*targets \{0: 5\}"):
        list(kafka_client.scan(_Markers([]), "t", {0: 0}, {0: 5}, idle_timeout=3.0))  # type: ignore[arg-type]


def test_the_grace_runs_from_the_leaders_answer_not_from_before_the_question(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asking the leader may take the request timeout (a leader coming back): the grace starts when it
    answered, so a record fetched right after is read (before, the wait for the answer counted as the
    grace, and the range was taken as read at the next poll)."""
    clock = {"now": 100.0}
    monkeypatch.setattr(kafka_client.time, "monotonic", lambda: clock["now"])

    class _SlowLeader(_Consumer):
        def consume(self, num_messages: int, timeout: float) -> list[Any]:
            clock["now"] += 1.0
            return super().consume(num_messages, timeout)

        def get_watermark_offsets(self, partition: Any, timeout: float, cached: bool) -> tuple[int, int]:
            clock["now"] += 10.0  # the answer takes 10 s
            return super().get_watermark_offsets(partition, timeout, cached)

    slow = _SlowLeader([[], [], [], [], [_Message(0, 0)]])  # nothing for 4 s, then the record
    batches = list(kafka_client.scan(slow, "t", {0: 0}, {0: 1}, idle_timeout=2.0))  # type: ignore[arg-type]
    assert _offsets(batches) == [(0, 0)]
