"""logstore_compaction: hourly, compact the LogStore tables whose small-file or delete-file counts say so.

The policy comes from each table's ``self-optimizing.*`` properties; tables below the thresholds
report "nothing to do". Compaction snapshots are marked so sensors and visibility ignore them.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, CronTriggerTimetable, Param, task

from airflow_logstore.operators.compaction import LogStoreCompactionOperator

with DAG(
    dag_id="logstore_compaction",
    description="Policy-driven compaction of LogStore tables (small files, deletes, snapshot expiry)",
    # Starts paused, and never runs for a time that has passed: unpaused, its first run is at the next
    # scheduled time, never at once when Airflow starts (no start_date; run_immediately=timedelta(0),
    # since False still runs a time up to 5 minutes past)
    schedule=CronTriggerTimetable("0 * * * *", timezone="UTC", run_immediately=timedelta(0)),
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
        "dry_run": Param(False, type="boolean", title="Dry run"),
    },
    tags=["logstore", "maintenance"],
    doc_md=__doc__,
) as dag:
    # [START logstore_compaction_tasks]
    @task
    def tables_to_compact(params: dict | None = None) -> list[str]:
        from airflow_logstore.hooks.logstore import LogStoreHook
        from airflow_logstore.table.discovery import logstore_tables

        chosen = (params or {}).get("table") or ""
        return [chosen] if chosen else logstore_tables(LogStoreHook().catalog_spec(), log_enabled_only=False)

    LogStoreCompactionOperator.partial(
        task_id="compact", dry_run="{{ params.dry_run }}", max_active_tis_per_dagrun=1
    ).expand(table=tables_to_compact())
    # [END logstore_compaction_tasks]
