"""SnapshotCommitTrigger: waits in the triggerer for an Iceberg snapshot committing a LogStore batch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async


class SnapshotCommitTrigger(BaseTrigger):
    """Poll the table's metadata (pyiceberg) until a matching dual-write snapshot exists.

    :param table: ``namespace.table``
    :param writer_id: only this writer's commits (optional)
    :param batch_id: the batch to wait for (else: any LogStore commit after ``after_snapshot_id``)
    :param after_snapshot_id: wait for a commit newer than this snapshot
    :param poll_interval: seconds between metadata reads
    :param timeout: seconds before the trigger gives up with a ``timeout`` event (None: never)
    """

    def __init__(
        self,
        *,
        table: str,
        logstore_conn_id: str = "logstore_default",
        kafka_config_id: str | None = "kafka_default",
        writer_id: str | None = None,
        batch_id: int | None = None,
        after_snapshot_id: int | None = None,
        poll_interval: float = 2.0,
        timeout: float | None = None,
    ) -> None:
        super().__init__()
        self.table = table
        self.logstore_conn_id = logstore_conn_id
        self.kafka_config_id = kafka_config_id
        self.writer_id = writer_id
        self.batch_id = batch_id
        self.after_snapshot_id = after_snapshot_id
        self.poll_interval = poll_interval
        self.timeout = timeout

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "logstore_conn_id": self.logstore_conn_id,
                "kafka_config_id": self.kafka_config_id,
                "writer_id": self.writer_id,
                "batch_id": self.batch_id,
                "after_snapshot_id": self.after_snapshot_id,
                "poll_interval": self.poll_interval,
                "timeout": self.timeout,
            },
        )

    def _check(self) -> dict[str, Any] | None:
        from airflow_logstore.hooks.logstore import LogStoreHook
        from airflow_logstore.snapshots import commit_xcom, find_commit

        handle = LogStoreHook(self.logstore_conn_id, self.kafka_config_id).table(self.table)
        commit = find_commit(
            handle, writer_id=self.writer_id, batch_id=self.batch_id, after_snapshot_id=self.after_snapshot_id
        )
        return commit_xcom(commit, self.table) if commit is not None else None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        started = time.monotonic()
        polls = 0
        while True:
            polls += 1
            try:
                found = await sync_to_async(self._check)()
            except Exception as exc:  # a broken catalog ends the wait with a clear event
                yield TriggerEvent(
                    {"status": "error", "message": f"{type(exc).__name__}: {exc}", "polls": polls}
                )
                return
            if found is not None:
                yield TriggerEvent({"status": "success", "commit": found, "polls": polls})
                return
            if self.timeout is not None and time.monotonic() - started > self.timeout:
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "polls": polls,
                        "message": f"no matching snapshot of {self.table} after {self.timeout:.0f}s",
                    }
                )
                return
            self.log.info(
                "no matching snapshot of %s yet (poll %s); next check in %ss",
                self.table,
                polls,
                self.poll_interval,
            )
            await asyncio.sleep(self.poll_interval)
