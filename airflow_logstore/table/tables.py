"""LogStore tables: an Iceberg v2 table whose properties carry the LogStore settings, plus its topics."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.control import ControlState
from airflow_logstore.core.ledger import with_commits
from airflow_logstore.core.properties import LogStoreConfig, parse_table_properties
from airflow_logstore.core.summary import S_BATCH, S_EPOCH, S_OPERATION, S_WRITER, CommitInfo
from airflow_logstore.exceptions import SchemaMismatchError, TablePropertyError
from airflow_logstore.log import kafka_client
from airflow_logstore.log.control_topic import ControlTopic
from airflow_logstore.log.feed_topic import ensure_feed_topics, log_topic_configs
from airflow_logstore.table.catalog import CatalogSpec, TableName, default_catalog
from airflow_logstore.table.layout import (
    CODEC_PROPERTY,
    codec_note,
    creation_properties,
    key_bucket_spec,
    layout_note,
)
from airflow_logstore.table.schema import (
    describe_schema,
    parse_schema,
    primary_key_of,
    same_columns,
)
from airflow_logstore.table.transactions import transaction

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Iceberg settings every LogStore table gets (a table's own properties win): row-level changes as
#: delete files (cheap upserts); data files compressed with zstd, which Iceberg's Java API stores in
#: every table it creates since 1.4 (a table created by pyiceberg without it is written with gzip by
#: Spark, Iceberg's older default, at several times the CPU: BENCHMARKS.md). Manifests are merged on
#: commit (Iceberg's Java default, which pyiceberg's is not): the writer's catalog commits then merge them
#: as Spark's do, instead of adding one manifest per batch until compaction (a streaming writer commits
#: every second, and each commit and scan reads every manifest).
ICEBERG_DEFAULTS = {
    "format-version": "2",
    CODEC_PROPERTY: "zstd",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
    "commit.manifest-merge.enabled": "true",
}


@dataclass
class LogStoreTable:
    """A handle on one LogStore table: its catalog, its name and the Kafka client settings to use.

    :param kafka_extra: librdkafka settings from the connection (security, SASL); the bootstrap
        servers always come from the table's ``log-store.address`` / ``kafka.bootstrap.servers``.
    """

    name: TableName
    catalog: CatalogSpec = field(default_factory=default_catalog)
    kafka_extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(
        cls,
        table_name: str | TableName,
        catalog: CatalogSpec | None = None,
        kafka_extra: Mapping[str, Any] | None = None,
    ) -> LogStoreTable:
        parsed = table_name if isinstance(table_name, TableName) else TableName.parse(table_name)
        return cls(parsed, catalog or default_catalog(), dict(kafka_extra or {}))

    def load(self) -> Table:
        return self.loaded_catalog.load_table(self.name.identifier)

    @functools.cached_property
    def loaded_catalog(self) -> Catalog:
        """The catalog in pyiceberg, loaded once per handle: a job's steps load its table many times
        (each load reads the catalog's current metadata; the catalog object holds no table state)."""
        return self.catalog.load()

    def config(self, table: Table | None = None) -> LogStoreConfig:
        return parse_table_properties((table or self.load()).properties)

    def kafka_config(self, config: LogStoreConfig | None = None) -> dict[str, Any]:
        config = config or self.config()
        _, bootstrap, _ = config.require_log()
        return kafka_client.client_config(bootstrap, self.kafka_extra)

    def control(self, config: LogStoreConfig | None = None) -> ControlTopic:
        config = config or self.config()
        _, _, control_topic = config.require_log()
        return ControlTopic(self.kafka_config(config), control_topic, self.epoch_floor)

    def log_side(self, table: Table | None = None) -> LogSide:
        """The LogStore settings, Kafka client settings and control topic, from one read of the
        properties (of ``table`` as already loaded, else loaded now): what an operation reads once."""
        return self.log_side_of(self.config(table))

    def log_side_of(self, config: LogStoreConfig) -> LogSide:
        """:meth:`log_side` for settings already read."""
        return LogSide(config, self.kafka_config(config), self.control(config))

    def epoch_floor(self, writer_id: str) -> int:
        """The highest epoch of ``writer_id`` in the table's snapshot summaries (0: none)."""
        return recorded_epochs(self.load()).get(writer_id, 0)

    def spark_name(self) -> str:
        return self.name.spark(self.catalog)


@dataclass(frozen=True)
class LogSide:
    """A table's log side as read once: its LogStore settings, the Kafka client settings, its control topic.

    Operations take these values at their start and pass them on, instead of asking the handle again.
    """

    config: LogStoreConfig
    kafka_config: dict[str, Any]
    control: ControlTopic

    @property
    def topic(self) -> str:
        topic, _, _ = self.config.require_log()
        return topic


def snapshot_commits(table: Table) -> list[CommitInfo]:
    """The LogStore commits in the live history of ``main``, oldest first.

    Only ``main``'s ancestors count: a staging branch's snapshot (a commit attempt that lost its
    compare-and-set, or died before it) is in the table's snapshot list until it expires, but it was
    never committed.
    """
    from pyiceberg.table.snapshots import ancestors_of

    commits = []
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        commit = CommitInfo.from_summary(
            summary,
            snapshot_id=snapshot.snapshot_id,
            sequence_number=snapshot.sequence_number,
            timestamp_ms=snapshot.timestamp_ms,
        )
        if commit is not None:
            commits.append(commit)
    return commits[::-1]


def recorded_epochs(table: Table) -> dict[str, int]:
    """Per writer the highest ``logstore.epoch`` in any snapshot summary the table still has (any ref).

    Epoch claims must stay above these even when the control topic is lost (see
    :meth:`~airflow_logstore.log.control_topic.ControlTopic.claim_epoch`).
    """
    highest: dict[str, int] = {}
    for snapshot in table.snapshots():
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        writer, epoch = summary.get(S_WRITER), summary.get(S_EPOCH)
        if writer is not None and epoch is not None and str(epoch).isdigit():
            highest[writer] = max(highest.get(writer, 0), int(epoch))
    return highest


def merged_state(table: Table, state: ControlState) -> ControlState:
    """A new control state: ``state`` with the commits of live snapshots added (not yet in the ledger).

    ``state`` itself is left as it is (see :func:`~airflow_logstore.core.ledger.with_commits`).
    """
    return with_commits(state, snapshot_commits(table))


@dataclass(frozen=True)
class CreateResult:
    table: str
    created: bool
    topic: str | None
    topic_created: bool
    control_topic: str | None
    partitions: int | None
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "created": self.created,
            "topic": self.topic,
            "topic_created": self.topic_created,
            "control_topic": self.control_topic,
            "partitions": self.partitions,
            "warnings": self.warnings,
        }


def create_table(
    handle: LogStoreTable,
    schema: str | Schema,
    *,
    primary_key: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
) -> CreateResult:
    """Create (idempotently) the Iceberg table and its log and control topics.

    Everything is validated first; nothing is created when the properties, schema or key are wrong.
    An existing table must have the same columns, key and LogStore settings.
    """
    properties = {str(k): str(v) for k, v in (properties or {}).items()}
    config, iceberg_schema = _validated(schema, primary_key, properties)
    warnings = _retention_warnings(config)
    topic_created, partitions = _ensure_topics(handle, config) if config.enabled else (False, None)
    created = _ensure_iceberg_table(handle, iceberg_schema, config, properties)
    return CreateResult(
        str(handle.name), created, config.topic, topic_created, config.control_topic, partitions, warnings
    )


def _validated(
    schema: str | Schema, primary_key: Sequence[str], properties: Mapping[str, str]
) -> tuple[LogStoreConfig, Schema]:
    """The LogStore settings and the Iceberg schema, or the first reason they are wrong."""
    for key in ICEBERG_DEFAULTS:
        if key == "format-version" and key in properties and properties[key] != "2":
            raise TablePropertyError(key, "LogStore tables are Iceberg format version 2")
    config = parse_table_properties(properties)
    iceberg_schema = parse_schema(schema, primary_key) if isinstance(schema, str) else schema
    if not isinstance(schema, str) and list(primary_key) != primary_key_of(iceberg_schema):
        raise SchemaMismatchError("primary_key does not match the schema's identifier fields")
    return config, iceberg_schema


def _retention_warnings(config: LogStoreConfig) -> list[str]:
    warning = config.retention_warning()
    if not warning:
        return []
    log.warning(warning)
    return [warning]


def _ensure_topics(handle: LogStoreTable, config: LogStoreConfig) -> tuple[bool, int]:
    """Create the log topic, the control topic and the committed feed's topics (when enabled) when
    missing: (log topic created, its partitions)."""
    topic, bootstrap, control_topic = config.require_log()
    kafka_config = kafka_client.client_config(bootstrap, handle.kafka_extra)
    info, topic_created = kafka_client.ensure_topic(
        kafka_config,
        topic,
        partitions=config.partitions,
        replication_factor=config.replication_factor,
        topic_configs=log_topic_configs(config),
    )
    ControlTopic(kafka_config, control_topic).ensure(config.replication_factor)
    if config.committed_feed:
        ensure_feed_topics(kafka_config, config)
    return topic_created, info.partitions


def _ensure_iceberg_table(
    handle: LogStoreTable, iceberg_schema: Schema, config: LogStoreConfig, properties: Mapping[str, str]
) -> bool:
    """Create the Iceberg table (True), or check the existing one is the same table (False)."""
    catalog = handle.loaded_catalog
    catalog.create_namespace_if_not_exists(handle.name.namespace)
    if catalog.table_exists(handle.name.identifier):
        _verify_existing(catalog.load_table(handle.name.identifier), iceberg_schema, config)
        return False
    from pyiceberg.exceptions import TableAlreadyExistsError

    try:
        catalog.create_table(
            handle.name.identifier,
            iceberg_schema,
            partition_spec=key_bucket_spec(iceberg_schema, config.key_buckets),
            properties={**ICEBERG_DEFAULTS, **creation_properties(properties, config.key_buckets)},
        )
        return True
    except TableAlreadyExistsError:  # a concurrent create won; it must be the same table
        _verify_existing(catalog.load_table(handle.name.identifier), iceberg_schema, config)
        return False


def _verify_existing(table: Table, schema: Schema, config: LogStoreConfig) -> None:
    difference = same_columns(table.schema(), schema)
    if difference:
        raise SchemaMismatchError(f"table {'.'.join(table.name())} already exists and {difference}")
    existing = parse_table_properties(table.properties)
    if existing != config:
        for key, old, new in (
            ("log-store.enabled", existing.enabled, config.enabled),
            ("log-store.topic", existing.topic, config.topic),
            ("log-store.address", existing.bootstrap_servers, config.bootstrap_servers),
            ("log-store.consistency-guarantee.enabled", existing.consistency, config.consistency),
            ("log.consumer.changelog.modes", existing.changelog_mode, config.changelog_mode),
            ("log-store.partitions", existing.partitions, config.partitions),
            ("log-store.committed-feed.enabled", existing.committed_feed, config.committed_feed),
        ):
            if old != new:
                raise TablePropertyError(key, f"the existing table has '{_plain(old)}', not '{_plain(new)}'")
        raise TablePropertyError("log-store.*", "the existing table has different LogStore settings")


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)


#: LogStore properties that cannot change once the table's log is enabled: its records are in that topic,
#: keyed to those partitions
_FIXED_WITH_A_LOG = ("log-store.topic", "log-store.partitions")


def alter_table(handle: LogStoreTable, properties: Mapping[str, str]) -> dict[str, Any]:
    """Set table properties, validated with the table's others; a log enabled now gets its topics.

    The log's topic and partitions cannot change once the log is enabled (its records are there).
    """
    table = handle.load()
    properties = {str(k): str(v) for k, v in properties.items()}
    before = handle.config(table)
    config = parse_table_properties({**table.properties, **properties})
    if before.enabled:
        for key in _FIXED_WITH_A_LOG:
            if key in properties and properties[key] != table.properties.get(key):
                raise TablePropertyError(
                    key, "cannot change once the table's log is enabled (its records are there)"
                )
    topic_created = False
    if config.enabled:
        topic_created, _ = _ensure_topics(handle, config)
    with transaction(table) as staged:
        staged.set_properties(properties)
    return {
        "table": str(handle.name),
        "set": properties,
        "log_enabled": config.enabled,
        "topic": config.topic,
        "topic_created": topic_created,
    }


def drop_table(handle: LogStoreTable, *, keep_topics: bool = False) -> dict[str, Any]:
    """Drop the table with its files (a purge) and, unless ``keep_topics``, its log, control and
    dead-letter topics. Returns what was removed and what was left."""
    from airflow_logstore.log.deadletter import dead_letter_topic_name

    table = handle.load()
    config = handle.config(table)
    topics: list[str] = []
    if config.enabled and config.topic:
        topic, _, control_topic = config.require_log()
        topics = [topic, control_topic, dead_letter_topic_name(topic)]
    deleted = (
        kafka_client.delete_topics(handle.kafka_config(config), topics) if topics and not keep_topics else []
    )
    handle.loaded_catalog.purge_table(handle.name.identifier)
    return {
        "table": str(handle.name),
        "dropped": True,
        "topics_deleted": deleted,
        "topics_kept": topics if keep_topics else [],
    }


def list_tables(catalog: CatalogSpec | None = None, namespace: str | None = None) -> list[str]:
    """The tables of the catalog (of one namespace), as ``namespace.table``, sorted."""
    loaded = (catalog or default_catalog()).load()
    namespaces = [(namespace,)] if namespace else loaded.list_namespaces()
    return sorted(".".join(ident) for ns in namespaces for ident in loaded.list_tables(ns))


def list_snapshots(handle: LogStoreTable) -> list[dict[str, Any]]:
    """The table's snapshots, oldest first: id, parent, time, operation and the LogStore commit (writer,
    batch, epoch) when it is one; ``current`` marks the one ``main`` points at."""
    table = handle.load()
    current = table.metadata.current_snapshot_id
    snapshots = []
    for snapshot in sorted(table.snapshots(), key=lambda s: (s.timestamp_ms, s.sequence_number or 0)):
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        snapshots.append(
            {
                "snapshot_id": snapshot.snapshot_id,
                "parent_id": snapshot.parent_snapshot_id,
                "timestamp_ms": snapshot.timestamp_ms,
                "operation": snapshot.summary.operation.value if snapshot.summary else None,
                "logstore_operation": summary.get(S_OPERATION),
                "writer_id": summary.get(S_WRITER),
                "batch_id": summary.get(S_BATCH),
                "epoch": summary.get(S_EPOCH),
                "current": snapshot.snapshot_id == current,
            }
        )
    return snapshots


def show_table(handle: LogStoreTable) -> dict[str, Any]:
    """Properties, topic and partitions, current snapshot and visibility state of a table."""
    table = handle.load()
    config = handle.config(table)
    log_store: dict[str, Any] = {
        "enabled": config.enabled,
        "topic": config.topic,
        "address": config.bootstrap_servers,
        "consistency": config.consistency.value,
        "changelog_mode": config.changelog_mode.value,
        "control_topic": config.control_topic,
    }
    if config.enabled:
        log_store.update(_show_log(handle, config))
    return {
        "table": str(handle.name),
        "location": table.location(),
        "format_version": table.format_version,
        "schema": describe_schema(table.schema()),
        "primary_key": primary_key_of(table.schema()),
        "properties": dict(sorted(table.properties.items())),
        "log_store": log_store,
        "snapshots": len(table.snapshots()),
        "current_snapshot": _show_snapshot(table.current_snapshot()),
        "layout_note": layout_note(table, str(handle.name)),
        "codec_note": codec_note(table, str(handle.name)),
    }


def _show_snapshot(snapshot: Any) -> dict[str, Any] | None:
    if snapshot is None:
        return None
    summary = snapshot.summary.additional_properties if snapshot.summary else {}
    return {
        "snapshot_id": snapshot.snapshot_id,
        "operation": snapshot.summary.operation.value if snapshot.summary else None,
        "logstore_operation": summary.get(S_OPERATION),
        "summary": dict(summary),
    }


def _show_log(handle: LogStoreTable, config: LogStoreConfig) -> dict[str, Any]:
    """The log topic (partitions, retention, offsets) and the control state, as far as they exist."""
    side = handle.log_side_of(config)
    info = kafka_client.describe_topic(side.kafka_config, config.topic or "")
    shown: dict[str, Any] = {
        "partitions": info.partitions if info else None,
        "topic_exists": info is not None,
        "retention_ms": info.configs.get("retention.ms") if info else None,
    }
    if info is None:
        return shown
    cons = kafka_client.consumer(side.kafka_config)
    try:
        offsets = kafka_client.partition_offsets(cons, config.topic or "", info.partitions)
    finally:
        cons.close()
    shown["offsets"] = {str(p): {"start": lo, "end": hi} for p, (lo, hi) in offsets.items()}
    shown["records"] = sum(hi - lo for lo, hi in offsets.values())
    return {**shown, **_show_control(side.control.read())}


def _show_control(state: ControlState) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "watermark": {str(p): o for p, o in sorted(state.watermark.items())},
        "ledger_commits": len(state.commits),
        "writers": dict(sorted(state.epochs.items())),
        "reconciled_positions": {str(p): o for p, o in sorted(state.reconcile_positions.items())},
    }
    if state.gaps:
        # retention deleted records before reconciliation scanned them (see reconciler.py)
        shown["retention_gaps"] = {str(p): gap for p, gap in sorted(state.gaps.items())}
        shown["needs_hybrid_reread"] = True
    return shown
