"""logstore reconcile TABLE [--dry-run]: reverse the records failed writer attempts left in the log."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_logstore.cli.commands import JVM_MIN_RECORDS, SCANNERS, open_table, report


def run(args: argparse.Namespace) -> int:
    from airflow_logstore.reconcile.reconciler import PythonEngine, reconcile

    done = reconcile(
        open_table(args.table, args),
        dry_run=args.dry_run,
        lease_ttl_s=args.lease_ttl,
        engine=PythonEngine(args.workers, scanner=args.scanner),
    )
    report(args, done.to_dict())
    return 0


def register(subparsers: Any) -> None:

    parser = subparsers.add_parser(
        "reconcile", help="reverse failed writer attempts' records in the log; prints its report"
    )
    parser.add_argument("table", help="namespace.table")
    parser.add_argument("--dry-run", action="store_true", help="compute the report, write nothing")
    parser.add_argument("--lease-ttl", type=float, default=120.0, help="lease time-to-live, seconds")
    parser.add_argument(
        "--workers", type=int, default=None, help="librdkafka scan processes (default: 1, this one)"
    )
    parser.add_argument(
        "--scanner",
        default="auto",
        choices=SCANNERS,
        help="read the log in a JVM (needs a JDK) or with librdkafka; auto: the JVM from "
        f"{JVM_MIN_RECORDS:,} records on when a JDK is installed",
    )
    parser.set_defaults(handler=run)
