"""logstore write TABLE --input PATH [--batch-id N] [--crash-at ...]: the dual-write job, in-process."""

from __future__ import annotations

import argparse
from typing import Any


def run(args: argparse.Namespace) -> int:
    from airflow_logstore.spark.jobs import dual_write_main

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
    return dual_write_main(argv)


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
        help="file,log (default), log or file (the seeds' mixed-format.emit.mode)",
    )
    parser.add_argument("--change-column", default="op", help="CDC column: insert/update/delete")
    parser.add_argument("--crash-at", default=None, help="after-log:N or after-commit:N (tests)")
    parser.set_defaults(handler=run)
