"""Compaction: the policy, the snapshot-expiry plan and the report, and the job that runs them.

- ``policy``: when to rewrite files, which snapshots may expire and what the ledger needs first (no
  Spark).
- ``compact_job``: Iceberg's maintenance actions on Spark, driven by the policy.
"""
