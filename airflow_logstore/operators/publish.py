"""LogStorePublishVisibleOffsetsOperator: advance the visibility watermark from committed snapshots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_logstore.operators._base import LogStoreOperator
from airflow_logstore.operators._lineage import Lineage, LineageMixin


class LogStorePublishVisibleOffsetsOperator(LineageMixin, LogStoreOperator):
    """Mark the Kafka offsets of committed snapshots visible to consistent readers.

    Copies live snapshots' commits into the control topic's ledger, then moves the per-partition
    watermark up to the first record that is still undecided. Monotonic and idempotent: running it
    twice (an Airflow retry) never moves the watermark backwards.

    :param table: ``namespace.table``

    The connection parameters are :class:`~airflow_logstore.operators._base.LogStoreOperator`'s.
    """

    template_fields: Sequence[str] = ("table",)
    ui_color = "#c9e4c5"

    def __init__(
        self,
        *,
        table: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_logstore.operators._failures import fail_fast
        from airflow_logstore.publish.publisher import publish_visible_offsets

        with fail_fast():  # a missing table or topic fails without retries; a broker that is down retries
            report = publish_visible_offsets(self.logstore_table(self.table))
        self.log.info(
            "watermark of %s: %s -> %s (%s records scanned, %s commits newly visible, "
            "%s added to the ledger)%s",
            self.table,
            report.watermark_before,
            report.watermark_after,
            report.scanned,
            len(report.newly_visible),
            len(report.ledger_added),
            f"; blocked by {report.blocked_by}" if report.blocked_by else "",
        )
        self.lineage_result = report.to_dict()
        return self.lineage_result

    def lineage(self, result: Mapping[str, Any] | None) -> Lineage:
        """OpenLineage: the table (at the snapshot it published up to) and its log topic in; the committed
        feed out when the table has one (the control topic is the protocol's own state: left out)."""
        table = self.table_lineage(self.table)
        version = (result or {}).get("current_snapshot_id")
        return Lineage.of([table.table(version), table.log()], [table.feed()])
