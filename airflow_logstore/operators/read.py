"""LogStoreReadOperator: read a LogStore table (file, log or hybrid) and report, or save, what it saw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.operators._lineage import Lineage, LineageMixin, location_dataset

READ_MODES = ("file", "log", "hybrid")


class LogStoreReadOperator(LineageMixin, BaseOperator):
    """Read a table in one of the read modes; push counts (and optionally save rows as JSON lines).

    :param table: ``namespace.table``
    :param mode: ``file``, ``log`` or ``hybrid`` (templated)
    :param consistency: ``consistent`` (or Paimon's name of it, ``transactional``) or ``eventual``; default:
        the table's setting (templated)
    :param changelog_mode: ``all-kinds`` or ``append-only``; default: the table's setting
    :param start: log start: earliest, latest, timestamp:<ms|ISO>, snapshot:<id> (templated)
    :param snapshot_id: the snapshot of a file or hybrid read (default: current; templated)
    :param output_path: when set, the rows are written there as JSON lines (templated)
    :param options: per-read hints, e.g. ``{"log-store.consistency-guarantee.enabled": "true"}``
    :param scanner: how a log read takes the records: ``jvm`` (a Java consumer hands them over as
        columns; needs a JDK), ``librdkafka``, or ``auto`` (the JVM from 200,000 records on, when a JDK is
        installed) (templated)
    """

    template_fields: Sequence[str] = (
        "table",
        "mode",
        "consistency",
        "start",
        "snapshot_id",
        "output_path",
        "scanner",
    )
    ui_color = "#dfe7fd"

    def __init__(
        self,
        *,
        table: str,
        mode: str = "log",
        consistency: str | None = None,
        changelog_mode: str | None = None,
        start: str = "earliest",
        snapshot_id: int | str | None = None,
        output_path: str | None = None,
        options: Mapping[str, str] | None = None,
        normalize: bool = False,
        scanner: str = "auto",
        logstore_conn_id: str = LogStoreHook.default_conn_name,
        kafka_config_id: str | None = "kafka_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.mode = mode
        self.consistency = consistency
        self.changelog_mode = changelog_mode
        self.start = start
        self.snapshot_id = snapshot_id
        self.output_path = output_path
        self.options = dict(options or {})
        self.normalize = normalize
        self.scanner = scanner
        self.logstore_conn_id = logstore_conn_id
        self.kafka_config_id = kafka_config_id

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_logstore.operators._failures import fail_fast

        with fail_fast():  # a bad option or a missing table fails without retries
            summary = self._read()
        self.log.info("read %s (%s): %s", self.table, self.mode, summary)
        self.lineage_result = summary
        return summary

    def lineage(self, result: Mapping[str, Any] | None) -> Lineage:
        """OpenLineage: what the mode reads (the table at the snapshot read, the log topic, or both); the
        output file out, when there is one."""
        from airflow_logstore.operators._options import as_int

        table = self.table_lineage(self.table)
        version = as_int(self.snapshot_id, "snapshot_id") if result is None else result.get("snapshot_id")
        inputs = [
            table.table(version) if self.mode in ("file", "hybrid") else None,
            table.log() if self.mode in ("log", "hybrid") else None,
        ]
        output = location_dataset(self.output_path) if self.output_path else None
        return Lineage.of(inputs, [output])

    def _read(self) -> dict[str, Any]:
        from airflow_logstore.exceptions import OptionError
        from airflow_logstore.read.reader import run_read

        if self.mode not in READ_MODES:
            raise OptionError("mode", f"must be one of {', '.join(READ_MODES)}, got {self.mode!r}")
        try:
            snapshot = int(self.snapshot_id) if self.snapshot_id not in (None, "", "None") else None
        except (TypeError, ValueError):
            raise OptionError("snapshot_id", f"must be an integer, got {self.snapshot_id!r}") from None
        handle = LogStoreHook(self.logstore_conn_id, self.kafka_config_id).table(self.table)
        return run_read(
            handle,
            mode=self.mode,
            consistency=self.consistency or None,
            changelog_mode=self.changelog_mode,
            start=self.start,
            snapshot_id=snapshot,
            options=self.options,
            normalize=self.normalize,
            output_path=self.output_path,
            scanner=self.scanner,
        )
