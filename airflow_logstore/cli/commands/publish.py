"""logstore publish TABLE: advance the visibility watermark from committed snapshots."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_logstore.cli.commands import open_table, report


def run(args: argparse.Namespace) -> int:
    from airflow_logstore.publish.publisher import publish_visible_offsets

    published = publish_visible_offsets(open_table(args.table, args)).to_dict()
    moved = "advanced" if published["advanced"] else "did not move"
    lines = [
        f"visible watermark of {published['table']} {moved}: {published['watermark_after']} "
        f"(was {published['watermark_before']}); {published['scanned']} records scanned"
    ]
    if published["newly_visible"]:
        lines.append(f"newly visible: {', '.join(published['newly_visible'])}")
    for partition, blocker in sorted(published["blocked_by"].items()):
        lines.append(f"partition {partition} waits for {blocker}")
    report(args, published, lines)
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("publish", help="mark the offsets of committed snapshots visible")
    parser.add_argument("table", help="namespace.table")
    parser.set_defaults(handler=run)
