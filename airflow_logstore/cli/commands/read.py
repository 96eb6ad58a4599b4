"""logstore read TABLE --mode file|log|hybrid [--consistency ...] --format jsonl|summary."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from airflow_logstore.cli.commands import open_table, parse_properties, print_json


def run(args: argparse.Namespace) -> int:
    from airflow_logstore.read.reader import run_read

    summary = run_read(
        open_table(args.table, args),
        mode=args.mode,
        consistency=args.consistency,
        changelog_mode=args.changelog_mode,
        start=args.start,
        snapshot_id=args.snapshot_id,
        options=parse_properties(args.option, "--option"),
        normalize=args.normalize,
        limit=args.limit,
        scanner=args.scanner,
        output=sys.stdout if args.format == "jsonl" else None,
    )
    if args.format == "summary":
        print_json(summary)
    else:
        print(f"# {summary}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    from airflow_logstore.log.jvm_scan import JVM_MIN_RECORDS, SCANNERS

    parser = subparsers.add_parser("read", help="read a table: file, log (consistent/eventual) or hybrid")
    parser.add_argument("table")
    parser.add_argument("--mode", choices=("file", "log", "hybrid"), default="log")
    parser.add_argument(
        "--consistency",
        choices=("transactional", "eventual"),
        default=None,
        help="default: the table's log-store.consistency-guarantee.enabled / log.consistency",
    )
    parser.add_argument("--changelog-mode", choices=("all-kinds", "append-only"), default=None)
    parser.add_argument(
        "--from",
        dest="start",
        default="earliest",
        help="earliest, latest, timestamp:<ms|ISO-8601>, snapshot:<id>",
    )
    parser.add_argument("--snapshot-id", type=int, default=None, help="snapshot of a file or hybrid read")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="read hint, e.g. log-store.consistency-guarantee.enabled=true",
    )
    parser.add_argument("--normalize", action="store_true", help="deduplicate an eventual read per key")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument(
        "--scanner",
        default="auto",
        choices=SCANNERS,
        help="read the log in a JVM (needs a JDK) or with librdkafka; "
        f"auto: the JVM from {JVM_MIN_RECORDS:,} records on",
    )
    parser.add_argument("--format", choices=("jsonl", "summary"), default="jsonl")
    parser.set_defaults(handler=run)
