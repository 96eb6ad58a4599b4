"""The heartbeat of a long-running streaming dual write, and its stop requests (in the Spark driver).

A daemon thread writes the application's heartbeat next to the table every ``interval`` seconds
(:mod:`airflow_logstore.table.streams`): its state, writer, epoch, micro-batches and a beat counter
that only grows (its supervisor judges liveness by the counter changing, never by comparing clocks).
At each beat it also looks for a stop request and, when there is one, stops the query: the application
then ends cleanly, with its result. A heartbeat that cannot be written is logged and tried again at the
next beat; it never stops the stream.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_logstore.exceptions import first_line
from airflow_logstore.table import streams

if TYPE_CHECKING:
    from airflow_logstore.write.writer import BatchResult, DualWriter

log = logging.getLogger(__name__)

#: Seconds between two lines that sum up the micro-batches written since the last one.
PROGRESS_S = 60.0


class StreamMonitor:
    """Heartbeat and stop requests of the streaming dual write submitted with ``report_id``."""

    #: the clock of the progress lines (tests set their own)
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(self, writer: DualWriter, report_id: str, interval: float = 5.0) -> None:
        self.report_id = report_id
        self.interval = interval
        self.table = writer.handle.load()  # its FileIO and location
        self.writer_id = writer.writer_id
        self.epoch = writer.epoch
        self.state = "starting"
        self.beats = 0
        self.batches = 0
        self.last_batch: dict[str, Any] | None = None
        self.stop_requested = False
        self._since = _Since(self.clock())  # the micro-batches since the last progress line
        self._query: Any = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="logstore-stream-heartbeat", daemon=True)
        self.beat()
        self._thread.start()

    def attach(self, query: Any) -> None:
        """The query is running: beats say so, and a stop request stops it."""
        with self._lock:
            self._query = query
            self.state = "running"
        self.beat()

    def batch_done(self, batch_id: int, result: BatchResult) -> None:
        """Count a micro-batch; one line sums up those since the last line about once a
        :data:`PROGRESS_S` (and the first micro-batch, and the rest at :meth:`close`)."""
        last = {"batch_id": batch_id, **result.to_dict()}
        log.debug("micro-batch %s: %s", batch_id, last)
        with self._lock:
            self.batches += 1
            self.last_batch = last
            since, now = self._since.add(result), self.clock()
            if self.batches > 1 and since.started_at + PROGRESS_S > now:
                return
            self._since = _Since(now)
        self._progress(since, now)

    def _progress(self, since: _Since, now: float) -> None:
        last = self.last_batch or {}
        log.info(
            "%s micro-batches in the last %.0fs (%s in all): %s rows in, %s log records, %s skipped as "
            "committed; the last: batch %s, snapshot %s, offsets %s",
            since.batches,
            now - since.started_at,
            self.batches,
            since.rows_in,
            since.log_records,
            since.skipped,
            last.get("batch_id"),
            last.get("snapshot_id"),
            last.get("offsets"),
        )

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "state": self.state,
                "report_id": self.report_id,
                "writer_id": self.writer_id,
                "epoch": self.epoch,
                "beats": self.beats,
                "batches": self.batches,
                "last_batch": self.last_batch,
                "stop_requested": self.stop_requested,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "heartbeat_ms": int(time.time() * 1000),
            }

    def beat(self) -> None:
        with self._lock:
            self.beats += 1
        try:
            streams.write_status(self.table, self.report_id, self.status())
        except Exception as exc:
            log.warning("could not write the stream's heartbeat (%s); trying again", first_line(exc))

    def _run(self) -> None:
        stopped = False  # the query was told to stop
        while not self._done.wait(self.interval):
            self.beat()
            try:
                asked = self.stop_requested or streams.stop_requested(self.table, self.report_id)
            except Exception as exc:
                log.warning("could not look for a stop request (%s); trying again", first_line(exc))
                continue
            if not asked or stopped:
                continue
            if not self.stop_requested:
                log.info("stop requested: stopping the streaming query")
            with self._lock:
                self.stop_requested = True
                query = self._query
            if query is None:
                continue  # obeyed when the query is attached (run_stream's start)
            try:
                query.stop()
                stopped = True
            except Exception as exc:  # the heartbeat goes on (its thread must not die), and so do the tries
                log.warning("could not stop the streaming query (%s); trying again", first_line(exc))

    def close(self, state: str) -> None:
        """The micro-batches not summed up yet, and the last heartbeat: ``finished``, ``stopped`` or
        ``failed``. Closing again does nothing."""
        if self._done.is_set():
            return
        self._done.set()
        self._thread.join(timeout=self.interval + 30)
        with self._lock:
            self.state = state
            since, self._since = self._since, _Since(self.clock())
        if since.batches:
            self._progress(since, self.clock())
        self.beat()


class _Since:
    """The micro-batches since the last progress line, summed."""

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at
        self.batches = self.rows_in = self.log_records = self.skipped = 0

    def add(self, result: BatchResult) -> _Since:
        self.batches += 1
        self.rows_in += result.rows_in
        self.log_records += result.log_records
        self.skipped += int(result.skipped)
        return self
