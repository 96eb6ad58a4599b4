"""The consistent follower's hold rule (``follow._release``) and buffer bound (``follow._flow_control``).

Scripted messages and a scripted consumer, no broker: a record below the watermark that the follower's
own control state still finds undecided is held (with everything after it in its partition) until the
state decides it, never dropped; a partition whose buffer is full is paused until it drains to half.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from airflow_logstore.core.codec import RecordMeta, RowKind, encode_headers, encode_value
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.properties import ChangelogMode
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.read import follow
from airflow_logstore.read.reader import LogReader, ReadReport, filter_for
from tests.unit.log.test_topic_scan import _Message

TASK = "0.17"


class _Record(_Message):
    """A log record as confluent_kafka's Message gives it to the follower."""

    def __init__(self, partition: int, offset: int, batch_id: int, epoch: int = 1) -> None:
        super().__init__(partition, offset)
        self._headers = encode_headers(RecordMeta("a", epoch, batch_id, TASK))
        self._value = encode_value(RowKind.INSERT, {"id": offset})

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return b"[%d]" % self.offset()

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_000 + self.offset())


class _DeadLetters:
    def __init__(self) -> None:
        self.entries: list[Any] = []

    def add(self, topic: str, message: Any, reason: str) -> None:
        self.entries.append((message.offset(), reason))


def _reader() -> LogReader:
    reader = LogReader.__new__(LogReader)
    reader.topic = "log"
    reader.field_types = {"id": "int"}
    reader.changelog_mode = ChangelogMode.ALL_KINDS
    reader.dead_letter = _DeadLetters()  # type: ignore[assignment]
    return reader


def _commit(batch_id: int, first: int, last: int) -> CommitInfo:
    return CommitInfo("a", batch_id, 1, offsets={0: (first, last)}, tasks=frozenset({TASK}))


def _state(watermark: int, *commits: CommitInfo) -> ControlState:
    return ControlState(epochs={"a": 1}, commits={c.key: c for c in commits}, watermark={0: watermark})


def _release(state: ControlState, pending: dict[int, list[Any]]) -> list[int]:
    report = ReadReport("t", "follow", "consistent", "all-kinds")
    rule = filter_for(state, True, None, {})
    position = follow.ResumePosition({}, None)
    return [r.offset for r in follow._release(_reader(), state, rule, pending, report, position)]


def test_an_undecided_record_below_the_watermark_is_held_then_released_once_decided() -> None:
    # offsets 3 and 5: batches 1 and 3, committed; offset 4: batch 2, in flight (its epoch is the
    # writer's newest, no ledger entry yet). The watermark (5) has passed all three, as it does when
    # retention deleted records a publish scan then skipped, or a state lags the watermark.
    pending: dict[int, list[Any]] = {
        0: [_Record(0, 3, 1), _Record(0, 4, 2), _Record(0, 5, 3), _Record(0, 6, 4)]
    }
    state = _state(5, _commit(1, 3, 3), _commit(3, 5, 5))
    assert _release(state, pending) == [3]
    assert [m.offset() for m in pending[0]] == [4, 5, 6]  # held: 4 and everything after it
    assert _release(state, pending) == []  # still undecided: still held, nothing dropped

    decided = replace(state, commits={**state.commits, ("a", 2): _commit(2, 4, 4)})
    assert _release(decided, pending) == [4, 5]  # in offset order, exactly once
    assert [m.offset() for m in pending[0]] == [6]  # above the watermark: waits for it


def test_an_undecided_record_that_turns_out_uncommitted_is_released_as_nothing() -> None:
    # offset 4 is a dead epoch's record: undecided (dead-pending) until the newer epoch commits past it
    pending: dict[int, list[Any]] = {0: [_Record(0, 4, 2, epoch=1), _Record(0, 5, 2, epoch=2)]}
    state = ControlState(epochs={"a": 2}, watermark={0: 5})
    assert _release(state, pending) == []
    newer = CommitInfo("a", 2, 2, offsets={0: (5, 5)}, tasks=frozenset({TASK}))
    assert _release(replace(state, commits={newer.key: newer}), pending) == [5]  # 4 is redundant
    assert pending[0] == []


def test_a_hold_in_one_partition_does_not_hold_another() -> None:
    pending: dict[int, list[Any]] = {0: [_Record(0, 0, 2)], 1: [_Record(1, 0, 1)]}
    state = _state(0, CommitInfo("a", 1, 1, offsets={1: (0, 0)}, tasks=frozenset({TASK})))
    state.watermark[1] = 0
    assert _release(state, pending) == [0]  # partition 1's record; partition 0's stays held
    assert [m.offset() for m in pending[0]] == [0]


class _PausingConsumer:
    """Remembers the partitions paused and resumed, call by call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []

    def pause(self, partitions: Sequence[Any]) -> None:
        self.calls.append(("pause", sorted(tp.partition for tp in partitions)))

    def resume(self, partitions: Sequence[Any]) -> None:
        self.calls.append(("resume", sorted(tp.partition for tp in partitions)))


def test_a_full_partition_is_paused_until_it_drains_to_half(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow, "MAX_PENDING_PER_PARTITION", 4)
    cons, paused = _PausingConsumer(), set[int]()
    pending: dict[int, list[Any]] = {0: [None] * 4, 1: [None] * 3}
    follow._flow_control(cons, "log", pending, paused)
    assert cons.calls == [("pause", [0])] and paused == {0}  # 1 is below the limit

    pending[0].append(None)  # records fetched before the pause took effect still come in
    follow._flow_control(cons, "log", pending, paused)
    pending[0][:] = [None] * 2  # released down to half: not below it yet
    follow._flow_control(cons, "log", pending, paused)
    assert cons.calls == [("pause", [0])] and paused == {0}  # paused once, still paused

    pending[0][:] = [None]
    pending[1].append(None)  # 1 fills up as 0 drains
    follow._flow_control(cons, "log", pending, paused)
    assert cons.calls[1:] == [("pause", [1]), ("resume", [0])] and paused == {1}


def test_a_held_record_fills_its_partition_which_is_paused_and_resumed_once_it_is_decided(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hold and the bound together: records behind a held one pile up only to the limit."""
    monkeypatch.setattr(follow, "MAX_PENDING_PER_PARTITION", 4)
    cons, paused = _PausingConsumer(), set[int]()
    pending: dict[int, list[Any]] = {0: []}
    state = _state(9, *(_commit(b, b, b) for b in range(1, 10) if b != 2))
    for offset in range(1, 6):  # batch 2 (offset 2) is undecided; consume hands out one record a poll
        pending[0].append(_Record(0, offset, offset))
        _release(state, pending)
        follow._flow_control(cons, "log", pending, paused)
    assert [m.offset() for m in pending[0]] == [2, 3, 4, 5] and paused == {0}
    assert cons.calls == [("pause", [0])]

    decided = replace(state, commits={**state.commits, ("a", 2): _commit(2, 2, 2)})
    assert _release(decided, pending) == [2, 3, 4, 5]
    follow._flow_control(cons, "log", pending, paused)
    assert cons.calls == [("pause", [0]), ("resume", [0])] and paused == set()
