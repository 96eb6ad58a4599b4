"""The dual-write PySpark job: its command line and entry point (``spark_apps/dual_write_app.py`` and
``spark_jobs/dual_write.py`` call :func:`dual_write_main`; so does ``logstore write``).

It reports through :mod:`airflow_logstore.spark.results` (a result line, and the result next to the
table for its submitter).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from airflow_logstore.exceptions import LogStoreError
from airflow_logstore.spark.results import add_report_id, emit_failure, emit_result, job_session

if TYPE_CHECKING:
    from airflow_logstore.table.catalog import CatalogSpec
    from airflow_logstore.write.writer import DualWriter

log = logging.getLogger(__name__)

DEFAULT_WRITER_ID = "logstore-cli"
"""The writer id of a batch dual write that names none (``--writer-id`` left out)."""


def dual_write_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dual_write", description="Write batches to an Iceberg table and its log"
    )
    parser.add_argument("--table", required=True)
    parser.add_argument(
        "--writer-id",
        default=None,
        help=f"default: {DEFAULT_WRITER_ID} (batch), derived from --checkpoint (stream)",
    )
    parser.add_argument("--emit-mode", default=None, help="file,log (default), log or file")
    parser.add_argument("--change-column", default="op")
    parser.add_argument(
        "--missing-columns",
        choices=("null", "error"),
        default="error",
        help="a nullable column the input lacks: an error for an insert or update (default), or null "
        "in every row",
    )
    add_report_id(parser)
    batch = parser.add_argument_group("batch mode")
    batch.add_argument("--input", help="input file or folder (JSON lines, CSV, Parquet)")
    batch.add_argument("--input-format", default=None)
    batch.add_argument("--batch-id", type=int, default=None)
    stream = parser.add_argument_group("streaming mode")
    stream.add_argument("--source-topic", help="Kafka topic of JSON change rows")
    stream.add_argument("--source-bootstrap", default=None, help="defaults to the table's Kafka")
    stream.add_argument("--checkpoint", help="checkpoint folder of the streaming query")
    stream.add_argument("--trigger", default="available-now", help="available-now, once, or e.g. '5 seconds'")
    stream.add_argument("--timeout", type=float, default=None, help="stop a processing-time stream after N s")
    stream.add_argument("--max-offsets-per-trigger", type=int, default=None)
    stream.add_argument(
        "--heartbeat-interval",
        type=float,
        default=None,
        help="with --report-id: a heartbeat next to the table every N s, and stop requests obeyed",
    )
    parser.add_argument(
        "--publish-after-commit",
        action="store_true",
        help="publish the watermark right after each committed batch (a long-running stream's batches "
        "become visible without waiting for a separate publish)",
    )
    return parser


def job_writer_id(args: argparse.Namespace) -> str:
    """The writer id the job claims its epoch for: ``--writer-id``, else one derived from the checkpoint
    folder in streaming mode (a new checkpoint is a new writer, see :mod:`~airflow_logstore.write.streaming`),
    else :data:`DEFAULT_WRITER_ID`."""
    if args.writer_id:
        return str(args.writer_id)
    if args.source_topic and args.checkpoint:
        from airflow_logstore.write.streaming import stream_writer_id

        return stream_writer_id(args.checkpoint)
    return DEFAULT_WRITER_ID


def dual_write_main(
    argv: Sequence[str] | None = None,
    *,
    raise_errors: bool = False,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Run the dual-write job; 0 on success. A failure leaves its report next to the table, then

    - as spark-submit's entry point (``raise_errors`` False): prints ``dual_write: error: ...`` and
      returns 1 for the project's own errors, and raises the others;
    - in-process for the ``logstore write`` CLI (``raise_errors`` True): raises every error, which the
      CLI explains (the problem and the next step).

    :param on_result: takes the result instead of :func:`emit_result` (the CLI: its own summary, no
        result line; the CLI passes no ``--report-id``)
    """
    from airflow_logstore.core.properties import parse_emit_mode
    from airflow_logstore.pause import kill_points
    from airflow_logstore.spark.jobconf import job_settings, spark_conf_dict
    from airflow_logstore.write.writer import open_writer

    args = dual_write_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if bool(args.input) == bool(args.source_topic):
        print(
            "dual_write: pass exactly one of --input (batch) or --source-topic (streaming)", file=sys.stderr
        )
        return 2
    writer: DualWriter | None = None
    catalog: CatalogSpec | None = None
    try:
        kill_points()  # a test's LOGSTORE_KILL_AT that names no kill point fails before anything is written
        spark = job_session(f"logstore-dual-write-{args.table}")
        catalog, kafka_extra = job_settings(spark_conf_dict(spark))
        writer = open_writer(
            spark,
            args.table,
            catalog=catalog,
            kafka_extra=kafka_extra,
            writer_id=job_writer_id(args),
            change_column=args.change_column,
            missing_as_null=args.missing_columns == "null",
            publish_after_commit=args.publish_after_commit,
        )
        emit = on_result or partial(emit_result, handle=writer.handle, report_id=args.report_id)
        if args.emit_mode:
            writer.emit_mode = parse_emit_mode(args.emit_mode, writer.config)
        if args.input:
            result = writer.write_path(args.input, args.batch_id, args.input_format)
            emit(result.to_dict())
        else:
            from airflow_logstore.write.streaming import run_stream

            monitor = None
            if args.heartbeat_interval and args.report_id:
                from airflow_logstore.write.stream_monitor import StreamMonitor

                monitor = StreamMonitor(writer, args.report_id, args.heartbeat_interval)
            outcome = "failed"
            try:
                results = run_stream(
                    writer,
                    source_topic=args.source_topic,
                    bootstrap=args.source_bootstrap,
                    checkpoint=args.checkpoint,
                    trigger=args.trigger,
                    timeout=args.timeout,
                    max_offsets_per_trigger=args.max_offsets_per_trigger,
                    monitor=monitor,
                )
                outcome = "stopped" if monitor is not None and monitor.stop_requested else "finished"
            finally:  # the last heartbeat (the query stopped), before any failure report
                if monitor is not None:
                    monitor.close(outcome)
            if monitor is not None:  # a long run: its count and last micro-batch, not all of them
                summary = {
                    "batches": monitor.batches,
                    "last_batch": monitor.last_batch,
                    "epoch": writer.epoch,
                }
                emit({**summary, "stopped": monitor.stop_requested})
            else:
                emit({"batches": [r.to_dict() for r in results]})
    except Exception as exc:
        _report_dual_write_failure(args, catalog, writer, exc)
        if raise_errors or not isinstance(exc, LogStoreError):
            raise
        print(f"dual_write: error: {exc}", file=sys.stderr)
        log.error("dual write failed: %s", exc)
        return 1
    finally:
        if writer is not None:
            writer.close()
    return 0


def _report_dual_write_failure(
    args: argparse.Namespace, catalog: CatalogSpec | None, writer: DualWriter | None, exc: BaseException
) -> None:
    """Leave a failure report next to the table: of the batch (batch mode with a known batch id), or
    under the report id its submitter chose (streaming mode)."""
    if args.source_topic and args.report_id:
        emit_failure(
            exc,
            job="dual_write_stream",
            table_name=args.table,
            catalog=catalog,
            report_id=args.report_id,
            handle=writer.handle if writer else None,
            epoch=writer.epoch if writer else None,
        )
        return
    if not args.input or args.batch_id is None:
        return
    emit_failure(
        exc,
        job="dual_write",
        table_name=args.table,
        catalog=catalog,
        report_id=args.report_id,
        handle=writer.handle if writer else None,
        writer_id=writer.writer_id if writer else job_writer_id(args),
        batch_id=args.batch_id,
        epoch=writer.epoch if writer else None,
    )
