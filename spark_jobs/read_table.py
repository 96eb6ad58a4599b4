"""PySpark entry point: read a LogStore table (file, log consistent/eventual, hybrid) with Spark.

spark-submit spark_jobs/read_table.py --table db.orders --mode hybrid --output /tmp/orders
"""

import sys

from airflow_logstore.read.read_job import read_table_main

if __name__ == "__main__":
    sys.exit(read_table_main())
