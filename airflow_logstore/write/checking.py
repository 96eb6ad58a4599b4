"""Step 2 of the dual write: one pass over a batch's changes checks every row against the table schema,
counts them and finds whether the batch changes each of its keys once.

A bad row (:func:`airflow_logstore.write.inputs.tagged_changes` tags it) fails the batch before anything
is written, with an error naming its row, column and file. A batch that changes each key once, or a table
without a key, needs no plan when none of its keys is in the table (the write-through's condition, and
a single-store write's): no change has a before-image and no record depends on another change
(:meth:`airflow_logstore.write.writer.DualWriter._through`, ``_write_direct``).

The pass is one Spark job over the changes: each task counts its rows, keeps the id of its first bad one
and, when keys are checked, sorts a hash of each row's key (``xxhash64`` of the key columns) in the JVM
(``LogProducer.ChangeCheck``); the driver merges the tasks' answers. Two keys with the same hash count as
a repeat, so "once" may be a false "no" (the batch then takes the per-key window, which is right for any
batch), never a false "yes". Hashing the keys in the validation's own pass costs less than a second pass:
the input is read once (BENCHMARKS.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_logstore.write.inputs import (
    ERROR_AT_COLUMN,
    ERROR_COLUMN,
    ROW_COLUMN,
    bad_input,
    tagged_changes,
    uncompressed_cache,
)
from airflow_logstore.write.planning import quoted
from airflow_logstore.write.producing import PRODUCER_CLASS, java_arguments, java_class

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

#: The Java class of the pass (a nested class of ``LogProducer``).
CHANGE_CHECK_CLASS = PRODUCER_CLASS + "$ChangeCheck"
#: Batches of more changes are not checked for repeated keys (their hashes would take more than 32 MB on
#: the driver): they take the per-key window. Each task hashes at most its share of the limit (the limit
#: over the batch's tasks), so a task with more rows than that leaves the batch unchecked too.
KEYS_ONCE_LIMIT = 4_000_000


@dataclass(frozen=True)
class Changes:
    """A batch's validated changes: the table's columns plus ``_logstore_op`` (I, U or D) and
    ``_logstore_row`` (input order).

    :param frame: the changes, computed from the input wherever a step reads them, or from a cache.
    :param rows: how many there are (counted by the validation).
    :param cached: what is cached (``frame`` and the validation's columns); None when the input is read
        again instead (:data:`~airflow_logstore.write.inputs.REREAD_FORMATS`).
    :param keys_once: whether the batch changes each of its keys once (always for a table without a key);
        None when this was not checked (not asked, or too many changes).
    :param tasks: the partitions of ``frame`` (and of any frame computed from it without a shuffle).
    """

    frame: DataFrame
    rows: int
    cached: DataFrame | None = None
    keys_once: bool | None = None
    tasks: int = 1

    def unpersist(self) -> None:
        if self.cached is not None:
            self.cached.unpersist()


@dataclass(frozen=True)
class Checked:
    """What the pass found: the rows, the id of the first bad one (None: every row is good), whether
    the keys change once (None: not checked), and the pass's tasks (the partitions of the changes)."""

    rows: int
    first_bad: int | None
    keys_once: bool | None
    tasks: int


def validated_changes(
    raw: DataFrame,
    table_schema: StructType,
    primary_key: Sequence[str],
    change_column: str | None,
    *,
    cache: bool = True,
    check_keys: bool = False,
    missing_as_null: bool = False,
    local: bool = False,
) -> Changes:
    """Cast ``raw`` to the table schema and tag rows; raise :class:`BadInputError` on the first bad row.

    One pass over the input checks every row and counts them; with ``check_keys`` it also finds whether
    the batch changes each key once (:attr:`Changes.keys_once`). With ``cache`` it also caches them;
    without, every later step computes the changes from the input again, which must then be files that
    do not change while the batch runs (a Parquet input; any input must not change, since Spark
    computes a lost cached block again from the input too). ``missing_as_null``: see
    :func:`~airflow_logstore.write.inputs.tagged_changes`. ``local``: ``raw`` is a small local frame
    (:func:`~airflow_logstore.write.inputs.small_batch_rows`): the pass runs in the driver
    (:func:`local_check`), and nothing is cached (every step evaluates the changes in the driver again,
    numbering the rows the same way).
    """
    tagged = tagged_changes(
        raw, table_schema, list(primary_key), change_column, missing_as_null=missing_as_null
    )
    cache = cache and not local
    if cache:
        tagged = tagged.persist()
    with uncompressed_cache(raw.sparkSession) if cache else nullcontext():  # the pass builds the cache
        checked = (local_check if local else checked_changes)(tagged, primary_key if check_keys else None)
    if checked.first_bad is not None:
        error = bad_input(raw, tagged, checked.first_bad)
        tagged.unpersist()
        raise error
    frame = tagged.drop(ERROR_COLUMN, ERROR_AT_COLUMN)
    return Changes(frame, checked.rows, tagged if cache else None, checked.keys_once, checked.tasks)


def checked_changes(tagged: DataFrame, primary_key: Sequence[str] | None) -> Checked:
    """The pass over ``tagged`` (:func:`~airflow_logstore.write.inputs.tagged_changes`).

    :param primary_key: the keys to check (empty: a table without a key, whose changes each stand alone);
        None: do not check them.
    """
    from pyspark.sql import functions as F

    spark = tagged.sparkSession
    hash_keys = bool(primary_key)
    columns = [F.col(ROW_COLUMN), F.col(ERROR_COLUMN).isNotNull()]
    if primary_key:
        columns.append(F.xxhash64(*[quoted(c) for c in primary_key]))
    partitions = partitions_of(tagged)
    per_task = KEYS_ONCE_LIMIT // max(1, partitions)
    check = (
        java_class(spark, CHANGE_CHECK_CLASS)
        .getConstructors()[0]
        .newInstance(java_arguments(spark, hash_keys, per_task))
    )
    summary = check.check(tagged.select(*columns)._jdf)
    rows, first_bad, keys = int(summary[0]), int(summary[1]), int(summary[2])
    if primary_key is None:
        keys_once = None
    elif not primary_key:
        keys_once = True
    else:
        keys_once = None if keys < 0 else keys == 1
    return Checked(rows, first_bad if first_bad >= 0 else None, keys_once, partitions)


def local_check(tagged: DataFrame, primary_key: Sequence[str] | None) -> Checked:
    """:func:`checked_changes` of a small local frame, without a Spark job: the same columns (row id,
    whether the row is bad, the key's ``xxhash64``) evaluated and collected in the driver, and the same
    answers (the first bad row's id; the keys change once unless two rows share a hash)."""
    from pyspark.sql import functions as F

    columns = [F.col(ROW_COLUMN), F.col(ERROR_COLUMN).isNotNull()]
    if primary_key:
        columns.append(F.xxhash64(*[quoted(c) for c in primary_key]))
    return checked_rows(tagged.select(*columns).collect(), primary_key, partitions_of(tagged))


def checked_rows(rows: Sequence[Sequence[Any]], primary_key: Sequence[str] | None, tasks: int) -> Checked:
    """What the pass finds in ``rows`` of (row id, whether it is bad[, the key's hash]): the rows, the
    smallest bad row id, and whether no two rows share a key hash (``ChangeCheck.summary``'s answers)."""
    first_bad = min((row[0] for row in rows if row[1]), default=None)
    if primary_key is None:
        keys_once = None
    elif not primary_key:
        keys_once = True
    else:
        hashes = [row[2] for row in rows]
        keys_once = len(set(hashes)) == len(hashes)
    return Checked(len(rows), first_bad, keys_once, tasks)


def partitions_of(frame: DataFrame) -> int:
    """The partitions of ``frame``, from its physical plan. Without a job for a plan without an exchange
    (a scan and projections, or a cache of one); a plan with one would run its stages first."""
    return int(frame._jdf.queryExecution().executedPlan().execute().getNumPartitions())
