"""The per-process shared producer: one per configuration, one caller at a time, dropped on error."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from airflow_logstore.log import kafka_client


class FakeProducer:
    created: list[FakeProducer] = []

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.purged = False
        FakeProducer.created.append(self)

    def purge(self) -> None:
        self.purged = True


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> kafka_client._SharedProducers:
    import confluent_kafka

    FakeProducer.created = []
    monkeypatch.setattr(confluent_kafka, "Producer", FakeProducer)
    producers = kafka_client._SharedProducers()
    monkeypatch.setattr(kafka_client, "_SHARED_PRODUCERS", producers)
    return producers


CONFIG = {"bootstrap.servers": "127.0.0.1:1", "group.id": "readers-only"}


def test_one_producer_per_configuration(shared: kafka_client._SharedProducers) -> None:
    with kafka_client.shared_producer(CONFIG, **{"linger.ms": 0}) as first:
        pass
    with kafka_client.shared_producer(CONFIG, **{"linger.ms": 0}) as again:
        pass
    with kafka_client.shared_producer(CONFIG, **{"linger.ms": 50}) as other:
        pass
    assert first is again
    assert other is not first
    assert len(FakeProducer.created) == 2
    # built with the same settings as a fresh producer: idempotent, consumer-only settings dropped
    assert first.settings == kafka_client.producer_settings(CONFIG, **{"linger.ms": 0})
    assert first.settings["enable.idempotence"] is True
    assert "group.id" not in first.settings


def test_an_error_purges_and_drops_the_producer(shared: kafka_client._SharedProducers) -> None:
    with pytest.raises(kafka_client.KafkaUnavailableError), kafka_client.shared_producer(CONFIG) as broken:
        raise kafka_client.KafkaUnavailableError("not acknowledged")
    assert broken.purged
    with kafka_client.shared_producer(CONFIG) as fresh:
        pass
    assert fresh is not broken
    assert not fresh.purged


def test_close_drops_every_producer(shared: kafka_client._SharedProducers) -> None:
    with kafka_client.shared_producer(CONFIG) as before:
        pass
    kafka_client.close_shared_producers()
    with kafka_client.shared_producer(CONFIG) as after:
        pass
    assert before.purged
    assert after is not before


def test_callers_take_turns(shared: kafka_client._SharedProducers) -> None:
    inside = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def holder() -> None:
        with kafka_client.shared_producer(CONFIG):
            order.append("first in")
            inside.set()
            release.wait(5)
            order.append("first out")

    thread = threading.Thread(target=holder)
    thread.start()
    assert inside.wait(5)
    waiter = threading.Thread(target=lambda: _enter_and_note(order))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive(), "a second caller got the producer while the first still held it"
    release.set()
    thread.join(5)
    waiter.join(5)
    assert order == ["first in", "first out", "second in"]


def _enter_and_note(order: list[str]) -> None:
    with kafka_client.shared_producer(CONFIG):
        order.append("second in")


def test_a_forked_child_starts_without_the_parents_producers(shared: kafka_client._SharedProducers) -> None:
    with kafka_client.shared_producer(CONFIG) as parents:
        pass
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        with kafka_client.shared_producer(CONFIG) as childs:
            pass
        orphaned = parents in [entry.producer for entry in shared.orphans]
        os.write(write, b"new" if childs is not parents and orphaned else b"old")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 8)
    os.waitpid(pid, 0)
    assert answer == b"new"
