"""logstore write TABLE --input PATH: the dual-write job, in-process, then a publish of what it committed.

Every option, the table, the input path (and its format) and the table's broker are checked before
Spark starts; the writer's steps are progress lines on stderr; stdout says what was written and
published (``--json``: the report).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from airflow_logstore.cli.commands import open_table, progress, report, spark_job
from airflow_logstore.exceptions import BadInputError

if TYPE_CHECKING:
    from airflow_logstore.core.properties import LogStoreConfig
    from airflow_logstore.table.tables import LogStoreTable

_GLOB = set("*?[{")
#: the formats ``--input-format`` takes (jsonl and ndjson are json)
INPUT_FORMATS = ("json", "jsonl", "ndjson", "csv", "parquet")


def check_before_spark(args: argparse.Namespace) -> tuple[LogStoreTable, LogStoreConfig]:
    """Fail before a JVM starts: a test's ``LOGSTORE_KILL_AT``, the table, the emit mode, a local input
    path and its format and, for a table with a log, its broker and log topic
    (``LOGSTORE_KAFKA_TIMEOUT_S`` when the broker does not answer). Returns the table and its LogStore
    settings."""
    from airflow_logstore.core.properties import parse_emit_mode, parse_table_properties
    from airflow_logstore.log.kafka_client import require_topic
    from airflow_logstore.pause import kill_points
    from airflow_logstore.write.inputs import infer_format

    kill_points()
    local = local_input_path(args.input)  # the input first: no catalog or Kafka client is needed
    if local is not None and not local.exists():
        raise BadInputError(f"input path '{args.input}' does not exist")
    if local is not None and args.input_format is None:
        infer_format(str(local), _local_folder)  # a folder with no file of a known format fails here
    handle = open_table(args.table, args)
    config = parse_table_properties(handle.load().properties)
    parse_emit_mode(args.emit_mode, config)
    if config.enabled:  # the writer claims its epoch on the control topic whatever the emit mode
        topic, _, _ = config.require_log()
        require_topic(handle.kafka_config(config), topic)
    return handle, config


def _local_folder(path: str) -> list[tuple[str, bool]] | None:
    """A :data:`~airflow_logstore.write.inputs.FolderLister` of the local file system."""
    found = Path(path)
    if not found.exists():
        raise BadInputError(f"input path '{path}' does not exist")
    return [(str(c), c.is_dir()) for c in found.iterdir()] if found.is_dir() else None


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


def job_argv(args: argparse.Namespace) -> list[str]:
    """The dual-write job's command line for these options."""
    argv = [
        *("--table", args.table, "--input", args.input),
        *("--writer-id", args.writer_id, "--change-column", args.change_column),
        *("--missing-columns", "null" if args.missing_as_null else "error"),
    ]
    for flag, value in (
        ("--batch-id", args.batch_id),
        ("--emit-mode", args.emit_mode),
        ("--input-format", args.input_format),
    ):
        if value is not None:
            argv += [flag, str(value)]
    return argv


class _Progress(logging.Handler):
    """The writer's steps (its INFO log lines) as progress lines on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        progress(record.getMessage())


@contextmanager
def writer_progress(args: argparse.Namespace) -> Iterator[None]:
    """The writer's steps as progress lines meanwhile (with ``-v`` or ``--debug`` they are logged anyway)."""
    if args.verbose or args.debug:
        yield
        return
    logger = logging.getLogger("airflow_logstore.write")
    handler, level, propagate = _Progress(logging.INFO), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # its warnings too are progress lines, once
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def run(args: argparse.Namespace) -> int:
    from airflow_logstore.write.write_job import dual_write_main

    handle, config = check_before_spark(args)
    written: dict[str, Any] = {}
    with spark_job(args, f"the write to {args.table}"), writer_progress(args):
        code = dual_write_main(job_argv(args), raise_errors=True, on_result=written.update)
    if code:
        return code
    if written.get("snapshot_id") is not None and not written.get("skipped"):
        snapshot = handle.load().snapshot_by_id(written["snapshot_id"])
        props = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
        written["data_files"] = int(props.get("added-data-files", 0))
    published = None
    publish = config.enabled and not args.no_publish and not written.get("skipped")
    if publish:
        from airflow_logstore.publish.publisher import publish_visible_offsets

        progress("publishing the committed offsets (the visibility watermark)")
        published = publish_visible_offsets(handle).to_dict()
    report(
        args, {"write": written, "published": published}, summary(args, config.enabled, written, published)
    )
    return 0


def summary(
    args: argparse.Namespace, logged: bool, written: dict[str, Any], published: dict[str, Any] | None
) -> list[str]:
    """What the write did, and what a reader sees now, in words."""
    batch = f"batch {written['batch_id']} of writer '{written['writer_id']}'"
    if written.get("skipped"):
        return [f"{batch} was already committed (snapshot {written['snapshot_id']}): nothing written"]
    snapshot = written.get("snapshot_id")
    lines = [
        f"wrote {batch} (epoch {written['epoch']}) to {written['table']}: {written['rows_in']} changes, "
        f"{written['log_records']} log records, "
        + (
            f"snapshot {snapshot} ({written.get('data_files', 0)} data files)"
            if snapshot is not None
            else "no snapshot (emit mode log)"
        )
        + f", in {written['seconds']:.0f}s"
    ]
    if not logged:
        lines.append("the table has no log: file reads ('logstore read --mode file') return the batch now")
    elif published is not None:
        lines.append(
            f"published: visible watermark {published['watermark_after']}; consistent log reads return "
            "the batch now"
        )
    else:
        lines.append(
            f"not published (--no-publish): consistent log reads hold the batch back until 'logstore "
            f"publish {args.table}'"
        )
    return lines


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "write",
        help="dual write one batch of input files (Iceberg + Kafka), then publish it",
        description="Dual write one batch of input files to the table and its log, then publish it "
        "(advance the visibility watermark), so that consistent readers see it. Each input column must be "
        "a table column; a table column the input lacks is an error unless --missing-as-null.",
    )
    parser.add_argument("table", help="namespace.table")
    parser.add_argument("--input", required=True, help="JSON lines, CSV or Parquet file/folder, or a URI")
    parser.add_argument(
        "--input-format",
        default=None,
        choices=INPUT_FORMATS,
        help="the input's format (default: from the file names' extensions)",
    )
    parser.add_argument("--batch-id", type=int, default=None, help="default: the writer's next batch")
    parser.add_argument(
        "--writer-id", default="logstore-cli", help="who writes: each writer numbers its own batches"
    )
    parser.add_argument(
        "--emit-mode",
        default=None,
        help="file,log (default), log or file (Amoro's mixed-format.emit.mode)",
    )
    parser.add_argument("--change-column", default="op", help="CDC column: insert/update/delete")
    parser.add_argument(
        "--missing-as-null",
        action="store_true",
        help="a nullable table column the input does not have is written as null (without this option it "
        "is an error, except in deletes)",
    )
    parser.add_argument(
        "--no-publish",
        action="store_true",
        help="do not publish: consistent log reads hold the batch back until 'logstore publish'",
    )
    parser.set_defaults(handler=run)
