"""The Airflow assets of a LogStore table, each watched by its event trigger.

``logstore_commit_asset(table)`` gets an event whenever the table commits a dual-write snapshot (a DAG
scheduled on it publishes visibility); ``logstore_visible_asset(table)`` whenever its visibility
watermark advances (DAGs scheduled on it read what became visible). Declare them in ``schedule`` and
Airflow's triggerer runs their watchers::

    from airflow_logstore.triggers.assets import logstore_visible_asset

    with DAG("orders_downstream", schedule=logstore_visible_asset("demo.orders")):
        LogStoreReadVisibleOperator(task_id="read", table="demo.orders")

One trigger per asset: its arguments name the table, so two assets never share one (Airflow shares a
trigger between assets whose watchers have the same arguments, and such a trigger has no asset of its
own to keep state for).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetWatcher

from airflow_logstore.triggers.table_events import LogStoreCommitTrigger, LogStoreVisibleTrigger

#: the asset group of LogStore's assets in the Airflow UI
ASSET_GROUP = "logstore"


def commit_asset_name(table: str) -> str:
    """The asset that gets an event per dual-write commit of ``table`` (committed, not yet visible)."""
    return f"logstore.{table}.commits"


def visible_asset_name(table: str) -> str:
    """The asset that gets an event whenever the visibility watermark of ``table`` advances."""
    return f"logstore.{table}.visible"


def logstore_commit_asset(table: str, **trigger_kwargs: Any) -> Asset:
    """``table``'s commit asset, watched by :class:`LogStoreCommitTrigger` (its arguments: ``poll_interval``,
    ``logstore_conn_id``, ``kafka_config_id``, ``max_backoff``)."""
    trigger = LogStoreCommitTrigger(table=table, **trigger_kwargs)
    return Asset(
        name=commit_asset_name(table),
        group=ASSET_GROUP,
        watchers=[AssetWatcher(name=f"{table}.commits", trigger=trigger)],
    )


def logstore_visible_asset(table: str, **trigger_kwargs: Any) -> Asset:
    """``table``'s visible asset, watched by :class:`LogStoreVisibleTrigger` (same arguments)."""
    trigger = LogStoreVisibleTrigger(table=table, **trigger_kwargs)
    return Asset(
        name=visible_asset_name(table),
        group=ASSET_GROUP,
        watchers=[AssetWatcher(name=f"{table}.visible", trigger=trigger)],
    )
