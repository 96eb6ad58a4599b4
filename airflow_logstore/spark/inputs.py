"""Read a batch's input files and check every row against the table schema before anything is written.

A bad row (a value that does not fit its column, a missing primary-key value, an unknown change
kind, a line that is not JSON) fails the batch with an error naming the row and the column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_logstore.core.changes import CHANGE_ALIASES
from airflow_logstore.exceptions import BadInputError, OptionError, SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

ROW_COLUMN = "_logstore_row"
OP_COLUMN = "_logstore_op"
FILE_COLUMN = "_logstore_file"
#: the columns :func:`validated_changes` adds to the table's own
ADDED_COLUMNS = (OP_COLUMN, ROW_COLUMN, FILE_COLUMN)
ERROR_COLUMN = "_logstore_error"
ERROR_AT_COLUMN = "_logstore_error_column"
CORRUPT_COLUMN = "_logstore_corrupt"

FORMATS = ("json", "csv", "parquet")


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


def read_raw(spark: SparkSession, path: str, fmt: str | None) -> DataFrame:
    fmt = (fmt or infer_format(path, hadoop_lister(spark))).lower()
    if fmt in ("jsonl", "ndjson"):
        fmt = "json"
    if fmt not in FORMATS:
        raise OptionError("input-format", f"'{fmt}' is not one of {', '.join(FORMATS)}")
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


@dataclass(frozen=True)
class Changes:
    """A batch's validated changes: the table's columns plus ``_logstore_op`` (I, U or D),
    ``_logstore_row`` (input order) and ``_logstore_file``, cached."""

    frame: DataFrame
    cached: DataFrame  # what is cached (``frame`` and the validation's columns)

    @cached_property
    def rows(self) -> int:
        """How many changes there are (counted from the cache when first asked)."""
        return self.frame.count()

    def unpersist(self) -> None:
        self.cached.unpersist()


def validated_changes(
    raw: DataFrame,
    table_schema: StructType,
    primary_key: list[str],
    change_column: str | None,
) -> Changes:
    """Cast ``raw`` to the table schema and tag rows; raise :class:`BadInputError` on the first bad row.

    One pass over the input checks every row and caches them.
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

    df = raw.withColumn(ROW_COLUMN, F.monotonically_increasing_id()).withColumn(
        FILE_COLUMN, F.input_file_name()
    )
    checks = []
    if CORRUPT_COLUMN in raw.columns:
        checks.append((F.col(CORRUPT_COLUMN).isNotNull(), "the line is not a JSON object", "(line)"))
    selected = []
    for name, field in table_columns.items():
        if name in input_columns:
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
            cast = None
        if name in primary_key:
            checks.append((F.col(f"`{name}`").isNull(), "primary key value is missing", name))
        elif not field.nullable and cast is not None:
            checks.append((F.col(f"`{name}`").isNull(), "value is missing (the column is not null)", name))
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
    if not primary_key:
        checks.append((op != F.lit("I"), "tables without a primary key accept inserts only", change or "op"))

    error = F.lit(None).cast("string")
    error_at = F.lit(None).cast("string")
    for condition, message, column in reversed(checks):
        error = F.when(condition, F.lit(message)).otherwise(error)
        error_at = F.when(condition, F.lit(column)).otherwise(error_at)
    tagged = df.select(
        *selected,
        op.alias(OP_COLUMN),
        F.col(ROW_COLUMN),
        F.col(FILE_COLUMN),
        error.alias(ERROR_COLUMN),
        error_at.alias(ERROR_AT_COLUMN),
    )
    tagged = tagged.persist()
    with uncompressed_cache(raw.sparkSession):  # the check builds the cache
        bad = tagged.where(F.col(ERROR_COLUMN).isNotNull()).orderBy(ROW_COLUMN).limit(1).collect()
    if bad:
        first = bad[0]
        row_number = tagged.where(F.col(ROW_COLUMN) < first[ROW_COLUMN]).count() + 1
        tagged.unpersist()
        raise BadInputError(
            f"{first[ERROR_COLUMN]} (file {Path(first[FILE_COLUMN]).name or first[FILE_COLUMN]})",
            row=row_number,
            column=first[ERROR_AT_COLUMN],
        )
    return Changes(tagged.drop(ERROR_COLUMN, ERROR_AT_COLUMN), tagged)
