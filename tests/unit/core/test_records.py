"""The control topic's typed payloads: what they write, what they read back, what the fold makes of them."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_logstore.core import control
from airflow_logstore.core.records import (
    EpochClaim,
    LeaseClaim,
    LeaseRelease,
    WatermarkRecord,
    as_json,
    lease_record,
)


def _fold(*records: tuple[str, dict[str, Any] | None]) -> control.ControlState:
    return control.fold(control.ControlRecord(k, v, i, 1_000 + i) for i, (k, v) in enumerate(records))


def test_each_payload_reads_back_what_it_wrote() -> None:
    move = WatermarkRecord({0: 5, 2: 9}, ["w/1/1"], {0: [0, 5]}, {0: {"redundant": [[2, 3]]}}, 77, 123)
    claim = LeaseClaim("host-a", 30_000, 456)
    renewal = LeaseClaim("host-a", 30_000, 789, renews=4)
    assert WatermarkRecord.from_json(move.to_json()) == move
    assert EpochClaim.from_json(EpochClaim("w", "o", 1).to_json()) == EpochClaim("w", "o", 1)
    assert lease_record(claim.to_json()) == claim
    assert lease_record(renewal.to_json()) == renewal
    assert lease_record(LeaseRelease(4, "host-a").to_json()) == LeaseRelease(4, "host-a")


def test_the_json_keeps_the_protocols_field_names() -> None:
    """Readers of older versions and people reading the topic see the same fields as before."""
    assert WatermarkRecord({1: 3}, ["w/1/1"], {1: [0, 3]}, {}, None, 5).to_json() == {
        "offsets": {"1": 3},
        "commits": ["w/1/1"],
        "snapshot_id": None,
        "published_at_ms": 5,
        "scanned": {"1": [0, 3]},
        "holes": {},
    }
    assert LeaseClaim("o", 10, 1).to_json() == {"owner": "o", "ttl_ms": 10, "claimed_at_ms": 1}
    assert LeaseClaim("o", 10, 2, renews=3).to_json() == {
        "owner": "o",
        "ttl_ms": 10,
        "renewed_at_ms": 2,
        "renews": 3,
    }
    assert as_json(LeaseRelease(3, "o")) == {"release": 3, "owner": "o"}
    assert as_json({"a": 1}) == {"a": 1} and as_json(None) is None


def test_older_payloads_read_with_their_defaults() -> None:
    """Before ttl_ms a claim said its absolute expiry in the writer's clock; an older watermark record
    had no settled ranges. Both still fold."""
    old = LeaseClaim.from_json({"owner": "o", "claimed_at_ms": 1_000, "expires_at_ms": 31_000})
    assert old.ttl_for() == 30_000
    state = _fold(("lease/reconciler", {"owner": "o", "claimed_at_ms": 1_000, "expires_at_ms": 31_000}))
    assert state.leases["reconciler"][0].expires_at_ms == 1_000 + 30_000
    assert WatermarkRecord.from_json({"offsets": {"0": 4}}) == WatermarkRecord({0: 4})


def test_a_malformed_watermark_changes_nothing_and_is_counted() -> None:
    """A bad offset makes the whole move malformed: none of its partitions moves (the fold used to
    apply the partitions before the bad one)."""
    state = _fold(("watermark/a", {"offsets": {"0": 4}}), ("watermark/b", {"offsets": {"0": 9, "1": "x"}}))
    assert state.watermark == {0: 4} and state.malformed == 1
    assert state.watermark_keys == ["watermark/a"]


@pytest.mark.parametrize(
    "value",
    [{"release": "x"}, {"owner": "o", "ttl_ms": "soon"}, {"owner": "o", "ttl_ms": 5, "renews": []}],
)
def test_a_malformed_lease_record_is_counted(value: dict[str, Any]) -> None:
    assert _fold(("lease/reconciler", value)).malformed == 1
