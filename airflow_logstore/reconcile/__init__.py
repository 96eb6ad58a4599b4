"""Reconciliation: reversing the records that failed writer attempts left in the log.

- ``reconciler``: one run (lease, scan, plan, produce the reversals, record progress): ``reconcile``.
- ``scan``: the log scan of one run, in one or several processes (imports little, for its workers).

The decisions themselves are pure, in :mod:`airflow_logstore.core.reconcile`.
"""
