"""Where a hybrid read of a snapshot starts its log part: the snapshot's, or its nearest LogStore
ancestor's, positions; a snapshot whose positions are gone is refused, never read from offset 0."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.exceptions import OptionError
from airflow_logstore.read.reader import hybrid_file_scan, plan_hybrid, snapshot_positions, snapshot_start


def snapshot(snapshot_id: int, parent: int | None, summary: dict[str, str]) -> Any:
    return SimpleNamespace(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent,
        sequence_number=snapshot_id,
        summary=SimpleNamespace(additional_properties=summary),
    )


class Table:
    def __init__(self, *snapshots: Any) -> None:
        self.snapshots = {s.snapshot_id: s for s in snapshots}

    def scan(self, snapshot_id: int | None = None) -> Any:
        return SimpleNamespace(snapshot_id=snapshot_id)

    def snapshot_by_id(self, snapshot_id: int) -> Any:
        return self.snapshots.get(snapshot_id)

    def current_snapshot(self) -> Any:
        return self.snapshots[max(self.snapshots)] if self.snapshots else None


BASE = snapshot(1, None, {})
COMMIT = snapshot(
    2,
    1,
    CommitInfo("w", 1, 1, offsets={0: (4, 4)}, positions={0: 5}, included=frozenset({"w/1"})).to_summary(),
)
COMPACTION = snapshot(3, 2, {})


def test_a_compaction_snapshot_uses_its_nearest_logstore_ancestor() -> None:
    table = Table(BASE, COMMIT, COMPACTION)
    assert snapshot_positions(table, 3) == (3, {0: 5})  # type: ignore[arg-type]
    start = snapshot_start(table, 3)  # type: ignore[arg-type]
    assert (start.sequence, start.included) == (3, frozenset({"w/1"}))


def test_the_first_snapshot_starts_the_log_at_its_beginning() -> None:
    assert snapshot_positions(Table(BASE), 1) == (1, {})  # type: ignore[arg-type]


def test_a_snapshot_whose_logstore_ancestor_expired_is_refused() -> None:
    """A staging ref kept the compaction snapshot while expiry removed its ancestors: reading the log
    from offset 0 with no included list would return the snapshot's own records again."""
    table = Table(COMPACTION)
    with pytest.raises(OptionError, match=r"snapshot 3 has no log positions any more.*ancestor 2 expired"):
        snapshot_positions(table, 3)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="read a newer snapshot"):
        snapshot_start(table, 3)  # type: ignore[arg-type]


def reader_of(table: Table, partitions: int = 2) -> Any:
    return SimpleNamespace(table=table, config=SimpleNamespace(partitions=partitions))


def test_a_hybrid_plan_starts_the_log_exactly_at_its_snapshots_positions() -> None:
    """The one plan of every hybrid read (read_hybrid, run_read, the read job, the Spark source): the
    snapshot its file part reads, and every partition's first log offset, 0 where the snapshot has none."""
    reader = reader_of(Table(BASE, COMMIT, COMPACTION))
    plan = plan_hybrid(reader, None)
    assert (plan.snapshot_id, plan.log_start, plan.positions()) == (3, {0: 5, 1: 0}, {0: 5})
    assert hybrid_file_scan(reader, plan).snapshot_id == 3
    assert (plan.held.sequence, plan.held.included) == (3, frozenset({"w/1"}))
    assert plan_hybrid(reader_of(Table(BASE, COMMIT, COMPACTION)), 1).log_start == {0: 0, 1: 0}


def test_a_hybrid_plan_of_a_table_without_snapshot_reads_no_file_and_the_whole_log() -> None:
    plan = plan_hybrid(reader_of(Table()), None)
    assert (plan.snapshot_id, plan.log_start, plan.held.included) == (None, {0: 0, 1: 0}, frozenset())
