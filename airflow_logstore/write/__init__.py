"""The writer: every batch goes to the table's log and to the Iceberg table (the protocol's first actor).

- ``writer``: :class:`~airflow_logstore.write.writer.DualWriter`, one writer attempt (claim an epoch,
  fence, then per batch the steps below).
- ``inputs`` and ``checking``: read a batch's input and check every row before anything is written.
- ``planning``: plan the row kinds against the table's current rows.
- ``producing``: produce the records from the JVM (``java/LogProducer.java``) and flush.
- ``committing``: commit the batch by compare-and-set on ``main`` (the staged commit and its fence are
  the table side's, :mod:`airflow_logstore.table.staged_commit`).
- ``streaming``: the same writer fed by a Structured Streaming query, one micro-batch a batch.
- ``write_job``: the PySpark job's command line and entry point.
"""
