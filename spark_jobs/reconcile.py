"""PySpark entry point: reconcile a LogStore table's log (big backlogs); the run of `logstore reconcile`.

spark-submit spark_jobs/reconcile.py --table db.orders [--dry-run]
"""

import sys

from airflow_logstore.reconcile.reconcile_job import main

if __name__ == "__main__":
    sys.exit(main())
