"""ReconcilerLease against an in-memory control topic whose broker stamps records (LogAppendTime).

Clocks are injected: the broker's, each reconciler's monotonic clock and the wall clock they stamp
into their records; nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from airflow_logstore.core import control
from airflow_logstore.exceptions import FencedError, OptionError
from airflow_logstore.log.control_topic import ControlTopic
from airflow_logstore.reconcile import reconciler
from airflow_logstore.reconcile.reconciler import LEASE_SKEW_MARGIN_MS, ReconcilerLease

TTL_S = 10.0
HOUR_MS = 3_600_000


class Broker:
    """The control partition: offsets in order, each record stamped with the broker's clock."""

    def __init__(self) -> None:
        self.now_ms = 1_000_000
        self.records: list[control.ControlRecord] = []


class InMemoryControlTopic(ControlTopic):
    def __init__(self, broker: Broker) -> None:
        super().__init__({}, "t.logstore-control")
        self.broker = broker

    def append(self, key: str, value: Mapping[str, Any] | None) -> int:
        offset = len(self.broker.records)
        payload = None if value is None else dict(value)
        self.broker.records.append(control.ControlRecord(key, payload, offset, self.broker.now_ms))
        return offset

    def read(self) -> control.ControlState:
        return control.fold(self.broker.records)


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Broker:
    monkeypatch.setattr(ReconcilerLease, "_keep", lambda self: None)  # renewals only when a test asks
    return Broker()


def lease(broker: Broker, owner: str, clock: Clock | None = None) -> ReconcilerLease:
    return ReconcilerLease(InMemoryControlTopic(broker), owner, TTL_S, clock=clock or Clock(0.0))


def with_wall_clock(monkeypatch: pytest.MonkeyPatch, ms: int) -> None:
    monkeypatch.setattr(reconciler, "_now_ms", lambda: ms)


def test_two_reconcilers_with_skewed_clocks_cannot_both_hold_the_lease(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow, fast = lease(broker, "slow", Clock(50.0)), lease(broker, "fast", Clock(9_000.0))
    with_wall_clock(monkeypatch, broker.now_ms - HOUR_MS)  # an hour behind
    assert slow.acquire() is None
    broker.now_ms += 100
    with_wall_clock(monkeypatch, broker.now_ms + HOUR_MS)  # an hour ahead: it would think slow expired
    holder = fast.acquire()
    assert holder is not None and holder.owner == "slow" and fast.lease_id is None
    slow.check()  # still ours, by the log and by its own monotonic clock
    assert fast.ctl.read().live_lease(reconciler.LEASE_NAME).owner == "slow"

    # the broker's clock passes the expiry: the next claim takes over and the old holder is fenced
    broker.now_ms += int(TTL_S * 1000)
    later = lease(broker, "later")
    assert later.acquire() is None
    with pytest.raises(FencedError, match="no longer held"):
        slow.check()
    later.check()


def test_the_holder_stops_acting_when_its_own_time_is_up_even_if_nobody_wrote(broker: Broker) -> None:
    clock = Clock(100.0)
    holder = lease(broker, "a", clock)
    assert holder.acquire() is None
    clock.now += TTL_S - LEASE_SKEW_MARGIN_MS / 1000 + 0.001  # e.g. a process paused that long
    assert holder.ctl.read().live_lease(reconciler.LEASE_NAME) is not None  # the log alone still says so
    with pytest.raises(FencedError, match="time ran out"):
        holder.check()


def test_a_check_past_half_the_ttl_renews_and_the_renewal_counts_from_its_sending(broker: Broker) -> None:
    clock = Clock(0.0)
    holder = lease(broker, "a", clock)
    assert holder.acquire() is None
    clock.now = TTL_S * 0.6
    broker.now_ms += int(TTL_S * 600)
    holder.check()  # renews
    renewal = broker.records[-1]
    assert renewal.value is not None and renewal.value["renews"] == holder.lease_id
    state = holder.ctl.read()
    current = state.live_lease(reconciler.LEASE_NAME)
    assert current is not None and current.basis_offset == renewal.offset
    assert holder.time_left_s(current) == pytest.approx(TTL_S - LEASE_SKEW_MARGIN_MS / 1000)

    broker.now_ms += int(TTL_S * 900)  # past the claim's expiry, not the renewal's
    other = lease(broker, "b")
    assert other.acquire() is not None
    holder.check()


def test_a_renewal_that_came_too_late_does_not_bring_the_lease_back(broker: Broker) -> None:
    clock = Clock(0.0)
    holder = lease(broker, "a", clock)
    assert holder.acquire() is None
    broker.now_ms += int(TTL_S * 1000)  # a paused process: its lease expired in the log meanwhile
    holder.renew()
    other = lease(broker, "b")
    assert other.acquire() is None
    with pytest.raises(FencedError, match="holder now: b"):
        holder.check()


def test_the_loser_releases_its_claim_and_the_lease_follows_the_log_after_the_holder_closes(
    broker: Broker,
) -> None:
    first, second = lease(broker, "first"), lease(broker, "second")
    assert first.acquire() is None
    assert second.acquire() is not None
    assert broker.records[-1].value == {"release": 2, "owner": "second"}
    first.close()
    assert first.ctl.read().live_lease(reconciler.LEASE_NAME) is None
    assert lease(broker, "third").acquire() is None


def test_a_ttl_within_the_skew_margin_is_refused(broker: Broker) -> None:
    with pytest.raises(OptionError, match="lease_ttl_s"):
        ReconcilerLease(InMemoryControlTopic(broker), "a", 2 * LEASE_SKEW_MARGIN_MS / 1000)
