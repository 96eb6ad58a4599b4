"""PySpark application: dual write of one batch (or a stream of micro-batches) to Iceberg and Kafka.

The operators submit this file (``job_path("dual_write_app.py")``);
``spark_jobs/dual_write.py`` in a checkout calls the same entry point.
"""

from __future__ import annotations

import sys

from airflow_logstore.write.write_job import dual_write_main

if __name__ == "__main__":
    sys.exit(dual_write_main())
