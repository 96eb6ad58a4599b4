"""A long-running streaming dual write's heartbeat and stop request, next to the table (its FileIO).

The Spark application writes its heartbeat (``<table location>/logstore/streams/<report id>.json``:
state, writer, epoch, micro-batches, the driver's process) every few seconds; whoever supervises it
(the streaming operator's trigger) reads it there, wherever the driver runs. A stop request
(``<report id>.stop``) asks the application to stop its query and end cleanly. Its result and failure
report take the ways every job's do (:mod:`airflow_logstore.table.reports`).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow_logstore.exceptions import first_line

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

STREAMS_DIR = "logstore/streams"


def status_path(location: str, report_id: str) -> str:
    return f"{location.rstrip('/')}/{STREAMS_DIR}/{quote(report_id, safe='')}.json"


def stop_path(location: str, report_id: str) -> str:
    return f"{location.rstrip('/')}/{STREAMS_DIR}/{quote(report_id, safe='')}.stop"


def write_status(table: Table, report_id: str, status: dict[str, Any]) -> None:
    with table.io.new_output(status_path(table.location(), report_id)).create(overwrite=True) as out:
        out.write(json.dumps(status, sort_keys=True, default=str).encode())


def read_status(table: Table, report_id: str) -> dict[str, Any] | None:
    """The application's last heartbeat, or None before its first, or when the file is cut short.

    A heartbeat is rewritten in place (FileIO has no rename): a reader can find it empty or half
    written while the driver writes it, and for good when the driver was killed in that moment. That is
    no heartbeat, not an error: the supervisor's process check and heartbeat timeout decide."""
    source = table.io.new_input(status_path(table.location(), report_id))
    if not source.exists():
        return None
    with source.open() as stream:
        raw = stream.read()
    try:
        data = json.loads(raw)
    except ValueError:  # a normal race while the driver writes: not worth a warning at every look
        log.debug("the heartbeat %s is cut short (%d bytes): taken as none", source.location, len(raw))
        return None
    return data if isinstance(data, dict) else None


def request_stop(table: Table, report_id: str) -> None:
    """Ask the application submitted with ``report_id`` to stop (it looks at each heartbeat)."""
    with table.io.new_output(stop_path(table.location(), report_id)).create(overwrite=True) as out:
        out.write(b"stop")


def stop_requested(table: Table, report_id: str) -> bool:
    return bool(table.io.new_input(stop_path(table.location(), report_id)).exists())


def remove(table: Table, report_id: str) -> None:
    """Best effort: the heartbeat and stop request of an application that ended (small files)."""
    for path in (status_path(table.location(), report_id), stop_path(table.location(), report_id)):
        try:
            if table.io.new_input(path).exists():
                table.io.delete(path)
        except Exception as exc:
            log.warning("could not remove %s: %s", path, first_line(exc))
