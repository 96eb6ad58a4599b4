"""airflow-logstore: a Kafka LogStore beside Apache Iceberg tables, written by PySpark, run by Airflow.

The names in :data:`__all__` are the stable API (README, "Public API"); everything else is internal.
They are imported on first use (module ``__getattr__``), so ``import airflow_logstore`` stays cheap:
Airflow imports this package to call :func:`get_provider_info` whenever it discovers providers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_logstore.exceptions import (
        FollowerLagError,
        LogStoreError,
        TableNotFoundError,
        TablePropertyError,
    )
    from airflow_logstore.hooks.logstore import LogStoreHook
    from airflow_logstore.operators.compaction import LogStoreCompactionOperator
    from airflow_logstore.operators.create_table import LogStoreCreateTableOperator
    from airflow_logstore.operators.dual_write import LogStoreDualWriteOperator
    from airflow_logstore.operators.publish import LogStorePublishVisibleOffsetsOperator
    from airflow_logstore.operators.read import LogStoreReadOperator
    from airflow_logstore.operators.reconcile import LogStoreReconcileOperator
    from airflow_logstore.read.follow import follow
    from airflow_logstore.read.reader import LogReader, read_file, read_hybrid, read_log
    from airflow_logstore.sensors.snapshot_commit import SnapshotCommitSensor
    from airflow_logstore.table.tables import LogStoreTable

__version__ = "0.1.0"

#: The stable API: each name and the module it lives in (imported on first use).
_PUBLIC = {
    # Airflow: the hook, the operators, the sensor
    "LogStoreHook": "airflow_logstore.hooks.logstore",
    "LogStoreCreateTableOperator": "airflow_logstore.operators.create_table",
    "LogStoreDualWriteOperator": "airflow_logstore.operators.dual_write",
    "LogStorePublishVisibleOffsetsOperator": "airflow_logstore.operators.publish",
    "LogStoreReconcileOperator": "airflow_logstore.operators.reconcile",
    "LogStoreCompactionOperator": "airflow_logstore.operators.compaction",
    "LogStoreReadOperator": "airflow_logstore.operators.read",
    "SnapshotCommitSensor": "airflow_logstore.sensors.snapshot_commit",
    # reads from Python
    "LogStoreTable": "airflow_logstore.table.tables",
    "LogReader": "airflow_logstore.read.reader",
    "read_log": "airflow_logstore.read.reader",
    "read_hybrid": "airflow_logstore.read.reader",
    "read_file": "airflow_logstore.read.reader",
    "follow": "airflow_logstore.read.follow",
    # the errors a caller handles (every one of the project's errors is a LogStoreError)
    "LogStoreError": "airflow_logstore.exceptions",
    "TablePropertyError": "airflow_logstore.exceptions",
    "TableNotFoundError": "airflow_logstore.exceptions",
    "FollowerLagError": "airflow_logstore.exceptions",
}

__all__ = [
    "FollowerLagError",
    "LogReader",
    "LogStoreCompactionOperator",
    "LogStoreCreateTableOperator",
    "LogStoreDualWriteOperator",
    "LogStoreError",
    "LogStoreHook",
    "LogStorePublishVisibleOffsetsOperator",
    "LogStoreReadOperator",
    "LogStoreReconcileOperator",
    "LogStoreTable",
    "SnapshotCommitSensor",
    "TableNotFoundError",
    "TablePropertyError",
    "follow",
    "get_provider_info",
    "read_file",
    "read_hybrid",
    "read_log",
]


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562)."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'airflow_logstore' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
