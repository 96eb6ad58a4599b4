"""logstore table list|show|snapshots|create|alter|drop.

A name without a namespace (``orders``) is in the namespace ``default`` (``default.orders``).
``create`` gives the table a Kafka log unless ``--no-log``: its topic is named after the table and its
broker is the local one (``./dev services``), unless ``--property`` says otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from airflow_logstore.cli.commands import open_table, parse_properties, report, using
from airflow_logstore.exceptions import OptionError


def create(args: argparse.Namespace) -> int:
    from airflow_logstore.table.tables import create_table

    key = [c.strip() for c in (args.primary_key or "").split(",") if c.strip()]
    handle = open_table(args.name, args)
    properties = with_log_defaults(parse_properties(args.property), str(handle.name), no_log=args.no_log)
    handle.loaded_catalog.list_namespaces()  # an unreachable catalog fails first, before Kafka is asked
    result = create_table(handle, args.schema, primary_key=key, properties=properties).to_dict()
    what = "created" if result["created"] else "already exists (same columns and settings)"
    lines = [f"table {result['table']} {what}"]
    if result["topic"]:
        topic = "created" if result["topic_created"] else "exists"
        lines.append(
            f"log: topic {result['topic']} ({result['partitions']} partitions, {topic}) at "
            f"{properties['log-store.address']}; control topic {result['control_topic']}"
        )
    else:
        lines.append("no log (log-store.enabled is false): file reads only; 'logstore table alter' adds one")
    lines += [f"warning: {w}" for w in result["warnings"]]
    report(args, result, lines)
    return 0


def with_log_defaults(properties: dict[str, str], name: str, *, no_log: bool) -> dict[str, str]:
    """The log settings ``table create`` adds: enabled (unless ``no_log``), its topic named after the
    table and its address the local broker's, each unless given."""
    from airflow_logstore.settings import local_settings

    if no_log:
        if properties.get("log-store.enabled", "false").lower() == "true":
            raise OptionError("--no-log", "contradicts --property log-store.enabled=true")
        return {**properties, "log-store.enabled": "false"}
    if properties.get("log-store.enabled", "true").lower() != "true":
        return properties
    defaults = {
        "log-store.enabled": "true",
        "log-store.topic": name,
        "log-store.address": local_settings().kafka_bootstrap,
    }
    return {**defaults, **properties}


def show(args: argparse.Namespace) -> int:
    from airflow_logstore.table.tables import show_table

    handle = open_table(args.name, args)
    shown = show_table(handle)
    report(args, {"using": using(handle.catalog, shown["log_store"]["address"]), **shown})
    return 0


def list_(args: argparse.Namespace) -> int:
    from airflow_logstore.table.catalog import default_catalog
    from airflow_logstore.table.tables import list_tables

    catalog = default_catalog()
    names = list_tables(catalog, args.namespace)
    lines = names or [f"no tables in catalog {catalog.describe()}"]
    report(args, {"catalog": catalog.describe(), "tables": names}, lines)
    return 0


def snapshots(args: argparse.Namespace) -> int:
    from airflow_logstore.table.tables import list_snapshots

    handle = open_table(args.name, args)
    found = list_snapshots(handle)
    lines = [f"{len(found)} snapshots of {handle.name}, oldest first (--from snapshot:ID reads from one)"]
    for snap in found:
        at = dt.datetime.fromtimestamp(snap["timestamp_ms"] / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        commit = (
            f" writer {snap['writer_id']} batch {snap['batch_id']} epoch {snap['epoch']}"
            if snap["writer_id"]
            else ""
        )
        kind = snap["logstore_operation"] or snap["operation"]
        lines.append(f"{snap['snapshot_id']}  {at}  {kind}{commit}{'  (current)' if snap['current'] else ''}")
    report(args, {"table": str(handle.name), "snapshots": found}, lines)
    return 0


def alter(args: argparse.Namespace) -> int:
    from airflow_logstore.table.tables import alter_table

    properties = parse_properties(args.property)
    if not properties:
        raise OptionError("--property", "give at least one KEY=VALUE to set")
    handle = open_table(args.name, args)
    if properties.get("log-store.enabled", "").lower() == "true":
        current = handle.load().properties
        properties = {**with_log_defaults({}, str(handle.name), no_log=False), **current, **properties}
        properties = {k: v for k, v in properties.items() if k.startswith("log-store.")}
    result = alter_table(handle, properties)
    lines = [
        f"table {result['table']}: set {', '.join(f'{k}={v}' for k, v in sorted(result['set'].items()))}"
    ]
    if result["topic_created"]:
        lines.append(f"log topic {result['topic']} created")
    report(args, result, lines)
    return 0


def drop(args: argparse.Namespace) -> int:
    from airflow_logstore.table.tables import drop_table

    if not args.yes:
        raise OptionError(
            "--yes",
            f"'logstore table drop {args.name}' deletes the table, its files"
            + ("" if args.keep_topics else " and its Kafka topics")
            + "; pass --yes to do it",
        )
    result = drop_table(open_table(args.name, args), keep_topics=args.keep_topics)
    lines = [f"dropped table {result['table']} and its files"]
    if result["topics_deleted"]:
        lines.append(f"deleted topics: {', '.join(result['topics_deleted'])}")
    if result["topics_kept"]:
        lines.append(f"left topics: {', '.join(result['topics_kept'])}")
    report(args, result, lines)
    return 0


def register(subparsers: Any) -> None:
    table = subparsers.add_parser(
        "table",
        help="list, show, create, alter or drop LogStore tables; list a table's snapshots",
        description="A table name is namespace.table; a name without a namespace is in 'default'.",
    )
    commands = table.add_subparsers(dest="table_command", required=True)

    parser = commands.add_parser("list", help="the tables of the catalog")
    parser.add_argument("namespace", nargs="?", default=None, help="only this namespace's tables")
    parser.set_defaults(handler=list_)

    parser = commands.add_parser(
        "show", help="properties, topic, partitions, current snapshot; the state folder, catalog and broker"
    )
    parser.add_argument("name", help="namespace.table")
    parser.set_defaults(handler=show)

    parser = commands.add_parser("snapshots", help="the table's snapshot ids (for read --from snapshot:ID)")
    parser.add_argument("name", help="namespace.table")
    parser.set_defaults(handler=snapshots)

    parser = commands.add_parser(
        "create",
        help="create an Iceberg table with its Kafka log (idempotent)",
        description="Create an Iceberg table and its Kafka log (log and control topics). Unless --no-log "
        "or --property log-store.enabled=false, the log is enabled, its topic is the table's name and its "
        "broker the local one (log-store.topic, log-store.address override them).",
    )
    parser.add_argument("name", help="namespace.table")
    parser.add_argument("--schema", required=True, help='columns, e.g. "id int, name string, ts timestamp"')
    parser.add_argument("--primary-key", default="", help="comma-separated key columns")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="table property (repeatable), e.g. log-store.partitions=6",
    )
    parser.add_argument("--no-log", action="store_true", help="a table without a Kafka log (file reads only)")
    parser.set_defaults(handler=create)

    parser = commands.add_parser(
        "alter",
        help="set table properties (log-store.enabled=true adds the log)",
        description="Set table properties, checked with the table's others. log-store.enabled=true gives "
        "the table its log (topic and broker as 'table create' chooses them); the log's topic and "
        "partitions cannot change once it is enabled.",
    )
    parser.add_argument("name", help="namespace.table")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="table property to set (repeatable)",
    )
    parser.set_defaults(handler=alter)

    parser = commands.add_parser("drop", help="drop a table, its files and its Kafka topics")
    parser.add_argument("name", help="namespace.table")
    parser.add_argument("--yes", action="store_true", help="really drop it (required)")
    parser.add_argument(
        "--keep-topics", action="store_true", help="leave the log, control and dead-letter topics"
    )
    parser.set_defaults(handler=drop)
