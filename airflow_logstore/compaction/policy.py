"""Compaction of LogStore tables: the policy, the snapshot-expiry plan and the report (no Spark here).

The Spark side (:mod:`airflow_logstore.compaction.compact_job`) runs Iceberg's actions; this module decides
*whether* and *what*, from table metadata read with pyiceberg:

- **Policy** (Amoro's ``self-optimizing.*`` properties): compaction is worth it when at least
  ``minor.trigger.file-count`` data files are smaller than ``target-size / fragment-ratio`` (merge
  them), or as many delete files exist, or deleted rows / data rows exceeds
  ``major.trigger.duplicate-ratio`` (rewrite the data files that have deletes). Otherwise the report
  says "nothing to do", with the numbers.
- **Retention** (Iceberg's ``history.expire.max-snapshot-age-ms`` / ``history.expire.min-snapshots-to-keep``,
  or options): which snapshots expire. Two LogStore rules come on top:

  1. every LogStore commit of an expiring snapshot must be in the control topic's ledger first
     (:func:`secure_ledger`): visibility, hybrid reads and reconciliation read batch -> epoch ->
     offsets from there once the snapshot is gone;
  2. the oldest kept snapshot must resolve its log positions: a compaction snapshot carries none (its
     data equals its parent's), so a hybrid read walks up to the nearest LogStore ancestor, and that
     ancestor is kept (:func:`plan_expiry`).

- **Orphan files** are only removed when older than a safe age (default 3 days, never under one hour
  unless a caller forces it: a younger file may belong to a commit in flight).

Compaction snapshots carry ``logstore.operation=compaction`` (and ``logstore.compaction-run``), so
``CommitInfo.from_summary`` ignores them and sensors never fire on them. They deliberately carry no
``logstore.log-positions``: a rewrite that commits on top of a concurrent batch would otherwise claim
the positions of the snapshot it started from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.checkpoint import RETIRED_EPOCH
from airflow_logstore.core.properties import CompactionPolicy
from airflow_logstore.core.summary import OP_COMPACTION, S_OPERATION, S_POSITIONS, CommitInfo
from airflow_logstore.exceptions import LogStoreError, OptionError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_logstore.core.control import ControlState
    from airflow_logstore.table.tables import LogStoreTable

#: Summary key naming the compaction run that committed a snapshot (next to ``logstore.operation``).
S_COMPACTION_RUN = "logstore.compaction-run"
COMPACTION_SUMMARY = {S_OPERATION: OP_COMPACTION}

# Iceberg's own retention properties (TableProperties.MAX_SNAPSHOT_AGE_MS / MIN_SNAPSHOTS_TO_KEEP).
MAX_SNAPSHOT_AGE_KEY = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_KEY = "history.expire.min-snapshots-to-keep"
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
DEFAULT_MIN_SNAPSHOTS = 1

HOUR_MS = 3600 * 1000
DEFAULT_ORPHAN_AGE_MS = 3 * 24 * HOUR_MS
MIN_ORPHAN_AGE_MS = HOUR_MS

CONTENT_DATA, CONTENT_POSITION_DELETES, CONTENT_EQUALITY_DELETES = 0, 1, 2


class CompactionSafetyError(LogStoreError):
    """Expiring would lose LogStore history (the ledger lacks a commit): nothing was expired."""


# -- file statistics --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileStats:
    """The live files of one snapshot, in numbers."""

    data_files: int = 0
    data_bytes: int = 0
    data_records: int = 0
    small_data_files: int = 0
    small_data_bytes: int = 0
    delete_files: int = 0
    delete_bytes: int = 0
    position_delete_files: int = 0
    equality_delete_files: int = 0
    deleted_records: int = 0

    @property
    def delete_ratio(self) -> float:
        """Deleted rows (position + equality deletes) per data row."""
        return self.deleted_records / self.data_records if self.data_records else 0.0

    @property
    def files(self) -> int:
        return self.data_files + self.delete_files

    @property
    def bytes(self) -> int:
        return self.data_bytes + self.delete_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "files": self.files,
            "bytes": self.bytes,
            "delete_ratio": round(self.delete_ratio, 4),
        }


def stats_from_files(files: Iterable[Mapping[str, Any]], small_file_size: int) -> FileStats:
    """Count files given as rows of ``content``, ``file_size_in_bytes`` and ``record_count``."""
    counts = dict.fromkeys(FileStats.__dataclass_fields__, 0)
    for row in files:
        content = int(row["content"])
        size = int(row["file_size_in_bytes"])
        records = int(row["record_count"])
        if content == CONTENT_DATA:
            counts["data_files"] += 1
            counts["data_bytes"] += size
            counts["data_records"] += records
            if size < small_file_size:
                counts["small_data_files"] += 1
                counts["small_data_bytes"] += size
        else:
            counts["delete_files"] += 1
            counts["delete_bytes"] += size
            counts["deleted_records"] += records
            key = "position_delete_files" if content == CONTENT_POSITION_DELETES else "equality_delete_files"
            counts[key] += 1
    return FileStats(**counts)


def file_stats(table: Table, small_file_size: int, snapshot_id: int | None = None) -> FileStats:
    """The live data and delete files of the current (or a given) snapshot, read with pyiceberg."""
    if snapshot_id is None and table.current_snapshot() is None:
        return FileStats()
    files = table.inspect.files(snapshot_id).select(["content", "file_size_in_bytes", "record_count"])
    return stats_from_files(files.to_pylist(), small_file_size)


# -- the policy -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyDecision:
    """Whether compaction is worth it, and why (or why not), in numbers."""

    compact: bool
    apply_deletes: bool
    reasons: tuple[str, ...]
    stats: FileStats
    policy: CompactionPolicy
    forced: bool = False

    @property
    def summary(self) -> str:
        verdict = "compact" if self.compact else "nothing to do"
        return f"{verdict}: {'; '.join(self.reasons)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "compact": self.compact,
            "apply_deletes": self.apply_deletes,
            "forced": self.forced,
            "reasons": list(self.reasons),
            "summary": self.summary,
            "thresholds": policy_dict(self.policy),
        }


def policy_dict(policy: CompactionPolicy) -> dict[str, Any]:
    return {
        "enabled": policy.enabled,
        "target_file_size": policy.target_file_size,
        "small_file_size": policy.small_file_size,
        "min_small_files": policy.min_small_files,
        "delete_ratio": policy.delete_ratio,
    }


def evaluate_policy(stats: FileStats, policy: CompactionPolicy, *, force: bool = False) -> PolicyDecision:
    """Decide from the numbers; ``force`` compacts whatever they say (still reporting them)."""
    small_trigger = max(2, policy.min_small_files)  # merging one file into one file gains nothing
    small = (
        f"{stats.small_data_files} small data files (< {policy.small_file_size} bytes) "
        f"{'>=' if stats.small_data_files >= small_trigger else '<'} {small_trigger}"
    )
    deletes = (
        f"{stats.delete_files} delete files "
        f"{'>=' if stats.delete_files >= policy.min_small_files else '<'} {policy.min_small_files}"
    )
    over_ratio = stats.deleted_records > 0 and stats.delete_ratio > policy.delete_ratio
    ratio = f"delete ratio {stats.delete_ratio:.3f} {'>' if over_ratio else '<='} {policy.delete_ratio:g}"

    if force:
        return PolicyDecision(
            True, stats.delete_files > 0, ("forced", small, deletes, ratio), stats, policy, forced=True
        )
    if not policy.enabled:
        return PolicyDecision(
            False, False, ("self-optimizing.enabled=false", small, deletes, ratio), stats, policy
        )
    by_small = stats.small_data_files >= small_trigger
    by_deletes = stats.delete_files > 0 and stats.delete_files >= policy.min_small_files
    apply_deletes = by_deletes or over_ratio
    reasons = [text for text, hit in ((small, by_small), (deletes, by_deletes), (ratio, over_ratio)) if hit]
    if not reasons:
        reasons = [small, deletes, ratio]
    return PolicyDecision(by_small or apply_deletes, apply_deletes, tuple(reasons), stats, policy)


def rewrite_options(
    decision: PolicyDecision, extra: Mapping[str, str] | None = None, *, target_file_size: int | None = None
) -> dict[str, str]:
    """Options of Iceberg's bin-pack rewrite (the ``rewrite_data_files`` procedure) for a decision."""
    target = target_file_size or decision.policy.target_file_size
    options = {
        "target-file-size-bytes": str(target),
        # Amoro's fragments: files under target / fragment-ratio are the ones worth merging.
        "min-file-size-bytes": str(min(decision.policy.small_file_size, target)),
        "min-input-files": "2",
        "partial-progress.enabled": "false",  # one commit per attempt: all or nothing, then retry
    }
    if decision.apply_deletes:
        options["delete-file-threshold"] = "1"  # rewrite every data file that has deletes: apply them
    if decision.forced:
        options["rewrite-all"] = "true"
    options.update({str(k): str(v) for k, v in (extra or {}).items()})
    return options


# -- retention --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetentionPolicy:
    max_snapshot_age_ms: int = DEFAULT_MAX_SNAPSHOT_AGE_MS
    min_snapshots_to_keep: int = DEFAULT_MIN_SNAPSHOTS

    @classmethod
    def resolve(
        cls,
        properties: Mapping[str, str],
        max_snapshot_age_ms: int | None = None,
        min_snapshots_to_keep: int | None = None,
    ) -> RetentionPolicy:
        """Options first, then the table's ``history.expire.*`` properties, then Iceberg's defaults."""
        age = max_snapshot_age_ms
        if age is None:
            age = _int_property(properties, MAX_SNAPSHOT_AGE_KEY, DEFAULT_MAX_SNAPSHOT_AGE_MS)
        keep = min_snapshots_to_keep
        if keep is None:
            keep = _int_property(properties, MIN_SNAPSHOTS_KEY, DEFAULT_MIN_SNAPSHOTS)
        if age < 0:
            raise OptionError("max-snapshot-age-ms", f"must be at least 0, got {age}")
        if keep < 1:
            raise OptionError("min-snapshots-to-keep", f"must be at least 1, got {keep}")
        return cls(int(age), int(keep))


def _int_property(properties: Mapping[str, str], key: str, default: int) -> int:
    raw = properties.get(key)
    if raw is None or not str(raw).strip():
        return default
    try:
        return int(str(raw).strip())
    except ValueError:
        raise OptionError(key, f"expected an integer, got '{raw}'") from None


@dataclass(frozen=True)
class SnapshotInfo:
    """What expiry planning needs to know about one snapshot."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    has_positions: bool = False
    operation: str | None = None
    commit: CommitInfo | None = None


def snapshot_infos(table: Table) -> list[SnapshotInfo]:
    infos = []
    for snapshot in table.snapshots():
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        infos.append(
            SnapshotInfo(
                snapshot.snapshot_id,
                snapshot.parent_snapshot_id,
                snapshot.timestamp_ms,
                S_POSITIONS in summary,
                summary.get(S_OPERATION),
                CommitInfo.from_summary(
                    summary,
                    snapshot_id=snapshot.snapshot_id,
                    sequence_number=snapshot.sequence_number,
                    timestamp_ms=snapshot.timestamp_ms,
                ),
            )
        )
    return infos


@dataclass(frozen=True)
class ExpiryPlan:
    """Which snapshots go, and the arguments that make Iceberg keep exactly the others.

    Iceberg keeps the current snapshot's ancestors while fewer than ``retain_last`` are kept or while
    they are not older than ``older_than_ms``; ``older_than_ms`` is never later than the oldest kept
    snapshot, so a commit landing between planning and expiring cannot push a kept one out.
    """

    older_than_ms: int
    retain_last: int
    keep: tuple[int, ...]
    expire: tuple[int, ...]
    kept_for_hybrid_reads: tuple[int, ...]
    expiring_commits: tuple[CommitInfo, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "older_than_ms": self.older_than_ms,
            "retain_last": self.retain_last,
            "keep": list(self.keep),
            "expire": list(self.expire),
            "kept_for_hybrid_reads": list(self.kept_for_hybrid_reads),
            "expiring_commits": [f"{c.writer_id}/{c.batch_id}/{c.epoch}" for c in self.expiring_commits],
        }


def ancestors(snapshots: Sequence[SnapshotInfo], current_id: int | None) -> list[SnapshotInfo]:
    """The current snapshot and its live ancestors, newest first."""
    by_id = {s.snapshot_id: s for s in snapshots}
    chain: list[SnapshotInfo] = []
    snapshot = by_id.get(current_id) if current_id is not None else None
    while snapshot is not None and len(chain) <= len(by_id):
        chain.append(snapshot)
        snapshot = by_id.get(snapshot.parent_id) if snapshot.parent_id is not None else None
    return chain


def plan_expiry(
    snapshots: Sequence[SnapshotInfo], current_id: int | None, retention: RetentionPolicy, now_ms: int
) -> ExpiryPlan:
    """Apply the retention policy, then keep what hybrid reads of the kept snapshots need."""
    cutoff = now_ms - retention.max_snapshot_age_ms
    chain = ancestors(snapshots, current_id)
    if not chain:
        return ExpiryPlan(cutoff, retention.min_snapshots_to_keep, (), (), (), ())
    kept = 0
    for snapshot in chain:
        if kept < retention.min_snapshots_to_keep or snapshot.timestamp_ms >= cutoff:
            kept += 1
        else:
            break
    by_policy = kept
    # The oldest kept snapshot must find its log positions among the kept ones (hybrid reads).
    last = kept - 1
    probe = last
    while probe < len(chain) - 1 and not chain[probe].has_positions:
        probe += 1
    if chain[probe].has_positions:
        kept = max(kept, probe + 1)
    keep = chain[:kept]
    older_than = min(cutoff, keep[-1].timestamp_ms)
    keep_ids = {s.snapshot_id for s in keep}
    chain_ids = {s.snapshot_id for s in chain}
    expire = [s for s in chain[kept:]]
    expire += [
        s for s in snapshots if s.snapshot_id not in chain_ids and s.timestamp_ms < older_than
    ]  # not an ancestor of the current snapshot (e.g. rolled back): goes by age alone
    return ExpiryPlan(
        older_than_ms=older_than,
        retain_last=max(retention.min_snapshots_to_keep, kept),
        keep=tuple(s.snapshot_id for s in keep),
        expire=tuple(s.snapshot_id for s in expire if s.snapshot_id not in keep_ids),
        kept_for_hybrid_reads=tuple(s.snapshot_id for s in chain[by_policy:kept]),
        # only commits of main's line were ever committed: a staging branch's leftover never was
        expiring_commits=tuple(s.commit for s in chain[kept:] if s.commit is not None),
    )


def secure_ledger(handle: LogStoreTable, table: Table, expiring: Sequence[CommitInfo]) -> dict[str, Any]:
    """Copy live commits into the control topic's ledger, then check every expiring one is there.

    :param table: the table as loaded for the expiry plan (its live snapshots are the ones copied).
    :raises CompactionSafetyError: when a commit of an expiring snapshot is missing from the ledger
        (or recorded with another epoch); the caller must not expire anything then.
    """
    from airflow_logstore.core.ledger import missing_commits
    from airflow_logstore.publish.publisher import record_commits
    from airflow_logstore.table.tables import snapshot_commits

    config = handle.config(table)
    if not config.enabled:
        return {"ledger": "none (the table has no LogStore)", "added": [], "checked": 0}
    ctl = handle.control(config)
    added = record_commits(ctl, missing_commits(ctl.read(), snapshot_commits(table)))
    missing = unrecorded_commits(ctl.read(), expiring)  # read back what the topic holds, not what we wrote
    if missing:
        raise CompactionSafetyError(
            f"the control-topic ledger of {handle.name} lacks {len(missing)} commit(s) of snapshots "
            f"that would expire: {', '.join(missing[:10])}; no snapshot was expired"
        )
    return {"ledger": config.control_topic, "added": added, "checked": len(expiring)}


def unrecorded_commits(state: ControlState, expiring: Iterable[CommitInfo]) -> list[str]:
    """The expiring commits the ledger lacks or holds with another epoch, as "w/b/e (why)".

    A retired entry counts as recorded: its records are settled.
    """
    missing = []
    for commit in expiring:
        entry = state.committed(commit.writer_id, commit.batch_id)
        if entry is None or entry.epoch not in (commit.epoch, RETIRED_EPOCH):
            found = "missing" if entry is None else f"epoch {entry.epoch}"
            missing.append(f"{commit.writer_id}/{commit.batch_id}/{commit.epoch} ({found})")
    return missing


# -- orphan files -----------------------------------------------------------------------------------


def orphan_cutoff(now_ms: int, age_ms: int, *, allow_unsafe: bool = False) -> int:
    """The "older than" timestamp of orphan removal; refuses ages under an hour unless forced."""
    if age_ms < 0:
        raise OptionError("orphan-age-ms", f"must be at least 0, got {age_ms}")
    if age_ms < MIN_ORPHAN_AGE_MS and not allow_unsafe:
        raise OptionError(
            "orphan-age-ms",
            f"{age_ms} ms is under the safe minimum of {MIN_ORPHAN_AGE_MS} ms (1 hour): a younger file "
            "may belong to a commit in flight; pass allow_unsafe_orphan_age only when nothing writes",
        )
    return now_ms - age_ms


# -- options and report -----------------------------------------------------------------------------


@dataclass
class CompactionOptions:
    """What one compaction run does. Defaults: policy-driven rewrite, expiry, orphan removal."""

    dry_run: bool = False
    force: bool = False
    target_file_size: int | None = None
    rewrite_options: dict[str, str] = field(default_factory=dict)
    expire_snapshots: bool = True
    max_snapshot_age_ms: int | None = None
    min_snapshots_to_keep: int | None = None
    remove_orphans: bool = True
    orphan_age_ms: int = DEFAULT_ORPHAN_AGE_MS
    allow_unsafe_orphan_age: bool = False
    max_attempts: int = 3

    def validate(self) -> None:
        if self.target_file_size is not None and self.target_file_size < 1:
            raise OptionError("target-size", f"must be at least 1 byte, got {self.target_file_size}")
        if self.max_attempts < 1:
            raise OptionError("max-attempts", f"must be at least 1, got {self.max_attempts}")
        orphan_cutoff(0, self.orphan_age_ms, allow_unsafe=self.allow_unsafe_orphan_age)

    def policy(self, table_policy: CompactionPolicy) -> CompactionPolicy:
        if self.target_file_size is None:
            return table_policy
        return CompactionPolicy(
            enabled=table_policy.enabled,
            target_file_size=self.target_file_size,
            fragment_ratio=table_policy.fragment_ratio,
            min_small_files=table_policy.min_small_files,
            delete_ratio=table_policy.delete_ratio,
        )


@dataclass
class CompactionReport:
    """What a run did (the operator's XCom, the CLI's output, the job's result line)."""

    table: str
    run_id: str
    status: str = "running"  # compacted | nothing-to-do | disabled | dry-run | aborted
    dry_run: bool = False
    decision: dict[str, Any] = field(default_factory=dict)
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    rewrite: dict[str, Any] = field(default_factory=dict)
    snapshots: dict[str, Any] = field(default_factory=dict)
    orphans: dict[str, Any] = field(default_factory=dict)
    compaction_snapshots: list[int] = field(default_factory=list)
    start_snapshot_id: int | None = None  # the table's current snapshot when the run planned
    warnings: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def throughput(nbytes: int, seconds: float) -> float | None:
    """Bytes per second, or None when nothing was measured."""
    if nbytes <= 0 or seconds <= 0 or math.isnan(seconds):
        return None
    return round(nbytes / seconds, 1)


__all__ = [
    "COMPACTION_SUMMARY",
    "S_COMPACTION_RUN",
    "CompactionOptions",
    "CompactionReport",
    "CompactionSafetyError",
    "ExpiryPlan",
    "FileStats",
    "PolicyDecision",
    "RetentionPolicy",
    "SnapshotInfo",
    "evaluate_policy",
    "file_stats",
    "orphan_cutoff",
    "plan_expiry",
    "rewrite_options",
    "secure_ledger",
    "snapshot_infos",
    "stats_from_files",
    "unrecorded_commits",
]
