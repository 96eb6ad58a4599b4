"""A LogStore table's health as an operator watches it, assembled from what the table's metadata says.

No I/O here: :mod:`airflow_logstore.health.probe` reads the facts, this module turns them into the
sections the Airflow view (and its JSON API) shows. Every section is plain JSON.

- **snapshot**: the current snapshot of ``main``, its age, and the newest LogStore commit on ``main``;
- **log**: per partition the log's start and end offsets against the visible watermark, the records
  not yet visible to consistent readers and how long the oldest of them has waited;
- **batches**: the attempts still undecided above the watermark, *in flight* (the writer's newest
  epoch, not committed yet) and *dead pending* (an older epoch whose successor has not committed past
  its batch), each with writer, batch and epoch, classified by the one rule every reader uses
  (:func:`~airflow_logstore.core.visibility.classify`, on the control state with the live snapshots'
  commits added, as publishing does);
- **reconcile**: the last reconcile report the control topic holds (reversals, dead letters), the
  attempts it keeps pending, the lease holder, how many records no run has scanned yet;
- **retention**: the gaps reconciliation recorded (records retention deleted before a run scanned
  them) and the ones the next run will find (:func:`~airflow_logstore.core.reconcile.window_starts`);
- **compaction**: small data files and delete files of the current snapshot against the table's
  ``self-optimizing.*`` policy, and the last compaction commit;
- **lag**: the visibility lag of each commit made visible in the last hours, from commit (its
  snapshot's time) to the watermark move that made it visible (that control record's broker time).

The lag's history is not stored anywhere new: the control topic already holds every watermark move
(``watermark/<id>``, with the commits it made visible) and ledger entry (with its snapshot's time).
Moves a checkpoint holds are tombstoned, but compaction removes records only after
``min.compaction.lag.ms`` (24 hours, :data:`~airflow_logstore.log.control_topic.CONTROL_TOPIC_CONFIGS`),
so a window of up to :data:`MAX_HOURS` reads them from the topic, at most ``history_limit`` records.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_logstore.compaction.policy import FileStats, SnapshotInfo, ancestors, evaluate_policy
from airflow_logstore.core import control
from airflow_logstore.core.codec import RecordMeta, decode_headers
from airflow_logstore.core.control import ControlRecord, ControlState
from airflow_logstore.core.lease import RECONCILER_LEASE
from airflow_logstore.core.ledger import ledger_name
from airflow_logstore.core.properties import CompactionPolicy, LogStoreConfig
from airflow_logstore.core.reconcile import window_starts
from airflow_logstore.core.summary import OP_COMPACTION, CommitInfo
from airflow_logstore.core.visibility import Decision, classify
from airflow_logstore.exceptions import RecordDecodeError

#: The records above the watermark a page load reads per partition (headers decide; values are not parsed).
TAIL_LIMIT = 2000
#: The control records a page load reads for the lag chart (the newest ones of the window).
HISTORY_LIMIT = 5000
DEFAULT_HOURS = 6.0
#: The control topic's ``min.compaction.lag.ms``: older watermark moves a checkpoint holds may be gone.
MAX_HOURS = 24.0

Bounds = Mapping[int, tuple[int, int]]


@dataclass(frozen=True)
class TailRecord:
    """One log record above the watermark, as the view reads it: where it is, when, who wrote it."""

    partition: int
    offset: int
    timestamp_ms: int | None
    headers: Sequence[tuple[str, Any]] | None


@dataclass(frozen=True)
class TableFacts:
    """What the catalog says of a table: its LogStore settings and every snapshot it still has."""

    name: str
    location: str
    config: LogStoreConfig
    current_snapshot_id: int | None
    snapshots: Sequence[SnapshotInfo]

    def main_line(self) -> list[SnapshotInfo]:
        """The current snapshot and its ancestors, newest first."""
        return ancestors(self.snapshots, self.current_snapshot_id)

    def commits(self) -> list[CommitInfo]:
        """The LogStore commits of ``main``'s live history, oldest first (as ``snapshot_commits``)."""
        return [s.commit for s in reversed(self.main_line()) if s.commit is not None]


def _age_s(now_ms: int, then_ms: int | None) -> float | None:
    return None if then_ms is None else round(max(0, now_ms - then_ms) / 1000, 1)


def _keys(values: Mapping[int, Any]) -> dict[str, Any]:
    return {str(p): v for p, v in sorted(values.items())}


# -- snapshot --------------------------------------------------------------------------------------------


def snapshot_section(facts: TableFacts, now_ms: int) -> dict[str, Any]:
    """The current snapshot of ``main`` and its age; the newest LogStore commit on ``main``."""
    line = facts.main_line()
    current = line[0] if line else None
    newest_commit = next((s.commit for s in line if s.commit is not None), None)
    return {
        "snapshots": len(facts.snapshots),
        "current": None
        if current is None
        else {
            "snapshot_id": current.snapshot_id,
            "timestamp_ms": current.timestamp_ms,
            "age_s": _age_s(now_ms, current.timestamp_ms),
            "logstore_operation": current.operation,
            "commit": ledger_name(current.commit) if current.commit else None,
        },
        "last_commit": None
        if newest_commit is None
        else {
            "commit": ledger_name(newest_commit),
            "writer_id": newest_commit.writer_id,
            "batch_id": newest_commit.batch_id,
            "epoch": newest_commit.epoch,
            "timestamp_ms": newest_commit.timestamp_ms,
            "age_s": _age_s(now_ms, newest_commit.timestamp_ms),
        },
    }


# -- the log against the watermark -----------------------------------------------------------------------


def tail_range(
    watermark: Mapping[int, int], bounds: Bounds, limit: int
) -> tuple[dict[int, int], dict[int, int]]:
    """(start, end) of the tail a page load reads: from the first record not yet visible (after the
    watermark, or the log start) to at most ``limit`` records further, never past the log's end."""
    start = {p: max(watermark.get(p, -1) + 1, low) for p, (low, _) in bounds.items()}
    end = {p: min(high, start[p] + limit) if high > start[p] else start[p] for p, (_, high) in bounds.items()}
    return start, end


def log_section(
    state: ControlState, bounds: Bounds, tail: Iterable[TailRecord], now_ms: int
) -> dict[str, Any]:
    """Per partition the log's offsets against the watermark: records behind and seconds behind.

    *Records behind* are the records above the watermark that retention kept; *seconds behind* is the
    age of the first of them (its Kafka timestamp), 0 when the partition is visible to its end.
    """
    first: dict[int, TailRecord] = {}
    for record in tail:
        if record.partition not in first or record.offset < first[record.partition].offset:
            first[record.partition] = record
    partitions: list[dict[str, Any]] = []
    behind_s: list[float] = []
    for partition, (low, high) in sorted(bounds.items()):
        watermark = state.watermark.get(partition, -1)
        behind = max(0, high - max(watermark + 1, low))
        oldest = first[partition] if behind and partition in first else None
        waiting_since = oldest.timestamp_ms if oldest is not None else None
        behind_s.append((_age_s(now_ms, waiting_since) or 0.0) if behind else 0.0)
        partitions.append(
            {
                "partition": partition,
                "log_start": low,
                "log_end": high,
                "watermark": watermark,
                "behind_records": behind,
                "oldest_invisible_offset": oldest.offset if oldest is not None else None,
                "oldest_invisible_ms": waiting_since,
                "behind_s": behind_s[-1],
            }
        )
    return {
        "partitions": partitions,
        "behind_records": sum(p["behind_records"] for p in partitions),
        "behind_s": max(behind_s, default=0.0),
        "watermark": _keys(state.watermark),
        "log_end": _keys({p: high for p, (_, high) in bounds.items()}),
    }


# -- batches above the watermark --------------------------------------------------------------------------


def batches_section(
    tail: Iterable[TailRecord],
    state: ControlState,
    start: Mapping[int, int],
    end: Mapping[int, int],
    bounds: Bounds,
) -> dict[str, Any]:
    """The undecided attempts above the watermark, by (writer, batch, epoch), and what the rest is.

    :param state: the control state with the live snapshots' commits added (``merged_state``).
    :param start: per partition where the tail read started; ``end`` where it stopped.
    """
    attempts: dict[tuple[Decision, str, int, int], dict[str, Any]] = {}
    decisions: dict[str, int] = {}
    scanned = undecodable = 0
    for record in tail:
        scanned += 1
        try:
            meta = decode_headers(record.headers)
        except RecordDecodeError:
            undecodable += 1
            continue
        decision = classify(meta, record.partition, record.offset, state)
        decisions[decision.value] = decisions.get(decision.value, 0) + 1
        if decision.undecided:
            _count_attempt(attempts, decision, meta, record)
    found = sorted(attempts.values(), key=lambda a: (a["writer_id"], a["batch_id"], a["epoch"]))
    unread = {p: bounds[p][1] - end[p] for p in bounds if bounds[p][1] > end.get(p, bounds[p][1])}
    return {
        "in_flight": [a for a in found if a["state"] == Decision.IN_FLIGHT.value],
        "dead_pending": [a for a in found if a["state"] == Decision.DEAD_PENDING.value],
        "scanned": scanned,
        "undecodable": undecodable,
        "decisions": dict(sorted(decisions.items())),
        "read_from": _keys(start),
        "truncated": bool(unread),
        "not_read": _keys(unread),
    }


def _count_attempt(
    attempts: dict[tuple[Decision, str, int, int], dict[str, Any]],
    decision: Decision,
    meta: RecordMeta,
    record: TailRecord,
) -> None:
    key = (decision, meta.writer_id, meta.batch_id, meta.epoch)
    found = attempts.setdefault(
        key,
        {
            "state": decision.value,
            "writer_id": meta.writer_id,
            "batch_id": meta.batch_id,
            "epoch": meta.epoch,
            "log_only": meta.log_only,
            "records": 0,
            "first_offsets": {},
            "first_seen_ms": None,
        },
    )
    found["records"] += 1
    found["first_offsets"].setdefault(str(record.partition), record.offset)
    stamp = record.timestamp_ms
    if stamp is not None and (found["first_seen_ms"] is None or stamp < found["first_seen_ms"]):
        found["first_seen_ms"] = stamp


# -- reconciliation and retention -----------------------------------------------------------------------


#: The numbers of a reconcile run's report that its progress record keeps (``core.reconcile.progress_value``).
REPORT_FIELDS = ("scanned", "redundant", "reversed", "reasserted", "already_reversed", "dead_lettered")


def reconcile_section(state: ControlState, bounds: Bounds, now_ms: int) -> dict[str, Any]:
    """The last reconcile report in the control topic, the attempts it keeps pending, the lease.

    A run records its progress (and its report) only when something changed, so the report shown is
    that of the last run that changed anything.
    """
    progress = state.reconcile_progress
    last_run = None
    if progress:
        report = progress.get("report") or {}
        last_run = {
            "run": progress.get("run"),
            "owner": progress.get("owner"),
            "recorded_at_ms": progress.get("recorded_at_ms"),
            "age_s": _age_s(now_ms, progress.get("recorded_at_ms")),
            **{name: int(report.get(name, 0)) for name in REPORT_FIELDS},
        }
    pending = [
        {
            "partition": int(partition),
            "writer_id": str(attempt[0]),
            "epoch": int(attempt[1]),
            "batch_id": int(attempt[2]),
            "task": str(attempt[3]),
            "log_only": bool(attempt[4]),
            "first_offset": int(attempt[5]),
            "last_offset": int(attempt[6]),
        }
        for partition, attempts in sorted(((progress or {}).get("pending") or {}).items())
        for attempt in attempts
    ]
    holder = state.live_lease(RECONCILER_LEASE)
    positions = state.reconcile_positions
    unscanned = sum(max(0, high - max(int(positions.get(p, 0)), low)) for p, (low, high) in bounds.items())
    return {
        "last_run": last_run,
        "pending_attempts": pending,
        "lease": None
        if holder is None
        else {"owner": holder.owner, "lease_id": holder.lease_id, "expires_at_ms": holder.expires_at_ms},
        "positions": _keys(positions),
        "unscanned_records": unscanned,
        "fenced_writes": state.fenced_writes,
    }


def retention_section(state: ControlState, bounds: Bounds, config: LogStoreConfig) -> dict[str, Any]:
    """Retention gaps: the ones reconciliation recorded, and the ones its next run will find now."""
    recorded = [
        {"partition": partition, **{k: v for k, v in gap.items() if k != "partition"}}
        for partition, gap in sorted(state.gaps.items())
    ]
    _, upcoming, warnings, _ = window_starts(state, bounds)
    return {
        "retention_ms": config.retention_ms,
        "recorded": recorded,
        "upcoming": [gap.to_dict() for gap in upcoming],
        "warnings": warnings,
        "needs_hybrid_reread": bool(recorded or upcoming),
    }


# -- compaction -------------------------------------------------------------------------------------------


def compaction_section(
    facts: TableFacts, stats: FileStats | None, policy: CompactionPolicy, now_ms: int
) -> dict[str, Any]:
    """Small data files and delete files of the current snapshot against the policy; the last compaction
    commit on ``main`` (a run that found nothing to do commits nothing, and leaves no trace here)."""
    last = next((s for s in facts.main_line() if s.operation == OP_COMPACTION), None)
    section: dict[str, Any] = {
        "enabled": policy.enabled,
        "small_file_size": policy.small_file_size,
        "min_small_files": policy.min_small_files,
        "last_run": None
        if last is None
        else {
            "snapshot_id": last.snapshot_id,
            "timestamp_ms": last.timestamp_ms,
            "age_s": _age_s(now_ms, last.timestamp_ms),
        },
    }
    if stats is None:
        return {**section, "files": None, "due": False, "reasons": ["the table has no snapshot yet"]}
    decision = evaluate_policy(stats, policy)
    return {
        **section,
        "files": stats.to_dict(),
        "small_files": stats.small_data_files,
        "delete_files": stats.delete_files,
        "due": decision.compact,
        "reasons": list(decision.reasons),
    }


# -- the visibility lag over the last hours --------------------------------------------------------------


def lag_section(
    history: Iterable[ControlRecord],
    state: ControlState,
    commits: Iterable[CommitInfo],
    *,
    now_ms: int,
    hours: float,
    truncated: bool,
) -> dict[str, Any]:
    """Per commit made visible in the window: its visibility lag (snapshot commit to watermark move).

    :param history: the control records of the window, in offset order (tombstones included).
    :param commits: the live snapshots' commits (a commit's time, when the window lacks its ledger entry).
    :param truncated: the window held more records than were read (evenly spaced slices of it were).
    """
    since = now_ms - int(hours * 3600 * 1000)
    committed_at = {ledger_name(c): c.timestamp_ms for c in [*commits, *state.commits.values()]}
    moves = []
    for record in history:
        if record.value is None:
            continue
        if record.key.startswith(control.K_COMMIT):
            try:
                entry = CommitInfo.from_json(record.value)
            except (KeyError, TypeError, ValueError):
                continue
            committed_at.setdefault(ledger_name(entry), entry.timestamp_ms)
        elif record.key == control.K_WATERMARK or record.key.startswith(control.K_WATERMARK_PREFIX):
            moves.append(record)
    points, unknown = [], 0
    for move in moves:
        assert move.value is not None
        visible_at = move.timestamp_ms or move.value.get("published_at_ms")
        if visible_at is None or visible_at < since:
            continue
        for name in move.value.get("commits") or []:
            at = committed_at.get(str(name))
            if at is None:
                unknown += 1
                continue
            points.append(
                {
                    "commit": str(name),
                    "visible_at_ms": int(visible_at),
                    "lag_s": round(max(0, visible_at - at) / 1000, 3),
                }
            )
    points.sort(key=lambda p: (p["visible_at_ms"], p["commit"]))
    lags = [float(p["lag_s"]) for p in points]
    return {
        "hours": hours,
        "from_ms": since,
        "to_ms": now_ms,
        "points": points,
        "moves": len(moves),
        "unknown_commit_times": unknown,
        "truncated": truncated,
        "median_s": round(statistics.median(lags), 3) if lags else None,
        "max_s": max(lags, default=None),
    }
