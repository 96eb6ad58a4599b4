"""logstore write TABLE --input PATH [--batch-id N] [--crash-at ...]: the dual-write job, in-process."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from airflow_logstore.cli.commands import open_table
from airflow_logstore.exceptions import BadInputError

_GLOB = set("*?[{")


def check_before_spark(args: argparse.Namespace) -> None:
    """Fail before a JVM starts: the table, the emit mode, a local input path and, for a table with a
    log, its broker and log topic (``LOGSTORE_KAFKA_TIMEOUT_S`` when the broker does not answer)."""
    from airflow_logstore.core.properties import parse_emit_mode, parse_table_properties
    from airflow_logstore.log.kafka_client import require_topic

    handle = open_table(args.table, args)
    config = parse_table_properties(handle.load().properties)
    parse_emit_mode(args.emit_mode, config)
    local = local_input_path(args.input)
    if local is not None and not local.exists():
        raise BadInputError(f"input path '{args.input}' does not exist")
    if config.enabled:  # the writer claims its epoch on the control topic whatever the emit mode
        topic, _, _ = config.require_log()
        require_topic(handle.kafka_config(config), topic)


def local_input_path(path: str, master: str | None = None) -> Path | None:
    """The local file a Spark input path names, or None when Spark resolves it (a URI, a glob).

    A path without a scheme is local only with a local Spark master: on a cluster it is resolved
    against the cluster's default file system, which only Spark knows.
    """
    from airflow_logstore.settings import local_settings

    if _GLOB & set(path):
        return None
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    master = master or local_settings().spark_master
    return Path(path) if not parsed.scheme and master.startswith("local") else None


def run(args: argparse.Namespace) -> int:
    from airflow_logstore.write.write_job import dual_write_main

    check_before_spark(args)
    argv = [
        "--table",
        args.table,
        "--input",
        args.input,
        "--writer-id",
        args.writer_id,
        "--change-column",
        args.change_column,
    ]
    for flag, value in (
        ("--batch-id", args.batch_id),
        ("--crash-at", args.crash_at),
        ("--emit-mode", args.emit_mode),
        ("--input-format", args.input_format),
    ):
        if value is not None:
            argv += [flag, str(value)]
    return dual_write_main(argv, raise_errors=True)  # its errors become the CLI's messages


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("write", help="dual write one batch of input files (Iceberg + Kafka)")
    parser.add_argument("table")
    parser.add_argument("--input", required=True, help="JSON lines, CSV or Parquet file/folder")
    parser.add_argument("--input-format", default=None)
    parser.add_argument("--batch-id", type=int, default=None, help="default: the writer's next batch")
    parser.add_argument("--writer-id", default="logstore-cli")
    parser.add_argument(
        "--emit-mode",
        default=None,
        help="file,log (default), log or file (Amoro's mixed-format.emit.mode)",
    )
    parser.add_argument("--change-column", default="op", help="CDC column: insert/update/delete")
    parser.add_argument("--crash-at", default=None, help="after-log:N or after-commit:N (tests)")
    parser.set_defaults(handler=run)
