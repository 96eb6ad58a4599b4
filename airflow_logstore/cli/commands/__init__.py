"""Subcommands of the ``logstore`` CLI; each module has ``register(subparsers)``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_logstore.table.catalog import CatalogSpec
    from airflow_logstore.table.tables import LogStoreTable

#: librdkafka logs each failed connection attempt on stderr (syslog level 3); the CLI reports the
#: last one in its error message instead, unless --verbose.
QUIET_KAFKA = {"log_level": 2}


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def parse_properties(pairs: Sequence[str], option: str = "--property") -> dict[str, str]:
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"{option} '{pair}' is not key=value")
        result[key.strip()] = value.strip()
    return result


def open_table(name: str, args: argparse.Namespace) -> LogStoreTable:
    """A handle on table ``name`` in the default catalog, with the ``LOGSTORE_KAFKA_CONFIG`` settings.

    :param args: the command's arguments; with ``--verbose`` or ``--debug`` librdkafka logs too
    """
    from airflow_logstore.settings import extra_kafka_config
    from airflow_logstore.table.tables import LogStoreTable

    loud = getattr(args, "verbose", False) or getattr(args, "debug", False)
    return LogStoreTable.open(name, kafka_extra={**({} if loud else QUIET_KAFKA), **extra_kafka_config()})


def using(catalog: CatalogSpec | None = None, broker: str | None = None) -> dict[str, str]:
    """Which state folder, catalog and Kafka broker a command uses (printed, so a user can tell)."""
    from airflow_logstore.settings import local_settings
    from airflow_logstore.table.catalog import default_catalog

    return {
        "state_folder": local_settings().describe_home(),
        "catalog": (catalog or default_catalog()).describe(),
        "broker": broker or "none (the table has no log)",
    }
