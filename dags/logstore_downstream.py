"""logstore_downstream: runs when a LogStore table's visibility watermark advances; reads what became visible.

Scheduled on the tables' *visible* assets: their watcher (``LogStoreVisibleTrigger``, in the triggerer)
fires when the table's watermark advances, whoever published (logstore_pipeline's publish task,
logstore_publish, the CLI). Each run reads, with the consistency guarantee, exactly the log records its
events made visible: never a record of an uncommitted batch, never a change an earlier run read, none
left out, also after a triggerer restart. One run at a time. Of the events that come while a run reads,
Airflow (up to at least 3.3.2, apache/airflow#56050) gives the next run only the first; each run's
catch-up task then brings one more run for the others, instead of leaving them for the table's next
visible change (README, "Events Airflow leaves behind").
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, AssetAny

from airflow_logstore.operators.read_visible import (
    LogStoreReadVisibleOperator,
    LogStoreVisibleCatchUpOperator,
)
from airflow_logstore.triggers.assets import logstore_visible_asset

# [START logstore_downstream_tables]
#: the tables this DAG follows (each gets a visible asset watched in the triggerer)
TABLES = ["demo.orders", "demo.orders_stream"]
# [END logstore_downstream_tables]

with DAG(
    dag_id="logstore_downstream",
    description="Read what became visible in LogStore tables, run by their visible events",
    schedule=AssetAny(*(logstore_visible_asset(table) for table in TABLES)),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["logstore", "example"],
    doc_md=__doc__,
) as dag:
    # [START logstore_downstream_tasks]
    for table in TABLES:
        name = table.replace(".", "_")
        # a table without an event in the run is skipped
        read = LogStoreReadVisibleOperator(task_id=f"read_{name}", table=table)
        # visible events stored after the run's own get a run of their own (skipped when none)
        read >> LogStoreVisibleCatchUpOperator(
            task_id=f"catch_up_{name}", table=table, trigger_rule="all_done"
        )
    # [END logstore_downstream_tasks]
