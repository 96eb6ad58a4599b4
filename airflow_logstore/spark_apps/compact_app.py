"""PySpark application: policy-driven compaction of a LogStore table (Iceberg's maintenance actions).

The operators submit this file (``job_path("compact_app.py")``);
``spark_jobs/compact.py`` in a checkout calls the same entry point.
"""

from __future__ import annotations

import sys

from airflow_logstore.compaction.compact_job import main

if __name__ == "__main__":
    sys.exit(main())
