"""logstore compact TABLE [--dry-run]: policy-driven compaction, in-process; prints its report."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_logstore.cli.commands import open_table, report, spark_job


def run(args: argparse.Namespace) -> int:
    from airflow_logstore.compaction.compact_job import options_from_args, run_compaction
    from airflow_logstore.spark.session import build_spark_session

    options = options_from_args(args)
    options.validate()  # before a JVM starts
    handle = open_table(args.table, args)
    handle.load()  # a missing table or catalog fails here, before a JVM starts
    with spark_job(args, f"the compaction of {args.table}"):
        spark = build_spark_session(f"logstore-compact-{args.table}")
        done = run_compaction(spark, handle, options).to_dict()
    report(args, done)
    return 0


def register(subparsers: Any) -> None:
    from airflow_logstore.compaction.compact_job import add_arguments

    parser = subparsers.add_parser(
        "compact",
        help="compact a table when its small-file / delete thresholds say so; expire snapshots, orphans",
    )
    parser.add_argument("table", help="namespace.table")
    add_arguments(parser)
    parser.set_defaults(handler=run)
