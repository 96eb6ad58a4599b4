"""Compaction: the policy, the snapshot-expiry plan and the report (no Spark here).

- ``policy``: when to rewrite files, which snapshots may expire and what the ledger needs first.

Iceberg's actions run on Spark in :mod:`airflow_logstore.spark.compact_job`.
"""
