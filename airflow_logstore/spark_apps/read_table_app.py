"""PySpark application: read a LogStore table (file, log consistent/eventual, hybrid) with Spark.

The operators submit this file (``job_path("read_table_app.py")``);
``spark_jobs/read_table.py`` in a checkout calls the same entry point.
"""

from __future__ import annotations

import sys

from airflow_logstore.read.read_job import read_table_main

if __name__ == "__main__":
    sys.exit(read_table_main())
