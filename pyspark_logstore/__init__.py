"""The ``logstore`` Spark data source, found by PySpark without user code.

PySpark looks up Python data sources in every top-level module named ``pyspark_*`` on the Python path
of the driver's Python (``PYSPARK_DRIVER_PYTHON``, else ``PYSPARK_PYTHON``) and registers its
``DefaultSource`` (``pyspark.sql.worker.lookup_data_sources``): with airflow-logstore installed there,
``spark.read.format("logstore")`` works in any session. The executors' Python needs the package too
(or use ``airflow_logstore.read.spark_source.register(spark)``, which ships it with the session's
``--py-files``).
"""

from __future__ import annotations

from airflow_logstore.read.spark_source import LogStoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
