"""Step 3 of the dual write: plan a batch's row kinds against the table's current rows.

The Spark form of :func:`airflow_logstore.core.changes.plan_batch` (same rules, same three parts): per
key, in input order, each change yields ``-U`` before + ``+U`` after, ``+I`` after, or ``-D`` before; a
delete of a key with no row yields nothing and is counted as a no-op delete. Tables without a key only
append (``+I``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_logstore.spark.inputs import OP_COLUMN, ROW_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Columns of the planned log records: the encoded key and value, the input row and the record's
#: place within that row's change (0 for the before-image, 1 for the after-image).
KEY_COLUMN = "_logstore_key"
VALUE_COLUMN = "_logstore_value"
SUB_COLUMN = "_logstore_sub"
BEFORE_COLUMN = "_logstore_before"
AFTER_COLUMN = "_after"
TABLE_ROW_COLUMN = "_table_row"
SEQ_IN_KEY_COLUMN = "_seq_in_key"
CURRENT_PREFIX = "_cur_"
JSON_OPTIONS = {
    "ignoreNullFields": "false",
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "dateFormat": "yyyy-MM-dd",
}


@dataclass(frozen=True)
class BatchPlan:
    """A planned batch as Spark frames (lazy until an action runs).

    :param records: the log records: key, value, input row, place in the row's change.
    :param final: the last change of each key (the table's columns and the change kind): the MERGE's source.
    :param noop_deletes: deletes of keys the table does not hold (None for tables without a key).
    """

    records: DataFrame
    final: DataFrame
    noop_deletes: DataFrame | None

    def persisted(self) -> BatchPlan:
        """The same plan with its records cached: they are counted, then produced."""
        return BatchPlan(self.records.persist(), self.final, self.noop_deletes)

    def unpersist(self) -> None:
        self.records.unpersist()

    def count_noop_deletes(self) -> int:
        return 0 if self.noop_deletes is None else self.noop_deletes.count()


def plan_row_kinds(changes: DataFrame, target: DataFrame, primary_key: Sequence[str]) -> BatchPlan:
    """Plan the log records, final per-key state and no-op deletes of validated ``changes``.

    :param target: the table as it is now (``main``): where before-images come from.
    """
    columns = [f.name for f in target.schema.fields]
    if not primary_key:
        return BatchPlan(append_records(changes, columns), table_columns(changes, columns), None)
    with_before = before_and_after(
        with_table_rows(changes, target, columns, primary_key), columns, primary_key
    )
    return BatchPlan(
        row_kind_records(with_before),
        last_change_per_key(changes, columns, primary_key),
        noop_deletes(with_before),
    )


def append_records(changes: DataFrame, columns: Sequence[str]) -> DataFrame:
    """Tables without a key: every row is one ``+I`` record with no key."""
    from pyspark.sql import functions as F

    return changes.select(
        F.lit(None).cast("binary").alias(KEY_COLUMN),
        value_json(F.lit("+I"), row_struct(columns)).alias(VALUE_COLUMN),
        F.col(ROW_COLUMN),
        F.lit(0).alias(SUB_COLUMN),
    )


def table_columns(frame: DataFrame, columns: Sequence[str]) -> DataFrame:
    return frame.select(*[quoted(c) for c in columns])


def with_table_rows(
    changes: DataFrame, target: DataFrame, columns: Sequence[str], primary_key: Sequence[str]
) -> DataFrame:
    """Each change with its key's current row in the table (``_table_row``; null when there is none)."""
    from pyspark.sql import functions as F

    current = target.select(*[quoted(c).alias(CURRENT_PREFIX + c) for c in columns])
    condition = None
    for c in primary_key:
        clause = quoted(c) == F.col(CURRENT_PREFIX + c)
        condition = clause if condition is None else condition & clause
    current_row = F.struct(*[F.col(CURRENT_PREFIX + c).alias(c) for c in columns])
    return changes.join(current, condition, "left").select(
        *[quoted(c) for c in columns],
        F.col(OP_COLUMN),
        F.col(ROW_COLUMN),
        F.when(F.col(CURRENT_PREFIX + primary_key[0]).isNotNull(), current_row).alias(TABLE_ROW_COLUMN),
    )


def before_and_after(joined: DataFrame, columns: Sequence[str], primary_key: Sequence[str]) -> DataFrame:
    """Each change's before-image (the table's row for a key's first change, else the previous change's
    after-image) and after-image (null for a delete), with the encoded key."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_key = Window.partitionBy(*[quoted(c) for c in primary_key]).orderBy(ROW_COLUMN)
    after = F.when(F.col(OP_COLUMN) == "D", F.lit(None)).otherwise(row_struct(columns))
    staged = joined.withColumn(AFTER_COLUMN, after).withColumn(SEQ_IN_KEY_COLUMN, F.row_number().over(by_key))
    staged = staged.withColumn(
        BEFORE_COLUMN,
        F.when(F.col(SEQ_IN_KEY_COLUMN) == 1, F.col(TABLE_ROW_COLUMN)).otherwise(
            F.lag(AFTER_COLUMN).over(by_key)
        ),
    )
    return staged.select(
        key_json(primary_key),
        F.col(ROW_COLUMN),
        F.col(OP_COLUMN),
        F.col(BEFORE_COLUMN),
        F.col(AFTER_COLUMN),
    )


def row_kind_records(with_before: DataFrame) -> DataFrame:
    """The log records: ``-U``/``-D`` of each before-image, then ``+U``/``+I`` of each after-image."""
    from pyspark.sql import functions as F

    before, after, op = F.col(BEFORE_COLUMN), F.col(AFTER_COLUMN), F.col(OP_COLUMN)
    retractions = with_before.where(before.isNotNull()).select(
        F.col(KEY_COLUMN),
        value_json(F.when(op == "D", F.lit("-D")).otherwise(F.lit("-U")), before).alias(VALUE_COLUMN),
        F.col(ROW_COLUMN),
        F.lit(0).alias(SUB_COLUMN),
    )
    additions = with_before.where(op != "D").select(
        F.col(KEY_COLUMN),
        value_json(F.when(before.isNull(), F.lit("+I")).otherwise(F.lit("+U")), after).alias(VALUE_COLUMN),
        F.col(ROW_COLUMN),
        F.lit(1).alias(SUB_COLUMN),
    )
    return retractions.unionByName(additions)


def noop_deletes(with_before: DataFrame) -> DataFrame:
    """Deletes of keys that have no row (neither in the table nor from an earlier change of the batch)."""
    from pyspark.sql import functions as F

    return with_before.where((F.col(OP_COLUMN) == "D") & F.col(BEFORE_COLUMN).isNull())


def last_change_per_key(changes: DataFrame, columns: Sequence[str], primary_key: Sequence[str]) -> DataFrame:
    """The last change of each key: the table's columns and the change kind (the MERGE's source)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    last = Window.partitionBy(*[quoted(c) for c in primary_key]).orderBy(F.col(ROW_COLUMN).desc())
    return (
        changes.withColumn("_last", F.row_number().over(last))
        .where(F.col("_last") == 1)
        .select(*[quoted(c) for c in columns], F.col(OP_COLUMN))
    )


def row_struct(columns: Sequence[str]) -> Column:
    from pyspark.sql import functions as F

    return F.struct(*[quoted(c) for c in columns])


def key_json(primary_key: Sequence[str]) -> Column:
    """The record key: the key values as a compact JSON array, as bytes."""
    from pyspark.sql import functions as F

    return (
        F.to_json(F.array(*[quoted(c) for c in primary_key]), JSON_OPTIONS).cast("binary").alias(KEY_COLUMN)
    )


def value_json(kind: Any, row: Any) -> Column:
    """The record value ``{"kind": ..., "row": {...}}`` as bytes."""
    from pyspark.sql import functions as F

    return F.to_json(F.struct(kind.alias("kind"), row.alias("row")), JSON_OPTIONS).cast("binary")


def quoted(name: str) -> Column:
    """A column by its table name, quoted (names may hold dots or spaces)."""
    from pyspark.sql import functions as F

    return F.col(f"`{name}`")
