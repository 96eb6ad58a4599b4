"""Whether a batch changes each of its keys once: then no record of a change depends on another change
of the batch, and a batch the table appends is written through straight from its input's partitions,
with no shuffle and no per-key window (:meth:`airflow_logstore.spark.dual_write.DualWriter._through`).

The check hashes each change's key (``xxhash64`` of the key columns), sorts each task's hashes in the JVM
(``LogProducer.KeyHashes``) and merges them on the driver: one pass over the key columns, 8 bytes per
change on the driver. Two keys with the same hash count as a repeat, so the answer may be a false "no"
(the batch then takes the per-key window, which is right for any batch), never a false "yes".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_logstore.spark.planning import quoted
from airflow_logstore.spark.producing import PRODUCER_CLASS, java_arguments, java_class

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: The Java class that sorts a task's key hashes (a nested class of ``LogProducer``).
KEY_HASHES_CLASS = PRODUCER_CLASS + "$KeyHashes"
#: Batches of more changes are not checked (their hashes would take more than 32 MB on the driver): they
#: take the per-key window.
KEYS_ONCE_LIMIT = 4_000_000


def keys_changed_once(changes: DataFrame, rows: int, primary_key: Sequence[str]) -> bool:
    """Whether ``changes`` (``rows`` of them) change each key once; True for a table without a key (each
    change stands alone), False for more than :data:`KEYS_ONCE_LIMIT` changes."""
    from pyspark.sql import functions as F

    if not primary_key:
        return True
    if rows > KEYS_ONCE_LIMIT:
        return False
    spark = changes.sparkSession
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hashes = java_class(spark, KEY_HASHES_CLASS).getConstructors()[0].newInstance(java_arguments(spark))
    hashed = changes.select(F.xxhash64(*[quoted(c) for c in primary_key]))
    tasks = hashed._jdf.mapPartitions(hashes, jvm.org.apache.spark.sql.Encoders.BINARY()).collectAsList()
    return bool(hashes.allOnce(tasks))


def partitions_of(frame: DataFrame) -> int:
    """The partitions of ``frame``, from its physical plan. Without a job for a plan without an exchange
    (a scan and projections); a plan with one would run its stages first."""
    return int(frame._jdf.queryExecution().executedPlan().execute().getNumPartitions())
