"""PySpark application: reconcile a LogStore table's log (big backlogs).

The operators submit this file (``job_path("reconcile_app.py")``);
``spark_jobs/reconcile.py`` in a checkout calls the same entry point.
"""

from __future__ import annotations

import sys

from airflow_logstore.reconcile.reconcile_job import main

if __name__ == "__main__":
    sys.exit(main())
