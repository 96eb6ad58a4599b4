"""The engine glue every PySpark job shares; no actor's logic here.

- ``session``: the SparkSession configured for LogStore tables.
- ``jobconf``: how a spark-submit'ed job learns its catalog and Kafka settings.
- ``results``: how a job reports back (its result line, and the result next to the table).
- ``executors``: what Spark executors need (the package zip, the Python requirements).

The jobs themselves are their actors': ``write.write_job``, ``read.read_job``, ``reconcile.reconcile_job``
and ``compaction.compact_job``; the files ``spark-submit`` runs are in :mod:`airflow_logstore.spark_apps`.
"""
