"""The ``logstore`` Spark data source: ``spark.read.format("logstore")``, ``spark.readStream.format(...)``.

A PySpark Python data source (``pyspark.sql.datasource``): the driver plans slices of the log (and, for
``hybrid``, of the snapshot's data files) and every Spark task reads one slice in a Python worker and
hands Spark Arrow record batches. What is read, and which records are kept, is
:mod:`airflow_logstore.read.source`'s (the project's one rule); this module is the glue to Spark.

Why Python and not a JVM connector: a record's decision is ``core.visibility`` (``ReadFilter``, the
follower's rule), which is Python; a JVM connector would need a second copy of it. The Spark read job
keeps records in the JVM by joining a decision table the driver computes, but a streaming source must
decide in the task that reads (its offsets are fixed before the records are seen), and the Python data
source gives exactly that place. The price is that the records cross into Python (the bulk decoder, or
the JVM scan for large slices) and back to the JVM as Arrow.

Registration: ``register(spark)`` registers the source in a session (its executors need the package,
installed or in the application's ``--py-files``); in any session a Python with the package installed also
finds it by itself (PySpark looks up a ``DefaultSource`` in top-level ``pyspark_*`` modules: the
package ships ``pyspark_logstore``).

Where the table is: the options ``catalog.*`` and ``kafka.*`` (:func:`logstore_options` writes them from a
job's settings, secrets under keys Spark redacts), else the environment, as the ``logstore`` command finds
it (``LOGSTORE_CATALOG``, ``LOGSTORE_HOME``, ``LOGSTORE_KAFKA_CONFIG``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from airflow_logstore.read.source import SourceOptions, StreamPlanner
    from airflow_logstore.table.catalog import CatalogSpec

NAME = "logstore"
#: What the job properties and the options share: ``spark.logstore.catalog.spec`` is option ``catalog.spec``.
_PROPERTY_PREFIX = "spark.logstore."


def register(spark: SparkSession) -> None:
    """Register the ``logstore`` source in ``spark``. It ships no code: the executors need the package
    installed, or in the application's ``--py-files`` (as the operators submit their jobs).

    It replaces the one PySpark found by itself (``pyspark_logstore``), whose executors would need the
    package installed; Spark then warns once per session it clones (every streaming query) that it
    did, which says nothing here: that one warning is turned off.
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    if spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(NAME):
        log4j = jvm.org.apache.logging.log4j
        log4j.core.config.Configurator.setLevel(_MANAGER_LOGGER, log4j.Level.ERROR)
    spark.dataSource.register(LogStoreDataSource)


_MANAGER_LOGGER = "org.apache.spark.sql.execution.datasources.DataSourceManager"


def logstore_options(
    spark: SparkSession | None = None,
    *,
    catalog: CatalogSpec | None = None,
    kafka_extra: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The options that tell the source where the table is: ``catalog``/``kafka_extra``, else the job's
    settings in ``spark``'s configuration (what the operators submit), else the environment's.

    Secrets travel under keys of their own, which Spark redacts in plans
    (``spark.sql.redaction.options.regex``).
    """
    from airflow_logstore.settings import extra_kafka_config
    from airflow_logstore.spark.jobconf import job_properties, job_settings, spark_conf_dict
    from airflow_logstore.table.catalog import default_catalog

    if catalog is None and spark is not None:
        catalog, found_kafka = job_settings(spark_conf_dict(spark))
        kafka_extra = found_kafka if kafka_extra is None else kafka_extra
    catalog = catalog or default_catalog()
    kafka_extra = extra_kafka_config() if kafka_extra is None else kafka_extra
    return {
        key.removeprefix(_PROPERTY_PREFIX): value
        for key, value in job_properties(catalog, kafka_extra).items()
        if key.startswith(_PROPERTY_PREFIX)
    }


def stream_lag(progress: Any, source: int = 0) -> dict[str, dict[str, int]]:
    """How far a ``logstore`` stream is behind, from its query's progress (``query.lastProgress``, a
    listener's event's ``progress``, or their JSON), per log partition:

    - ``positions``: the next offset the stream hands out (the end of its last micro-batch);
    - ``log_end``: the log's end when the stream last looked; ``behind``: ``log_end - positions``;
    - ``watermark`` (a consistent stream, or one from a snapshot): the visibility watermark;
      ``unpublished``: records above it, ``log_end - watermark - 1`` (waiting for commits and publishes).

    :param source: the index of the ``logstore`` source among the query's sources.
    """
    import json

    text = getattr(progress, "json", progress)  # PySpark's progress objects: their JVM JSON
    data = json.loads(text) if isinstance(text, str) else progress
    entry = data["sources"][source]
    end = _offset_json(entry.get("endOffset"))
    latest = _offset_json(entry.get("latestOffset")) or end
    positions = {p: int(o) for p, o in (end or latest).get("positions", {}).items()}
    log_end = {p: int(o) for p, o in latest.get("log_end", {}).items()}
    lag = {"positions": positions, "log_end": log_end}
    lag["behind"] = {p: max(0, log_end[p] - positions.get(p, 0)) for p in log_end}
    if "watermark" in latest:
        watermark = {p: int(o) for p, o in latest["watermark"].items()}
        lag["watermark"] = watermark
        lag["unpublished"] = {p: max(0, log_end[p] - watermark.get(p, -1) - 1) for p in log_end}
    return lag


def _offset_json(value: Any) -> dict[str, Any]:
    import json

    if value is None:
        return {}
    return dict(value) if isinstance(value, Mapping) else dict(json.loads(value))


def source_options(options: Mapping[str, str]) -> SourceOptions:
    """The checked options of one read (an ``OptionError`` names a bad one), with its catalog and Kafka
    settings (options ``catalog.*``/``kafka.*``, else the environment)."""
    from airflow_logstore.exceptions import OptionError, first_line
    from airflow_logstore.read.source import SETTING_PREFIXES, SourceOptions
    from airflow_logstore.settings import extra_kafka_config
    from airflow_logstore.spark.jobconf import settings_from_spark_conf
    from airflow_logstore.table.catalog import default_catalog

    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    conf = {_PROPERTY_PREFIX + k: v for k, v in lowered.items() if k.startswith(SETTING_PREFIXES)}
    try:
        found = settings_from_spark_conf(conf)
    except (ValueError, TypeError, AttributeError) as exc:  # not the JSON of a catalog
        raise OptionError(
            "catalog.spec", f"is not a catalog's JSON ({type(exc).__name__}: {first_line(exc)})"
        ) from None
    if found is not None:
        catalog, kafka_extra = found
    else:
        catalog = default_catalog()
        kafka_extra = {k[len("kafka.") :]: v for k, v in lowered.items() if k.startswith("kafka.")}
        kafka_extra = kafka_extra or extra_kafka_config()
    return SourceOptions.parse(lowered, catalog, kafka_extra)


def spark_schema(field_types: Mapping[str, str], hybrid: bool) -> StructType:
    """The rows' schema: the table's columns (Iceberg types as Spark's), then the log metadata
    (``_kind``, ``_partition``, ``_offset``, ``_writer_id``, ``_epoch``, ``_batch_id``, ``_record_type``),
    then ``_source`` (``file`` or ``log``) for a hybrid read. Every column is nullable."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from airflow_logstore.read.source import output_columns

    meta = {"_partition", "_offset", "_epoch", "_batch_id"}
    fields = [StructField(name, _spark_type(kind)) for name, kind in field_types.items()]
    for name in output_columns({}, hybrid):
        fields.append(StructField(name, LongType() if name in meta else StringType()))
    return StructType(fields)


def _spark_type(iceberg_type: str) -> Any:
    import re

    from pyspark.sql import types as T

    simple = {
        "int": T.IntegerType(),
        "long": T.LongType(),
        "float": T.FloatType(),
        "double": T.DoubleType(),
        "string": T.StringType(),
        "uuid": T.StringType(),
        "boolean": T.BooleanType(),
        "date": T.DateType(),
        "timestamptz": T.TimestampType(),
        "timestamp": T.TimestampNTZType(),
        "binary": T.BinaryType(),
    }
    name = iceberg_type.lower().replace(" ", "")
    if name in simple:
        return simple[name]
    match = re.fullmatch(r"decimal\((\d+),(\d+)\)", name)
    if match:
        return T.DecimalType(int(match.group(1)), int(match.group(2)))
    from airflow_logstore.exceptions import SchemaMismatchError

    raise SchemaMismatchError(f"column type '{iceberg_type}' has no Spark type in the 'logstore' source")


class SliceInput(InputPartition):
    """One slice (``read.source.LogSlice`` or ``FileSlice``) as Spark ships it to a task."""


def _batches(piece: Any, arrow_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    from airflow_logstore.read.source import read_slice

    if piece is None:  # Spark reads one empty partition when a batch read planned none
        return
    for table in read_slice(piece.value):
        yield from table.select(arrow_schema.names).cast(arrow_schema).to_batches()


class LogStoreDataSource(DataSource):
    """``format("logstore")``: options ``table`` (or ``load(name)``), ``mode`` (``log``, ``hybrid``),
    ``consistency`` (``consistent``/``transactional``, ``eventual``; default: the table's),
    ``changelog-mode`` (``all-kinds``, ``append-only``; default: the table's), ``startingPosition``
    (``earliest``, ``latest``, ``timestamp:<ms|ISO>``, ``snapshot:<id>``, ``positions:<JSON>``),
    ``maxRecordsPerTrigger`` (streams), ``minPartitions`` (tasks at least), ``scanner`` (``auto``, ``jvm``,
    ``librdkafka``), the read hints of the table properties, and ``catalog.*``/``kafka.*``
    (:func:`logstore_options`).

    Every option is checked when the frame is loaded (``load()``), and the table opened: a bad one
    fails there, naming the option.
    """

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        from airflow_logstore.exceptions import LogStoreError, OptionError
        from airflow_logstore.read.reader import snapshot_positions
        from airflow_logstore.read.source import parse_start

        opts = source_options(self.options)
        try:
            reader = opts.open_reader()
        except OptionError:
            raise
        except LogStoreError as exc:  # no log, a bad table property
            raise OptionError("table", f"'{opts.table}' cannot be read from its log: {exc}") from None
        start = parse_start(opts.start, opts.mode)
        if start.kind == "snapshot":
            try:
                snapshot_positions(reader.table, start.value)
            except OptionError as exc:
                raise OptionError("startingPosition", str(exc).split(": ", 1)[-1]) from None
        return spark_schema(reader.field_types, opts.mode == "hybrid")

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogStoreBatchReader(source_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LogStoreStreamReader(source_options(self.options), schema)


class LogStoreBatchReader(DataSourceReader):
    """``spark.read.format("logstore")``: the Python reader's read, a task per slice of log partitions."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.opts = opts
        self.arrow_schema = to_arrow_schema(schema)

    def partitions(self) -> list[InputPartition]:
        from airflow_logstore.read.source import plan_batch

        return [SliceInput(piece) for piece in plan_batch(self.opts).slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _batches(partition, self.arrow_schema)


class LogStoreStreamReader(DataSourceStreamReader):
    """``spark.readStream.format("logstore")``: offsets and micro-batches of ``read.source.StreamPlanner``."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.opts = opts
        self.arrow_schema = to_arrow_schema(schema)
        self._planner: StreamPlanner | None = None

    @property
    def planner(self) -> StreamPlanner:
        from airflow_logstore.read.source import StreamPlanner

        if self._planner is None:
            self._planner = StreamPlanner(self.opts)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        return self.planner.initial_offset()

    def latestOffset(self) -> dict[str, Any]:
        return self.planner.latest_offset()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return [SliceInput(piece) for piece in self.planner.partitions(start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _batches(partition, self.arrow_schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the table's log is kept by its retention, not by the readers' progress."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.stop()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_planner": None}  # a task never needs the driver's connections
