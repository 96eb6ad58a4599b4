"""logstore_downstream: scheduled on LogStore table assets; reads what the new batch made visible.

Every batch the pipeline commits emits the table's asset (through the ``logstore_tables`` alias);
this DAG runs then and reads the table's log with the consistency guarantee.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, AssetAlias, task

from airflow_logstore.operators.read import LogStoreReadOperator

with DAG(
    dag_id="logstore_downstream",
    description="A downstream step scheduled on the LogStore table assets",
    schedule=[AssetAlias("logstore_tables")],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["logstore", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def changed_tables(triggering_asset_events: dict | None = None) -> list[str]:
        names = set()
        for events in (triggering_asset_events or {}).values():
            for event in events:
                name = getattr(event.asset, "name", "") or ""
                if name.startswith("logstore."):
                    names.add(name[len("logstore.") :])
        return sorted(names) or ["demo.orders"]

    LogStoreReadOperator.partial(task_id="consistent_read", mode="log", consistency="transactional").expand(
        table=changed_tables()
    )
