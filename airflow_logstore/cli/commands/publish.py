"""logstore publish TABLE: advance the visibility watermark from committed snapshots."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_logstore.cli.commands import open_table, print_json


def run(args: argparse.Namespace) -> int:
    from airflow_logstore.publish.publisher import publish_visible_offsets

    print_json(publish_visible_offsets(open_table(args.table, args)).to_dict())
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("publish", help="mark the offsets of committed snapshots visible")
    parser.add_argument("table")
    parser.set_defaults(handler=run)
