"""LogStoreDualWriteOperator: one batch to the Iceberg table and its Kafka log, through spark-submit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_logstore.operators._base import SparkJobOperator
from airflow_logstore.operators._lineage import Lineage, LineageMixin, location_dataset


class LogStoreDualWriteOperator(LineageMixin, SparkJobOperator):
    """Submit ``spark_jobs/dual_write.py`` through the Airflow Spark provider and report the commit.

    The job produces the batch's log records, then commits the Iceberg write with the batch, epoch
    and offsets in the snapshot summary. A retry of the task after the commit finds the batch in the
    table's snapshots and returns it (``skipped``) without starting Spark; the job itself (a new epoch)
    also skips a batch the ledger holds as committed. An uncommitted one is written again and
    reconciliation reverses the failed attempt's records. The Spark and connection parameters are those of
    :class:`~airflow_logstore.operators._base.SparkJobOperator`.

    :param table: ``namespace.table``
    :param input_path: input file or folder: JSON lines, CSV or Parquet (templated)
    :param batch_id: the batch id, stable across retries of the same run (templated)
    :param writer_id: the writer (default ``<dag_id>.<task_id>``; templated)
    :param emit_mode: ``file,log`` (default), ``log`` or ``file`` (Amoro's ``mixed-format.emit.mode``)
    :param input_format: json, csv or parquet (default: from the file name)
    :param change_column: CDC column with insert/update/delete (optional in the input)
    :param missing_as_null: write null into a nullable column the whole input lacks; by default an insert
        or update without it fails the task (a delete needs only its key), as ``logstore write`` does
    """

    template_fields: Sequence[str] = ("table", "input_path", "batch_id", "writer_id", "emit_mode")
    ui_color = "#f4a460"

    def __init__(
        self,
        *,
        table: str,
        input_path: str,
        batch_id: int | str,
        writer_id: str | None = None,
        emit_mode: str | None = None,
        input_format: str | None = None,
        change_column: str = "op",
        missing_as_null: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.input_path = input_path
        self.batch_id = batch_id
        self.writer_id = writer_id
        self.emit_mode = emit_mode
        self.input_format = input_format
        self.change_column = change_column
        self.missing_as_null = missing_as_null

    def _batch(self) -> int:
        from airflow_logstore.exceptions import OptionError

        try:
            return int(self.batch_id)
        except (TypeError, ValueError):
            raise OptionError("batch_id", f"must be an integer, got {self.batch_id!r}") from None

    def application_args(self, writer_id: str) -> list[str]:
        args = [
            "--table",
            self.table,
            "--input",
            self.input_path,
            "--batch-id",
            str(self._batch()),
            "--writer-id",
            writer_id,
            "--change-column",
            self.change_column,
            "--missing-columns",
            "null" if self.missing_as_null else "error",
        ]
        if self.emit_mode:
            args += ["--emit-mode", self.emit_mode]
        if self.input_format:
            args += ["--input-format", self.input_format]
        return args

    def execute(self, context: Any) -> dict[str, Any]:
        """Write the batch. Errors a retry cannot fix raise ``AirflowFailException``; when the task
        fails for good (such an error, or any error on its last try), the batch's final failure report
        ends the wait of a sensor for it (see :mod:`airflow_logstore.operators._failures`)."""
        from airflow.sdk.exceptions import AirflowTaskTimeout

        from airflow_logstore.operators._failures import fail_fast, fails_for_good

        writer_id = self.writer_id or f"{self.dag_id}.{self.task_id}"
        self._report_id = None
        try:
            with fail_fast():
                self.lineage_result = self._write(context, writer_id)
                return self.lineage_result
        except (Exception, AirflowTaskTimeout) as exc:
            if fails_for_good(exc, context, self.retries):
                self._report_final_failure(writer_id, exc)
            raise

    def lineage(self, result: Mapping[str, Any] | None) -> Lineage:
        """OpenLineage: the input path in; the table (at the batch's snapshot) and its log topic out."""
        table = self.table_lineage(self.table)
        version = (result or {}).get("snapshot_id")
        return Lineage.of([location_dataset(self.input_path)], table.written(self.emit_mode, version))

    def _report_final_failure(self, writer_id: str, error: BaseException) -> None:
        """Best effort (the task's error matters more): the batch's final failure report."""
        from airflow_logstore.operators._failures import report_final_failure

        try:
            batch_id = self._batch()
            handle = self.logstore_table(self.table)
        except Exception as exc:  # no batch id or no table: nothing to report on
            self.log.warning("no final failure report of %s: %s", self.table, exc)
            return
        report_final_failure(
            handle, writer_id=writer_id, batch_id=batch_id, report_id=self._report_id, error=error
        )

    def _write(self, context: Any, writer_id: str) -> dict[str, Any]:
        from airflow_logstore.core.properties import parse_emit_mode
        from airflow_logstore.operators._spark import spark_target
        from airflow_logstore.table.snapshots import commit_xcom, find_commit
        from airflow_logstore.write.inputs import check_input_path

        batch_id = self._batch()
        handle = self.logstore_table(self.table)
        parse_emit_mode(self.emit_mode, handle.config())  # a missing table or bad properties: no Spark
        commit = find_commit(handle, writer_id=writer_id, batch_id=batch_id)
        if commit is not None:  # a retry after the commit: what the job would skip, without Spark
            result: dict[str, Any] = {"skipped": True, "rows_in": 0, "log_records": 0, "noop_deletes": 0}
        else:
            # a missing input fails here, its path first in the task's error, not after Spark's start-up
            checked = check_input_path(
                self.input_path,
                on_this_host=spark_target(self.spark_conn_id).deploy_mode != "cluster",
                table=handle.load,
            )
            self.log.info("%s", checked)
            result = self.run_job(
                handle,
                "dual_write_app.py",
                name=f"logstore-dual-write-{self.table}-{batch_id}",
                application_args=self.application_args(writer_id),
                what=f"dual write of batch {batch_id} of {self.table} by writer '{writer_id}'",
                writer_id=writer_id,
                batch_id=batch_id,
            )
            commit = find_commit(handle, writer_id=writer_id, batch_id=batch_id)
        value: dict[str, Any] = {
            "table": self.table,
            "writer_id": writer_id,
            "batch_id": batch_id,
            "skipped": bool(result.get("skipped", False)),
            "rows_in": result.get("rows_in"),
            "log_records": result.get("log_records"),
            "noop_deletes": result.get("noop_deletes"),
        }
        if commit is not None:
            value.update(commit_xcom(commit, self.table))
        elif result:
            value.update(
                {"snapshot_id": None, "epoch": result.get("epoch"), "offsets": result.get("offsets")}
            )
        self._emit_asset_events(context, value)
        self.log.info(
            "batch %s of %s: %s rows in, %s log records (offsets %s), snapshot %s, epoch %s%s",
            batch_id,
            self.table,
            value.get("rows_in"),
            value.get("log_records"),
            value.get("offsets"),
            value.get("snapshot_id"),
            value.get("epoch"),
            " (already committed: skipped)" if value["skipped"] else "",
        )
        return value

    def _emit_asset_events(self, context: Any, value: dict[str, Any]) -> None:
        """Attach this table's *commit* asset to every asset alias among the outlets (with the commit as
        extra): the batch is committed, not yet visible. DAGs that read the table are scheduled on its
        visible asset (:func:`~airflow_logstore.triggers.assets.logstore_visible_asset`)."""
        from airflow.sdk import Asset, AssetAlias

        from airflow_logstore.triggers.assets import commit_asset_name

        events = context.get("outlet_events") if hasattr(context, "get") else None
        if events is None:
            return
        for outlet in self.outlets or []:
            if isinstance(outlet, AssetAlias):
                extra = {k: value.get(k) for k in ("snapshot_id", "batch_id", "epoch", "writer_id")}
                events[outlet].add(Asset(name=commit_asset_name(self.table)), extra=extra)
