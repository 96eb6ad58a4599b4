"""LogStore table properties in the two vocabularies, Amoro's and Paimon's, validated.

``parse_table_properties`` turns an Iceberg table's properties into a :class:`LogStoreConfig` or raises
:class:`~airflow_logstore.exceptions.TablePropertyError` naming the property: unknown ``log.*`` /
``log-store.*`` / ``self-optimizing.*`` keys (with the nearest valid key), bad types or enum values,
missing topic or address when the log is enabled, and settings that contradict each other.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from airflow_logstore.core.codec import DataFormat
from airflow_logstore.exceptions import OptionError, TablePropertyError


class Consistency(StrEnum):
    """How a log reader treats records that no Iceberg snapshot has committed yet."""

    CONSISTENT = "consistent"  # exactly-once: only records of committed, published snapshots
    EVENTUAL = "eventual"  # at-least-once: every record at once, reversals included
    #: Deprecated: the old name of ``CONSISTENT``, kept for code that imports it. An alias (the same value),
    #: so ``Consistency.TRANSACTIONAL is Consistency.CONSISTENT``; its value is now ``consistent``, and
    #: iterating the class lists each consistency once.
    TRANSACTIONAL = "consistent"

    @classmethod
    def _missing_(cls, value: object) -> Consistency | None:
        """``Consistency(name)`` takes every name of :data:`CONSISTENCY_NAMES`, in any case: older code and
        stored values that say ``transactional`` (the old value) still convert."""
        return CONSISTENCY_NAMES.get(value.strip().lower()) if isinstance(value, str) else None


#: Every name a user may give a consistency, case-insensitive: ours, and ``transactional``, Paimon's name of
#: ``consistent`` (its ``log.consistency`` value). Everything inside and every output says ours.
CONSISTENCY_NAMES: dict[str, Consistency] = {
    "consistent": Consistency.CONSISTENT,
    "transactional": Consistency.CONSISTENT,
    "eventual": Consistency.EVENTUAL,
}


def parse_consistency(
    value: Consistency | str,
    *,
    key: str = "consistency",
    error: type[OptionError] | type[TablePropertyError] = OptionError,
) -> Consistency:
    """The :class:`Consistency` a name means, in either vocabulary (see :data:`CONSISTENCY_NAMES`).

    Every edge that takes a consistency (table properties, read hints, operator and function parameters,
    CLI and Spark-job options, the Spark source's option) calls this, so all accept the same names.

    :param key: the property or option that held ``value``, named in the error
    :param error: :class:`OptionError` for an option or parameter, :class:`TablePropertyError` for a property
    :raises OptionError: (or ``error``) naming the bad value and the accepted names
    """
    try:
        return Consistency(value)  # a member, or any name of CONSISTENCY_NAMES (Consistency._missing_)
    except ValueError:
        hint = nearest_key(str(value).strip().lower(), list(CONSISTENCY_NAMES))
        suffix = f"; did you mean '{hint}'?" if hint else ""
        accepted = "consistent, eventual or transactional (Paimon's name of consistent)"
        raise error(key, f"'{value}' is not one of {accepted}{suffix}") from None


class ChangelogMode(StrEnum):
    ALL_KINDS = "all-kinds"
    APPEND_ONLY = "append-only"


@dataclass(frozen=True)
class PropertySpec:
    key: str
    kind: str  # "bool", "int", "float", "str", "enum" or "consistency" (a name parse_consistency takes)
    default: Any
    description: str
    vocabulary: str  # "amoro", "paimon" or "logstore" (ours)
    choices: tuple[str, ...] = ()
    minimum: float | None = None


DEFAULT_PARTITIONS = 3
DATA_FORMATS = tuple(f.value for f in DataFormat)
#: Buckets of a key table's partition spec (``bucket(N, <first key column>)``), 0 for none. A batch's keys
#: are pushed into its lookup and its MERGE whatever the layout; buckets let a batch with fewer keys
#: than buckets skip the others (a batch of thousands of keys touches every bucket). Opt-in: pyiceberg
#: appends to a bucketed table need the optional pyiceberg-core package.
DEFAULT_KEY_BUCKETS = 0
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
#: The committed feed of log topic ``t``: ``t`` + FEED_SUFFIX; its publishers' progress: + PROGRESS_SUFFIX.
FEED_SUFFIX = ".committed"
PROGRESS_SUFFIX = ".committed-progress"

PROPERTY_SPECS: tuple[PropertySpec, ...] = (
    PropertySpec("log-store.enabled", "bool", False, "Write every change to the Kafka log too.", "amoro"),
    PropertySpec(
        "log-store.type", "enum", "kafka", "Log system; only Kafka is supported.", "amoro", choices=("kafka",)
    ),
    PropertySpec("log-store.topic", "str", None, "Kafka topic of the table's log.", "amoro"),
    PropertySpec("log-store.address", "str", None, "Kafka bootstrap servers of the log.", "amoro"),
    PropertySpec(
        "log-store.consistency-guarantee.enabled",
        "bool",
        False,
        "Log readers see only records of committed snapshots (exactly-once).",
        "amoro",
    ),
    PropertySpec(
        "log-store.data-format",
        "enum",
        "json",
        "Encoding of log record values: json (ours) or debezium-json (the Debezium envelope).",
        "amoro",
        choices=DATA_FORMATS,
    ),
    PropertySpec(
        "log.format",
        "enum",
        "json",
        "Encoding of log record values: json (ours) or debezium-json (the Debezium envelope).",
        "paimon",
        choices=DATA_FORMATS,
    ),
    PropertySpec(
        "log.consumer.changelog.modes",
        "enum",
        "all-kinds",
        "Row kinds a log read emits: all-kinds (+I/-U/+U/-D) or append-only (+I only).",
        "amoro",
        choices=("all-kinds", "append-only"),
    ),
    PropertySpec(
        "log.system",
        "enum",
        "none",
        "External log system: none or kafka.",
        "paimon",
        choices=("none", "kafka"),
    ),
    PropertySpec("kafka.bootstrap.servers", "str", None, "Kafka bootstrap servers of the log.", "paimon"),
    PropertySpec("kafka.topic", "str", None, "Kafka topic of the table's log.", "paimon"),
    PropertySpec(
        "log.consistency",
        "consistency",
        "consistent",
        "consistent (Paimon's transactional): visible after the snapshot commits; eventual: visible at once.",
        "paimon",
        choices=("consistent", "transactional", "eventual"),
    ),
    PropertySpec(
        "log-store.partitions",
        "int",
        DEFAULT_PARTITIONS,
        "Partitions of the log topic when the table creates it.",
        "logstore",
        minimum=1,
    ),
    PropertySpec(
        "log-store.replication-factor",
        "int",
        None,
        "Replication factor of the log topics (default: the broker's default.replication.factor).",
        "logstore",
        minimum=1,
    ),
    PropertySpec(
        "log-store.retention.ms",
        "int",
        DEFAULT_RETENTION_MS,
        "retention.ms of the log topic; must outlast the reconcile schedule (-1: forever).",
        "logstore",
        minimum=-1,
    ),
    PropertySpec(
        "log-store.control-topic",
        "str",
        None,
        "Compacted topic holding epochs, the commit ledger and the visibility watermark "
        "(default: '<topic>.logstore-control').",
        "logstore",
    ),
    PropertySpec(
        "log-store.reconcile.interval.ms",
        "int",
        10 * 60 * 1000,
        "How often reconciliation runs; retention shorter than 3x this is warned about.",
        "logstore",
        minimum=1,
    ),
    PropertySpec(
        "log-store.key-buckets",
        "int",
        DEFAULT_KEY_BUCKETS,
        "Buckets of a key table's partition spec, bucket(N, first key column), set when the table is "
        "created (0: unpartitioned). Recorded on every table created since it exists.",
        "logstore",
        minimum=0,
    ),
    PropertySpec(
        "log-store.committed-feed.enabled",
        "bool",
        False,
        "Publishing also copies every newly visible committed change, once, to '<topic>.committed' in a "
        "Kafka transaction: any read_committed consumer sees each committed change exactly once.",
        "logstore",
    ),
    PropertySpec(
        "self-optimizing.enabled", "bool", True, "Let scheduled compaction rewrite this table.", "amoro"
    ),
    PropertySpec(
        "self-optimizing.target-size",
        "int",
        DEFAULT_TARGET_FILE_SIZE,
        "Target data file size of compaction, in bytes.",
        "amoro",
        minimum=1,
    ),
    PropertySpec(
        "self-optimizing.fragment-ratio",
        "int",
        8,
        "Files smaller than target-size / fragment-ratio count as small.",
        "amoro",
        minimum=1,
    ),
    PropertySpec(
        "self-optimizing.minor.trigger.file-count",
        "int",
        12,
        "Compact when at least this many small files (or delete files) exist.",
        "amoro",
        minimum=1,
    ),
    PropertySpec(
        "self-optimizing.major.trigger.duplicate-ratio",
        "float",
        0.1,
        "Compact when deleted rows / data rows exceeds this ratio.",
        "amoro",
        minimum=0.0,
    ),
)

SPECS_BY_KEY: dict[str, PropertySpec] = {spec.key: spec for spec in PROPERTY_SPECS}
VALIDATED_PREFIXES = ("log.", "log-store.", "self-optimizing.")
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

EMIT_MODE_KEYS = ("mixed-format.emit.mode", "arctic.emit.mode")
READ_OPTION_KEYS = (
    "log-store.consistency-guarantee.enabled",
    "log.consistency",
    "log.consumer.changelog.modes",
)


@dataclass(frozen=True)
class CompactionPolicy:
    enabled: bool = True
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    fragment_ratio: int = 8
    min_small_files: int = 12
    delete_ratio: float = 0.1

    @property
    def small_file_size(self) -> int:
        return self.target_file_size // self.fragment_ratio


@dataclass(frozen=True)
class LogStoreConfig:
    """The LogStore settings of one table, whichever vocabulary declared them."""

    enabled: bool
    topic: str | None = None
    bootstrap_servers: str | None = None
    consistency: Consistency = Consistency.EVENTUAL
    changelog_mode: ChangelogMode = ChangelogMode.ALL_KINDS
    partitions: int = DEFAULT_PARTITIONS
    replication_factor: int | None = None  # None: the broker's default.replication.factor
    retention_ms: int = DEFAULT_RETENTION_MS
    control_topic: str | None = None
    reconcile_interval_ms: int = 10 * 60 * 1000
    key_buckets: int = DEFAULT_KEY_BUCKETS
    data_format: DataFormat = DataFormat.JSON
    committed_feed: bool = False  # publishing copies committed changes to '<topic>.committed'
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)

    @property
    def consistent(self) -> bool:
        return self.consistency is Consistency.CONSISTENT

    def feed_topics(self) -> tuple[str, str]:
        """(the committed topic, its progress topic), or fail when the table has no committed feed."""
        if not self.committed_feed or not self.topic:
            raise TablePropertyError(
                "log-store.committed-feed.enabled", "the table has no committed feed (it is not enabled)"
            )
        return f"{self.topic}{FEED_SUFFIX}", f"{self.topic}{PROGRESS_SUFFIX}"

    def require_log(self) -> tuple[str, str, str]:
        """Return (topic, bootstrap servers, control topic) or fail when the log is disabled."""
        if not self.enabled or not self.topic or not self.bootstrap_servers or not self.control_topic:
            raise TablePropertyError("log-store.enabled", "the table has no LogStore (the log is disabled)")
        return self.topic, self.bootstrap_servers, self.control_topic

    def retention_warning(self) -> str | None:
        """A warning when the topic retention is too short for the reconcile schedule, else None."""
        if self.retention_ms == -1 or self.retention_ms >= 3 * self.reconcile_interval_ms:
            return None
        return (
            f"log-store.retention.ms={self.retention_ms} is shorter than 3 reconcile intervals "
            f"(log-store.reconcile.interval.ms={self.reconcile_interval_ms}): records may be deleted "
            "before reconciliation scans them"
        )


def nearest_key(key: str, candidates: tuple[str, ...] | list[str] | None = None) -> str | None:
    pool = list(candidates) if candidates is not None else list(SPECS_BY_KEY)
    matches = difflib.get_close_matches(key, pool, n=1, cutoff=0.5)
    return matches[0] if matches else None


def _unknown_key_error(key: str, candidates: tuple[str, ...] | list[str] | None = None) -> TablePropertyError:
    hint = nearest_key(key, candidates)
    suffix = f"; did you mean '{hint}'?" if hint else ""
    return TablePropertyError(key, f"unknown LogStore property{suffix}")


def _convert(spec: PropertySpec, raw: Any) -> Any:
    text = str(raw).strip()
    if spec.kind == "bool":
        if text.lower() not in ("true", "false"):
            raise TablePropertyError(spec.key, f"expected true or false, got '{raw}'")
        return text.lower() == "true"
    if spec.kind in ("int", "float"):
        try:
            value: float = int(text) if spec.kind == "int" else float(text)
        except ValueError:
            raise TablePropertyError(
                spec.key, f"expected {'an integer' if spec.kind == 'int' else 'a number'}, got '{raw}'"
            ) from None
        if spec.minimum is not None and value < spec.minimum:
            raise TablePropertyError(spec.key, f"must be at least {spec.minimum:g}, got {value}")
        return value
    if spec.kind == "consistency":  # validated here, kept as written (for errors), mapped by _consistency
        parse_consistency(text, key=spec.key, error=TablePropertyError)
        return text.lower()
    if spec.kind == "enum":
        if text.lower() not in spec.choices:
            hint = nearest_key(text.lower(), list(spec.choices))
            suffix = f"; did you mean '{hint}'?" if hint else ""
            raise TablePropertyError(spec.key, f"'{raw}' is not one of {', '.join(spec.choices)}{suffix}")
        return text.lower()
    if not text:
        raise TablePropertyError(spec.key, "must not be empty")
    return text


def _typed(properties: Mapping[str, Any]) -> dict[str, Any]:
    typed: dict[str, Any] = {}
    for key, raw in properties.items():
        spec = SPECS_BY_KEY.get(key)
        if spec is None:
            if key.startswith(VALIDATED_PREFIXES):
                raise _unknown_key_error(key)
            continue
        if key == "log-store.type" and str(raw).strip().lower() == "pulsar":
            raise TablePropertyError(key, "'pulsar' is not supported; airflow-logstore writes to Kafka")
        typed[key] = _convert(spec, raw)
    return typed


def _agree(typed: Mapping[str, Any], amoro_key: str, paimon_key: str, amoro: Any, paimon: Any) -> None:
    if amoro_key in typed and paimon_key in typed and amoro != paimon:
        raise TablePropertyError(
            amoro_key,
            f"contradicts '{paimon_key}' ('{_text(typed[amoro_key])}' vs '{_text(typed[paimon_key])}'); "
            "set one of them",
        )


def _consistency(typed: Mapping[str, Any], default: Consistency) -> Consistency:
    """The consistency the two vocabularies name, Amoro's ``log-store.consistency-guarantee.enabled``
    flag and Paimon's ``log.consistency`` (already parsed by :func:`parse_consistency`), for table
    properties and read options alike: both may be set when they agree; neither set is ``default``."""
    amoro, paimon = "log-store.consistency-guarantee.enabled", "log.consistency"
    named = {paimon: parse_consistency(typed[paimon], key=paimon)} if paimon in typed else {}
    if amoro in typed:
        named[amoro] = Consistency.CONSISTENT if typed[amoro] else Consistency.EVENTUAL
    _agree(typed, amoro, paimon, named.get(amoro), named.get(paimon))
    return named.get(amoro) or named.get(paimon) or default


def _text(value: Any) -> str:
    """A typed property value as a user writes it (true/false, not True/False)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_topic(key: str, topic: str) -> None:
    if not _TOPIC_NAME.match(topic) or topic in (".", ".."):
        raise TablePropertyError(
            key, f"'{topic}' is not a legal Kafka topic name (letters, digits, '.', '_', '-'; at most 249)"
        )


def parse_table_properties(properties: Mapping[str, Any]) -> LogStoreConfig:
    """Validate ``properties`` and return the table's :class:`LogStoreConfig`."""
    typed = _typed(properties)

    _agree(
        typed,
        "log-store.enabled",
        "log.system",
        typed.get("log-store.enabled"),
        typed.get("log.system") == "kafka",
    )
    enabled = bool(typed.get("log-store.enabled", False) or typed.get("log.system") == "kafka")

    _agree(typed, "log-store.topic", "kafka.topic", typed.get("log-store.topic"), typed.get("kafka.topic"))
    _agree(
        typed,
        "log-store.address",
        "kafka.bootstrap.servers",
        typed.get("log-store.address"),
        typed.get("kafka.bootstrap.servers"),
    )
    uses_paimon = "log.system" in typed and "log-store.enabled" not in typed
    # each vocabulary keeps its own default
    consistency = _consistency(typed, Consistency.CONSISTENT if uses_paimon else Consistency.EVENTUAL)

    _agree(
        typed,
        "log-store.data-format",
        "log.format",
        typed.get("log-store.data-format"),
        typed.get("log.format"),
    )
    data_format = DataFormat(typed.get("log-store.data-format") or typed.get("log.format") or DataFormat.JSON)

    topic = typed.get("log-store.topic") or typed.get("kafka.topic")
    address = typed.get("log-store.address") or typed.get("kafka.bootstrap.servers")
    topic_key = "kafka.topic" if uses_paimon else "log-store.topic"
    address_key = "kafka.bootstrap.servers" if uses_paimon else "log-store.address"

    control_topic = typed.get("log-store.control-topic")
    if enabled:
        if not topic:
            raise TablePropertyError(topic_key, "is required when the log is enabled")
        if not address:
            raise TablePropertyError(address_key, "is required when the log is enabled")
        # name the property that holds the topic (vocabularies may be mixed when they agree)
        _check_topic(next((k for k in ("log-store.topic", "kafka.topic") if k in typed), topic_key), topic)
        control_topic = control_topic or f"{topic}.logstore-control"
        _check_topic("log-store.control-topic", control_topic)
        if control_topic == topic:
            raise TablePropertyError("log-store.control-topic", "must differ from the log topic")
    committed_feed = typed.get("log-store.committed-feed.enabled", False)
    if committed_feed:
        if not enabled:
            raise TablePropertyError(
                "log-store.committed-feed.enabled",
                "needs the log (log-store.enabled=true or log.system=kafka): the feed copies its records",
            )
        for suffix in (FEED_SUFFIX, PROGRESS_SUFFIX):
            _check_topic("log-store.committed-feed.enabled", f"{topic}{suffix}")
        if control_topic in (f"{topic}{FEED_SUFFIX}", f"{topic}{PROGRESS_SUFFIX}"):
            raise TablePropertyError(
                "log-store.control-topic", "must differ from the committed feed's topics"
            )

    compaction = CompactionPolicy(
        enabled=typed.get("self-optimizing.enabled", True),
        target_file_size=typed.get("self-optimizing.target-size", DEFAULT_TARGET_FILE_SIZE),
        fragment_ratio=typed.get("self-optimizing.fragment-ratio", 8),
        min_small_files=typed.get("self-optimizing.minor.trigger.file-count", 12),
        delete_ratio=float(typed.get("self-optimizing.major.trigger.duplicate-ratio", 0.1)),
    )
    return LogStoreConfig(
        enabled=enabled,
        topic=topic,
        bootstrap_servers=address,
        consistency=consistency,
        changelog_mode=ChangelogMode(typed.get("log.consumer.changelog.modes", "all-kinds")),
        partitions=typed.get("log-store.partitions", DEFAULT_PARTITIONS),
        replication_factor=typed.get("log-store.replication-factor"),
        retention_ms=typed.get("log-store.retention.ms", DEFAULT_RETENTION_MS),
        control_topic=control_topic,
        reconcile_interval_ms=typed.get("log-store.reconcile.interval.ms", 10 * 60 * 1000),
        key_buckets=typed.get("log-store.key-buckets", DEFAULT_KEY_BUCKETS),
        data_format=data_format,
        committed_feed=committed_feed,
        compaction=compaction,
    )


@dataclass(frozen=True)
class ReadOptions:
    consistency: Consistency
    changelog_mode: ChangelogMode


def typed_read_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The read hints, each checked and converted as its table property is (``TablePropertyError``
    naming the hint otherwise)."""
    options = dict(options or {})
    for key in options:
        if key not in READ_OPTION_KEYS:
            raise _unknown_key_error(key, list(READ_OPTION_KEYS))
    return {key: _convert(SPECS_BY_KEY[key], value) for key, value in options.items()}


def resolve_read_options(config: LogStoreConfig, options: Mapping[str, Any] | None = None) -> ReadOptions:
    """Per-read hints (Amoro's and Paimon's ``OPTIONS(...)`` hints) override the table's settings."""
    typed = typed_read_options(options)
    mode = ChangelogMode(typed.get("log.consumer.changelog.modes", config.changelog_mode.value))
    return ReadOptions(consistency=_consistency(typed, config.consistency), changelog_mode=mode)


EMIT_FILE = "file"
EMIT_LOG = "log"


def parse_emit_mode(
    value: str | None, config: LogStoreConfig, *, key: str = "mixed-format.emit.mode"
) -> frozenset[str]:
    """Parse the write hint ``mixed-format.emit.mode`` (``file``, ``log`` or ``file,log``)."""
    if value is None or not str(value).strip():
        return frozenset({EMIT_FILE, EMIT_LOG}) if config.enabled else frozenset({EMIT_FILE})
    parts = [part.strip().lower() for part in str(value).split(",") if part.strip()]
    bad = [part for part in parts if part not in (EMIT_FILE, EMIT_LOG)]
    if bad or not parts:
        raise OptionError(key, f"'{value}' is not one of file, log, file,log")
    modes = frozenset(parts)
    if EMIT_LOG in modes and not config.enabled:
        raise OptionError(key, f"'{value}' writes the log, but the table has no LogStore (log-store.enabled)")
    return modes


def emit_mode_from_options(options: Mapping[str, Any], config: LogStoreConfig) -> frozenset[str]:
    """Read the emit mode from write options, accepting the older ``arctic.emit.mode`` spelling."""
    present = [key for key in EMIT_MODE_KEYS if options.get(key) is not None and str(options[key]).strip()]
    modes = [parse_emit_mode(options[key], config, key=key) for key in present]
    if len(modes) == 2 and modes[0] != modes[1]:  # "file,log" and "log,file" agree
        raise OptionError(EMIT_MODE_KEYS[0], f"contradicts '{EMIT_MODE_KEYS[1]}'")
    return modes[0] if modes else parse_emit_mode(None, config)


def format_emit_mode(modes: frozenset[str]) -> str:
    return ",".join(sorted(modes))
