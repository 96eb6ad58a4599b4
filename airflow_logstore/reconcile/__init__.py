"""Reconciliation: reversing the records that failed writer attempts left in the log.

- ``reconciler``: one run (lease, scan, plan, produce the reversals, record progress): ``reconcile``.
- ``scan``: the log scan of one run, in one or several processes (imports little, for its workers).
- ``reconcile_job``: the same run with its scan and produce in a PySpark job, for big backlogs.

The decisions themselves are pure, in :mod:`airflow_logstore.core.reconcile`.
"""
