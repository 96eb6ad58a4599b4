"""PySpark entry point: dual write of one batch (or a stream of micro-batches) to Iceberg and Kafka.

spark-submit spark_jobs/dual_write.py --table db.orders --input orders.jsonl --batch-id 7
"""

import sys

from airflow_logstore.write.write_job import dual_write_main

if __name__ == "__main__":
    sys.exit(dual_write_main())
