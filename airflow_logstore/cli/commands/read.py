"""logstore read TABLE --mode file|log|hybrid [--consistency ...] --format jsonl|summary.

Rows go to stdout as JSON lines; the read's summary goes to stderr (to stdout with ``--format
summary``, which prints no rows), as words or, with ``--json``, as the JSON report. A consistent read
that holds records back says how many and why on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from airflow_logstore.cli.commands import (
    JVM_MIN_RECORDS,
    SCANNERS,
    non_negative_int,
    open_table,
    parse_properties,
    print_json,
)
from airflow_logstore.read.read_job import consistency_argument

if TYPE_CHECKING:
    from airflow_logstore.table.tables import LogStoreTable

#: options of a log read that a file read ignores, with their defaults
_LOG_ONLY = {"consistency": None, "changelog_mode": None, "start": None, "normalize": False}


def run(args: argparse.Namespace) -> int:
    from airflow_logstore.read.reader import run_read

    options = parse_properties(args.option, "--option")
    if args.mode == "file":
        ignored = [name for name, default in _LOG_ONLY.items() if getattr(args, name) != default]
        if ignored or options:
            flags = [_flag(name) for name in ignored] + (["--option"] if options else [])
            verb = "does" if len(flags) == 1 else "do"
            print(
                f"logstore: note: {', '.join(flags)} {verb} not apply to a file read; ignored",
                file=sys.stderr,
            )
    handle = open_table(args.table, args)
    summary = run_read(
        handle,
        mode=args.mode,
        consistency=args.consistency,
        changelog_mode=args.changelog_mode,
        start=args.start or "earliest",
        snapshot_id=args.snapshot_id,
        options=options,
        normalize=args.normalize,
        limit=args.limit,
        scanner=args.scanner,
        output=sys.stdout if args.format == "jsonl" else None,
    )
    sys.stdout.flush()
    held = _held_back(handle, summary)
    if held is not None:
        summary["held_back"] = held
    out = sys.stdout if args.format == "summary" else sys.stderr
    if args.json:
        if args.format == "summary":
            print_json(summary)
        else:  # stdout has the rows: the report is one JSON line on stderr
            print(json.dumps(summary, default=str), file=sys.stderr)
    else:
        for line in describe(summary):
            print(line if out is sys.stdout else f"logstore: {line}", file=out)
    return 0


def _flag(name: str) -> str:
    return "--from" if name == "start" else f"--{name.replace('_', '-')}"


def _held_back(handle: LogStoreTable, summary: dict[str, Any]) -> dict[str, int] | None:
    """Who wrote the records a consistent read held back, when it held back any."""
    from airflow_logstore.read.reader import ReadReport, held_back

    report = summary.get("report") or {}
    if not report.get("not_yet_visible"):
        return None
    fields = ReadReport.__dataclass_fields__
    return held_back(handle, ReadReport(**{k: v for k, v in report.items() if k in fields}))


def describe(summary: dict[str, Any]) -> list[str]:
    """The read's summary in words: what it returned, and what it held back or dropped, and why."""
    table, mode = summary["table"], summary["mode"]
    report = summary.get("report") or {}
    if mode == "file":
        return [f"{summary['rows']} rows of {table} (file read of snapshot {summary['snapshot_id']})"]
    lines = []
    if mode == "hybrid":
        lines.append(
            f"{summary['file_rows'] + summary['log_records']} rows of {table} (hybrid read: "
            f"{summary['file_rows']} from snapshot {summary['snapshot_id']}'s files, "
            f"{summary['log_records']} log records after it)"
        )
    else:
        lines.append(
            f"{summary['records']} records of {table} ({report.get('consistency')} log read; "
            f"{report.get('scanned', 0)} scanned)"
        )
    if report.get("normalized_in"):
        n_in, dropped = report["normalized_in"], report["normalized_dropped"]
        absorbed, added = report["normalized_absorbed"], report["normalized_added"]
        lines.append(
            f"normalize: {n_in} records in, {dropped} dropped (duplicates, stale retractions), {absorbed} "
            f"-U in and {added} -U out (an update's -U comes from the key's state): "
            f"{n_in - dropped - absorbed + added} out"
        )
    held = summary.get("held_back")
    if held:
        lines.append(f"held back: {report['not_yet_visible']} records past the visibility watermark")
        if held["data"]:
            lines.append(
                f"  {held['data']} written by writers whose batch is not published (or not committed) yet: "
                f"'logstore publish {table}' publishes what is committed"
            )
        if held["reconciliation"]:
            lines.append(
                f"  {held['reconciliation']} reversals the reconciler wrote after the last publish: "
                f"'logstore publish {table}' makes them visible (they undo records no reader was shown)"
            )
    if report.get("dead_lettered"):
        lines.append(f"{report['dead_lettered']} undecodable records sent to {report['dead_letter_topic']}")
    return lines


def register(subparsers: Any) -> None:

    parser = subparsers.add_parser(
        "read",
        help="read a table: file, log (consistent/eventual) or hybrid",
        description="Read a table. Rows go to stdout as JSON lines, the read's summary to stderr.",
    )
    parser.add_argument("table", help="namespace.table")
    parser.add_argument(
        "--mode",
        choices=("file", "log", "hybrid"),
        default="log",
        help="file: the snapshot's rows; log: the changelog; hybrid: a snapshot's rows, then the log "
        "after it",
    )
    parser.add_argument(
        "--consistency",
        type=consistency_argument,
        default=None,
        metavar="{consistent,eventual}",
        help="log and hybrid reads; Paimon's name 'transactional' means consistent (default: the table's "
        "log-store.consistency-guarantee.enabled / log.consistency)",
    )
    parser.add_argument(
        "--changelog-mode",
        choices=("all-kinds", "append-only"),
        default=None,
        help="log and hybrid reads: every change kind, or inserts only (default: the table's "
        "log.changelog-mode)",
    )
    parser.add_argument(
        "--from",
        dest="start",
        default=None,
        help="log reads: earliest (default), latest, timestamp:<ms|ISO-8601>, snapshot:<id>",
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
    parser.add_argument(
        "--limit",
        type=non_negative_int,
        default=None,
        help="at most this many rows, in every mode (0: none; default: all)",
    )
    parser.add_argument(
        "--scanner",
        default="auto",
        choices=SCANNERS,
        help="read the log in a JVM (needs a JDK) or with librdkafka; "
        f"auto: the JVM from {JVM_MIN_RECORDS:,} records on",
    )
    parser.add_argument(
        "--format",
        choices=("jsonl", "summary"),
        default="jsonl",
        help="jsonl: the rows on stdout, the summary on stderr; summary: only the summary, on stdout",
    )
    parser.set_defaults(handler=run)
