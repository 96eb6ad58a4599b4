"""LogStoreCompactionOperator: policy-driven compaction of a LogStore table, through spark-submit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_logstore.operators._base import SparkJobOperator
from airflow_logstore.operators._lineage import Lineage, LineageMixin
from airflow_logstore.operators._options import as_bool, as_int


class LogStoreCompactionOperator(LineageMixin, SparkJobOperator):
    """Submit ``spark_jobs/compact.py`` through the Airflow Spark provider; the report goes to XCom.

    The job compacts only when the table's ``self-optimizing.*`` thresholds say it is worth it (small
    data files, delete files, delete ratio), else reports "nothing to do"; then it expires snapshots
    (``history.expire.*`` or the arguments below) after copying their LogStore commits into the
    control-topic ledger, and removes orphan files older than a safe age. Compaction snapshots carry
    ``logstore.operation=compaction``: sensors and visibility ignore them. A rewrite that conflicts
    with a concurrent dual write is planned again, or the run reports ``aborted``; it never loses data.

    :param table: ``namespace.table`` (templated)
    :param dry_run: plan and report, change nothing (templated; "True"/"False" strings accepted)
    :param force: rewrite whatever the policy says (templated)
    :param target_file_size: target data file size in bytes (default ``self-optimizing.target-size``)
    :param rewrite_options: extra options of Iceberg's ``rewrite_data_files``
    :param expire_snapshots: expire snapshots after the rewrite
    :param max_snapshot_age_ms: retention age (default ``history.expire.max-snapshot-age-ms``, 5 days)
    :param min_snapshots_to_keep: snapshots always kept (default ``history.expire.min-snapshots-to-keep``)
    :param remove_orphans: remove orphan files
    :param orphan_age_ms: only files older than this are orphans (default 3 days, at least 1 hour)
    :param max_attempts: how often a rewrite that conflicts with a concurrent write is planned again

    The Spark and connection parameters are :class:`~airflow_logstore.operators._base.SparkJobOperator`'s.
    """

    template_fields: Sequence[str] = (
        "table",
        "dry_run_value",
        "force",
        "target_file_size",
        "max_snapshot_age_ms",
        "min_snapshots_to_keep",
        "orphan_age_ms",
    )
    ui_color = "#c9e4ca"

    def __init__(
        self,
        *,
        table: str,
        dry_run: bool | str = False,
        force: bool | str = False,
        target_file_size: int | str | None = None,
        rewrite_options: Mapping[str, str] | None = None,
        expire_snapshots: bool = True,
        max_snapshot_age_ms: int | str | None = None,
        min_snapshots_to_keep: int | str | None = None,
        remove_orphans: bool = True,
        orphan_age_ms: int | str | None = None,
        max_attempts: int = 3,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        # BaseOperator.dry_run is a method: keep the argument under another attribute name.
        self.dry_run_value = dry_run
        self.force = force
        self.target_file_size = target_file_size
        self.rewrite_options = dict(rewrite_options or {})
        self.expire_snapshots = expire_snapshots
        self.max_snapshot_age_ms = max_snapshot_age_ms
        self.min_snapshots_to_keep = min_snapshots_to_keep
        self.remove_orphans = remove_orphans
        self.orphan_age_ms = orphan_age_ms
        self.max_attempts = max_attempts

    def application_args(self) -> list[str]:
        """The job's arguments (validated: a bad value fails the task before Spark starts)."""
        args = ["--table", self.table, "--max-attempts", str(int(self.max_attempts))]
        if as_bool(self.dry_run_value, "dry_run"):
            args.append("--dry-run")
        if as_bool(self.force, "force"):
            args.append("--force")
        if not as_bool(self.expire_snapshots, "expire_snapshots"):
            args.append("--no-expire")
        if not as_bool(self.remove_orphans, "remove_orphans"):
            args.append("--no-orphans")
        for flag, name in (
            ("--target-size", "target_file_size"),
            ("--max-snapshot-age-ms", "max_snapshot_age_ms"),
            ("--min-snapshots-to-keep", "min_snapshots_to_keep"),
            ("--orphan-age-ms", "orphan_age_ms"),
        ):
            number = as_int(getattr(self, name), name)
            if number is not None:
                args += [flag, str(number)]
        for key, option in sorted(self.rewrite_options.items()):
            args += ["--rewrite-option", f"{key}={option}"]
        return args

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_logstore.operators._failures import fail_fast

        with fail_fast():  # bad options, a missing table or bad table properties fail without retries
            report = self._compact()
        before, after = report.get("before") or {}, report.get("after") or {}
        self.log.info(
            "compaction of %s: %s (%s); data files %s -> %s, delete files %s -> %s, bytes %s -> %s, "
            "%s snapshots expired, %s orphan files removed, %s s",
            self.table,
            report.get("status"),
            (report.get("decision") or {}).get("summary"),
            before.get("data_files"),
            after.get("data_files"),
            before.get("delete_files"),
            after.get("delete_files"),
            before.get("bytes"),
            after.get("bytes"),
            (report.get("snapshots") or {}).get("expired"),
            (report.get("orphans") or {}).get("removed"),
            (report.get("seconds") or {}).get("total"),
        )
        for warning in report.get("warnings") or []:
            self.log.warning(warning)
        self.lineage_result = report
        return report

    def lineage(self, result: Mapping[str, Any] | None) -> Lineage:
        """OpenLineage: the table in (at the snapshot the run started from) and out (at its last rewrite's
        snapshot); a dry run writes nothing."""
        table = self.table_lineage(self.table)
        if result is None:
            dry_run = as_bool(self.dry_run_value, "dry_run")
            return Lineage.of([table.table()], [] if dry_run else [table.table()])
        rewritten = result.get("compaction_snapshots") or []
        written = [] if result.get("dry_run") else [table.table(rewritten[-1] if rewritten else None)]
        return Lineage.of([table.table(result.get("start_snapshot_id"))], written)

    def _compact(self) -> dict[str, Any]:
        from airflow_logstore.compaction.compact_job import options_from_args, parser
        from airflow_logstore.compaction.policy import CompactionOptions

        application_args = self.application_args()
        options: CompactionOptions = options_from_args(parser().parse_args(application_args))
        options.validate()  # before Spark starts
        handle = self.logstore_table(self.table)
        handle.load()  # a missing table fails before Spark starts (the job could not report it)
        return self.run_job(
            handle,
            "compact_app.py",
            name=f"logstore-compact-{self.table}",
            application_args=application_args,
            what=f"compaction of {self.table}",
        )
