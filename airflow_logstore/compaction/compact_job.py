"""The compaction job: Iceberg's Spark maintenance actions, driven by the LogStore policy.

Steps (each reported; a dry run only plans and lists):

1. **Policy**: file statistics of the current snapshot (pyiceberg) against the table's
   ``self-optimizing.*`` thresholds (:func:`airflow_logstore.compaction.policy.evaluate_policy`).
2. **Rewrite** (only when the policy says so, or ``force``): Iceberg's bin-pack data-file rewrite
   (what ``CALL system.rewrite_data_files`` runs) with the target size and, when deletes are over their
   thresholds, ``delete-file-threshold=1`` so every data file with deletes is rewritten with its
   deletes applied; then dangling delete files are removed and the remaining position-delete files
   are compacted (``rewrite_position_delete_files``).
3. **Expire snapshots** with the retention policy, after
   :func:`~airflow_logstore.compaction.policy.secure_ledger` made sure the control-topic ledger holds
   every commit that expires.
4. **Remove orphan files** older than a safe age.

**Marking the snapshots.** Iceberg 1.12.0 applies the session settings
``spark.sql.iceberg.snapshot-property.*`` to writes (INSERT/MERGE...) only: the maintenance procedures
ignore them (verified: a ``rewrite_data_files`` CALL under that setting commits a snapshot without the
property; the upstream change for actions, apache/iceberg#15842, is not in 1.12.0). So the job calls
the same actions through their Java API (``SparkActions``, via py4j) and sets the summary with
``snapshotProperty(...)``. ``remove-dangling-deletes=true`` is *not* used: Iceberg runs that step as
an internal action without the caller's properties, which would leave an unmarked snapshot; the job
runs ``removeDanglingDeleteFiles`` itself, marked.

**Conflicts.** Each commit is all or nothing (partial progress off). A rewrite that loses a race with a
concurrent dual-write commit (``ValidationException``: new deletes for a replaced file) fails without
changing the table; it is planned again from the new state, up to ``max_attempts`` times, then the run
reports ``aborted`` (the writer's data is never touched: Iceberg validates before committing).

The actions run in a separate session (``spark.newSession()``): its SQL settings are not the writer's,
so a dual write in the same application never leaks its ``logstore.*`` summary into a compaction
snapshot, nor the other way round.
"""

from __future__ import annotations

import argparse
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_logstore.compaction.policy import (
    COMPACTION_SUMMARY,
    S_COMPACTION_RUN,
    CompactionOptions,
    CompactionReport,
    PolicyDecision,
    RetentionPolicy,
    evaluate_policy,
    file_stats,
    orphan_cutoff,
    plan_expiry,
    rewrite_options,
    secure_ledger,
    snapshot_infos,
    throughput,
)
from airflow_logstore.exceptions import CommitConflictError
from airflow_logstore.table.commit_retry import RetryOutcome, retry_iceberg_commit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_logstore.table.catalog import CatalogSpec
    from airflow_logstore.table.tables import LogStoreTable

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_LISTED_ORPHANS = 50


class IcebergActions:
    """Iceberg's Spark actions on one table, through py4j, every commit marked as a compaction."""

    def __init__(self, spark: SparkSession, table_name: str, summary: Mapping[str, str]) -> None:
        self.spark = spark
        self.jvm: Any = spark._jvm  # type: ignore[attr-defined]
        self.jsession = spark._jsparkSession  # type: ignore[attr-defined]
        self.table_name = table_name
        self.summary = dict(summary)

    @contextmanager
    def _active(self) -> Iterator[None]:
        """Make this session the JVM thread's active one for a call, then put the previous one back.

        Iceberg resolves the catalog of a table name through the *active* session, a JVM thread-local;
        a Python thread of its own (py4j pins one JVM thread to it) has none.
        """
        sessions = self.jvm.org.apache.spark.sql.SparkSession
        previous = sessions.getActiveSession()
        sessions.setActiveSession(self.jsession)
        try:
            yield
        finally:
            if previous.isDefined():
                sessions.setActiveSession(previous.get())
            else:
                sessions.clearActiveSession()

    def _table(self) -> Any:
        table = self.jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(self.jsession, self.table_name)
        table.refresh()  # the session's catalog may cache the table: plan from the latest metadata
        return table

    def _actions(self) -> Any:
        return self.jvm.org.apache.iceberg.spark.actions.SparkActions.get(self.jsession)

    def _marked(self, action: Any) -> Any:
        for key, value in self.summary.items():
            action = action.snapshotProperty(key, value)
        return action

    def rewrite_data_files(self, options: Mapping[str, str]) -> dict[str, int]:
        with self._active():
            action = self._actions().rewriteDataFiles(self._table()).binPack()
            for key, value in options.items():
                action = action.option(key, value)
            result = self._marked(action).execute()
            return {
                "data_files_rewritten": int(result.rewrittenDataFilesCount()),
                "data_files_added": int(result.addedDataFilesCount()),
                "bytes_rewritten": int(result.rewrittenBytesCount()),
                "delete_files_removed": int(result.removedDeleteFilesCount()),
                "failed_data_files": int(result.failedDataFilesCount()),
            }

    def remove_dangling_deletes(self) -> int:
        with self._active():
            result = self._marked(self._actions().removeDanglingDeleteFiles(self._table())).execute()
            return sum(1 for _ in result.removedDeleteFiles())

    def rewrite_position_deletes(self, options: Mapping[str, str]) -> dict[str, int]:
        with self._active():
            action = self._actions().rewritePositionDeletes(self._table())
            for key, value in options.items():
                action = action.option(key, value)
            result = self._marked(action).execute()
            return {
                "position_delete_files_rewritten": int(result.rewrittenDeleteFilesCount()),
                "position_delete_files_added": int(result.addedDeleteFilesCount()),
                "position_delete_bytes_rewritten": int(result.rewrittenBytesCount()),
            }

    def expire_snapshots(self, older_than_ms: int, retain_last: int) -> dict[str, int]:
        with self._active():
            action = self._actions().expireSnapshots(self._table()).expireOlderThan(older_than_ms)
            result = action.retainLast(retain_last).execute()
            return {
                "data_files": int(result.deletedDataFilesCount()),
                "position_delete_files": int(result.deletedPositionDeleteFilesCount()),
                "equality_delete_files": int(result.deletedEqualityDeleteFilesCount()),
                "manifests": int(result.deletedManifestsCount()),
                "manifest_lists": int(result.deletedManifestListsCount()),
            }

    def remove_orphan_files(self, older_than_ms: int, *, dry_run: bool) -> list[str]:
        with self._active():
            action = self._actions().deleteOrphanFiles(self._table()).olderThan(older_than_ms)
            if dry_run:
                # A java.util.function.Consumer that only collects: lists the orphans, deletes nothing.
                action = action.deleteWith(self.jvm.java.util.stream.Stream.builder())
            return [str(location) for location in action.execute().orphanFileLocations()]


def run_compaction(
    spark: SparkSession,
    handle: LogStoreTable,
    options: CompactionOptions | None = None,
    *,
    now_ms: Callable[[], int] | None = None,
) -> CompactionReport:
    """Compact one LogStore table (see the module docstring); returns the report."""
    options = options or CompactionOptions()
    options.validate()
    clock = now_ms or (lambda: int(time.time() * 1000))
    started = time.monotonic()
    run_id = uuid.uuid4().hex[:16]
    report = CompactionReport(str(handle.name), run_id, dry_run=options.dry_run)
    session = spark.newSession()
    actions = IcebergActions(session, handle.spark_name(), {**COMPACTION_SUMMARY, S_COMPACTION_RUN: run_id})

    table = handle.load()
    policy = options.policy(handle.config(table).compaction)
    start_snapshot = table.current_snapshot()
    start_sequence = (start_snapshot.sequence_number or 0) if start_snapshot else 0
    before = file_stats(table, policy.small_file_size)
    decision = evaluate_policy(before, policy, force=options.force)
    report.before = before.to_dict()
    report.decision = decision.to_dict()
    report.snapshots["before"] = len(table.snapshots())
    report.start_snapshot_id = start_snapshot.snapshot_id if start_snapshot else None
    report.seconds["policy"] = round(time.monotonic() - started, 3)
    log.info("compaction %s of %s: %s", run_id, handle.name, decision.summary)

    if options.dry_run:
        report.status = "dry-run"
        report.rewrite = {"planned": decision.compact, "options": _rewrite_options(decision, options)}
    elif decision.compact:
        _rewrite(actions, handle, decision, options, report)
    else:
        report.status = "disabled" if not policy.enabled else "nothing-to-do"

    if options.expire_snapshots:
        _expire(actions, handle, options, report, clock)
    if options.remove_orphans:
        _remove_orphans(actions, options, report, clock)

    table = handle.load()
    after = before if options.dry_run else file_stats(table, policy.small_file_size)
    report.after = after.to_dict()
    report.snapshots["after"] = len(table.snapshots())
    report.compaction_snapshots = [
        s.snapshot_id
        for s in sorted(table.snapshots(), key=lambda s: s.sequence_number or 0)
        if (s.sequence_number or 0) > start_sequence
        and s.summary is not None
        and s.summary.additional_properties.get(S_COMPACTION_RUN) == run_id
    ]
    report.seconds["total"] = round(time.monotonic() - started, 3)
    log.info(
        "compaction %s of %s: %s; data files %s -> %s, delete files %s -> %s, %s snapshots expired, "
        "%s orphan files removed, %.1f s",
        run_id,
        handle.name,
        report.status,
        before.data_files,
        after.data_files,
        before.delete_files,
        after.delete_files,
        report.snapshots.get("expired", 0),
        report.orphans.get("removed", 0),
        report.seconds["total"],
    )
    return report


def _rewrite_options(decision: PolicyDecision, options: CompactionOptions) -> dict[str, str]:
    return rewrite_options(decision, options.rewrite_options, target_file_size=options.target_file_size)


def _with_retries(
    what: str, step: Callable[[], T], options: CompactionOptions, outcome: RetryOutcome
) -> T | None:
    return retry_iceberg_commit(step, what=what, attempts=options.max_attempts, outcome=outcome)


def _rewrite(
    actions: IcebergActions,
    handle: LogStoreTable,
    decision: PolicyDecision,
    options: CompactionOptions,
    report: CompactionReport,
) -> None:
    started = time.monotonic()
    rewrite_opts = _rewrite_options(decision, options)
    outcome, deletes_outcome = RetryOutcome(), RetryOutcome()
    numbers: dict[str, Any] = {"options": rewrite_opts}
    try:
        result = _with_retries(
            f"rewrite of {handle.name}", lambda: actions.rewrite_data_files(rewrite_opts), options, outcome
        )
        numbers.update(result or {})
        # Deletes left behind: the ones of files that were rewritten are dangling now; drop them, then
        # compact what still applies to files that stay (small position-delete files).
        stats = file_stats(handle.load(), decision.policy.small_file_size)
        if stats.delete_files:
            numbers["dangling_delete_files_removed"] = _with_retries(
                f"dangling-delete removal of {handle.name}",
                actions.remove_dangling_deletes,
                options,
                deletes_outcome,
            )
            stats = file_stats(handle.load(), decision.policy.small_file_size)
        if stats.position_delete_files >= 2:
            position_options = {"min-input-files": "2", "partial-progress.enabled": "false"}
            numbers.update(
                _with_retries(
                    f"position-delete rewrite of {handle.name}",
                    lambda: actions.rewrite_position_deletes(position_options),
                    options,
                    deletes_outcome,
                )
                or {}
            )
        report.status = "compacted"
    except CommitConflictError as exc:
        # Every attempt lost its race with a concurrent commit: nothing of the failed step is in the
        # table (Iceberg validates before it commits and cleans up the files it wrote).
        log.warning("compaction of %s aborted: %s", handle.name, exc)
        report.status = "aborted"
        report.warnings.append(str(exc))
    seconds = time.monotonic() - started
    numbers["attempts"] = outcome.attempts  # of the data-file rewrite
    numbers["conflicts"] = [*(outcome.conflicts or []), *(deletes_outcome.conflicts or [])]
    numbers["seconds"] = round(seconds, 3)
    numbers["bytes_per_second"] = throughput(int(numbers.get("bytes_rewritten", 0)), seconds)
    report.rewrite = numbers
    report.seconds["rewrite"] = round(seconds, 3)


def _expire(
    actions: IcebergActions,
    handle: LogStoreTable,
    options: CompactionOptions,
    report: CompactionReport,
    clock: Callable[[], int],
) -> None:
    started = time.monotonic()
    table = handle.load()
    retention = RetentionPolicy.resolve(
        table.properties, options.max_snapshot_age_ms, options.min_snapshots_to_keep
    )
    current = table.current_snapshot()
    plan = plan_expiry(snapshot_infos(table), current.snapshot_id if current else None, retention, clock())
    info: dict[str, Any] = {
        "retention": {
            "max_snapshot_age_ms": retention.max_snapshot_age_ms,
            "min_snapshots_to_keep": retention.min_snapshots_to_keep,
            "older_than_ms": plan.older_than_ms,
            "retain_last": plan.retain_last,
        },
        "kept_for_hybrid_reads": list(plan.kept_for_hybrid_reads),
        "commits_in_expired": len(plan.expiring_commits),
    }
    if options.dry_run or not plan.expire:
        info["expired_ids"] = list(plan.expire) if options.dry_run else []
        info["expired"] = len(plan.expire) if options.dry_run else 0
    else:
        info["ledger"] = secure_ledger(handle, table, plan.expiring_commits)
        before_ids = {s.snapshot_id for s in table.snapshots()}
        outcome = RetryOutcome()
        info["deleted_files"] = _with_retries(
            f"snapshot expiry of {handle.name}",
            lambda: actions.expire_snapshots(plan.older_than_ms, plan.retain_last),
            options,
            outcome,
        )
        after_ids = {s.snapshot_id for s in handle.load().snapshots()}
        expired = sorted(before_ids - after_ids)
        info["expired_ids"] = expired
        info["expired"] = len(expired)
        info["attempts"] = outcome.attempts
    report.snapshots.update(info)
    report.seconds["expire"] = round(time.monotonic() - started, 3)


def _remove_orphans(
    actions: IcebergActions, options: CompactionOptions, report: CompactionReport, clock: Callable[[], int]
) -> None:
    started = time.monotonic()
    cutoff = orphan_cutoff(clock(), options.orphan_age_ms, allow_unsafe=options.allow_unsafe_orphan_age)
    files = actions.remove_orphan_files(cutoff, dry_run=options.dry_run)
    report.orphans = {
        "age_ms": options.orphan_age_ms,
        "older_than_ms": cutoff,
        "dry_run": options.dry_run,
        "found": len(files),
        "removed": 0 if options.dry_run else len(files),
        "files": files[:MAX_LISTED_ORPHANS],
    }
    report.seconds["orphans"] = round(time.monotonic() - started, 3)


# -- the job's command line -------------------------------------------------------------------------


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"'{text}' is not key=value")
    return key.strip(), value.strip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the job and of ``logstore compact`` (one definition for both)."""
    parser.add_argument("--dry-run", action="store_true", help="plan and report; change nothing")
    parser.add_argument("--force", action="store_true", help="rewrite whatever the policy says")
    parser.add_argument(
        "--target-size",
        type=int,
        default=None,
        help="target data file size in bytes (default: self-optimizing.target-size)",
    )
    parser.add_argument(
        "--rewrite-option",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="extra option of Iceberg's rewrite_data_files, e.g. max-file-group-size-bytes=...",
    )
    parser.add_argument("--no-expire", action="store_true", help="do not expire snapshots")
    parser.add_argument(
        "--max-snapshot-age-ms",
        type=int,
        default=None,
        help="expire snapshots older than this (default: history.expire.max-snapshot-age-ms, 5 days)",
    )
    parser.add_argument(
        "--min-snapshots-to-keep",
        type=int,
        default=None,
        help="always keep this many (default: history.expire.min-snapshots-to-keep, 1)",
    )
    parser.add_argument("--no-orphans", action="store_true", help="do not remove orphan files")
    parser.add_argument(
        "--orphan-age-ms", type=int, default=None, help="remove orphan files older than this (default 3 days)"
    )
    parser.add_argument(
        "--allow-unsafe-orphan-age",
        action="store_true",
        help="accept an orphan age under 1 hour (only when nothing writes to the table)",
    )
    parser.add_argument("--max-attempts", type=int, default=3, help="attempts of a commit that conflicts")


def options_from_args(args: argparse.Namespace) -> CompactionOptions:
    from airflow_logstore.compaction.policy import DEFAULT_ORPHAN_AGE_MS

    return CompactionOptions(
        dry_run=bool(args.dry_run),
        force=bool(args.force),
        target_file_size=args.target_size,
        rewrite_options=dict(args.rewrite_option or []),
        expire_snapshots=not args.no_expire,
        max_snapshot_age_ms=args.max_snapshot_age_ms,
        min_snapshots_to_keep=args.min_snapshots_to_keep,
        remove_orphans=not args.no_orphans,
        orphan_age_ms=DEFAULT_ORPHAN_AGE_MS if args.orphan_age_ms is None else args.orphan_age_ms,
        allow_unsafe_orphan_age=bool(args.allow_unsafe_orphan_age),
        max_attempts=args.max_attempts,
    )


def parser() -> argparse.ArgumentParser:
    from airflow_logstore.spark.results import add_report_id

    result = argparse.ArgumentParser(prog="compact", description="Compact a LogStore table")
    result.add_argument("--table", required=True)
    add_arguments(result)
    add_report_id(result)
    return result


def run(
    spark: SparkSession,
    table: str,
    options: CompactionOptions,
    catalog: CatalogSpec | None = None,
    kafka_extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    from airflow_logstore.table.tables import LogStoreTable

    return run_compaction(spark, LogStoreTable.open(table, catalog, kafka_extra), options).to_dict()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark_jobs/compact.py``: prints one ``LOGSTORE_RESULT {json}`` line (and writes
    the report next to the table when ``--report-id`` is given); a failure leaves its failure report
    there instead (:func:`~airflow_logstore.spark.results.run_table_job`)."""
    from airflow_logstore.spark.results import run_table_job

    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def compact(spark: Any, handle: LogStoreTable) -> dict[str, Any]:
        options = options_from_args(args)
        options.validate()
        return run_compaction(spark, handle, options).to_dict()

    return run_table_job("compaction", args.table, args.report_id, compact)


__all__ = ["IcebergActions", "add_arguments", "main", "options_from_args", "parser", "run", "run_compaction"]
