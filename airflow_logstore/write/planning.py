"""Step 3 of the dual write: plan a batch's row kinds against the table's current rows.

The Spark form of :func:`airflow_logstore.core.batch_plan.plan_batch` (same rules, same three parts): per
key, in input order, each change yields ``-U`` before + ``+U`` after, ``+I`` after, or ``-D`` before; a
delete of a key with no row yields nothing and is counted as a no-op delete. Tables without a key only
append (``+I``).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.codec import (
    DEBEZIUM_CONNECTOR,
    SPARK_JSON_OPTIONS,
    DataFormat,
    RowKind,
    debezium_op,
)
from airflow_logstore.write.inputs import ADDED_COLUMNS, OP_COLUMN, ROW_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)

#: Columns of the plan: the encoded record key, the before- and after-images, and a change's two record
#: values (``write_through_rows``).
KEY_COLUMN = "_logstore_key"
BEFORE_COLUMN = "_logstore_before"
AFTER_COLUMN = "_after"
TABLE_ROW_COLUMN = "_table_row"
LAST_COLUMN = "_last_in_key"
BEFORE_VALUE_COLUMN = "_logstore_before_value"
AFTER_VALUE_COLUMN = "_logstore_after_value"
APPENDED_COLUMN = "_logstore_appended"
CURRENT_PREFIX = "_cur_"
#: A batch with more distinct keys than this reads the table without a key filter (the filter is a list
#: of literals: in the scan's pushed filter and in the MERGE's statement).
KEY_FILTER_LIMIT = 50_000


@dataclass(frozen=True)
class KeyFilter:
    """The distinct values of the batch's first key column: the only rows of the table it can touch.

    Pushed into the scan that looks up the batch's current rows and into the MERGE's target, it lets
    Iceberg skip buckets (and files whose key range holds none of them) and Spark drop every other
    row before any join, so neither joins nor shuffles the whole table.
    """

    column: str
    values: tuple[Any, ...]

    def condition(self) -> Column:
        """The filter as a column: parsed from its SQL text in one call (``Column.isin`` makes a JVM
        call per value: seconds for a batch of 10,000 keys)."""
        from pyspark.sql import functions as F

        return F.expr(self.sql())

    def sql(self, alias: str | None = None) -> str:
        """The filter in Spark SQL, on the table ``alias`` if given (``false`` for an empty batch)."""
        if not self.values:
            return "false"
        column = f"`{self.column}`" if alias is None else f"{alias}.`{self.column}`"
        return f"{column} IN ({', '.join(sql_literal(v) for v in self.values)})"


def sql_literal(value: Any) -> str:
    """A key value (int, long, string, date, boolean: the key types) as a Spark SQL literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise TypeError(f"a key value of type {type(value).__name__} has no SQL literal here")


def worth_a_key_filter(table_rows: int | None, batch_rows: int) -> bool:
    """Whether finding the batch's keys (one pass over the batch) can save more than it costs: only
    when the table holds more rows than the batch. A table no larger than its batch (a first load) is
    read whole at the cost of the batch itself. ``table_rows`` None: unknown, assume large."""
    return table_rows is None or table_rows > batch_rows


def table_rows(table: Any) -> int | None:
    """The rows of a pyiceberg table's current snapshot (its summary's total), None when unknown."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return 0
    total = snapshot.summary.additional_properties.get("total-records") if snapshot.summary else None
    return int(total) if total is not None else None


def key_filter(changes: DataFrame, primary_key: Sequence[str], *, local: bool = False) -> KeyFilter | None:
    """The batch's :class:`KeyFilter` (None without a key, or with more than KEY_FILTER_LIMIT values).

    :param local: ``changes`` is a small local frame: its key column is collected in the driver (no
        Spark job) and made distinct here (Spark's ``distinct`` is an aggregate: a job even then)."""
    if not primary_key:
        return None
    column = primary_key[0]
    if local:
        values = {row[0] for row in changes.select(quoted(column)).collect()}
    else:
        values = {
            row[0] for row in changes.select(quoted(column)).distinct().limit(KEY_FILTER_LIMIT + 1).collect()
        }
    if len(values) > KEY_FILTER_LIMIT:
        return None
    return KeyFilter(column, tuple(sorted(values)))


def files_may_hold(table: Any, keys: KeyFilter) -> bool:
    """Whether a data file of ``table``'s current snapshot (pyiceberg) may hold a row of ``keys``, by the
    table's metadata alone: its partitions and its files' column bounds (pyiceberg's scan planning,
    which keeps every file that may match). False means the table holds none of the keys, found without
    reading a data file or running a Spark job (a batch of new keys above every key in the table). Any
    error answers True (the caller then looks the keys up)."""
    if not keys.values:
        return False
    if "." in keys.column:  # pyiceberg reads a dotted name as a nested field
        return True
    try:
        from pyiceberg.expressions import In

        snapshot = table.metadata.current_snapshot_id
        if snapshot is None:
            return False
        found = In(keys.column, set(keys.values))  # type: ignore[call-arg,arg-type]  # pydantic signature
        scan = table.scan(row_filter=found, snapshot_id=snapshot)
        return any(True for _ in scan.plan_files())
    except Exception as exc:  # e.g. a key type pyiceberg's literals do not take
        log.info("the table's metadata could not tell where keys %s are (%s): looked up", keys.column, exc)
        return True


@dataclass(frozen=True)
class BatchPlan:
    """A planned batch as Spark frames, built when first read (lazy until an action runs; the frames a
    batch does not use are not even built: a write-through of a batch that changes each key once reads
    none of them).

    :param changes: the batch's validated changes.
    :param columns: the table's columns.
    :param primary_key: the table's key (empty: none).
    :param lookup: the table's current rows of the batch's keys (None: the table holds no rows, or has
        no key): read once, then the before-images and :meth:`holds_keys` come from it.
    :param keys: where the batch's keys can be in the table (None: anywhere).
    :param tasks: the partitions of :attr:`planned` (and of every frame computed from it without a
        shuffle).
    :param data_format: the format of the record values (the table's ``log-store.data-format``).
    """

    changes: DataFrame
    columns: tuple[str, ...]
    primary_key: tuple[str, ...]
    lookup: DataFrame | None = None
    keys: KeyFilter | None = None
    tasks: int = 1
    data_format: DataFormat = DataFormat.JSON

    @cached_property
    def planned(self) -> DataFrame:
        """Each change with its before- and after-image, spread over the Spark partitions that produce
        its records (all of a key in one), in the per-key window's order; for tables without a key, each
        row (an insert) spread over the tasks. What every other frame is computed from: cached by
        :meth:`persisted` when more than one of them is read, so the join with the lookup and the
        per-key window run once per batch."""
        from pyspark.sql import functions as F

        if not self.primary_key:
            return self.changes.repartition(self.tasks).select(
                *[quoted(c) for c in self.columns], F.col(OP_COLUMN), F.col(ROW_COLUMN)
            )
        joined = with_table_rows(self.changes, self.lookup, self.columns, self.primary_key)
        spread = joined.repartition(self.tasks, *[quoted(c) for c in self.primary_key])
        return before_and_after(spread, self.columns, self.primary_key)

    @cached_property
    def final(self) -> DataFrame:
        """The last change of each key (the table's columns and the change kind): the MERGE's source
        (every row, for tables without a key)."""
        if not self.primary_key:
            return table_columns(self.planned, self.columns)
        return final_rows(self.planned, self.columns, self.primary_key)

    @cached_property
    def through(self) -> DataFrame:
        """The rows of a write-through (:func:`write_through_rows`): each change's records and, for an
        appended row, the table's columns; in ``planned``'s partitions and order."""
        if not self.primary_key:  # every row is an insert (the validation allows nothing else)
            return appended_changes(self.planned, self.columns, (), self.data_format)
        return write_through_rows(self.planned, self.columns, self.primary_key, self.data_format)

    def lookup_cached(self) -> BatchPlan:
        """The same plan with its lookup cached: the table is read once per batch, for
        :meth:`holds_keys` and for the before-images."""
        if self.lookup is not None:
            self.lookup.persist()
        return self

    def holds_keys(self) -> bool:
        """Whether the table (as planned) holds a row of any of the batch's keys. When it does not, the
        batch's final rows are all new (or deletes of nothing): appending them is the MERGE's result,
        if the commit's base is the snapshot planned against (:class:`KeysAbsent`)."""
        return self.lookup is not None and not self.lookup.isEmpty()

    def persisted(self) -> BatchPlan:
        """The same plan with its planned changes cached: the no-op deletes (counted), the records
        (produced) and the final rows (committed) come from one computation of the plan (Spark uses a
        cached frame wherever its plan appears in a later query)."""
        self.planned.persist()
        return self

    def unpersist(self) -> None:
        if "planned" in self.__dict__:  # built (an unread plan was never cached)
            self.planned.unpersist()
        if self.lookup is not None:
            self.lookup.unpersist()

    def count(self) -> PlanCounts:
        """The batch's changes and its no-op deletes, in one pass over the plan (cached by
        :meth:`persisted`)."""
        from pyspark.sql import functions as F

        planned = self.planned
        if not self.primary_key:  # every change is one record, an append
            return PlanCounts(planned.count(), 0)
        row = planned.select(F.count(F.lit(1)), F.count(F.when(noop_delete(), F.lit(1)))).first()
        assert row is not None  # an aggregate without grouping has one row
        changes, noops = row
        return PlanCounts(changes, noops)


@dataclass(frozen=True)
class PlanCounts:
    """What :meth:`BatchPlan.count` found."""

    changes: int
    noop_deletes: int


@dataclass(frozen=True)
class KeysAbsent:
    """The plan found none of the batch's keys in the table as of ``snapshot_id`` (None: the table had
    no snapshot)."""

    snapshot_id: int | None

    def hold_for(self, base_snapshot_id: int, base_rows: int | None) -> bool:
        """Whether a commit on this base may append the batch: the base is the snapshot planned
        against, or it holds no rows at all."""
        return base_snapshot_id == self.snapshot_id or base_rows == 0


def plan_row_kinds(
    changes: DataFrame,
    target: DataFrame | None,
    primary_key: Sequence[str],
    keys: KeyFilter | None = None,
    tasks: int = 1,
    data_format: DataFormat = DataFormat.JSON,
) -> BatchPlan:
    """Plan the log records, final per-key state and no-op deletes of validated ``changes``.

    :param target: the table as it is now (``main``): where before-images come from; None when the
        table holds no rows (nothing to look up).
    :param keys: the batch's :func:`key_filter`, pushed into the lookup of the table.
    :param tasks: the Spark tasks that will produce the records. The plan is spread over that many
        partitions, all of a key in one (the per-key window needs no other shuffle), and the records are
        produced from those partitions as they are: per key in input order (the window's order).
    """
    columns = tuple(f.name for f in changes.schema.fields if f.name not in ADDED_COLUMNS)
    if not primary_key:
        return BatchPlan(changes, columns, (), tasks=tasks, data_format=data_format)
    lookup = current_rows(changes, target, primary_key, keys) if target is not None else None
    return BatchPlan(changes, columns, tuple(primary_key), lookup, keys, tasks, data_format)


def current_rows(
    changes: DataFrame, target: DataFrame, primary_key: Sequence[str], keys: KeyFilter | None
) -> DataFrame:
    """The table's rows whose key is in the batch.

    With a key filter the scan reads only what can hold the batch's keys, and the batch's keys are
    broadcast: the table is streamed once, never shuffled.
    """
    from pyspark.sql import functions as F

    batch_keys = changes.select(*[quoted(c) for c in primary_key]).distinct()
    if keys is None:  # a very large batch: let Spark choose the join
        return target.join(batch_keys, list(primary_key), "left_semi")
    return target.where(keys.condition()).join(F.broadcast(batch_keys), list(primary_key), "left_semi")


def appended_changes(
    changes: DataFrame,
    columns: Sequence[str],
    primary_key: Sequence[str],
    data_format: DataFormat = DataFormat.JSON,
) -> DataFrame:
    """The write-through rows (:func:`write_through_rows`' columns) of a batch that changes each key
    once (or has no key) and whose keys the table does not hold, straight from the changes, in their
    partitions and order: no change has a before-image, so each is an insert of its row (``+I``,
    appended) or a delete of a key that has no row (no record: a no-op delete)."""
    from pyspark.sql import functions as F

    key = key_json(primary_key) if primary_key else F.lit(None).cast("binary").alias(KEY_COLUMN)
    inserted = F.col(OP_COLUMN) != "D"
    return changes.select(
        key,
        F.lit(None).cast("binary").alias(BEFORE_VALUE_COLUMN),
        F.when(inserted, value_json(RowKind.INSERT, row_struct(columns), data_format)).alias(
            AFTER_VALUE_COLUMN
        ),
        inserted.alias(APPENDED_COLUMN),
        *[quoted(c) for c in columns],
    )


def changes_final(changes: DataFrame, columns: Sequence[str]) -> DataFrame:
    """:attr:`BatchPlan.final` of a batch that changes each key once (or has no key), straight from its
    changes: each change is its key's last (a delete's other columns are not read)."""
    from pyspark.sql import functions as F

    return changes.select(*[quoted(c) for c in columns], F.col(OP_COLUMN))


def deletes_in(changes: DataFrame) -> int:
    """How many of the changes are deletes (a count the optimizer answers without a scan when the
    batch has no change column: every change is then an insert)."""
    from pyspark.sql import functions as F

    return changes.where(F.col(OP_COLUMN) == "D").count()


def table_columns(frame: DataFrame, columns: Sequence[str]) -> DataFrame:
    return frame.select(*[quoted(c) for c in columns])


def with_table_rows(
    changes: DataFrame, target: DataFrame | None, columns: Sequence[str], primary_key: Sequence[str]
) -> DataFrame:
    """Each change with its key's current row (``_table_row``; null when there is none).

    :param target: the table's rows, or only those of the batch's keys (:func:`current_rows`); None
        when the table holds no rows.
    """
    from pyspark.sql import functions as F

    kept = [*[quoted(c) for c in columns], F.col(OP_COLUMN), F.col(ROW_COLUMN)]
    if target is None:
        return changes.select(*kept, F.lit(None).cast(row_type(changes, columns)).alias(TABLE_ROW_COLUMN))
    current = target.select(*[quoted(c).alias(CURRENT_PREFIX + c) for c in columns])
    condition = None
    for c in primary_key:
        clause = quoted(c) == F.col(CURRENT_PREFIX + c)
        condition = clause if condition is None else condition & clause
    current_row = F.struct(*[F.col(CURRENT_PREFIX + c).alias(c) for c in columns])
    return changes.join(current, condition, "left").select(
        *kept,
        F.when(F.col(CURRENT_PREFIX + primary_key[0]).isNotNull(), current_row).alias(TABLE_ROW_COLUMN),
    )


def row_type(frame: DataFrame, columns: Sequence[str]) -> Any:
    """The struct type of ``columns`` of ``frame`` (a row of the table)."""
    from pyspark.sql.types import StructType

    return StructType([frame.schema[c] for c in columns])


def before_and_after(joined: DataFrame, columns: Sequence[str], primary_key: Sequence[str]) -> DataFrame:
    """Each change's before-image (the table's row for a key's first change, else the previous change's
    after-image) and after-image (null for a delete), with the encoded key, the key's columns and
    whether it is the key's last change."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_key = Window.partitionBy(*[quoted(c) for c in primary_key]).orderBy(ROW_COLUMN)
    after = F.when(F.col(OP_COLUMN) == "D", F.lit(None)).otherwise(row_struct(columns))
    before = F.when(F.row_number().over(by_key) == 1, F.col(TABLE_ROW_COLUMN)).otherwise(
        F.lag(after).over(by_key)
    )
    return joined.select(  # one projection: the frame is analyzed once
        key_json(primary_key),
        *[quoted(c) for c in primary_key],
        F.col(ROW_COLUMN),
        F.col(OP_COLUMN),
        before.alias(BEFORE_COLUMN),
        after.alias(AFTER_COLUMN),
        F.lead(ROW_COLUMN).over(by_key).isNull().alias(LAST_COLUMN),
    )


def retraction_value(data_format: DataFormat = DataFormat.JSON) -> Column:
    """The record value of a change's before-image: ``-D`` for a delete, else ``-U`` (null without one)."""
    from pyspark.sql import functions as F

    before, op = F.col(BEFORE_COLUMN), F.col(OP_COLUMN)
    value = F.when(op == "D", value_json(RowKind.DELETE, before, data_format)).otherwise(
        value_json(RowKind.UPDATE_BEFORE, before, data_format)
    )
    return F.when(before.isNotNull(), value)


def addition_value(data_format: DataFormat = DataFormat.JSON) -> Column:
    """The record value of a change's after-image: ``+I`` without a before-image, else ``+U`` (null for
    a delete)."""
    from pyspark.sql import functions as F

    after = F.col(AFTER_COLUMN)
    value = F.when(F.col(BEFORE_COLUMN).isNull(), value_json(RowKind.INSERT, after, data_format)).otherwise(
        value_json(RowKind.UPDATE_AFTER, after, data_format)
    )
    return F.when(F.col(OP_COLUMN) != "D", value)


def write_through_rows(
    with_before: DataFrame,
    columns: Sequence[str],
    primary_key: Sequence[str],
    data_format: DataFormat = DataFormat.JSON,
) -> DataFrame:
    """Each change's key, its two record values (either may be null) and, for the last change of a key
    that is not a delete, the table's columns to append (``_appended``): what a write-through produces
    and appends when the table holds none of the batch's keys. In ``with_before``'s partitions and order.
    """
    from pyspark.sql import functions as F

    after = F.col(AFTER_COLUMN)
    return with_before.select(
        F.col(KEY_COLUMN),
        retraction_value(data_format).alias(BEFORE_VALUE_COLUMN),
        addition_value(data_format).alias(AFTER_VALUE_COLUMN),
        (F.col(LAST_COLUMN) & (F.col(OP_COLUMN) != "D")).alias(APPENDED_COLUMN),
        *[quoted(c) if c in primary_key else after.getField(c).alias(c) for c in columns],
    )


def final_rows(with_before: DataFrame, columns: Sequence[str], primary_key: Sequence[str]) -> DataFrame:
    """The last change of each key: the table's columns (the key's alone for a delete) and the change
    kind. The MERGE's source."""
    from pyspark.sql import functions as F

    after = F.col(AFTER_COLUMN)
    return with_before.where(F.col(LAST_COLUMN)).select(
        *[quoted(c) if c in primary_key else after.getField(c).alias(c) for c in columns],
        F.col(OP_COLUMN),
    )


def noop_delete() -> Column:
    """Whether a planned change is a delete of a key that has no row."""
    from pyspark.sql import functions as F

    return (F.col(OP_COLUMN) == "D") & F.col(BEFORE_COLUMN).isNull()


def row_struct(columns: Sequence[str]) -> Column:
    from pyspark.sql import functions as F

    return F.struct(*[quoted(c) for c in columns])


def key_json(primary_key: Sequence[str]) -> Column:
    """The record key: the key values as a compact JSON array, as bytes."""
    from pyspark.sql import functions as F

    return (
        F.to_json(F.array(*[quoted(c) for c in primary_key]), SPARK_JSON_OPTIONS)
        .cast("binary")
        .alias(KEY_COLUMN)
    )


def value_json(kind: RowKind, row: Column, data_format: DataFormat = DataFormat.JSON) -> Column:
    """The record value of a change of ``kind`` to ``row`` as bytes, in ``data_format``: the bytes of
    :func:`airflow_logstore.core.codec.encode_value` (the same fields in the same order)."""
    from pyspark.sql import functions as F

    if data_format is DataFormat.JSON:
        fields = [F.lit(kind.value).alias("kind"), row.alias("row")]
    else:
        no_row = F.when(F.lit(False), row)  # a null of the row's type
        source = F.struct(F.lit(DEBEZIUM_CONNECTOR).alias("connector"), F.lit(kind.value).alias("row_kind"))
        fields = [
            (no_row if kind.is_addition else row).alias("before"),
            (row if kind.is_addition else no_row).alias("after"),
            F.lit(debezium_op(kind)).alias("op"),
            source.alias("source"),
        ]
    return F.to_json(F.struct(*fields), SPARK_JSON_OPTIONS).cast("binary")


def quoted(name: str) -> Column:
    """A column by its table name, quoted (names may hold dots or spaces)."""
    from pyspark.sql import functions as F

    return F.col(f"`{name}`")
