"""Leases in the control topic: the holder is decided by the log (order and broker timestamps) alone."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_logstore.core import control
from airflow_logstore.core.control import ControlRecord, Lease, fold

TTL = 1000


def at(ms: int, key: str, value: dict[str, Any] | None, offset: int) -> ControlRecord:
    """A record the broker stamped at ``ms`` (LogAppendTime)."""
    return ControlRecord(key, value, offset, ms)


def log(*items: tuple[int, str, dict[str, Any] | None]) -> list[ControlRecord]:
    """Records at consecutive offsets, each with its broker timestamp."""
    return [at(ms, key, value, offset) for offset, (ms, key, value) in enumerate(items)]


def claim(owner: str, ttl: int = TTL, wall: int = 0) -> dict[str, Any]:
    return {"owner": owner, "ttl_ms": ttl, "claimed_at_ms": wall}


def renew(lease_id: int, owner: str, ttl: int = TTL, wall: int = 0) -> dict[str, Any]:
    return {"renews": lease_id, "owner": owner, "ttl_ms": ttl, "renewed_at_ms": wall}


def holder_of(records: list[ControlRecord], name: str = "rec") -> tuple[str, int] | None:
    holder = fold(records).live_lease(name)
    return None if holder is None else (holder.owner, holder.lease_id)


@pytest.mark.parametrize(("log_time", "live"), [(0, True), (999, True), (1000, False), (5000, False)])
def test_a_lease_is_live_until_its_expiry_in_log_time(log_time: int, live: bool) -> None:
    assert Lease("rec", 1, "r1", 1000).live(log_time) is live
    assert Lease("rec", 1, "r1", 1000, released=True).live(log_time) is False


def test_the_lease_id_is_the_claim_offset_plus_one_and_expiry_counts_from_the_broker_stamp() -> None:
    state = fold([at(5000, control.lease_key("rec"), claim("r1", wall=123), 7)])
    assert state.leases["rec"] == [Lease("rec", 8, "r1", 5000 + TTL, False, 7, TTL)]
    assert state.log_time_ms == 5000
    assert state.live_lease("rec") == state.leases["rec"][0]


def test_the_first_live_claim_in_log_order_holds_it() -> None:
    assert holder_of(log((0, "lease/rec", claim("r1")), (10, "lease/rec", claim("r2", ttl=10_000)))) == (
        "r1",
        1,
    )


def test_a_claim_stamped_after_the_expiry_takes_over() -> None:
    records = log((0, "lease/rec", claim("r1")), (1000, "lease/rec", claim("r2")))
    assert holder_of(records) == ("r2", 2)


def test_a_later_record_of_any_kind_moves_log_time_past_the_expiry() -> None:
    records = log((0, "lease/rec", claim("r1")), (999, "epoch/w", {}))
    assert holder_of(records) == ("r1", 1)
    records = log((0, "lease/rec", claim("r1")), (1000, "epoch/w", {}))
    assert holder_of(records) is None


def test_without_later_records_a_lease_does_not_expire_by_any_readers_clock() -> None:
    # nobody else wrote: whoever reads this, whenever, sees r1 hold (a claimant's own record moves time)
    assert holder_of(log((0, "lease/rec", claim("r1")))) == ("r1", 1)


def test_a_renewal_extends_in_place_and_keeps_priority() -> None:
    records = log(
        (0, "lease/rec", claim("r1")),
        (100, "lease/rec", claim("r2", ttl=5000)),
        (900, "lease/rec", renew(1, "r1")),
        (1500, "x", {}),
    )
    state = fold(records)
    assert [lease.lease_id for lease in state.leases["rec"]] == [1, 2]
    assert state.leases["rec"][0].expires_at_ms == 1900 and state.leases["rec"][0].basis_offset == 2
    assert holder_of(records) == ("r1", 1)
    assert holder_of([*records, at(1900, "x", {}, 4)]) == ("r2", 2)


def test_a_renewal_stamped_after_the_expiry_revives_nothing() -> None:
    records = log((0, "lease/rec", claim("r1")), (1200, "lease/rec", renew(1, "r1")))
    assert holder_of(records) is None
    assert fold(records).leases["rec"][0].expires_at_ms == TTL


def test_a_renewal_after_a_release_revives_nothing() -> None:
    records = log(
        (0, "lease/rec", claim("a")),
        (10, "lease/rec", claim("b")),
        (20, "lease/rec", {"release": 1}),
        (30, "lease/rec", renew(1, "a")),
    )
    assert holder_of(records) == ("b", 2)


def test_a_release_hands_the_lease_to_the_next_live_claim() -> None:
    records = log(
        (0, "lease/rec", claim("r1")), (5, "lease/rec", claim("r2")), (6, "lease/rec", {"release": 1})
    )
    state = fold(records)
    assert state.leases["rec"][0].released is True
    assert holder_of(records) == ("r2", 2)


def test_release_of_an_unknown_lease_or_a_tombstone_changes_nothing() -> None:
    records = log((0, "lease/rec", claim("r1")), (1, "lease/rec", {"release": 99}), (2, "lease/rec", None))
    assert fold(records).leases["rec"] == [Lease("rec", 1, "r1", TTL, False, 0, TTL)]


def test_leases_by_name_are_independent() -> None:
    records = log((0, "lease/a", claim("x")), (0, "lease/b", claim("y")), (0, "lease/a", {"release": 1}))
    assert holder_of(records, "a") is None
    assert holder_of(records, "b") == ("y", 2)
    assert holder_of(records, "unknown") is None


def test_writers_wall_clocks_do_not_decide() -> None:
    """Two claimants whose clocks are an hour apart: the broker's stamps alone decide, both ways."""
    hour = 3_600_000
    records = log((0, "lease/rec", claim("slow", wall=-hour)), (10, "lease/rec", claim("fast", wall=hour)))
    assert holder_of(records) == ("slow", 1)  # 'fast' thinks an hour passed; the log says 10 ms
    records = log((0, "lease/rec", claim("fast", wall=hour)), (10, "lease/rec", claim("slow", wall=-hour)))
    assert holder_of(records) == ("fast", 1)


def test_every_prefix_of_a_log_names_at_most_one_holder_and_holders_follow_log_order() -> None:
    """However claims, renewals, releases and timestamps interleave, at each point of the log the
    holder is one claim, and a holder that lost the lease never becomes the holder again."""
    import random

    for seed in range(300):
        rng = random.Random(seed)
        records: list[ControlRecord] = []
        now = 0
        ended: set[int] = set()
        previous: int | None = None
        for offset in range(40):
            now += rng.choice([0, 1, 200, 700, 1100])
            ids = [r.offset + 1 for r in records if r.key == "lease/rec" and "owner" in (r.value or {})]
            kind = rng.random()
            if kind < 0.4 or not ids:
                value: dict[str, Any] = claim(f"o{offset}")
            elif kind < 0.7:
                value = renew(rng.choice(ids), "o")
            elif kind < 0.85:
                value = {"release": rng.choice(ids)}
            else:
                records.append(at(now, "x", {}, offset))
                continue
            records.append(at(now, "lease/rec", value, offset))
            holder = fold(records).live_lease("rec")
            current = None if holder is None else holder.lease_id
            if previous is not None and current != previous:
                ended.add(previous)
            assert current not in ended, f"seed {seed}: lease {current} held again after it ended"
            previous = current


def test_records_without_a_timestamp_fall_back_to_the_writers_stamp() -> None:
    records = [
        ControlRecord("lease/rec", claim("r1", wall=100), 0),
        ControlRecord("lease/rec", claim("r2", wall=1200), 1),
    ]
    assert holder_of(records) == ("r2", 2)


def test_claims_written_before_ttl_ms_keep_their_duration() -> None:
    legacy = {"owner": "old", "expires_at_ms": 5_000, "claimed_at_ms": 4_000}  # a 1 s lease
    records = [at(50, "lease/rec", legacy, 0), at(1049, "x", {}, 1)]
    assert holder_of(records) == ("old", 1)
    assert holder_of([*records, at(1050, "x", {}, 2)]) is None


def test_decode_keeps_the_timestamp() -> None:
    record = control.decode(b"lease/rec", control.encode(claim("r")), 4, 777)
    assert record == ControlRecord("lease/rec", claim("r"), 4, 777)


# -- the lease as a fencing token of the reconciler's progress and gap records (issue 33, hole 2) -----


def progress(lease: int, run: int, position: int) -> dict[str, Any]:
    return {"positions": {"0": position}, "lease": lease, "run": run}


def test_a_progress_record_of_a_lease_that_lost_it_is_ignored() -> None:
    """Reconciler A (lease 1) stalls past its lease; B (lease 3) takes it over and records run 2; A's
    late progress of the same run, written after B held the lease, does not overwrite B's."""
    records = log(
        (0, "lease/reconciler", claim("A")),  # lease 1
        (1, "reconcile", progress(1, 1, 10)),
        (2000, "lease/reconciler", claim("B")),  # A expired at 1000 by the log's time: lease 3 holds it
        (2001, "reconcile", progress(3, 2, 50)),
        (2002, "reconcile", progress(1, 2, 40)),  # A wakes up: its write is fenced
        (2003, "log-gap/0", {"from": 0, "to": 5, "lease": 1}),  # A's gap too
    )
    state = fold(records)
    assert state.reconcile_positions == {0: 50} and state.reconcile_lease == 3
    assert state.gaps == {} and state.fenced_writes == 2
    assert state.lease_fences == {"reconciler": 3}


def test_a_late_write_is_fenced_even_when_the_new_holder_became_it_only_by_the_log_s_time() -> None:
    """B's claim came while A was still live (B stepped aside, then claimed again after A's expiry):
    whoever the log names the holder at A's late write fences it, with or without records between."""
    records = log(
        (0, "lease/reconciler", claim("A")),  # lease 1, expires at 1000
        (500, "lease/reconciler", claim("B", ttl=10_000)),  # lease 2: A still holds it
        (1500, "reconcile", progress(1, 1, 40)),  # A's late write: B (lease 2) is the holder now
    )
    state = fold(records)
    assert state.reconcile_progress is None and state.fenced_writes == 1


def test_a_write_within_its_lease_counts_and_so_does_one_after_it_expired_when_nobody_took_over() -> None:
    head = log((0, "lease/reconciler", claim("A")), (999, "reconcile", progress(1, 1, 7)))
    state = fold([*head, at(5000, "reconcile", progress(1, 1, 9), 2)])
    assert state.reconcile_positions == {0: 9} and state.fenced_writes == 0


def test_a_write_whose_claim_compaction_removed_still_counts() -> None:
    """Compaction keeps one record per key: a fold may see a progress record whose lease claim is gone
    (superseded by a later release). Nothing newer is known to have held the lease: it counts."""
    records = [
        at(10, "reconcile", progress(1, 4, 12), 3),
        at(20, "lease/reconciler", {"release": 1, "owner": "A"}, 5),
    ]
    assert fold(records).reconcile_positions == {0: 12}


def test_legacy_progress_without_a_lease_counts() -> None:
    assert fold([at(0, "reconcile", {"positions": {"1": 3}}, 0)]).reconcile_positions == {1: 3}


def test_the_fence_survives_a_checkpoint() -> None:
    from airflow_logstore.core.checkpoint import decode_state, encode_state

    head = log((0, "lease/reconciler", claim("A")), (2000, "lease/reconciler", claim("B")))
    state, through = decode_state(encode_state(fold(head), 1), control.ControlState)
    late = fold([at(2001, "reconcile", progress(1, 2, 40), through + 1)], state)
    assert late.reconcile_progress is None and late.fenced_writes == 1
