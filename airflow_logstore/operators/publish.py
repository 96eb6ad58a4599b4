"""LogStorePublishVisibleOffsetsOperator: advance the visibility watermark from committed snapshots."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_logstore.hooks.logstore import LogStoreHook


class LogStorePublishVisibleOffsetsOperator(BaseOperator):
    """Mark the Kafka offsets of committed snapshots visible to consistent readers.

    Copies live snapshots' commits into the control topic's ledger, then moves the per-partition
    watermark up to the first record that is still undecided. Monotonic and idempotent: running it
    twice (an Airflow retry) never moves the watermark backwards.

    :param table: ``namespace.table``
    """

    template_fields: Sequence[str] = ("table",)
    ui_color = "#c9e4c5"

    def __init__(
        self,
        *,
        table: str,
        logstore_conn_id: str = LogStoreHook.default_conn_name,
        kafka_config_id: str | None = "kafka_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.logstore_conn_id = logstore_conn_id
        self.kafka_config_id = kafka_config_id

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_logstore.publish.publisher import publish_visible_offsets

        report = publish_visible_offsets(
            LogStoreHook(self.logstore_conn_id, self.kafka_config_id).table(self.table)
        )
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
        return report.to_dict()
