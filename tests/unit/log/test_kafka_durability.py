"""Durability defaults of LogStore topics and the epoch floor of claims (no broker: the I/O is faked)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_logstore.core.properties import parse_table_properties
from airflow_logstore.exceptions import TopicError
from airflow_logstore.log import control_topic, kafka_client
from airflow_logstore.log.control_topic import CONTROL_TOPIC_CONFIGS, ControlTopic
from airflow_logstore.log.kafka_client import TopicInfo, durability_configs
from airflow_logstore.table.tables import recorded_epochs

# --- replication and topic settings -------------------------------------------------------------------


@pytest.mark.parametrize(
    "replication, expected",
    [(1, {}), (2, {}), (3, {"min.insync.replicas": "2"}), (5, {"min.insync.replicas": "2"})],
)
def test_min_insync_replicas_is_two_from_replication_three(
    replication: int, expected: dict[str, str]
) -> None:
    assert durability_configs(replication) == expected


def test_the_control_topic_never_elects_an_unclean_leader() -> None:
    assert CONTROL_TOPIC_CONFIGS["unclean.leader.election.enable"] == "false"
    assert CONTROL_TOPIC_CONFIGS["cleanup.policy"] == "compact"


def test_the_replication_factor_defaults_to_the_brokers_and_a_property_overrides_it() -> None:
    base = {"log-store.enabled": "true", "log-store.topic": "t", "log-store.address": "k:9092"}
    assert parse_table_properties(base).replication_factor is None
    assert parse_table_properties({**base, "log-store.replication-factor": "2"}).replication_factor == 2


class FakeAdmin:
    def __init__(self) -> None:
        self.requests: list[Any] = []

    def create_topics(self, requests: list[Any]) -> dict[str, Any]:
        self.requests.extend(requests)

        class Done:
            def result(self, timeout: float) -> None:
                return None

        return {request.topic: Done() for request in requests}


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin()
    monkeypatch.setattr(kafka_client, "describe_topic", lambda config, topic, timeout=None: None)
    monkeypatch.setattr(kafka_client, "admin_client", lambda config: fake)
    monkeypatch.setattr(
        kafka_client, "_wait_for_topic", lambda config, topic, timeout: TopicInfo(topic, 1, {})
    )
    return fake


def _create(replication_factor: int | None, configs: Mapping[str, str]) -> None:
    kafka_client.ensure_topic(
        {"bootstrap.servers": "k:9092"},
        "t",
        partitions=1,
        replication_factor=replication_factor,
        topic_configs=configs,
    )


@pytest.mark.parametrize("broker_default, min_insync", [(1, None), (3, "2")])
def test_a_topic_without_a_replication_factor_gets_the_brokers_default(
    admin: FakeAdmin, monkeypatch: pytest.MonkeyPatch, broker_default: int, min_insync: str | None
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(
        kafka_client,
        "broker_default_replication_factor",
        lambda config, timeout=30.0: asked.append(config["bootstrap.servers"]) or broker_default,
    )
    _create(None, CONTROL_TOPIC_CONFIGS)
    (request,) = admin.requests
    assert asked == ["k:9092"]
    assert request.replication_factor == broker_default
    assert request.config.get("min.insync.replicas") == min_insync
    assert request.config["unclean.leader.election.enable"] == "false"


def test_an_explicit_replication_factor_is_used_and_topic_settings_win(
    admin: FakeAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(config: Any, timeout: float = 30.0) -> int:
        raise AssertionError("the broker is not asked when the table sets the replication factor")

    monkeypatch.setattr(kafka_client, "broker_default_replication_factor", never)
    _create(4, {"min.insync.replicas": "3"})
    (request,) = admin.requests
    assert (request.replication_factor, request.config) == (4, {"min.insync.replicas": "3"})


# --- the epoch floor ------------------------------------------------------------------------------------


class InMemoryControlTopic(ControlTopic):
    """A control topic whose log is a list: offsets are positions, as Kafka assigns them."""

    def __init__(self, epoch_floor: Any = None, start: int = 0) -> None:
        super().__init__({}, "t.logstore-control", epoch_floor)
        self.records: list[tuple[str, Any]] = [("old", None)] * start

    def append(self, key: str, value: Mapping[str, Any] | None) -> int:
        self.records.append((key, value))
        return len(self.records) - 1

    def end_offset(self) -> int:
        return len(self.records)

    def append_fill(self, count: int) -> None:
        self.records.extend([(control_topic.EPOCH_FILL_KEY, None)] * count)


def test_a_claim_above_the_floor_writes_only_the_claim() -> None:
    topic = InMemoryControlTopic(lambda writer: 3, start=10)
    assert topic.claim_epoch("w") == 11
    assert [key for key, _ in topic.records[10:]] == ["epoch/w"]


def test_a_recreated_topic_never_hands_out_an_epoch_at_or_below_the_recorded_one() -> None:
    floors: list[str] = []
    topic = InMemoryControlTopic(lambda writer: floors.append(writer) or 42)
    epoch = topic.claim_epoch("w")
    assert floors == ["w"] and epoch == 43
    assert topic.records[-1][0] == "epoch/w"
    assert {key for key, _ in topic.records[:-1]} == {control_topic.EPOCH_FILL_KEY}
    assert topic.claim_epoch("w") == 44  # the next one needs no filler


def test_an_explicit_floor_wins_and_no_floor_means_zero() -> None:
    assert InMemoryControlTopic().claim_epoch("w") == 1
    assert InMemoryControlTopic(lambda writer: 1).claim_epoch("w", floor=7) == 8


def test_a_gap_too_large_to_fill_is_an_error_naming_topic_writer_and_epoch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(control_topic, "MAX_EPOCH_FILL", 100)
    topic = InMemoryControlTopic(lambda writer: 500, start=5)
    with pytest.raises(TopicError) as caught:
        topic.claim_epoch("w")
    message = str(caught.value)
    assert "'t.logstore-control' ends at offset 5" in message and "epoch 500 of writer 'w'" in message
    assert len(topic.records) == 5  # nothing claimed, nothing filled


def test_a_topic_recreated_again_while_claiming_is_an_error() -> None:
    class Recreated(InMemoryControlTopic):
        def append(self, key: str, value: Mapping[str, Any] | None) -> int:
            self.records = []  # lost between the fill and the claim
            return super().append(key, value)

    with pytest.raises(TopicError, match="epoch claim 1 of writer 'w' is not above epoch 9"):
        Recreated(lambda writer: 9).claim_epoch("w")


@dataclass
class FakeSummary:
    additional_properties: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeSnapshot:
    summary: FakeSummary | None


class FakeTable:
    def __init__(self, *summaries: dict[str, str] | None) -> None:
        self._snapshots = [FakeSnapshot(None if s is None else FakeSummary(s)) for s in summaries]

    def snapshots(self) -> list[FakeSnapshot]:
        return self._snapshots


def test_recorded_epochs_are_the_highest_per_writer_over_every_snapshot() -> None:
    table = FakeTable(
        {"logstore.writer-id": "a", "logstore.epoch": "7"},
        {"logstore.writer-id": "b", "logstore.epoch": "3"},
        {"logstore.writer-id": "a", "logstore.epoch": "12"},
        {"logstore.writer-id": "a", "logstore.epoch": "9"},
        {"logstore.operation": "compaction"},
        None,
    )
    assert recorded_epochs(table) == {"a": 12, "b": 3}  # type: ignore[arg-type]


def test_a_new_topic_a_broker_does_not_know_yet_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """On several brokers the one answering ``describe_configs`` may not know a just-created topic yet
    (seen on the cluster test): that is "not there yet", and the wait asks again."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from confluent_kafka import KafkaError, KafkaException

    from airflow_logstore.log import kafka_client

    answers = [KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)), None]

    class _Admin:
        def describe_configs(self, resources: list[Any]) -> dict[Any, Future[Any]]:
            future: Future[Any] = Future()
            answer = answers.pop(0)
            if answer is None:
                future.set_result({"retention.ms": SimpleNamespace(value="1000")})
            else:
                future.set_exception(answer)
            return {resources[0]: future}

    topic = SimpleNamespace(error=None, partitions={0: None, 1: None})
    metadata = SimpleNamespace(topics={"t": topic})
    monkeypatch.setattr(kafka_client, "_metadata", lambda config, name, timeout: (metadata, _Admin()))
    info = kafka_client._wait_for_topic({}, "t", 5.0)
    assert info == kafka_client.TopicInfo("t", 2, {"retention.ms": "1000"}) and answers == []
