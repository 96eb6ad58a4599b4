"""The in-memory world the simulation's actors share: a Kafka log, a control topic, an Iceberg catalog.

Nothing here decides anything about the protocol; it only stores and returns what was written, with
the atomicity the real systems give (an append gets the next offset; ``main`` moves by compare-and-set).
Every record and snapshot also carries *ground truth* the real systems do not have (which Spark task
attempt produced a record), used only by the oracle.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from airflow_logstore.core import control
from airflow_logstore.core.control import ControlRecord, ControlState
from airflow_logstore.core.summary import CommitInfo

Row = dict[str, Any]


def row_id(row: Row) -> str:
    """A row as a canonical string (multiset element of a table or a folded log)."""
    return json.dumps(row, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, eq=False)
class TaskRun:
    """Ground truth: one run of one Spark task (identity by object, never by its tag)."""

    writer_id: str
    epoch: int
    batch_id: int
    partition_id: int
    attempt_number: int
    attempt_id: int
    tag: str


@dataclass(frozen=True)
class LogEntry:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    origin: TaskRun | None  # None: written by the reconciler


class KafkaLog:
    """The table's log topic: partitions of records, offsets from 0 (no retention in this model)."""

    def __init__(self, partitions: int) -> None:
        self.partitions: list[list[LogEntry]] = [[] for _ in range(partitions)]

    def append(
        self,
        partition: int,
        key: bytes | None,
        value: bytes,
        headers: list[tuple[str, bytes]] | tuple[tuple[str, bytes], ...],
        origin: TaskRun | None,
    ) -> int:
        records = self.partitions[partition]
        entry = LogEntry(partition, len(records), key, value, tuple(headers), origin)
        records.append(entry)
        return entry.offset

    def end_offsets(self) -> dict[int, int]:
        return {p: len(records) for p, records in enumerate(self.partitions)}

    def bounds(self) -> dict[int, tuple[int, int]]:
        return {p: (0, len(records)) for p, records in enumerate(self.partitions)}

    def scan(self, start: dict[int, int], end: dict[int, int]) -> Iterator[LogEntry]:
        for partition, records in enumerate(self.partitions):
            yield from records[start.get(partition, 0) : end.get(partition, 0)]


class ControlTopic:
    """The control topic (one partition); ``read`` folds it from the start, as ``ControlTopic.read`` does."""

    def __init__(self) -> None:
        self.records: list[ControlRecord] = []
        self.clock = 0
        self._folded = ControlState()  # fold() of the records so far (fold is incremental by design)
        self._count = 0

    def append(self, key: str, value: dict[str, Any] | None) -> int:
        self.clock += 1
        offset = len(self.records)
        self.records.append(ControlRecord(key, value, offset, self.clock))
        return offset

    def read(self) -> ControlState:
        """``ControlTopic.read``: the whole topic folded; a fresh object the caller may change."""
        control.fold(self.records[self._count :], self._folded)
        self._count = len(self.records)
        s = self._folded
        return replace(
            s,
            epochs=dict(s.epochs),
            commits=dict(s.commits),
            watermark=dict(s.watermark),
            watermark_commits=list(s.watermark_commits),
            leases={k: list(v) for k, v in s.leases.items()},
            reconcile_positions=dict(s.reconcile_positions),
            gaps=dict(s.gaps),
        )

    def claim_epoch(self, writer_id: str) -> int:
        return self.append(control.epoch_key(writer_id), {"writer": writer_id}) + 1

    def record_commit(self, commit: CommitInfo) -> None:
        self.append(control.commit_key(commit.writer_id, commit.batch_id), commit.to_json())


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    parent_id: int | None
    sequence_number: int
    summary: dict[str, str]
    rows: Counter[str]  # multiset of row_id(row); a key table holds each key once
    timestamp_ms: int = 0

    @cached_property
    def commit(self) -> CommitInfo | None:
        """The LogStore commit its summary describes (``CommitInfo.from_summary``), parsed once."""
        return CommitInfo.from_summary(
            self.summary, snapshot_id=self.snapshot_id, sequence_number=self.sequence_number
        )


@dataclass(frozen=True)
class TableView:
    """The table as one ``load()`` saw it: immutable."""

    main: int | None
    snapshots: dict[int, Snapshot]

    def current(self) -> Snapshot | None:
        return self.snapshots.get(self.main) if self.main is not None else None

    def ancestors(self, snapshot_id: int | None = None) -> list[Snapshot]:
        """``snapshot_id`` (default main) and its live ancestors, newest first."""
        chain = []
        snapshot = self.snapshots.get(snapshot_id if snapshot_id is not None else self.main or -1)
        while snapshot is not None:
            chain.append(snapshot)
            snapshot = self.snapshots.get(snapshot.parent_id) if snapshot.parent_id is not None else None
        return chain


@dataclass
class Catalog:
    """An Iceberg catalog holding one table: snapshots, refs, a compare-and-set on ``main``."""

    snapshots: dict[int, Snapshot] = field(default_factory=dict)
    refs: dict[str, int] = field(default_factory=dict)
    last_sequence: int = 0
    next_id: int = 1
    history: list[int] = field(default_factory=list)  # ground truth: every snapshot main pointed to, in order

    def load(self) -> TableView:
        return TableView(self.refs.get("main"), dict(self.snapshots))

    def stage(
        self, parent_id: int | None, summary: dict[str, str], rows: Counter[str], branch: str
    ) -> Snapshot:
        """Write a snapshot on a branch (a staged commit): it takes the table's next sequence number."""
        self.last_sequence += 1
        snapshot = Snapshot(self.next_id, parent_id, self.last_sequence, summary, rows, self.last_sequence)
        self.next_id += 1
        self.snapshots[snapshot.snapshot_id] = snapshot
        self.refs[branch] = snapshot.snapshot_id
        return snapshot

    def cas_main(self, expected: int | None, new: int, branch: str | None = None) -> bool:
        """Move ``main`` from ``expected`` to ``new`` (dropping ``branch``) only if it is ``expected``."""
        if self.refs.get("main") != expected:
            return False
        self.refs["main"] = new
        self.history.append(new)
        if branch is not None:
            self.refs.pop(branch, None)
        return True

    def drop_branch(self, branch: str) -> None:
        self.refs.pop(branch, None)

    def expire(self, snapshot_ids: tuple[int, ...]) -> list[int]:
        """Remove snapshots; like Iceberg, never one a ref (main or a branch) points to."""
        referenced = set(self.refs.values())
        removed = [s for s in snapshot_ids if s in self.snapshots and s not in referenced]
        for snapshot_id in removed:
            del self.snapshots[snapshot_id]
        return removed
