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
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from airflow_logstore.core import control
from airflow_logstore.core.checkpoint import decode_state
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
    """The table's log topic: partitions of records, offsets from 0, and retention.

    Retention (:meth:`delete_before`) moves a partition's log start as Kafka deletes old segments: the
    records below it are gone for every read (``bounds`` reports the new start, ``scan`` starts there, as
    a consumer reset to ``earliest`` does). They stay in ``partitions`` as ground truth for the oracle.
    """

    def __init__(self, partitions: int) -> None:
        self.partitions: list[list[LogEntry]] = [[] for _ in range(partitions)]
        self.log_start: list[int] = [0] * partitions  # per partition the first offset retention kept

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

    def delete_before(self, partition: int, offset: int) -> range:
        """Retention: delete the partition's records below ``offset`` (never past its end); the offsets
        deleted now."""
        before = self.log_start[partition]
        self.log_start[partition] = max(before, min(offset, len(self.partitions[partition])))
        return range(before, self.log_start[partition])

    def end_offsets(self) -> dict[int, int]:
        return {p: len(records) for p, records in enumerate(self.partitions)}

    def bounds(self) -> dict[int, tuple[int, int]]:
        """kafka_client.partition_offsets: per partition (log start, end offset)."""
        return {p: (self.log_start[p], len(records)) for p, records in enumerate(self.partitions)}

    def deleted(self, start: dict[int, int], end: dict[int, int]) -> set[tuple[int, int]]:
        """Ground truth: the (partition, offset) of ``start`` to ``end`` that retention has deleted."""
        return {
            (p, offset)
            for p in range(len(self.partitions))
            for offset in range(start.get(p, 0), min(self.log_start[p], end.get(p, 0)))
        }

    def scan(self, start: dict[int, int], end: dict[int, int]) -> Iterator[LogEntry]:
        """The records of ``start`` to ``end`` that retention kept (a read below the log start goes on
        from the log start)."""
        for partition, records in enumerate(self.partitions):
            first = max(start.get(partition, 0), self.log_start[partition])
            yield from records[first : end.get(partition, 0)]


class CommittedFeed:
    """The committed topic with its progress topic, as a ``read_committed`` consumer sees them: only what
    committed transactions wrote. A transaction commits only under the newest token of the feed's one
    transactional id (``init_transactions`` fences every earlier one; a fenced or dead publisher's open
    transaction never becomes visible)."""

    def __init__(self) -> None:
        self.records: list[LogEntry] = []  # the copies, in commit order (the originals' entries)
        self.progress: dict[int, int] = {}  # the last committed progress record
        self.tokens = 0  # the transactional id's producer epoch
        self.gaps: set[tuple[int, int]] = set()  # ground truth: (partition, offset) retention took first

    def take_token(self) -> int:
        """``init_transactions``: a new producer epoch; every earlier one is fenced."""
        self.tokens += 1
        return self.tokens

    def commit(self, token: int, copies: list[LogEntry], progress: dict[int, int]) -> bool:
        """The copies and the progress in one transaction: both or nothing (False: fenced)."""
        if token != self.tokens:
            return False
        self.records.extend(copies)
        self.progress = dict(progress)
        return True


class ControlTopic:
    """The control topic (one partition, compacted) and its checkpoint topic.

    ``read`` is ``checkpoints.read_state``: the latest checkpoint (``decode_state`` of its JSON) with the
    control records after its ``through`` folded on; with ``full`` (or while no checkpoint exists) the
    whole topic is folded from offset 0 (what a reader does when there is no checkpoint).

    **Time**: records are stamped by the broker (``LogAppendTime``): ``now``, the scheduler's clock
    (one tick a step), never earlier than the previous stamp. Leases are judged by these stamps.

    **Compaction** (:meth:`clean`, Kafka's log cleaner): a record older than ``lag`` ticks (the topic's
    ``min.compaction.lag.ms``) is removed once a later record of its key exists, and a tombstone older
    than ``lag + delete_retention`` is removed itself. Removed records stay in ``records`` (ground
    truth) but no read returns them. Without a cleaner (``lag`` None), compaction never runs.

    **Checkpoints** are written in a Kafka transaction whose transactional id every publisher of the table
    shares (``checkpoints.maybe_checkpoint``): :meth:`checkpoint_token` is ``init_transactions`` (it
    fences every earlier token), :meth:`write_checkpoint` commits only under the newest token.

    Folding is incremental by design (``fold`` applies record by record), so each fold is cached and
    extended while nothing it read was removed, and every read returns a fresh copy.
    """

    def __init__(
        self,
        full_fold_rate: float = 0.0,
        rng: Any = None,
        lag: int | None = None,
        delete_retention: int = 0,
    ) -> None:
        self.records: list[ControlRecord] = []
        self.removed: set[int] = set()  # offsets the cleaner removed
        self.now = 0  # the scheduler's clock
        self.clock = 0  # the last stamp
        self.lag = lag
        self.delete_retention = delete_retention
        self.checkpoints: list[str] = []  # the checkpoint topic: encode_state(...) as JSON, oldest first
        self.checkpoint_tokens = 0  # the transactional id's producer epoch
        self.full_fold_rate = full_fold_rate  # how often a read ignores the checkpoint (seeded)
        self.rng = rng
        self._full = _Fold(ControlState(), 0)  # the whole topic folded so far
        self._tail: _Fold | None = None  # the latest checkpoint with the records after it folded so far
        self.reads: Counter[str] = Counter()  # coverage: reads from a checkpoint / of the whole topic
        self.known: set[tuple[str, int]] = set()  # every (writer, batch) a read found committed
        self.forgotten: set[tuple[str, int]] = set()  # ... that a later read did not
        self.highest_watermark: dict[int, int] = {}  # per partition the highest watermark a read saw
        self.regressed: set[tuple[int, int, int]] = set()  # (partition, read, highest before) regressions

    def append(self, key: str, value: dict[str, Any] | None) -> int:
        self.clock = max(self.clock, self.now)
        offset = len(self.records)
        self.records.append(ControlRecord(key, value, offset, self.clock))
        return offset

    def live(self, start: int = 0) -> list[ControlRecord]:
        """The records from offset ``start`` on that compaction kept (what a consumer reads)."""
        return [r for r in self.records[start:] if r.offset not in self.removed]

    def clean(self) -> list[int]:
        """One pass of the log cleaner; returns the offsets it removed now."""
        if self.lag is None:
            return []
        latest: dict[str, int] = {}
        for record in self.records:
            latest[record.key] = record.offset
        removed = []
        for record in self.records:
            if record.offset in self.removed or (record.timestamp_ms or 0) > self.now - self.lag:
                continue
            superseded = latest[record.key] != record.offset
            expired = record.value is None and (record.timestamp_ms or 0) <= self.now - self.lag - (
                self.delete_retention
            )
            if superseded or expired:
                self.removed.add(record.offset)
                removed.append(record.offset)
        if removed:
            self._full = _Fold(ControlState(), 0)
            self._tail = None
        return removed

    def checkpoint_token(self) -> int:
        """``init_transactions`` of the checkpointers' shared transactional id: a new producer epoch,
        which fences every earlier one."""
        self.checkpoint_tokens += 1
        return self.checkpoint_tokens

    def write_checkpoint(self, data: dict[str, Any], token: int | None = None) -> bool:
        """checkpoints._append in its transaction: committed unless a newer token fenced ``token``
        (None: written without a transaction, as before checkpoints were fenced)."""
        if token is not None and token != self.checkpoint_tokens:
            return False
        self.checkpoints.append(json.dumps(data, separators=(",", ":")))
        self._tail = None
        return True

    def latest(self, full: bool | None = None) -> tuple[ControlState, int]:
        """checkpoints.latest: (the latest checkpoint's state, the control offset to fold on from)."""
        if full is None:
            full = self.rng is not None and self.rng.random() < self.full_fold_rate
        if not self.checkpoints or full:
            return ControlState(), 0
        state, through = decode_state(json.loads(self.checkpoints[-1]), ControlState)
        assert through < len(self.records), "a checkpoint past the control topic's end"
        return state, through + 1

    def read(self, full: bool | None = None) -> ControlState:
        """checkpoints.read_state: the latest checkpoint + the records after it (a fresh object)."""
        if full is None:
            full = self.rng is not None and self.rng.random() < self.full_fold_rate
        if full or not self.checkpoints:
            cached = self._full
            if self.checkpoints:
                self.reads["control read of the whole topic past a checkpoint"] += 1
        else:
            self.reads["control read from a checkpoint"] += 1
            if self._tail is None:
                state, start = self.latest(full=False)
                state.checkpoint_start = start
                self._tail = _Fold(state, start)
            cached = self._tail
        control.fold(self.live(cached.next), cached.state)
        cached.next = len(self.records)
        self._check_nothing_forgotten(cached.state)
        return copy_state(cached.state)

    def _check_nothing_forgotten(self, state: ControlState) -> None:
        """Ground truth for the oracle: once a read said (writer, batch) is committed, every later read
        must say so too (decisions only move from undecided to decided; retiring changes none)."""
        known = {key for key in self.known if state.committed(*key) is not None}
        self.forgotten |= self.known - known
        self.known |= known | set(state.commits)
        for partition, offset in self.highest_watermark.items():  # W1: it never moves backwards
            if state.watermark.get(partition, -1) < offset:
                self.regressed.add((partition, state.watermark.get(partition, -1), offset))
        for partition, offset in state.watermark.items():
            self.highest_watermark[partition] = max(self.highest_watermark.get(partition, -1), offset)

    def claim_epoch(self, writer_id: str) -> int:
        return self.append(control.epoch_key(writer_id), {"writer": writer_id}) + 1

    def record_commit(self, commit: CommitInfo) -> None:
        self.append(control.commit_key(commit.writer_id, commit.batch_id), commit.to_json())


@dataclass
class _Fold:
    state: ControlState
    next: int  # the next control offset to fold


def copy_state(state: ControlState) -> ControlState:
    """A copy whose containers (two levels deep: ``holes``, ``leases``) the caller may change."""

    def copied(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v
                for k, v in value.items()
            }
        return list(value) if isinstance(value, list) else value

    return ControlState(**{f.name: copied(getattr(state, f.name)) for f in fields(state)})


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

    def cas_main(
        self, expected: int | None, new: int, drop: tuple[str, ...] = (), required: tuple[str, ...] = ()
    ) -> bool:
        """Move ``main`` from ``expected`` to ``new`` and drop the refs ``drop``, in one commit that
        succeeds only if ``main`` is ``expected`` and every ref in ``required`` exists."""
        if self.refs.get("main") != expected or any(ref not in self.refs for ref in required):
            return False
        self.refs["main"] = new
        self.history.append(new)
        for ref in drop:
            self.refs.pop(ref, None)
        return True

    def open_attempt(self, base: int | None, branch: str, tag: str) -> None:
        """A staging branch and a fence tag at ``base``, in one commit."""
        assert base is not None
        self.refs[branch] = self.refs[tag] = base

    def remove_refs(self, refs: list[str]) -> list[str]:
        """Remove branches and tags (one commit); returns those that existed."""
        return [ref for ref in refs if self.refs.pop(ref, None) is not None]

    def drop_branch(self, branch: str) -> None:
        self.refs.pop(branch, None)

    def expire(self, snapshot_ids: tuple[int, ...]) -> list[int]:
        """Remove snapshots; like Iceberg, never one a ref (main or a branch) points to."""
        referenced = set(self.refs.values())
        removed = [s for s in snapshot_ids if s in self.snapshots and s not in referenced]
        for snapshot_id in removed:
            del self.snapshots[snapshot_id]
        return removed
