"""Table properties: both vocabularies, defaults, every validation error and its message."""

from __future__ import annotations

import re
from typing import Any

import pytest

from airflow_logstore.core.codec import DataFormat
from airflow_logstore.core.properties import (
    DEFAULT_PARTITIONS,
    DEFAULT_RETENTION_MS,
    DEFAULT_TARGET_FILE_SIZE,
    EMIT_FILE,
    EMIT_LOG,
    PROPERTY_SPECS,
    SPECS_BY_KEY,
    ChangelogMode,
    CompactionPolicy,
    Consistency,
    LogStoreConfig,
    emit_mode_from_options,
    format_emit_mode,
    nearest_key,
    parse_consistency,
    parse_emit_mode,
    parse_table_properties,
    resolve_read_options,
)
from airflow_logstore.exceptions import OptionError, TablePropertyError

AMORO = {
    "log-store.enabled": "true",
    "log-store.topic": "orders",
    "log-store.address": "kafka:9092",
}
PAIMON = {
    "log.system": "kafka",
    "kafka.topic": "orders",
    "kafka.bootstrap.servers": "kafka:9092",
}


def error_of(properties: dict[str, Any]) -> TablePropertyError:
    with pytest.raises(TablePropertyError) as info:
        parse_table_properties(properties)
    return info.value


# --- vocabularies and defaults ---------------------------------------------------------------------


def test_no_properties_means_no_log_and_all_defaults() -> None:
    config = parse_table_properties({})
    assert config == LogStoreConfig(enabled=False)
    assert config.topic is None and config.bootstrap_servers is None and config.control_topic is None
    assert config.consistency is Consistency.EVENTUAL
    assert config.changelog_mode is ChangelogMode.ALL_KINDS
    assert config.partitions == DEFAULT_PARTITIONS == 3
    assert config.replication_factor is None  # the broker's default.replication.factor
    assert config.retention_ms == DEFAULT_RETENTION_MS == 7 * 24 * 3600 * 1000
    assert config.reconcile_interval_ms == 600_000
    assert config.compaction == CompactionPolicy()


def test_foreign_properties_are_ignored() -> None:
    config = parse_table_properties({"write.format.default": "parquet", "kafka.acks": "all", "owner": "x"})
    assert config.enabled is False


def test_amoro_vocabulary_defaults_to_eventual() -> None:
    config = parse_table_properties(AMORO)
    assert config.enabled is True
    assert config.topic == "orders"
    assert config.bootstrap_servers == "kafka:9092"
    assert config.consistency is Consistency.EVENTUAL
    assert config.consistent is False
    assert config.control_topic == "orders.logstore-control"


def test_paimon_vocabulary_defaults_to_consistent() -> None:
    config = parse_table_properties(PAIMON)
    assert config.enabled is True
    assert config.topic == "orders"
    assert config.bootstrap_servers == "kafka:9092"
    assert config.consistency is Consistency.CONSISTENT
    assert config.consistent is True
    assert config.control_topic == "orders.logstore-control"


def test_paimon_log_system_none_is_disabled() -> None:
    config = parse_table_properties({"log.system": "none"})
    assert config.enabled is False
    assert config.control_topic is None


def test_amoro_disabled_needs_no_topic() -> None:
    config = parse_table_properties({"log-store.enabled": "false"})
    assert config.enabled is False


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"log-store.consistency-guarantee.enabled": "true"}, Consistency.CONSISTENT),
        ({"log-store.consistency-guarantee.enabled": "false"}, Consistency.EVENTUAL),
        ({"log.consistency": "transactional"}, Consistency.CONSISTENT),
        ({"log.consistency": "eventual"}, Consistency.EVENTUAL),
        ({"log.consistency": "EVENTUAL"}, Consistency.EVENTUAL),
    ],
)
@pytest.mark.parametrize("base", [AMORO, PAIMON], ids=["amoro", "paimon"])
def test_explicit_consistency_beats_vocabulary_default(
    base: dict[str, str], extra: dict[str, str], expected: Consistency
) -> None:
    assert parse_table_properties({**base, **extra}).consistency is expected


def test_both_vocabularies_agreeing_are_accepted() -> None:
    config = parse_table_properties(
        {
            **AMORO,
            **PAIMON,
            "log-store.consistency-guarantee.enabled": "true",
            "log.consistency": "transactional",
        }
    )
    assert config.enabled and config.topic == "orders" and config.bootstrap_servers == "kafka:9092"
    assert config.consistency is Consistency.CONSISTENT


def test_mixed_vocabularies_take_topic_and_address_from_either() -> None:
    config = parse_table_properties(
        {"log-store.enabled": "true", "kafka.topic": "t1", "kafka.bootstrap.servers": "b:1"}
    )
    assert (config.topic, config.bootstrap_servers) == ("t1", "b:1")
    config = parse_table_properties(
        {"log.system": "kafka", "log-store.topic": "t2", "log-store.address": "b:2"}
    )
    assert (config.topic, config.bootstrap_servers) == ("t2", "b:2")


def test_values_are_trimmed_and_case_insensitive_where_typed() -> None:
    config = parse_table_properties(
        {
            "log-store.enabled": " TRUE ",
            "log-store.topic": "  orders ",
            "log-store.address": " kafka:9092 ",
            "log-store.type": "Kafka",
            "log.consumer.changelog.modes": "Append-Only",
            "log-store.partitions": " 12 ",
        }
    )
    assert config.enabled is True
    assert config.topic == "orders"
    assert config.bootstrap_servers == "kafka:9092"
    assert config.changelog_mode is ChangelogMode.APPEND_ONLY
    assert config.partitions == 12


def test_python_typed_values_are_accepted() -> None:
    config = parse_table_properties(
        {
            "log-store.enabled": True,
            "log-store.topic": "t",
            "log-store.address": "a:1",
            "log-store.partitions": 5,
        }
    )
    assert config.enabled is True and config.partitions == 5


def test_logstore_settings_are_read() -> None:
    config = parse_table_properties(
        {
            **AMORO,
            "log-store.partitions": "6",
            "log-store.replication-factor": "3",
            "log-store.retention.ms": "-1",
            "log-store.control-topic": "orders-ctl",
            "log-store.reconcile.interval.ms": "1000",
        }
    )
    assert config.partitions == 6
    assert config.replication_factor == 3
    assert config.retention_ms == -1
    assert config.control_topic == "orders-ctl"
    assert config.reconcile_interval_ms == 1000


def test_compaction_policy_is_read() -> None:
    config = parse_table_properties(
        {
            "self-optimizing.enabled": "false",
            "self-optimizing.target-size": "1000",
            "self-optimizing.fragment-ratio": "4",
            "self-optimizing.minor.trigger.file-count": "2",
            "self-optimizing.major.trigger.duplicate-ratio": "0.5",
        }
    )
    assert config.compaction == CompactionPolicy(
        enabled=False, target_file_size=1000, fragment_ratio=4, min_small_files=2, delete_ratio=0.5
    )
    assert config.compaction.small_file_size == 250
    assert isinstance(config.compaction.delete_ratio, float)


def test_default_compaction_policy() -> None:
    policy = parse_table_properties({}).compaction
    assert policy.enabled is True
    assert policy.target_file_size == DEFAULT_TARGET_FILE_SIZE
    assert policy.small_file_size == DEFAULT_TARGET_FILE_SIZE // 8
    assert policy.min_small_files == 12
    assert policy.delete_ratio == pytest.approx(0.1)


def test_enum_defaults_are_valid_choices() -> None:
    for spec in PROPERTY_SPECS:
        assert SPECS_BY_KEY[spec.key] is spec
        if spec.kind == "enum":
            assert spec.default in spec.choices, spec.key


# --- require_log and retention warning -------------------------------------------------------------


def test_require_log_returns_topics() -> None:
    assert parse_table_properties(AMORO).require_log() == ("orders", "kafka:9092", "orders.logstore-control")


def test_require_log_fails_without_log() -> None:
    with pytest.raises(TablePropertyError, match=r"'log-store.enabled'.*has no LogStore") as info:
        parse_table_properties({}).require_log()
    assert info.value.key == "log-store.enabled"


@pytest.mark.parametrize(
    ("retention", "interval", "warns"),
    [
        (-1, 1000, False),
        (3000, 1000, False),
        (2999, 1000, True),
        (1, 600_000, True),
        (DEFAULT_RETENTION_MS, 600_000, False),
    ],
)
def test_retention_warning(retention: int, interval: int, warns: bool) -> None:
    config = parse_table_properties(
        {**AMORO, "log-store.retention.ms": str(retention), "log-store.reconcile.interval.ms": str(interval)}
    )
    warning = config.retention_warning()
    if warns:
        assert warning is not None
        assert f"log-store.retention.ms={retention}" in warning
        assert f"log-store.reconcile.interval.ms={interval}" in warning
        assert "shorter than 3 reconcile intervals" in warning
    else:
        assert warning is None


# --- validation errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("log-store.topik", "log-store.topic"),
        ("log-store.enable", "log-store.enabled"),
        ("log-store.adress", "log-store.address"),
        ("log.consistancy", "log.consistency"),
        ("log.sytem", "log.system"),
        ("log-store.consistency-guarantee", "log-store.consistency-guarantee.enabled"),
        ("self-optimizing.target_size", "self-optimizing.target-size"),
        ("self-optimizing.enable", "self-optimizing.enabled"),
    ],
)
def test_unknown_key_suggests_nearest(key: str, suggestion: str) -> None:
    error = error_of({**AMORO, key: "x"})
    assert error.key == key
    assert str(error) == f"table property '{key}': unknown LogStore property; did you mean '{suggestion}'?"


@pytest.mark.parametrize(
    "key", ["log.zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "self-optimizing.qqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"]
)
def test_unknown_key_without_close_match_has_no_suggestion(key: str) -> None:
    error = error_of({key: "1"})
    assert str(error) == f"table property '{key}': unknown LogStore property"


def test_nearest_key_uses_given_candidates() -> None:
    assert nearest_key("log.consistncy", ["log.consistency", "log.system"]) == "log.consistency"
    assert nearest_key("completely-different", ["log.system"]) is None


@pytest.mark.parametrize(
    ("properties", "key"),
    [
        ({"log-store.enabled": "true", "log-store.address": "k:1"}, "log-store.topic"),
        ({"log-store.enabled": "true", "log-store.topic": "t"}, "log-store.address"),
        ({"log.system": "kafka", "kafka.bootstrap.servers": "k:1"}, "kafka.topic"),
        ({"log.system": "kafka", "kafka.topic": "t"}, "kafka.bootstrap.servers"),
        ({"log-store.enabled": "true"}, "log-store.topic"),
        ({"log.system": "kafka"}, "kafka.topic"),
    ],
)
def test_missing_topic_or_address_names_the_vocabulary_key(properties: dict[str, str], key: str) -> None:
    error = error_of(properties)
    assert error.key == key
    assert str(error) == f"table property '{key}': is required when the log is enabled"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("log.system", "kafak", "'kafak' is not one of none, kafka; did you mean 'kafka'?"),
        ("log.system", "rabbitmq", "'rabbitmq' is not one of none, kafka"),
        (
            "log.consistency",
            "eventually",
            "'eventually' is not one of consistent, eventual or transactional (Paimon's name of consistent);"
            " did you mean 'eventual'?",
        ),
        (
            "log.consumer.changelog.modes",
            "append",
            "'append' is not one of all-kinds, append-only; did you mean 'append-only'?",
        ),
        ("log-store.data-format", "avro", "'avro' is not one of json, debezium-json"),
        ("log.format", "avro", "'avro' is not one of json, debezium-json"),
        ("log-store.type", "kinesis", "'kinesis' is not one of kafka"),
    ],
)
def test_bad_enum_value(key: str, value: str, message: str) -> None:
    error = error_of({key: value})
    assert error.key == key
    assert str(error) == f"table property '{key}': {message}"


@pytest.mark.parametrize("value", ["yes", "1", "", "on", "truee"])
@pytest.mark.parametrize(
    "key", ["log-store.enabled", "log-store.consistency-guarantee.enabled", "self-optimizing.enabled"]
)
def test_bad_bool(key: str, value: str) -> None:
    error = error_of({key: value})
    assert error.key == key
    assert str(error) == f"table property '{key}': expected true or false, got '{value}'"


@pytest.mark.parametrize("value", ["three", "1.5", "", "1e3", "0x10"])
@pytest.mark.parametrize(
    "key", ["log-store.partitions", "log-store.retention.ms", "self-optimizing.target-size"]
)
def test_bad_int(key: str, value: str) -> None:
    error = error_of({key: value})
    assert str(error) == f"table property '{key}': expected an integer, got '{value}'"


def test_bad_float() -> None:
    key = "self-optimizing.major.trigger.duplicate-ratio"
    assert str(error_of({key: "lots"})) == f"table property '{key}': expected a number, got 'lots'"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("log-store.partitions", "0", "must be at least 1, got 0"),
        ("log-store.replication-factor", "-3", "must be at least 1, got -3"),
        ("log-store.retention.ms", "-2", "must be at least -1, got -2"),
        ("log-store.reconcile.interval.ms", "0", "must be at least 1, got 0"),
        ("self-optimizing.fragment-ratio", "0", "must be at least 1, got 0"),
        ("self-optimizing.minor.trigger.file-count", "0", "must be at least 1, got 0"),
        ("self-optimizing.target-size", "0", "must be at least 1, got 0"),
        ("self-optimizing.major.trigger.duplicate-ratio", "-0.5", "must be at least 0, got -0.5"),
    ],
)
def test_below_minimum(key: str, value: str, message: str) -> None:
    error = error_of({key: value})
    assert error.key == key
    assert str(error) == f"table property '{key}': {message}"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("log-store.partitions", "1"),
        ("log-store.retention.ms", "-1"),
        ("self-optimizing.major.trigger.duplicate-ratio", "0"),
    ],
)
def test_minimum_itself_is_accepted(key: str, value: str) -> None:
    parse_table_properties({key: value})


@pytest.mark.parametrize(
    ("properties", "key", "other", "values"),
    [
        ({**AMORO, "log.system": "none"}, "log-store.enabled", "log.system", "('true' vs 'none')"),
        (
            {"log-store.enabled": "false", **PAIMON},
            "log-store.enabled",
            "log.system",
            "('false' vs 'kafka')",
        ),
        (
            {**AMORO, **PAIMON, "kafka.topic": "other"},
            "log-store.topic",
            "kafka.topic",
            "('orders' vs 'other')",
        ),
        (
            {**AMORO, **PAIMON, "kafka.bootstrap.servers": "elsewhere:9092"},
            "log-store.address",
            "kafka.bootstrap.servers",
            "('kafka:9092' vs 'elsewhere:9092')",
        ),
        (
            {**AMORO, "log-store.consistency-guarantee.enabled": "true", "log.consistency": "eventual"},
            "log-store.consistency-guarantee.enabled",
            "log.consistency",
            "('true' vs 'eventual')",
        ),
        (
            {
                **PAIMON,
                "log-store.consistency-guarantee.enabled": "false",
                "log.consistency": "transactional",
            },
            "log-store.consistency-guarantee.enabled",
            "log.consistency",
            "('false' vs 'transactional')",
        ),
    ],
    ids=[
        "enabled-vs-system-none",
        "disabled-vs-system-kafka",
        "topic",
        "address",
        "consistency-on",
        "consistency-off",
    ],
)
def test_contradicting_vocabularies(properties: dict[str, str], key: str, other: str, values: str) -> None:
    error = error_of(properties)
    assert error.key == key
    assert str(error) == f"table property '{key}': contradicts '{other}' {values}; set one of them"


def test_disabled_in_both_vocabularies_agrees() -> None:
    assert parse_table_properties({"log-store.enabled": "false", "log.system": "none"}).enabled is False


@pytest.mark.parametrize(
    "topic",
    ["my topic", "orders/eu", "ä", ".", "..", "x" * 250, "t:1", "t*"],
)
@pytest.mark.parametrize(
    ("base", "key"), [(AMORO, "log-store.topic"), (PAIMON, "kafka.topic")], ids=["amoro", "paimon"]
)
def test_illegal_topic_name(base: dict[str, str], key: str, topic: str) -> None:
    error = error_of({**base, key: topic})
    assert error.key == key
    assert str(error) == (
        f"table property '{key}': '{topic}' is not a legal Kafka topic name "
        "(letters, digits, '.', '_', '-'; at most 249)"
    )


def test_illegal_topic_names_the_key_that_was_set() -> None:
    # Amoro switch, Paimon topic: the message must name the property that holds the bad value.
    error = error_of(
        {"log-store.enabled": "true", "kafka.topic": "bad topic", "kafka.bootstrap.servers": "k:1"}
    )
    assert error.key == "kafka.topic"
    error = error_of({"log.system": "kafka", "log-store.topic": "bad topic", "log-store.address": "k:1"})
    assert error.key == "log-store.topic"


@pytest.mark.parametrize("topic", ["a", "A.b_c-9", "x" * 249])
def test_legal_topic_names(topic: str) -> None:
    config = parse_table_properties({**AMORO, "log-store.topic": topic, "log-store.control-topic": "ctl"})
    assert config.topic == topic


def test_empty_topic_is_rejected() -> None:
    error = error_of({**AMORO, "log-store.topic": "   "})
    assert str(error) == "table property 'log-store.topic': must not be empty"


def test_illegal_control_topic() -> None:
    error = error_of({**AMORO, "log-store.control-topic": "ctl topic"})
    assert error.key == "log-store.control-topic"
    assert "'ctl topic' is not a legal Kafka topic name" in str(error)


def test_default_control_topic_too_long_is_reported_on_the_control_topic() -> None:
    error = error_of({**AMORO, "log-store.topic": "x" * 240})
    assert error.key == "log-store.control-topic"


def test_control_topic_equal_to_log_topic() -> None:
    error = error_of({**AMORO, "log-store.control-topic": "orders"})
    assert error.key == "log-store.control-topic"
    assert str(error) == "table property 'log-store.control-topic': must differ from the log topic"


def test_control_topic_of_a_disabled_table_is_kept_unchecked() -> None:
    assert parse_table_properties({"log-store.control-topic": "c"}).control_topic == "c"


@pytest.mark.parametrize("value", ["pulsar", "Pulsar", " PULSAR "])
def test_pulsar_is_unsupported(value: str) -> None:
    error = error_of({**AMORO, "log-store.type": value})
    assert error.key == "log-store.type"
    assert (
        str(error)
        == "table property 'log-store.type': 'pulsar' is not supported; airflow-logstore writes to Kafka"
    )


def test_error_is_a_value_error() -> None:
    assert isinstance(error_of({"log.system": "x"}), ValueError)


# --- read options ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "options", "consistency", "mode"),
    [
        (AMORO, None, Consistency.EVENTUAL, ChangelogMode.ALL_KINDS),
        (PAIMON, {}, Consistency.CONSISTENT, ChangelogMode.ALL_KINDS),
        (
            AMORO,
            {"log-store.consistency-guarantee.enabled": "true"},
            Consistency.CONSISTENT,
            ChangelogMode.ALL_KINDS,
        ),
        (
            PAIMON,
            {"log-store.consistency-guarantee.enabled": "false"},
            Consistency.EVENTUAL,
            ChangelogMode.ALL_KINDS,
        ),
        (PAIMON, {"log.consistency": "eventual"}, Consistency.EVENTUAL, ChangelogMode.ALL_KINDS),
        (AMORO, {"log.consistency": "transactional"}, Consistency.CONSISTENT, ChangelogMode.ALL_KINDS),
        (
            AMORO,
            {"log.consumer.changelog.modes": "append-only"},
            Consistency.EVENTUAL,
            ChangelogMode.APPEND_ONLY,
        ),
        (
            {**AMORO, "log.consumer.changelog.modes": "append-only"},
            {},
            Consistency.EVENTUAL,
            ChangelogMode.APPEND_ONLY,
        ),
        (
            {**AMORO, "log.consumer.changelog.modes": "append-only"},
            {"log.consumer.changelog.modes": "all-kinds"},
            Consistency.EVENTUAL,
            ChangelogMode.ALL_KINDS,
        ),
        (
            AMORO,
            {"log-store.consistency-guarantee.enabled": "true", "log.consistency": "transactional"},
            Consistency.CONSISTENT,
            ChangelogMode.ALL_KINDS,
        ),
    ],
)
def test_read_options_override_table(
    base: dict[str, str], options: dict[str, str] | None, consistency: Consistency, mode: ChangelogMode
) -> None:
    read = resolve_read_options(parse_table_properties(base), options)
    assert read.consistency is consistency
    assert read.changelog_mode is mode


def test_read_option_unknown_key_suggests_a_read_option() -> None:
    with pytest.raises(TablePropertyError) as info:
        resolve_read_options(parse_table_properties(AMORO), {"log.consistncy": "eventual"})
    assert (
        str(info.value)
        == "table property 'log.consistncy': unknown LogStore property; did you mean 'log.consistency'?"
    )


def test_read_option_that_is_a_table_property_is_refused() -> None:
    with pytest.raises(TablePropertyError, match=r"'log-store.topic': unknown LogStore property"):
        resolve_read_options(parse_table_properties(AMORO), {"log-store.topic": "other"})


def test_read_option_bad_value() -> None:
    with pytest.raises(TablePropertyError) as info:
        resolve_read_options(
            parse_table_properties(AMORO), {"log-store.consistency-guarantee.enabled": "maybe"}
        )
    assert "expected true or false, got 'maybe'" in str(info.value)


def test_read_options_contradicting_each_other() -> None:
    with pytest.raises(TablePropertyError) as info:
        resolve_read_options(
            parse_table_properties(AMORO),
            {"log-store.consistency-guarantee.enabled": "false", "log.consistency": "transactional"},
        )
    assert info.value.key == "log-store.consistency-guarantee.enabled"
    assert "contradicts 'log.consistency'" in str(info.value)


# --- emit mode -------------------------------------------------------------------------------------

ENABLED = parse_table_properties(AMORO)
DISABLED = parse_table_properties({})


@pytest.mark.parametrize(
    ("value", "config", "expected"),
    [
        (None, ENABLED, {EMIT_FILE, EMIT_LOG}),
        ("", ENABLED, {EMIT_FILE, EMIT_LOG}),
        ("  ", ENABLED, {EMIT_FILE, EMIT_LOG}),
        (None, DISABLED, {EMIT_FILE}),
        ("file", ENABLED, {EMIT_FILE}),
        ("file", DISABLED, {EMIT_FILE}),
        ("log", ENABLED, {EMIT_LOG}),
        ("file,log", ENABLED, {EMIT_FILE, EMIT_LOG}),
        (" LOG , File ", ENABLED, {EMIT_FILE, EMIT_LOG}),
        ("file,,file", ENABLED, {EMIT_FILE}),
    ],
)
def test_parse_emit_mode(value: str | None, config: LogStoreConfig, expected: set[str]) -> None:
    assert parse_emit_mode(value, config) == frozenset(expected)


@pytest.mark.parametrize("value", ["files", "kafka", "file;log", ",", "file,iceberg"])
def test_parse_emit_mode_rejects_bad_values(value: str) -> None:
    with pytest.raises(OptionError) as info:
        parse_emit_mode(value, ENABLED)
    assert info.value.name == "mixed-format.emit.mode"
    assert str(info.value) == f"option 'mixed-format.emit.mode': '{value}' is not one of file, log, file,log"


@pytest.mark.parametrize("value", ["log", "file,log"])
def test_emit_mode_log_on_a_table_without_log(value: str) -> None:
    with pytest.raises(OptionError) as info:
        parse_emit_mode(value, DISABLED)
    assert str(info.value) == (
        f"option 'mixed-format.emit.mode': '{value}' writes the log, but the table has no LogStore "
        "(log-store.enabled)"
    )


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, {EMIT_FILE, EMIT_LOG}),
        ({"mixed-format.emit.mode": "file"}, {EMIT_FILE}),
        ({"arctic.emit.mode": "log"}, {EMIT_LOG}),
        ({"mixed-format.emit.mode": "", "arctic.emit.mode": "file"}, {EMIT_FILE}),
        ({"mixed-format.emit.mode": None, "arctic.emit.mode": "log"}, {EMIT_LOG}),
        ({"mixed-format.emit.mode": "file", "arctic.emit.mode": " file "}, {EMIT_FILE}),
        ({"mixed-format.emit.mode": "file,log", "arctic.emit.mode": "log,file"}, {EMIT_FILE, EMIT_LOG}),
        ({"mixed-format.emit.mode": "  ", "arctic.emit.mode": "log"}, {EMIT_LOG}),
        ({"unrelated": "x"}, {EMIT_FILE, EMIT_LOG}),
    ],
)
def test_emit_mode_from_options(options: dict[str, Any], expected: set[str]) -> None:
    assert emit_mode_from_options(options, ENABLED) == frozenset(expected)


def test_emit_mode_spellings_contradicting() -> None:
    with pytest.raises(OptionError) as info:
        emit_mode_from_options({"mixed-format.emit.mode": "file", "arctic.emit.mode": "log"}, ENABLED)
    assert info.value.name == "mixed-format.emit.mode"
    assert str(info.value) == "option 'mixed-format.emit.mode': contradicts 'arctic.emit.mode'"


def test_old_emit_mode_spelling_names_itself_in_errors() -> None:
    with pytest.raises(OptionError, match=re.escape("option 'arctic.emit.mode': 'log' writes the log")):
        emit_mode_from_options({"arctic.emit.mode": "log"}, DISABLED)
    with pytest.raises(OptionError, match=re.escape("option 'arctic.emit.mode': 'bogus' is not one of")):
        emit_mode_from_options({"arctic.emit.mode": "bogus"}, ENABLED)


@pytest.mark.parametrize(
    ("modes", "text"),
    [({EMIT_FILE}, "file"), ({EMIT_LOG}, "log"), ({EMIT_LOG, EMIT_FILE}, "file,log")],
)
def test_format_emit_mode_round_trips(modes: set[str], text: str) -> None:
    assert format_emit_mode(frozenset(modes)) == text
    assert parse_emit_mode(text, ENABLED) == frozenset(modes)


def test_bad_value_in_either_emit_mode_spelling_names_that_spelling() -> None:
    with pytest.raises(OptionError) as info:
        emit_mode_from_options({"mixed-format.emit.mode": "file", "arctic.emit.mode": "bogus"}, ENABLED)
    assert info.value.name == "arctic.emit.mode"


@pytest.mark.parametrize(
    ("properties", "data_format"),
    [
        ({}, DataFormat.JSON),
        ({"log-store.data-format": "debezium-json"}, DataFormat.DEBEZIUM_JSON),
        ({"log.format": "Debezium-JSON"}, DataFormat.DEBEZIUM_JSON),
        ({"log.format": "json", "log-store.data-format": "json"}, DataFormat.JSON),
    ],
)
def test_data_format_in_both_vocabularies(properties: dict[str, str], data_format: DataFormat) -> None:
    assert parse_table_properties(properties).data_format is data_format


def test_data_formats_that_contradict_each_other() -> None:
    error = error_of({"log-store.data-format": "json", "log.format": "debezium-json"})
    assert error.key == "log-store.data-format"
    assert "contradicts 'log.format' ('json' vs 'debezium-json')" in str(error)


# -- consistency names: ours and Paimon's, at every edge ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("consistent", Consistency.CONSISTENT),
        ("transactional", Consistency.CONSISTENT),  # Paimon's name
        ("Transactional", Consistency.CONSISTENT),
        (" CONSISTENT ", Consistency.CONSISTENT),
        ("eventual", Consistency.EVENTUAL),
        ("EVENTUAL", Consistency.EVENTUAL),
        (Consistency.EVENTUAL, Consistency.EVENTUAL),
    ],
)
def test_parse_consistency_takes_both_vocabularies_in_any_case(name: str, expected: Consistency) -> None:
    assert parse_consistency(name) is expected


def test_parse_consistency_names_the_bad_value_and_the_accepted_ones() -> None:
    with pytest.raises(OptionError) as raised:
        parse_consistency("exactly-once")
    assert str(raised.value) == (
        "option 'consistency': 'exactly-once' is not one of consistent, eventual or transactional "
        "(Paimon's name of consistent)"
    )
    with pytest.raises(TablePropertyError, match=r"table property 'log.consistency': 'strict' is not one of"):
        parse_consistency("strict", key="log.consistency", error=TablePropertyError)


@pytest.mark.parametrize("value", ["transactional", "TRANSACTIONAL", "consistent", "Consistent"])
def test_the_paimon_property_takes_both_names_of_consistent(value: str) -> None:
    config = parse_table_properties({**PAIMON, "log.consistency": value})
    assert config.consistency is Consistency.CONSISTENT and config.consistent
    agreeing = {**AMORO, "log-store.consistency-guarantee.enabled": "true", "log.consistency": value}
    assert parse_table_properties(agreeing).consistency is Consistency.CONSISTENT


def test_a_read_hint_takes_both_names_of_consistent() -> None:
    config = parse_table_properties(AMORO)
    for value in ("transactional", "consistent"):
        hinted = resolve_read_options(config, {"log.consistency": value})
        assert hinted.consistency is Consistency.CONSISTENT


def test_the_consistency_contradiction_quotes_what_was_written() -> None:
    error = error_of(
        {**AMORO, "log-store.consistency-guarantee.enabled": "false", "log.consistency": "consistent"}
    )
    assert "('false' vs 'consistent')" in str(error)


def test_the_old_name_transactional_is_a_deprecated_alias_of_consistent() -> None:
    """Code written against the old enum keeps working: the member, and converting the old value."""
    assert Consistency.TRANSACTIONAL is Consistency.CONSISTENT
    assert Consistency["TRANSACTIONAL"] is Consistency.CONSISTENT
    assert Consistency("transactional") is Consistency.CONSISTENT  # a stored value of an older version
    assert list(Consistency) == [Consistency.CONSISTENT, Consistency.EVENTUAL]  # each consistency once
    with pytest.raises(ValueError, match="'strong' is not a valid Consistency"):
        Consistency("strong")
