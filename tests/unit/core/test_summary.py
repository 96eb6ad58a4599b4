"""Snapshot summaries and ledger entries of LogStore commits."""

from __future__ import annotations

import json

import pytest

from airflow_logstore.core.summary import (
    OP_COMPACTION,
    S_BATCH,
    S_EMIT,
    S_EPOCH,
    S_OFFSETS,
    S_OPERATION,
    S_POSITIONS,
    S_RECORDS,
    S_TASKS,
    S_WRITER,
    CommitInfo,
    advance_positions,
    offsets_from_json,
    offsets_to_json,
    positions_from_json,
    positions_to_json,
)

FULL = CommitInfo(
    writer_id="job-a",
    batch_id=12,
    epoch=40,
    snapshot_id=8812,
    sequence_number=5,
    timestamp_ms=1_700_000_000_000,
    offsets={2: (10, 19), 0: (3, 3)},
    tasks=frozenset({"1.0", "0.0", "2.1"}),
    positions={0: 4, 1: 7, 2: 20},
    record_count=11,
    emit_mode="file,log",
)

COMMITS = [
    FULL,
    CommitInfo("w", 0, 1),
    CommitInfo("w", 3, 2, offsets={0: (0, 0)}, tasks=None, positions={0: 1}, record_count=1),
    CommitInfo("w", 4, 2, offsets={}, tasks=frozenset(), positions={0: 1}, emit_mode="file"),
    CommitInfo("writer/with/slashes", 2**40, 2**35, offsets={5: (2**40, 2**40 + 3)}, emit_mode="log"),
]


def test_summary_layout() -> None:
    assert FULL.to_summary() == {
        S_OPERATION: "dual-write",
        S_WRITER: "job-a",
        S_EPOCH: "40",
        S_BATCH: "12",
        S_OFFSETS: '{"0":[3,3],"2":[10,19]}',
        S_TASKS: "0.0,1.0,2.1",
        S_POSITIONS: '{"0":4,"1":7,"2":20}',
        S_RECORDS: "11",
        S_EMIT: "file,log",
    }
    assert all(isinstance(value, str) for value in FULL.to_summary().values())


def test_summary_without_tasks_omits_the_property() -> None:
    assert S_TASKS not in CommitInfo("w", 1, 1).to_summary()


@pytest.mark.parametrize("commit", COMMITS)
def test_summary_round_trip(commit: CommitInfo) -> None:
    back = CommitInfo.from_summary(
        commit.to_summary(),
        snapshot_id=commit.snapshot_id,
        sequence_number=commit.sequence_number,
        timestamp_ms=commit.timestamp_ms,
    )
    assert back == commit


def test_summary_does_not_carry_snapshot_fields() -> None:
    back = CommitInfo.from_summary(FULL.to_summary())
    assert back is not None
    assert (back.snapshot_id, back.sequence_number, back.timestamp_ms) == (None, None, None)
    assert back.offsets == FULL.offsets and back.tasks == FULL.tasks


@pytest.mark.parametrize("commit", COMMITS)
def test_json_round_trip(commit: CommitInfo) -> None:
    data = commit.to_json()
    assert CommitInfo.from_json(json.loads(json.dumps(data))) == commit


def test_json_layout() -> None:
    assert FULL.to_json() == {
        "writer_id": "job-a",
        "batch_id": 12,
        "epoch": 40,
        "snapshot_id": 8812,
        "sequence_number": 5,
        "timestamp_ms": 1_700_000_000_000,
        "offsets": {"0": [3, 3], "2": [10, 19]},
        "tasks": ["0.0", "1.0", "2.1"],
        "positions": {"0": 4, "1": 7, "2": 20},
        "record_count": 11,
        "emit_mode": "file,log",
    }


def test_from_json_defaults() -> None:
    commit = CommitInfo.from_json({"writer_id": "w", "batch_id": "3", "epoch": "9"})
    assert commit == CommitInfo("w", 3, 9)
    assert commit.tasks is None and commit.offsets == {} and commit.emit_mode == "file,log"


def test_from_summary_defaults() -> None:
    commit = CommitInfo.from_summary({S_OPERATION: "dual-write", S_WRITER: "w", S_BATCH: "3", S_EPOCH: "9"})
    assert commit == CommitInfo("w", 3, 9)


@pytest.mark.parametrize(
    "summary",
    [
        {},
        {"operation": "append", "added-records": "10"},
        {**FULL.to_summary(), S_OPERATION: OP_COMPACTION},
        {key: value for key, value in FULL.to_summary().items() if key != S_OPERATION},
        {key: value for key, value in FULL.to_summary().items() if key != S_BATCH},
    ],
    ids=["empty", "plain-append", "compaction", "no-operation", "no-batch"],
)
def test_from_summary_ignores_non_logstore_snapshots(summary: dict[str, str]) -> None:
    assert CommitInfo.from_summary(summary) is None


def test_key() -> None:
    assert FULL.key == ("job-a", 12)


@pytest.mark.parametrize(
    ("partition", "offset", "task", "covered"),
    [
        (2, 10, "0.0", True),
        (2, 19, "2.1", True),
        (2, 15, "1.0", True),
        (0, 3, "0.0", True),
        (2, 9, "0.0", False),
        (2, 20, "0.0", False),
        (1, 15, "0.0", False),
        (2, 15, "2.0", False),
        (2, 15, "", False),
    ],
)
def test_covers(partition: int, offset: int, task: str, covered: bool) -> None:
    assert FULL.covers(partition, offset, task) is covered


def test_covers_without_task_list_accepts_any_task() -> None:
    commit = CommitInfo("w", 1, 1, offsets={0: (5, 6)}, tasks=None)
    assert commit.covers(0, 5, "anything")
    assert not commit.covers(0, 7, "anything")


def test_covers_nothing_with_empty_task_set() -> None:
    commit = CommitInfo("w", 1, 1, offsets={0: (5, 6)}, tasks=frozenset())
    assert not commit.covers(0, 5, "0.0")


@pytest.mark.parametrize(
    ("previous", "offsets", "expected"),
    [
        ({}, {}, {}),
        ({}, {0: (0, 4)}, {0: 5}),
        ({0: 5, 1: 2}, {0: (5, 9)}, {0: 10, 1: 2}),
        ({0: 10}, {0: (3, 4)}, {0: 10}),
        ({0: 10}, {0: (3, 9)}, {0: 10}),
        ({0: 10}, {1: (0, 0), 2: (7, 8)}, {0: 10, 1: 1, 2: 9}),
    ],
)
def test_advance_positions_never_moves_backwards(
    previous: dict[int, int], offsets: dict[int, tuple[int, int]], expected: dict[int, int]
) -> None:
    before = dict(previous)
    result = advance_positions(previous, offsets)
    assert result == expected
    assert previous == before  # not mutated
    assert all(result[p] >= o for p, o in previous.items())


def test_offsets_json_helpers() -> None:
    text = offsets_to_json({3: (1, 2), 1: (0, 9)})
    assert text == '{"1":[0,9],"3":[1,2]}'
    assert offsets_from_json(text) == {1: (0, 9), 3: (1, 2)}
    assert offsets_from_json(None) == {} and offsets_from_json("") == {}


def test_positions_json_helpers() -> None:
    text = positions_to_json({2: 5, 0: 1})
    assert text == '{"0":1,"2":5}'
    assert positions_from_json(text) == {0: 1, 2: 5}
    assert positions_from_json(None) == {} and positions_from_json("") == {}


def test_included_commits_round_trip_through_the_summary() -> None:
    commit = CommitInfo("w", 3, 7, offsets={0: (1, 2)}, included=frozenset({"w/3", "x/1"}))
    summary = commit.to_summary()
    assert summary["logstore.log-included"] == "w/3,x/1"
    restored = CommitInfo.from_summary(summary)
    assert restored is not None and restored.included == frozenset({"w/3", "x/1"})
    assert CommitInfo.from_summary({**summary, "logstore.log-included": ""}).included == frozenset()  # type: ignore[union-attr]
    without = dict(summary)
    del without["logstore.log-included"]
    assert CommitInfo.from_summary(without).included is None  # type: ignore[union-attr]
