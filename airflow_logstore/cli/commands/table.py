"""logstore table create|show."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_logstore.cli.commands import open_table, parse_properties, print_json, using


def create(args: argparse.Namespace) -> int:
    from airflow_logstore.table.tables import create_table

    key = [c.strip() for c in (args.primary_key or "").split(",") if c.strip()]
    result = create_table(
        open_table(args.name, args),
        args.schema,
        primary_key=key,
        properties=parse_properties(args.property),
    )
    print_json(result.to_dict())
    return 0


def show(args: argparse.Namespace) -> int:
    from airflow_logstore.table.tables import show_table

    handle = open_table(args.name, args)
    shown = show_table(handle)
    print_json({"using": using(handle.catalog, shown["log_store"]["address"]), **shown})
    return 0


def register(subparsers: Any) -> None:
    table = subparsers.add_parser("table", help="create or show a LogStore table")
    commands = table.add_subparsers(dest="table_command", required=True)
    parser = commands.add_parser("create", help="create an Iceberg table with its Kafka log (idempotent)")
    parser.add_argument("name", help="namespace.table")
    parser.add_argument("--schema", required=True, help='columns, e.g. "id int, name string, ts timestamp"')
    parser.add_argument("--primary-key", default="", help="comma-separated key columns")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="table property (repeatable), e.g. log-store.enabled=true",
    )
    parser.set_defaults(handler=create)
    parser = commands.add_parser(
        "show", help="properties, topic, partitions, current snapshot; the state folder, catalog and broker"
    )
    parser.add_argument("name")
    parser.set_defaults(handler=show)
