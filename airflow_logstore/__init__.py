"""airflow-logstore: a Kafka LogStore beside Apache Iceberg tables, written by PySpark, run by Airflow."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_MODULES = "airflow_logstore"


def get_provider_info() -> dict[str, Any]:
    """What this Airflow provider offers (read by Airflow's ProvidersManager)."""
    return {
        "package-name": "airflow-logstore",
        "name": "LogStore (Iceberg + Kafka)",
        "description": "Dual write to Apache Iceberg tables and their Kafka log from PySpark, with "
        "snapshot-gated visibility, failover reconciliation and compaction.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "LogStore",
                "external-doc-url": "https://github.com/airflow-logstore/airflow-logstore",
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": "LogStore", "python-modules": [f"{_MODULES}.hooks.logstore"]}],
        "operators": [
            {
                "integration-name": "LogStore",
                "python-modules": [
                    f"{_MODULES}.operators.create_table",
                    f"{_MODULES}.operators.dual_write",
                    f"{_MODULES}.operators.publish",
                    f"{_MODULES}.operators.reconcile",
                    f"{_MODULES}.operators.compaction",
                    f"{_MODULES}.operators.read",
                    f"{_MODULES}.operators.read_visible",
                    f"{_MODULES}.operators.streaming_write",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "LogStore", "python-modules": [f"{_MODULES}.sensors.snapshot_commit"]}
        ],
        "triggers": [
            {
                "integration-name": "LogStore",
                "python-modules": [
                    f"{_MODULES}.triggers.snapshot_commit",
                    f"{_MODULES}.triggers.table_events",
                    f"{_MODULES}.triggers.streaming_write",
                ],
            }
        ],
        "plugins": [
            {"name": "logstore", "plugin-class": f"{_MODULES}.plugins.logstore_view.LogStoreViewPlugin"}
        ],
        "connection-types": [
            {
                "hook-class-name": f"{_MODULES}.hooks.logstore.LogStoreHook",
                "connection-type": "logstore",
            }
        ],
    }
