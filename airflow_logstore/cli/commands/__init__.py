"""Subcommands of the ``logstore`` CLI; each module has ``register(subparsers)``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from airflow_logstore.table.catalog import CatalogSpec
    from airflow_logstore.table.tables import LogStoreTable

#: ``log.jvm_scan``'s scanners and threshold: the parser is built without importing numpy and the
#: reconciler (a unit test keeps these equal to theirs)
SCANNERS = ("auto", "jvm", "librdkafka")
JVM_MIN_RECORDS = 200_000

#: librdkafka logs each failed connection attempt on stderr (syslog level 3); the CLI reports the
#: last one in its error message instead, unless --verbose.
QUIET_KAFKA = {"log_level": 2}


def print_json(value: Any, file: TextIO | None = None) -> None:
    print(json.dumps(value, indent=2, default=str), file=file or sys.stdout)


def report(args: argparse.Namespace, value: Mapping[str, Any], summary: Sequence[str] | None = None) -> None:
    """A command's outcome: with ``--json`` its report as JSON on stdout, else ``summary`` (default: the
    report's top-level entries, one ``key: value`` line each) for a person, on stdout too."""
    if getattr(args, "json", False):
        print_json(value)
        return
    lines = summary if summary is not None else [f"{key}: {_plain(item)}" for key, item in value.items()]
    for line in lines:
        print(line)


def _plain(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return "-" if value is None else str(value)


def progress(message: str) -> None:
    """One line of progress on stderr (a long step starts or ends); stdout keeps the result."""
    print(f"logstore: {message}", file=sys.stderr, flush=True)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer that is 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


@contextmanager
def spark_job(args: argparse.Namespace, what: str) -> Iterator[None]:
    """Say that Spark starts for ``what``; meanwhile, unless ``--debug`` or ``-v``, the JVM's output (its
    log, start-up warnings) goes to ``logs/spark.log`` in the state folder instead of stderr, and the
    job's own Kafka clients log only errors (as :func:`open_table`'s)."""
    from airflow_logstore.settings import extra_kafka_config, local_settings
    from airflow_logstore.spark.session import send_spark_output_to

    loud = getattr(args, "verbose", False) or getattr(args, "debug", False)
    spark_log = local_settings().home / "logs" / "spark.log"
    send_spark_output_to(None if loud else spark_log)
    progress(f"starting Spark for {what}" + ("" if loud else f" (its output: {spark_log})"))
    before = os.environ.get("LOGSTORE_KAFKA_CONFIG")
    if not loud:  # the job opens its own Kafka clients, with the settings of the environment
        os.environ["LOGSTORE_KAFKA_CONFIG"] = json.dumps({**QUIET_KAFKA, **extra_kafka_config()})
    try:
        yield
    finally:
        send_spark_output_to(None)
        if before is None:
            os.environ.pop("LOGSTORE_KAFKA_CONFIG", None)
        else:
            os.environ["LOGSTORE_KAFKA_CONFIG"] = before


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
