"""Read a batch's input files and check every row against the table schema before anything is written.

A bad row (a value that does not fit its column, a missing primary-key value, an unknown change
kind, a line that is not JSON) fails the batch with an error naming the row and the column.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from airflow_logstore.core.batch_plan import CHANGE_ALIASES
from airflow_logstore.exceptions import BadInputError, OptionError, SchemaMismatchError, first_line

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

ROW_COLUMN = "_logstore_row"
OP_COLUMN = "_logstore_op"
#: the columns :func:`airflow_logstore.write.checking.validated_changes` adds to the table's own
ADDED_COLUMNS = (OP_COLUMN, ROW_COLUMN)
#: the input file of a bad row (computed for its error only)
FILE_COLUMN = "_logstore_file"
ERROR_COLUMN = "_logstore_error"
ERROR_AT_COLUMN = "_logstore_error_column"
CORRUPT_COLUMN = "_logstore_corrupt"

FORMATS = ("json", "csv", "parquet")


#: Schemes of paths on this host's file system.
LOCAL_SCHEMES = ("", "file")
#: Hadoop's names of one object store (``s3a://b/k`` and ``s3://b/k`` are the same object).
_SAME_STORE = {"s3a": "s3", "s3n": "s3"}


def _store(uri: str) -> tuple[str, str]:
    """The object store and bucket of ``uri`` (``s3a://b/k`` -> ``("s3", "b")``)."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    return _SAME_STORE.get(scheme, scheme), parts.netloc


def check_input_path(path: str, *, on_this_host: bool, table: Callable[[], Table] | None = None) -> str:
    """Fail fast, before Spark starts, on an input path that surely does not exist: a local path
    (``/x``, ``file:///x``, a glob) checked here when the Spark driver runs on this host
    (``on_this_host``), an object in the table's own object store (same scheme and bucket as the table's
    location) checked through the table's FileIO (the catalog's credentials). Any other path, and any
    error while checking, is left to Spark.

    :param table: loads the table whose FileIO and location apply (called only for a remote path)
    :returns: what was checked, or why nothing was (for the task log)
    :raises BadInputError: the path does not exist; its message starts with the path
    """
    parts = urlsplit(path)
    missing = BadInputError(f"input path '{path}' does not exist (checked before starting Spark)")
    pattern = any(c in path for c in "*?[{")
    if "{" in path or (pattern and parts.scheme.lower() not in LOCAL_SCHEMES):
        return f"input path '{path}' not checked: a pattern, matched by Spark"
    if parts.scheme.lower() in LOCAL_SCHEMES:
        if not on_this_host:
            return f"input path '{path}' not checked: the Spark driver runs on another host"
        local = unquote(parts.path) if parts.scheme else path
        if not (glob.glob(local) if pattern else os.path.exists(local)):
            raise missing
        return f"input path '{path}' found"
    if table is None:
        return f"input path '{path}' not checked: no table to reach its object store through"
    try:
        loaded = table()
        if _store(path) != _store(loaded.location()):
            return f"input path '{path}' not checked: outside the table's object store; Spark reads it"
        found = loaded.io.new_input(path).exists()
    except Exception as exc:  # no credentials, another endpoint: Spark's own configuration may reach it
        return f"input path '{path}' not checked: {type(exc).__name__}: {first_line(exc)}"
    if not found:
        raise missing
    return f"input path '{path}' found"


#: Lists a folder for :func:`infer_format`: its children as (path, is a folder), None when ``path`` is a
#: file; raises :class:`BadInputError` when it does not exist.
FolderLister = Callable[[str], "list[tuple[str, bool]] | None"]

_SUFFIXES = (
    (".jsonl", "json"),
    (".ndjson", "json"),
    (".json", "json"),
    (".csv", "csv"),
    (".parquet", "parquet"),
)


def format_of_name(path: str) -> str | None:
    """The format a file name's extension says (``a.jsonl`` -> json), or None."""
    name = path.rstrip("/").lower()
    return next((fmt for suffix, fmt in _SUFFIXES if name.endswith(suffix)), None)


def _visible(path: str) -> bool:
    return not path.rstrip("/").rsplit("/", 1)[-1].startswith((".", "_"))


def infer_format(path: str, list_folder: FolderLister) -> str:
    """The input format of ``path`` (any Hadoop URI: file, folder, ``s3://``...): from its extension,
    else from the first visible file with a known extension in the folder (subfolders included)."""
    found = format_of_name(path)
    if found:
        return found
    children = list_folder(path)
    if children is None:
        raise OptionError("input-format", f"cannot tell the format of '{path}'; pass json, csv or parquet")
    visible = sorted(child for child in children if _visible(child[0]))
    for child, is_folder in visible:
        found = format_of_name(child) if not is_folder else _folder_format(child, list_folder)
        if found:
            return found
    raise OptionError(
        "input-format", f"no file in folder '{path}' has a known extension; pass json, csv or parquet"
    )


def _folder_format(path: str, list_folder: FolderLister) -> str | None:
    try:
        return infer_format(path, list_folder)
    except OptionError:
        return None


def hadoop_lister(spark: SparkSession) -> FolderLister:
    """A :data:`FolderLister` through the JVM's Hadoop FileSystem (what Spark itself reads the input with)."""
    jvm = spark.sparkContext._jvm
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]

    def list_folder(path: str) -> list[tuple[str, bool]] | None:
        folder = jvm.org.apache.hadoop.fs.Path(path)  # type: ignore[union-attr]
        fs = folder.getFileSystem(hadoop_conf)
        if not fs.exists(folder):
            raise BadInputError(f"input path '{path}' does not exist")
        if not fs.getFileStatus(folder).isDirectory():
            return None
        return [(str(s.getPath().toString()), bool(s.isDirectory())) for s in fs.listStatus(folder)]

    return list_folder


#: Formats whose files a batch reads again wherever it needs its rows instead of caching them: a
#: columnar scan of the few columns a step reads costs less than building a cache (BENCHMARKS.md).
REREAD_FORMATS = ("parquet",)


def resolved_format(spark: SparkSession, path: str, fmt: str | None) -> str:
    """The format of the input at ``path``: ``fmt`` when given (``jsonl``/``ndjson`` mean json), else
    inferred (:func:`infer_format`); raises :class:`OptionError` on a format the job does not read."""
    fmt = (fmt or infer_format(path, hadoop_lister(spark))).lower()
    if fmt in ("jsonl", "ndjson"):
        fmt = "json"
    if fmt not in FORMATS:
        raise OptionError("input-format", f"'{fmt}' is not one of {', '.join(FORMATS)}")
    return fmt


def read_raw(spark: SparkSession, path: str, fmt: str | None) -> DataFrame:
    fmt = resolved_format(spark, path, fmt)
    reader = spark.read
    if fmt == "json":
        return (
            reader.option("primitivesAsString", "true")
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
            .json(path)
        )
    if fmt == "csv":
        return reader.option("header", "true").option("mode", "FAILFAST").csv(path)
    return reader.parquet(path)


#: A batch whose rows Spark holds in the driver (its plan is a ``LocalRelation``) and that has at most
#: this many rows takes the small-batch path (:func:`small_batch_rows`): Spark evaluates projections and
#: filters of such a frame, and collects them, in the driver without a job (``ConvertToLocalRelation``,
#: ``LocalTableScanExec.executeCollect``), so the steps that read only the batch (validation, counts,
#: the key filter) cost no Spark job. A streaming micro-batch of at most this many records is made one
#: (``write/streaming``). The bound keeps what the driver evaluates and holds small.
SMALL_BATCH_ROWS = 1_000
#: Spark's class of a frame whose rows the driver holds.
LOCAL_RELATION = "org.apache.spark.sql.catalyst.plans.logical.LocalRelation"


def local_rows(frame: DataFrame) -> int | None:
    """The rows of ``frame`` when Spark holds them in the driver (its optimized plan is a
    ``LocalRelation``: a frame made from Arrow or pandas data, and any projection or filter of one),
    else None. Optimizing the plan runs no job."""
    plan = frame._jdf.queryExecution().optimizedPlan()
    if plan.getClass().getName() != LOCAL_RELATION:
        return None
    return int(plan.maxRows().get())


def small_batch_rows(frame: DataFrame) -> int | None:
    """The rows of ``frame`` when it takes the small-batch path (a local frame of at most
    :data:`SMALL_BATCH_ROWS` rows), else None."""
    rows = local_rows(frame)
    return rows if rows is not None and rows <= SMALL_BATCH_ROWS else None


#: Spark's setting for compressing cached columns, read when a cache is built.
CACHE_COMPRESSION = "spark.sql.inMemoryColumnarStorage.compressed"


@contextmanager
def uncompressed_cache(spark: SparkSession) -> Iterator[None]:
    """Caches built meanwhile keep their columns uncompressed: a batch's validated changes live for one
    batch, and compressing them cost more than the rest of their validation (1M rows: 1.2 s compressed,
    0.6 s uncompressed; BENCHMARKS.md). The session's own setting is restored afterwards."""
    before = spark.conf.get(CACHE_COMPRESSION, None)
    spark.conf.set(CACHE_COMPRESSION, "false")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(CACHE_COMPRESSION)
        else:
            spark.conf.set(CACHE_COMPRESSION, before)


def bad_input(raw: DataFrame, tagged: DataFrame, row_id: int) -> BadInputError:
    """The error of the first bad row (its id in ``tagged``, :func:`tagged_changes`): its error and
    column, its row number in the input and its file, found by three more queries (the file from the
    input itself: the changes do not carry it, so that the rows of a good batch are not each tagged with
    their file's name)."""
    from pyspark.sql import functions as F

    found = tagged.where(F.col(ROW_COLUMN) == row_id).select(ERROR_COLUMN, ERROR_AT_COLUMN).first()
    assert found is not None, row_id  # the id of a row of ``tagged``
    message, column = found
    row_number = tagged.where(F.col(ROW_COLUMN) < row_id).count() + 1
    located = with_row_ids(raw).select(F.col(ROW_COLUMN), F.input_file_name().alias(FILE_COLUMN))
    in_file = located.where(F.col(ROW_COLUMN) == row_id).first()
    path = in_file[FILE_COLUMN] if in_file is not None else ""
    return BadInputError(f"{message} (file {Path(path).name or path})", row=row_number, column=column)


def with_row_ids(raw: DataFrame) -> DataFrame:
    """``raw`` with each row's id in input order (``_logstore_row``), the same in every computation of
    the same input (Spark numbers rows by partition and position)."""
    from pyspark.sql import functions as F

    return raw.withColumn(ROW_COLUMN, F.monotonically_increasing_id())


def tagged_changes(
    raw: DataFrame,
    table_schema: StructType,
    primary_key: list[str],
    change_column: str | None,
    *,
    missing_as_null: bool = False,
) -> DataFrame:
    """``raw`` cast to the table's columns, with each row's change kind, row id and, for a bad row, its
    error and the column it is about (``_logstore_error``, ``_logstore_error_column``; null when good);
    raises :class:`SchemaMismatchError` when the columns themselves do not fit the table.

    :param missing_as_null: a nullable column the input does not have is null in every row; when False,
        an insert or update without it is a bad row (a delete needs only its key).
    """
    from pyspark.sql import functions as F

    table_columns = {field.name: field for field in table_schema.fields}
    input_columns = [c for c in raw.columns if c != CORRUPT_COLUMN]
    change = change_column if change_column and change_column in input_columns else None
    unknown = [c for c in input_columns if c not in table_columns and c != change]
    if unknown:
        raise SchemaMismatchError(
            f"input column '{unknown[0]}' is not in the table (columns: {', '.join(table_columns)})"
        )
    required = [name for name, field in table_columns.items() if not field.nullable or name in primary_key]
    missing_required = [c for c in required if c not in input_columns]
    if missing_required:
        raise SchemaMismatchError(f"input has no column '{missing_required[0]}', which the table requires")

    checks = []
    if CORRUPT_COLUMN in raw.columns:
        checks.append((F.col(CORRUPT_COLUMN).isNotNull(), "the line is not a JSON object", "(line)"))
    if change:
        known = F.lower(F.trim(F.col(f"`{change}`"))).isin(list(CHANGE_ALIASES))
        checks.append(
            (
                F.col(f"`{change}`").isNotNull() & ~known,
                "unknown change kind (expected insert, update, delete, upsert or I/U/D)",
                change,
            )
        )
        mapping = F.create_map(
            *[item for alias, code in CHANGE_ALIASES.items() for item in (F.lit(alias), F.lit(code))]
        )
        op = F.coalesce(mapping[F.lower(F.trim(F.col(f"`{change}`")))], F.lit("I"))
    else:
        op = F.lit("I")
    selected = []
    input_types = {field.name: field.dataType for field in raw.schema.fields}
    for name, field in table_columns.items():
        present = name in input_columns
        if present and input_types[name] == field.dataType:
            selected.append(F.col(f"`{name}`"))  # nothing to check: a pass need not read the column
        elif present:
            source = F.col(f"`{name}`")
            cast = F.expr(f"try_cast(`{name}` AS {field.dataType.simpleString()})")
            checks.append(
                (
                    source.isNotNull() & cast.isNull(),
                    f"value does not fit type {field.dataType.simpleString()}",
                    name,
                )
            )
            selected.append(cast.alias(name))
        else:
            selected.append(F.lit(None).cast(field.dataType).alias(name))
            if not missing_as_null and name not in primary_key:
                missing = f"value is missing: the input has no column '{name}', and missing-as-null is off"
                checks.append((op != F.lit("D"), missing, name))
        if name in primary_key:
            checks.append((F.col(f"`{name}`").isNull(), "primary key value is missing", name))
        elif not field.nullable and present:
            checks.append((F.col(f"`{name}`").isNull(), "value is missing (the column is not null)", name))
    if not primary_key:
        checks.append((op != F.lit("I"), "tables without a primary key accept inserts only", change or "op"))

    error = F.lit(None).cast("string")
    error_at = F.lit(None).cast("string")
    for condition, message, column in reversed(checks):
        error = F.when(condition, F.lit(message)).otherwise(error)
        error_at = F.when(condition, F.lit(column)).otherwise(error_at)
    return with_row_ids(raw).select(
        *selected,
        op.alias(OP_COLUMN),
        F.col(ROW_COLUMN),
        error.alias(ERROR_COLUMN),
        error_at.alias(ERROR_AT_COLUMN),
    )
