"""LogStoreCreateTableOperator: create (idempotently) a LogStore table and its Kafka topics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_logstore.operators._base import LogStoreOperator
from airflow_logstore.operators._lineage import Lineage, LineageMixin, TableLineage


class LogStoreCreateTableOperator(LineageMixin, LogStoreOperator):
    """Create an Iceberg v2 table whose properties carry the LogStore settings, plus its topics.

    Validation comes first: a bad property, schema or key fails the task and creates nothing. Running
    it again with the same arguments is a no-op (safe for retries).

    :param table: ``namespace.table``
    :param schema: columns, e.g. ``"id int, name string, ts timestamp"``
    :param primary_key: key columns (Iceberg identifier fields); empty for append-only tables
    :param properties: table properties, e.g. ``{"log-store.enabled": "true", ...}``

    The connection parameters are :class:`~airflow_logstore.operators._base.LogStoreOperator`'s.
    """

    template_fields: Sequence[str] = ("table", "schema", "primary_key", "properties")
    template_fields_renderers = {"properties": "json"}
    ui_color = "#d6ecf3"

    def __init__(
        self,
        *,
        table: str,
        schema: str,
        primary_key: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.schema = schema
        self.primary_key = primary_key
        self.properties = properties

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_logstore.operators._failures import fail_fast
        from airflow_logstore.table.tables import create_table

        key = [self.primary_key] if isinstance(self.primary_key, str) else list(self.primary_key)
        key = [c.strip() for part in key for c in str(part).split(",") if c.strip()]
        with fail_fast():  # a bad property, schema or key fails without retries
            handle = self.logstore_table(self.table)
            result = create_table(
                handle, self.schema, primary_key=key, properties=dict(self.properties or {})
            )
        self.log.info(
            "table %s %s; topic %s %s with %s partitions; control topic %s",
            result.table,
            "created" if result.created else "already existed",
            result.topic,
            "created" if result.topic_created else "verified",
            result.partitions,
            result.control_topic,
        )
        for warning in result.warnings:
            self.log.warning(warning)
        self.lineage_result = result.to_dict()
        return self.lineage_result

    def lineage(self, result: Mapping[str, Any] | None) -> Lineage:
        """OpenLineage: the table, its log topic and its committed feed out. Before the table exists (on
        start) it has no location yet: only the topics its properties name."""
        from pyiceberg.exceptions import NoSuchTableError

        handle = self.lineage_table(self.table)
        try:
            table = TableLineage.load(handle)
        except NoSuchTableError:
            table = TableLineage.planned(handle, dict(self.properties or {}))
        return Lineage.of(outputs=[table.table(), table.log(), table.feed()])
