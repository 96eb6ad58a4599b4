"""A follower from ``snapshot:S`` is the log part of a hybrid read of S: S's rows plus what it yields are
each change once (invariant H1 for followers).

Scripted records and states, no broker. Partition 0 holds: batch 1 (offsets 0-1, committed, held by S:
S's positions start the log at 0 because the watermark had not passed batch 1 when S was committed),
batch 2 (offsets 2-3, committed after S), a zombie's copy of batch 1 (offset 4, redundant), a reversal
of it (offset 5), a reversal of a redundant record below S's positions (offset 6, in partition 1's
terms: see ``BELOW``) and batch 3 in flight (offset 7).
"""

from __future__ import annotations

from typing import Any

from airflow_logstore.core.codec import RecordMeta, RecordType, RowKind, encode_headers, encode_value
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.properties import ChangelogMode
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import Decision
from airflow_logstore.read import follow
from airflow_logstore.read.reader import LogReader, ReadReport, SnapshotStart, StartPosition, filter_for
from tests.unit.log.test_topic_scan import _Message
from tests.unit.read.test_follow_hold import _DeadLetters

TASK, ZOMBIE_TASK = "0.1", "0.9"
S = SnapshotStart(sequence=5, included=frozenset({"w/1"}), snapshot_id=77, positions=((0, 0), (1, 3)))
BELOW = (1, 2)  # a redundant record below S's positions in partition 1: never read by the follower


class _Record(_Message):
    def __init__(self, partition: int, offset: int, meta: RecordMeta, kind: RowKind = RowKind.INSERT) -> None:
        super().__init__(partition, offset)
        self._headers = encode_headers(meta)
        self._value = encode_value(kind, {"id": offset})

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return b"[%d]" % self.offset()

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_000 + self.offset())


def _reversal(offset: int, of: tuple[int, int]) -> _Record:
    meta = RecordMeta("reconciler", 1, 0, TASK, record_type=RecordType.REVERSAL, reverses=of)
    return _Record(0, offset, meta, RowKind.DELETE)


LOG = [
    _Record(0, 0, RecordMeta("w", 1, 1, TASK)),
    _Record(0, 1, RecordMeta("w", 1, 1, TASK)),
    _Record(0, 2, RecordMeta("w", 1, 2, TASK)),
    _Record(0, 3, RecordMeta("w", 1, 2, TASK)),
    _Record(0, 4, RecordMeta("w", 1, 1, ZOMBIE_TASK)),  # another task attempt's copy: redundant
    _reversal(5, (0, 4)),
    _reversal(6, BELOW),
    _Record(0, 7, RecordMeta("w", 1, 3, TASK)),  # in flight
]


def _state(watermark: int) -> ControlState:
    commits = [
        CommitInfo("w", 1, 1, offsets={0: (0, 1)}, tasks=frozenset({TASK}), sequence_number=5),
        CommitInfo("w", 2, 1, offsets={0: (2, 3)}, tasks=frozenset({TASK}), sequence_number=6),
    ]
    return ControlState(epochs={"w": 1}, commits={c.key: c for c in commits}, watermark={0: watermark})


def _reader() -> LogReader:
    reader = LogReader.__new__(LogReader)
    reader.topic = "log"
    reader.field_types = {"id": "int"}
    reader.changelog_mode = ChangelogMode.ALL_KINDS
    reader.dead_letter = _DeadLetters()  # type: ignore[assignment]
    return reader


def _report() -> ReadReport:
    return ReadReport("t", "follow", "consistent", "all-kinds")


def _consistent(hybrid: SnapshotStart | None) -> list[Any]:
    state = _state(watermark=7)
    rule = filter_for(state, True, hybrid, {0: 0})
    pending: dict[int, list[Any]] = {0: list(LOG)}
    position = follow.ResumePosition({0: 0}, hybrid)
    return list(follow._release(_reader(), state, rule, pending, _report(), position))


def test_a_consistent_follower_from_a_snapshot_skips_the_commits_it_holds() -> None:
    records = _consistent(S)
    assert [r.offset for r in records] == [2, 3]  # batch 2 only: batch 1 is in S's rows
    assert all(r.decision is Decision.COMMITTED for r in records)


def test_without_the_hybrid_rule_the_snapshots_own_batch_comes_again() -> None:
    """The follower before: a plain consistent filter returns batch 1, which S's rows already hold."""
    assert [r.offset for r in _consistent(None)] == [0, 1, 2, 3]


def test_the_resume_position_of_a_snapshot_follower_keeps_the_snapshot() -> None:
    records = _consistent(S)
    token = records[-1].resume_position
    assert token == {
        "positions": {"0": 4},
        "snapshot": {"id": 77, "sequence": 5, "included": ["w/1"], "positions": {"0": 0, "1": 3}},
    }
    resumed = StartPosition.of(token)
    assert isinstance(resumed, StartPosition) and resumed.hybrid == S and resumed.offsets == ((0, 4),)


def _eventual(hybrid: SnapshotStart) -> list[int]:
    state = _state(watermark=-1)  # eventual: no watermark; the state read at the follower's start
    rule = follow.EventualAfterSnapshot(filter_for(state, False, hybrid, {0: 0}), dict(hybrid.positions))
    position = follow.ResumePosition({0: 0}, hybrid)
    out = []
    for message in LOG:
        out += [r.offset for r in follow._hand_out(_reader(), message, rule, _report(), None, position)]
    return out


def test_an_eventual_follower_from_a_snapshot_drops_only_what_never_changes() -> None:
    # batch 1 (held by S) dropped; the redundant copy and its reversal both kept (they cancel, as the
    # eventual log folds); the reversal of a record below S's positions dropped: it was never read
    assert _eventual(S) == [2, 3, 4, 5, 7]


def test_an_eventual_follower_keeps_a_reversal_of_a_record_it_read() -> None:
    floor_below = SnapshotStart(5, frozenset({"w/1"}), 77, ((0, 0), (1, 0)))  # S starts partition 1 at 0
    assert _eventual(floor_below) == [2, 3, 4, 5, 6, 7]  # offset 6 reverses (1, 2), which it read


def test_an_eventual_follower_from_a_snapshot_drops_a_later_copy_of_a_reversal_it_kept() -> None:
    """A retried reconcile task resends its reversals: the copy has the same identity (the record it
    reverses) and is dropped, as every eventual reader drops it."""
    state = _state(watermark=-1)
    rule = follow.EventualAfterSnapshot(filter_for(state, False, S, {0: 0}), dict(S.positions))
    position = follow.ResumePosition({0: 0}, S)
    report = _report()
    out = []
    for message in [*LOG, _reversal(8, (0, 4)), _reversal(9, BELOW)]:
        out += [r.offset for r in follow._hand_out(_reader(), message, rule, report, None, position)]
    assert out == [2, 3, 4, 5, 7]  # 8 is a copy of 5; 9 reverses a record below S's positions
    assert report.by_decision.get(Decision.DUPLICATE.value) == 1
    assert position.offsets == {0: 10}  # both passed: filtered, never held
