"""logstore_publish: publish visibility whenever a LogStore table commits (event-driven).

Scheduled on the tables' *commit* assets: their watcher (``LogStoreCommitTrigger``, in the triggerer)
fires when a table commits a dual-write snapshot, and this DAG moves the visibility watermark. Then
their *visible* assets fire, and the DAGs scheduled on those (logstore_downstream) read what became
visible. A writer that publishes by itself (``logstore_pipeline``'s sensor and publish tasks) needs no
run of this DAG; one that does not (the streaming writer, ``logstore write``) gets its visibility here.
One run at a time: commits that come while a run publishes are published by the next one.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, AssetAny, task

from airflow_logstore.operators.publish import LogStorePublishVisibleOffsetsOperator
from airflow_logstore.triggers.assets import logstore_commit_asset

# [START logstore_publish_tables]
#: the tables whose commits this DAG publishes (each gets a commit asset watched in the triggerer)
TABLES = ["demo.orders", "demo.orders_stream"]
# [END logstore_publish_tables]

with DAG(
    dag_id="logstore_publish",
    description="Publish the visibility watermark of LogStore tables when they commit",
    schedule=AssetAny(*(logstore_commit_asset(table, poll_interval=1.0) for table in TABLES)),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["logstore", "example"],
    doc_md=__doc__,
) as dag:
    # [START logstore_publish_tasks]
    @task
    def committed_tables(triggering_asset_events: dict | None = None) -> list[str]:
        """The tables the run's commit events name (every table of TABLES for a manual run)."""
        from airflow_logstore.core.windows import COMMIT_EVENT, payload_of

        names = set()
        for events in (triggering_asset_events or {}).values():
            for event in events:
                payload = payload_of(event.extra)
                if payload is not None and payload.get("event") == COMMIT_EVENT:
                    names.add(str(payload["table"]))
        return sorted(names) or list(TABLES)

    LogStorePublishVisibleOffsetsOperator.partial(task_id="publish", retries=2).expand(
        table=committed_tables()
    )
    # [END logstore_publish_tasks]
