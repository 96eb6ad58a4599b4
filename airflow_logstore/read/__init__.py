"""Reading a LogStore table: ``file``, ``log`` (consistent or eventual) and ``hybrid`` reads.

- ``reader``: one read of a snapshot, of the log, or of both (``run_read``).
- ``follow``: tailing the log with second-level latency, snapshot-gated for consistent readers.
- ``read_job``: the same reads as a PySpark job, at Spark scale.
"""
