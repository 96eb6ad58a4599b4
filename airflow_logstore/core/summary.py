"""What a LogStore commit records in its Iceberg snapshot summary, and the commit ledger entry.

Summary properties of a dual-write snapshot::

    logstore.operation      dual-write | compaction | base
    logstore.writer-id      the writer
    logstore.epoch          its attempt
    logstore.batch-id       the batch this snapshot commits
    logstore.log-offsets    {"<partition>": [first, last], ...}  offsets of this batch's records
    logstore.task-attempts  "0.17,1.18,2.23"  the Spark task attempts whose records were committed:
                            "<partition>.<task attempt id>", unique within the Spark application
    logstore.log-positions  {"<partition>": next, ...}  where a hybrid read of this snapshot starts the
                            log: below it every record was decided before the commit
                            (``core.visibility.commit_positions``)
    logstore.log-included   "w/1,w/2"  the commits this snapshot holds whose records lie at or above its
                            positions (a hybrid read skips exactly these in its log part)
    logstore.log-records    number of log records of the batch
    logstore.emit-mode      file,log | file
    logstore.control-topic-id  the id Kafka gave the control topic the writer's epoch was claimed in (a
                            control topic deleted and re-created under the same name has another)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

S_OPERATION = "logstore.operation"
S_WRITER = "logstore.writer-id"
S_EPOCH = "logstore.epoch"
S_BATCH = "logstore.batch-id"
S_OFFSETS = "logstore.log-offsets"
S_TASKS = "logstore.task-attempts"
S_POSITIONS = "logstore.log-positions"
S_RECORDS = "logstore.log-records"
S_EMIT = "logstore.emit-mode"
S_INCLUDED = "logstore.log-included"
S_CONTROL_ID = "logstore.control-topic-id"

OP_DUAL_WRITE = "dual-write"
OP_COMPACTION = "compaction"
OP_BASE = "base"  # the empty snapshot an empty table gets before its first staged commit

Offsets = dict[int, tuple[int, int]]


def offsets_to_json(offsets: Mapping[int, tuple[int, int]]) -> str:
    return json.dumps(
        {str(p): [first, last] for p, (first, last) in sorted(offsets.items())}, separators=(",", ":")
    )


def offsets_from_json(text: str | None) -> Offsets:
    if not text:
        return {}
    raw = json.loads(text)
    return {int(p): (int(pair[0]), int(pair[1])) for p, pair in raw.items()}


def positions_to_json(positions: Mapping[int, int]) -> str:
    return json.dumps({str(p): int(o) for p, o in sorted(positions.items())}, separators=(",", ":"))


def positions_from_json(text: str | None) -> dict[int, int]:
    if not text:
        return {}
    return {int(p): int(o) for p, o in json.loads(text).items()}


def advance_positions(previous: Mapping[int, int], offsets: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """Positions after a batch: per partition, past the batch's last record (never backwards)."""
    merged = dict(previous)
    for partition, (_, last) in offsets.items():
        merged[partition] = max(merged.get(partition, 0), last + 1)
    return merged


def _name_set(text: str | None) -> frozenset[str] | None:
    """A comma-separated set from a summary: "" is the empty set, absent is None."""
    if text is None:
        return None
    return frozenset(text.split(",")) if text else frozenset()


@dataclass(frozen=True)
class CommitInfo:
    """One committed batch: (writer, batch) -> epoch, snapshot and the log offsets it covers."""

    writer_id: str
    batch_id: int
    epoch: int
    snapshot_id: int | None = None
    sequence_number: int | None = None
    timestamp_ms: int | None = None
    offsets: Offsets = field(default_factory=dict)
    tasks: frozenset[str] | None = None
    positions: dict[int, int] = field(default_factory=dict)
    record_count: int = 0
    emit_mode: str = "file,log"
    included: frozenset[str] | None = None  # "writer/batch" (see S_INCLUDED); None: not recorded
    control_topic_id: str | None = None  # see S_CONTROL_ID; None: not recorded

    @property
    def log_only(self) -> bool:
        """Written to the log only (emit mode ``log``): the ledger entry is the whole commit."""
        return "file" not in self.emit_mode.split(",")

    @property
    def key(self) -> tuple[str, int]:
        return (self.writer_id, self.batch_id)

    def covers(self, partition: int, offset: int, task: str) -> bool:
        """True when the record at (partition, offset) from ``task`` is one this commit made visible."""
        span = self.offsets.get(partition)
        if span is None or not span[0] <= offset <= span[1]:
            return False
        return self.tasks is None or task in self.tasks

    def to_summary(self) -> dict[str, str]:
        summary = {
            S_OPERATION: OP_DUAL_WRITE,
            S_WRITER: self.writer_id,
            S_EPOCH: str(self.epoch),
            S_BATCH: str(self.batch_id),
            S_OFFSETS: offsets_to_json(self.offsets),
            S_POSITIONS: positions_to_json(self.positions),
            S_RECORDS: str(self.record_count),
            S_EMIT: self.emit_mode,
        }
        if self.tasks is not None:
            summary[S_TASKS] = ",".join(sorted(self.tasks))
        if self.included is not None:
            summary[S_INCLUDED] = ",".join(sorted(self.included))
        if self.control_topic_id is not None:
            summary[S_CONTROL_ID] = self.control_topic_id
        return summary

    @classmethod
    def from_summary(
        cls,
        summary: Mapping[str, str],
        *,
        snapshot_id: int | None = None,
        sequence_number: int | None = None,
        timestamp_ms: int | None = None,
    ) -> CommitInfo | None:
        """The commit a snapshot summary describes, or None for snapshots LogStore did not write."""
        if summary.get(S_OPERATION) != OP_DUAL_WRITE or S_BATCH not in summary:
            return None
        tasks = summary.get(S_TASKS)
        included = summary.get(S_INCLUDED)
        return cls(
            writer_id=summary[S_WRITER],
            batch_id=int(summary[S_BATCH]),
            epoch=int(summary[S_EPOCH]),
            snapshot_id=snapshot_id,
            sequence_number=sequence_number,
            timestamp_ms=timestamp_ms,
            offsets=offsets_from_json(summary.get(S_OFFSETS)),
            # "" is an empty set of task attempts (a batch without log records), absent is "any task"
            tasks=frozenset(tasks.split(",")) if tasks else (frozenset() if tasks is not None else None),
            positions=positions_from_json(summary.get(S_POSITIONS)),
            record_count=int(summary.get(S_RECORDS, "0")),
            emit_mode=summary.get(S_EMIT, "file,log"),
            included=_name_set(included),
            control_topic_id=summary.get(S_CONTROL_ID),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "writer_id": self.writer_id,
            "batch_id": self.batch_id,
            "epoch": self.epoch,
            "snapshot_id": self.snapshot_id,
            "sequence_number": self.sequence_number,
            "timestamp_ms": self.timestamp_ms,
            "offsets": {str(p): list(span) for p, span in sorted(self.offsets.items())},
            "tasks": sorted(self.tasks) if self.tasks is not None else None,
            "positions": {str(p): o for p, o in sorted(self.positions.items())},
            "record_count": self.record_count,
            "emit_mode": self.emit_mode,
            **({"control_topic_id": self.control_topic_id} if self.control_topic_id else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CommitInfo:
        tasks = data.get("tasks")
        return cls(
            writer_id=str(data["writer_id"]),
            batch_id=int(data["batch_id"]),
            epoch=int(data["epoch"]),
            snapshot_id=data.get("snapshot_id"),
            sequence_number=data.get("sequence_number"),
            timestamp_ms=data.get("timestamp_ms"),
            offsets={int(p): (int(s[0]), int(s[1])) for p, s in (data.get("offsets") or {}).items()},
            tasks=frozenset(tasks) if tasks is not None else None,
            positions={int(p): int(o) for p, o in (data.get("positions") or {}).items()},
            record_count=int(data.get("record_count", 0)),
            emit_mode=str(data.get("emit_mode", "file,log")),
            control_topic_id=data.get("control_topic_id"),
        )
