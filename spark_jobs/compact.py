"""PySpark entry point: policy-driven compaction of a LogStore table (Iceberg's maintenance actions).

spark-submit spark_jobs/compact.py --table db.orders [--dry-run] [--force] [--target-size BYTES]
"""

import sys

from airflow_logstore.compaction.compact_job import main

if __name__ == "__main__":
    sys.exit(main())
