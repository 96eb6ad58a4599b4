"""logstore_reconcile: every 10 minutes, reverse the records that failed writer attempts left in the logs.

Runs over every LogStore table of the catalog, or only the table given in the ``table`` param.
One run at a time; no catch-up (each run scans from where the previous one stopped).
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, CronTriggerTimetable, Param, task

from airflow_logstore.operators.reconcile import LogStoreReconcileOperator

with DAG(
    dag_id="logstore_reconcile",
    description="Detect redundant log records of failed writer attempts and write their reversals",
    # Starts paused, and never runs for a time that has passed: unpaused, its first run is at the next
    # scheduled time, never at once when Airflow starts (no start_date; run_immediately=timedelta(0),
    # since False still runs a time up to 5 minutes past)
    schedule=CronTriggerTimetable("*/10 * * * *", timezone="UTC", run_immediately=timedelta(0)),
    is_paused_upon_creation=True,
    catchup=False,
    max_active_runs=1,
    params={
        "table": Param(
            "",
            type="string",
            pattern=r"^$|^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$",
            title="Table",
            description="Empty: every LogStore table of the catalog",
        ),
        "dry_run": Param(False, type="boolean", title="Dry run", description="Report only; write nothing"),
    },
    tags=["logstore", "maintenance"],
    doc_md=__doc__,
) as dag:
    # [START logstore_reconcile_tasks]
    @task
    def tables_to_reconcile(params: dict | None = None) -> list[str]:
        from airflow_logstore.hooks.logstore import LogStoreHook
        from airflow_logstore.table.discovery import logstore_tables

        chosen = (params or {}).get("table") or ""
        return [chosen] if chosen else logstore_tables(LogStoreHook().catalog_spec())

    LogStoreReconcileOperator.partial(
        task_id="reconcile", dry_run="{{ params.dry_run }}", max_active_tis_per_dagrun=2
    ).expand(table=tables_to_reconcile())
    # [END logstore_reconcile_tasks]
