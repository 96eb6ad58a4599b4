"""LogStoreReconcileOperator: reverse the log records that failed writer attempts left behind."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_logstore.operators._base import SparkJobOperator
from airflow_logstore.operators._lineage import Lineage, LineageMixin
from airflow_logstore.operators._options import as_bool

if TYPE_CHECKING:
    from airflow_logstore.table.tables import LogStoreTable

ENGINES = ("python", "spark")


class LogStoreReconcileOperator(LineageMixin, SparkJobOperator):
    """Detect the redundant records of failed writer attempts in a table's log and write their reversals.

    One run scans the log from the last reconciled position to the end offsets at start, writes a
    reversal for every redundant record (and a reassert pair where a later legitimate change of the key
    must stay the key's image), then records its progress — idempotent, fenced by a lease in the
    table's control topic (a concurrent run reports ``status: lease-held`` and writes nothing).
    Returns the JSON report (pushed to XCom): scanned, redundant by writer/batch/epoch, reversed,
    reasserted, skipped in flight, dead-lettered, safe point, retention gaps, positions.

    :param table: ``namespace.table`` (templated)
    :param dry_run: compute the report, write nothing (templated; "True"/"False" accepted)
    :param engine: ``python`` (in the worker, scan processes for large windows) or ``spark`` (submits
        ``spark_jobs/reconcile.py`` for big backlogs)
    :param scanner: how the ``python`` engine reads the log: ``jvm`` (a Java consumer hands the records
        over as columns; needs a JDK), ``librdkafka``, or ``auto`` (the JVM from 200,000 records on, when
        a JDK is installed) (templated)
    :param lease_ttl_s: how long the lease lives without renewal (renewed every third of it)

    The connection parameters, and ``spark_conn_id``, ``jars`` and ``python`` of the ``spark`` engine,
    are :class:`~airflow_logstore.operators._base.SparkJobOperator`'s.
    """

    # ``dry_run`` is kept as ``dry_run_flag``: BaseOperator.dry_run() is a method of every operator
    template_fields: Sequence[str] = ("table", "dry_run_flag", "engine", "scanner")
    ui_color = "#f6d8c9"

    def __init__(
        self,
        *,
        table: str,
        dry_run: bool | str = False,
        engine: str = "python",
        scanner: str = "auto",
        lease_ttl_s: float = 120.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.dry_run_flag = dry_run
        self.engine = engine
        self.scanner = scanner
        self.lease_ttl_s = lease_ttl_s

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_logstore.operators._failures import fail_fast

        with fail_fast():  # a bad option, a missing table or a fenced run fails without retries
            report = self._reconcile()
        self._log(report)
        self.lineage_result = report
        return report

    def lineage(self, result: Mapping[str, Any] | None) -> Lineage:
        """OpenLineage: the log topic in, and out (its reversals) unless a dry run or a run that another
        reconciler's lease kept from writing."""
        log = self.table_lineage(self.table).log()
        if result is None:
            writes = not as_bool(self.dry_run_flag, "dry_run")
        else:
            writes = not result.get("dry_run") and result.get("status") != "lease-held"
        return Lineage.of([log], [log] if writes else [])

    def _reconcile(self) -> dict[str, Any]:
        from airflow_logstore.exceptions import OptionError

        dry_run = as_bool(self.dry_run_flag, "dry_run")
        if self.engine not in ENGINES:
            raise OptionError("engine", f"'{self.engine}' is not one of {', '.join(ENGINES)}")
        handle = self.logstore_table(self.table)
        if self.engine == "spark":
            return self._submit(handle, dry_run)
        from airflow_logstore.reconcile.reconciler import PythonEngine, reconcile

        engine = PythonEngine(scanner=self.scanner)
        return reconcile(handle, dry_run=dry_run, lease_ttl_s=self.lease_ttl_s, engine=engine).to_dict()

    def _submit(self, handle: LogStoreTable, dry_run: bool) -> dict[str, Any]:
        handle.load()  # a missing table fails before Spark starts (the job could not report it)
        args = ["--table", self.table, "--lease-ttl", str(self.lease_ttl_s)]
        if dry_run:
            args.append("--dry-run")
        return self.run_job(
            handle,
            "reconcile_app.py",
            name=f"logstore-reconcile-{self.table}",
            application_args=args,
            what=f"reconciliation of {self.table}",
        )

    def _log(self, report: dict[str, Any]) -> None:
        if report.get("status") == "lease-held":
            self.log.warning(
                "%s: another reconciler holds the lease (%s); nothing done",
                self.table,
                report.get("lease_holder"),
            )
            return
        self.log.info(
            "%s (%s%s): scanned %s records, redundant %s %s, reversed %s, reasserted %s, "
            "already reversed %s, skipped in flight %s, dead-lettered %s; safe point %s; positions %s -> %s",
            self.table,
            report.get("status"),
            ", dry run" if report.get("dry_run") else "",
            report.get("scanned"),
            report.get("redundant"),
            report.get("redundant_by_attempt"),
            report.get("reversed"),
            report.get("reasserted"),
            report.get("already_reversed"),
            report.get("skipped_in_flight"),
            report.get("dead_lettered"),
            report.get("safe_point"),
            report.get("positions_before"),
            report.get("positions_after"),
        )
        for gap in report.get("gaps") or []:
            self.log.warning(
                "%s: partition %s offsets [%s, %s) (%s records) were deleted by retention before "
                "reconciliation; the table's log needs a hybrid re-read from a snapshot",
                self.table,
                gap.get("partition"),
                gap.get("from"),
                gap.get("to"),
                gap.get("count"),
            )
        if report.get("in_flight"):
            self.log.info(
                "%s: records still in flight, left for the next run: %s", self.table, report["in_flight"]
            )
