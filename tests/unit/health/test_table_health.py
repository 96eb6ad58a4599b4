"""The health view's data on fakes: a control topic, a log tail and a table's snapshots built by hand.

The control state is folded from control records exactly as the topic would hold them (epochs are
claim offsets + 1), and the log tail carries real LogStore headers, so the view decides with the same
rules as publishing and reading.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_logstore.compaction.policy import FileStats, SnapshotInfo
from airflow_logstore.core import control
from airflow_logstore.core import reconcile as core_reconcile
from airflow_logstore.core.codec import RecordMeta, encode_headers
from airflow_logstore.core.control import ControlRecord, ControlState
from airflow_logstore.core.properties import LogStoreConfig, parse_table_properties
from airflow_logstore.core.summary import OP_COMPACTION, CommitInfo
from airflow_logstore.exceptions import KafkaUnavailableError, TableNotFoundError
from airflow_logstore.health import catalog_health, table_health
from airflow_logstore.health.probe import HISTORY_SLICES, history_ranges
from airflow_logstore.health.view import TableFacts, TailRecord, tail_range

S = 1000  # ms
NOW = 10_000 * S
CONFIG = parse_table_properties(
    {"log-store.enabled": "true", "log-store.topic": "orders_log", "log-store.address": "127.0.0.1:9"}
)


class ControlLog:
    """Control records with offsets and broker timestamps, as the topic holds them."""

    def __init__(self) -> None:
        self.records: list[ControlRecord] = []

    def append(self, key: str, value: dict[str, Any] | None, at_ms: int) -> int:
        offset = len(self.records)
        self.records.append(ControlRecord(key, value, offset, at_ms))
        return offset

    def claim(self, writer: str, at_ms: int) -> int:
        """An epoch claim; returns the epoch (its offset + 1)."""
        return self.append(control.epoch_key(writer), {"writer": writer}, at_ms) + 1

    def commit(self, commit: CommitInfo, at_ms: int) -> None:
        self.append(control.ledger_key(commit), commit.to_json(), at_ms)

    def state(self) -> ControlState:
        return control.fold(self.records)


def tail_record(partition: int, offset: int, meta: RecordMeta, at_ms: int) -> TailRecord:
    return TailRecord(partition, offset, at_ms, encode_headers(meta))


def snapshot(
    sid: int, parent: int | None, at_ms: int, commit: CommitInfo | None = None, op: str | None = None
) -> SnapshotInfo:
    return SnapshotInfo(sid, parent, at_ms, True, op or ("dual-write" if commit else None), commit)


@dataclass
class FakeProbe:
    """A table's reads from fixed facts; records the order of the reads."""

    name: str
    facts_list: list[TableFacts]
    bounds: dict[int, tuple[int, int]] = field(default_factory=dict)
    state: ControlState = field(default_factory=ControlState)
    log: list[TailRecord] = field(default_factory=list)
    history: list[ControlRecord] = field(default_factory=list)
    stats: FileStats | None = None
    failures: dict[str, Exception] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.failures:
            raise self.failures[name]

    def facts(self) -> TableFacts:
        self._call("facts")
        return self.facts_list[min(self.calls.count("facts"), len(self.facts_list)) - 1]

    def file_stats(self, facts: TableFacts) -> FileStats | None:
        self._call("file_stats")
        return self.stats

    def log_bounds(self, config: LogStoreConfig) -> dict[int, tuple[int, int]]:
        self._call("log_bounds")
        return dict(self.bounds)

    def control_state(self, config: LogStoreConfig) -> ControlState:
        self._call("control_state")
        return self.state

    def tail(
        self, config: LogStoreConfig, start: Mapping[int, int], end: Mapping[int, int]
    ) -> list[TailRecord]:
        self._call("tail")
        self.tail_asked = (dict(start), dict(end))
        return [r for r in self.log if start.get(r.partition, 0) <= r.offset < end.get(r.partition, 0)]

    def control_history(
        self, config: LogStoreConfig, since_ms: int, limit: int
    ) -> tuple[list[ControlRecord], bool]:
        self._call("control_history")
        found = [r for r in self.history if (r.timestamp_ms or 0) >= since_ms]
        ranges = history_ranges(0, len(found), limit)  # as the live probe reads the window
        return [r for start, end in ranges for r in found[start:end]], len(ranges) > 1


def facts(snapshots: Sequence[SnapshotInfo], config: LogStoreConfig = CONFIG) -> TableFacts:
    current = snapshots[-1].snapshot_id if snapshots else None
    return TableFacts("ns.orders", "file:///warehouse/ns/orders", config, current, list(snapshots))


@dataclass
class Scenario:
    """Three partitions: p0 committed and published, then a dead attempt's copy of batch 2 reversed;
    p1 a batch in flight; p2 a dead attempt still pending (its writer claimed again, nothing committed)."""

    probe: FakeProbe
    epochs: dict[str, int]


def scenario() -> Scenario:
    ctl = ControlLog()
    w1 = ctl.claim("w", 100 * S)
    c1 = CommitInfo("w", 1, w1, 11, 1, 110 * S, {0: (0, 4)}, frozenset({"0.1"}))
    ctl.commit(c1, 111 * S)
    w2 = ctl.claim("w", 200 * S)  # dies after writing batch 2's records at 5..8
    w3 = ctl.claim("w", 300 * S)
    c2 = CommitInfo("w", 2, w3, 12, 2, 310 * S, {0: (9, 12)}, frozenset({"0.3"}))
    ctl.commit(c2, 311 * S)
    ctl.append(
        control.watermark_key("a"), {"offsets": {"0": 12}, "commits": [f"w/1/{w1}", f"w/2/{w3}"]}, 340 * S
    )
    stream = ctl.claim("stream", 400 * S)
    r1 = ctl.claim("retry", 500 * S)
    r2 = ctl.claim("retry", 600 * S)  # the retry's new attempt has not written batch 5 yet
    progress = core_reconcile.progress_value(
        positions={0: 17, 1: 0, 2: 0},
        safe_point={0: 17, 1: 3, 2: 2},
        output={0: (13, 16)},
        pending={"1": [["stream", stream, 7, "1.9", False, 0, 2]]},
        lease_id=99,
        run=4,
        owner="host:1",
        summary={"scanned": 20, "redundant": 4, "reversed": 4, "reasserted": 0, "dead_lettered": 1},
        now_ms=700 * S,
    )
    ctl.append(control.K_RECONCILE, progress, 700 * S)
    ctl.append(control.watermark_key("b"), {"offsets": {"0": 16}, "commits": []}, 710 * S)
    log = [
        *[tail_record(0, o, RecordMeta("w", w1, 1, "0.1"), 105 * S) for o in range(0, 5)],
        *[tail_record(0, o, RecordMeta("w", w2, 2, "0.2"), 205 * S) for o in range(5, 9)],
        *[tail_record(0, o, RecordMeta("w", w3, 2, "0.3"), 305 * S) for o in range(9, 13)],
        *[tail_record(1, o, RecordMeta("stream", stream, 7, "1.9"), 9_000 * S + o) for o in range(0, 3)],
        *[tail_record(2, o, RecordMeta("retry", r1, 5, "2.4"), 9_500 * S) for o in range(0, 2)],
    ]
    snapshots = [snapshot(11, None, 110 * S, c1), snapshot(12, 11, 310 * S, c2)]
    probe = FakeProbe(
        "ns.orders",
        [facts(snapshots)],
        bounds={0: (0, 17), 1: (0, 3), 2: (0, 2)},
        state=ctl.state(),
        log=log,
        history=list(ctl.records),
        stats=FileStats(data_files=2, small_data_files=2, data_records=9),
    )
    return Scenario(probe, {"w1": w1, "w2": w2, "w3": w3, "stream": stream, "r1": r1, "r2": r2})


def test_in_flight_and_dead_pending_batches_are_named_with_writer_batch_and_epoch() -> None:
    found = scenario()
    health = table_health(found.probe, now_ms=NOW)
    batches = health["batches"]
    assert [(a["writer_id"], a["batch_id"], a["epoch"], a["records"]) for a in batches["in_flight"]] == [
        ("stream", 7, found.epochs["stream"], 3)
    ]
    assert [(a["writer_id"], a["batch_id"], a["epoch"], a["records"]) for a in batches["dead_pending"]] == [
        ("retry", 5, found.epochs["r1"], 2)
    ]
    assert batches["in_flight"][0]["first_offsets"] == {"1": 0}
    assert batches["in_flight"][0]["first_seen_ms"] == 9_000 * S
    # the watermark passed p0's records: only p1 and p2 are read, from the first record not visible
    assert found.probe.tail_asked == ({0: 17, 1: 0, 2: 0}, {0: 17, 1: 3, 2: 2})
    assert batches["decisions"] == {"dead-pending": 2, "in-flight": 3}
    assert batches["truncated"] is False and health["errors"] == {}


def test_records_and_seconds_behind_the_watermark_per_partition() -> None:
    health = table_health(scenario().probe, now_ms=NOW)
    log = health["log"]
    rows = {p["partition"]: p for p in log["partitions"]}
    assert [(r["watermark"], r["log_end"], r["behind_records"]) for r in rows.values()] == [
        (16, 17, 0),
        (-1, 3, 3),
        (-1, 2, 2),
    ]
    assert rows[0]["behind_s"] == 0.0
    assert rows[1]["behind_s"] == 1000.0 and rows[1]["oldest_invisible_offset"] == 0
    assert rows[2]["behind_s"] == 500.0
    assert (log["behind_records"], log["behind_s"]) == (5, 1000.0)


def test_the_last_reconcile_report_and_the_attempts_it_keeps_pending() -> None:
    health = table_health(scenario().probe, now_ms=NOW)
    reconcile = health["reconcile"]
    run = reconcile["last_run"]
    assert (run["run"], run["owner"], run["reversed"], run["dead_lettered"], run["redundant"]) == (
        4,
        "host:1",
        4,
        1,
        4,
    )
    assert run["age_s"] == 9300.0
    assert [(p["partition"], p["writer_id"], p["batch_id"]) for p in reconcile["pending_attempts"]] == [
        (1, "stream", 7)
    ]
    assert reconcile["unscanned_records"] == 3 + 2  # p1 and p2 from position 0
    assert reconcile["lease"] is None


def test_a_commit_that_lands_between_the_reads_is_committed_not_in_flight() -> None:
    """The live snapshots are read again after the control state (as publishing reads them): a batch
    that reached ``main`` after the first metadata read, and whose ledger entry is not written yet, is
    committed. (Planted: taking the commits of the first read shows it in flight.)"""
    found = scenario()
    probe = found.probe
    late = CommitInfo("stream", 7, found.epochs["stream"], 13, 3, 9_100 * S, {1: (0, 2)}, frozenset({"1.9"}))
    first = probe.facts_list[0]
    probe.facts_list.append(facts([*first.snapshots, snapshot(13, 12, 9_100 * S, late)]))
    health = table_health(probe, now_ms=NOW)
    assert health["batches"]["in_flight"] == []
    assert health["batches"]["decisions"]["committed"] == 3
    assert probe.calls == [
        "facts",
        "file_stats",
        "log_bounds",
        "control_state",
        "facts",
        "tail",
        "control_history",
    ]


def test_retention_gaps_recorded_and_those_the_next_run_will_find() -> None:
    found = scenario()
    ctl = ControlLog()
    ctl.records = list(found.probe.history)
    gap = core_reconcile.Gap(0, 0, 3)
    ctl.append(control.gap_key(0), core_reconcile.gap_value(gap, run=4, lease_id=0, now_ms=800 * S), 800 * S)
    found.probe.state = ctl.state()
    found.probe.bounds = {0: (3, 17), 1: (2, 3), 2: (0, 2)}  # retention took p1's first two records
    health = table_health(found.probe, now_ms=NOW)
    retention = health["retention"]
    assert [(g["partition"], g["from"], g["to"], g["count"]) for g in retention["recorded"]] == [(0, 0, 3, 3)]
    assert [(g["partition"], g["from"], g["to"], g["count"]) for g in retention["upcoming"]] == [(1, 0, 2, 2)]
    assert retention["needs_hybrid_reread"] is True
    assert health["log"]["partitions"][1]["behind_records"] == 1  # only what retention kept


def test_compaction_state_small_files_delete_files_and_the_last_run() -> None:
    found = scenario()
    first = found.probe.facts_list[0]
    compacted = snapshot(20, 12, 900 * S, op=OP_COMPACTION)
    found.probe.facts_list = [facts([*first.snapshots, compacted])]
    found.probe.stats = FileStats(data_files=14, small_data_files=13, delete_files=1, data_records=100)
    compaction = table_health(found.probe, now_ms=NOW)["compaction"]
    assert (compaction["small_files"], compaction["delete_files"], compaction["due"]) == (13, 1, True)
    assert compaction["last_run"] == {"snapshot_id": 20, "timestamp_ms": 900 * S, "age_s": 9100.0}
    assert any("13 small data files" in reason for reason in compaction["reasons"])

    found.probe.facts_list = [first]
    found.probe.stats = FileStats(data_files=2, small_data_files=2, data_records=9)
    compaction = table_health(found.probe, now_ms=NOW)["compaction"]
    assert (compaction["due"], compaction["last_run"]) == (False, None)


def test_visibility_lag_from_the_watermark_moves_and_the_commits_times() -> None:
    found = scenario()
    health = table_health(found.probe, now_ms=NOW, hours=3)
    lag = health["lag"]
    # both commits were made visible by the move at 340 s: 230 s and 30 s after their snapshots
    names = [f"w/1/{found.epochs['w1']}", f"w/2/{found.epochs['w3']}"]
    assert [(p["commit"], p["lag_s"]) for p in lag["points"]] == [(names[0], 230.0), (names[1], 30.0)]
    assert (lag["moves"], lag["max_s"], lag["median_s"], lag["unknown_commit_times"]) == (2, 230.0, 130.0, 0)
    assert lag["from_ms"] == NOW - 3 * 3600 * S

    later = NOW + 2 * 3600 * S  # the window no longer holds the move at 340 s
    assert table_health(found.probe, now_ms=later, hours=2)["lag"]["points"] == []


def test_a_commit_whose_ledger_entry_retired_takes_its_time_from_the_snapshot() -> None:
    found = scenario()
    kept = [r for r in found.probe.history if not r.key.startswith(control.K_COMMIT)]
    kept.append(ControlRecord(control.commit_key("w", 1), None, 99, 900 * S))  # a tombstone is skipped
    found.probe.history = kept
    found.probe.state = control.fold(kept)  # the ledger entries are gone (retired)
    lag = table_health(found.probe, now_ms=NOW)["lag"]
    assert [p["lag_s"] for p in lag["points"]] == [230.0, 30.0]

    found.probe.facts_list = [facts([])]  # ... and with its snapshot expired, its time is unknown
    lag = table_health(found.probe, now_ms=NOW)["lag"]
    assert (lag["points"], lag["unknown_commit_times"]) == ([], 2)


def test_the_reads_are_bounded() -> None:
    start, end = tail_range({0: 9, 1: -1}, {0: (0, 50_000), 1: (100, 100)}, 2000)
    assert (start, end) == ({0: 10, 1: 100}, {0: 2010, 1: 100})
    found = scenario()
    health = table_health(found.probe, now_ms=NOW, tail_limit=2, history_limit=3)
    assert found.probe.tail_asked[1] == {0: 17, 1: 2, 2: 2}
    assert health["batches"]["truncated"] is True and health["batches"]["not_read"] == {"1": 1}
    assert health["batches"]["in_flight"][0]["records"] == 2
    assert health["cost"]["tail_records"] == 4 and health["cost"]["history_records"] == 3
    assert health["lag"]["truncated"] is True
    assert table_health(found.probe, now_ms=NOW, hours=1000)["lag"]["hours"] == 24.0


def test_a_failing_log_read_leaves_the_metadata_and_names_the_error() -> None:
    found = scenario()
    found.probe.failures["log_bounds"] = KafkaUnavailableError("the broker did not answer")
    health = table_health(found.probe, now_ms=NOW)
    assert health["errors"] == {"log": "KafkaUnavailableError: the broker did not answer"}
    assert health["snapshot"]["current"]["snapshot_id"] == 12
    assert health["snapshot"]["current"]["age_s"] == 9690.0
    assert health["snapshot"]["last_commit"]["commit"] == f"w/2/{found.epochs['w3']}"
    assert health["compaction"]["small_files"] == 2
    assert "log" not in health and "batches" not in health


def test_a_part_that_keeps_failing_is_logged_with_its_trace_once(caplog: pytest.LogCaptureFixture) -> None:
    """The page asks every minute: a broker that stays down is one warning with its stack trace, then
    debug lines; another error of the same part is a warning again."""
    found = scenario()
    found.probe.failures["log_bounds"] = KafkaUnavailableError("the broker did not answer (logged once)")
    with caplog.at_level("DEBUG", logger="airflow_logstore.health.gather"):
        for _ in range(3):
            assert table_health(found.probe, now_ms=NOW)["errors"]["log"].startswith("KafkaUnavailableError")
        found.probe.failures["log_bounds"] = KafkaUnavailableError("another error (logged once)")
        table_health(found.probe, now_ms=NOW)
        del found.probe.failures["log_bounds"]
        assert "log" not in table_health(found.probe, now_ms=NOW)["errors"]  # the broker is back
        found.probe.failures["log_bounds"] = KafkaUnavailableError("another error (logged once)")
        table_health(found.probe, now_ms=NOW)  # and down again, days later: logged in full again
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert [str(r.args[2]) for r in warnings] == [
        "the broker did not answer (logged once)",
        "another error (logged once)",
        "another error (logged once)",
    ]
    assert all(r.exc_info for r in warnings)
    assert sum(r.levelname == "DEBUG" and "again" in r.getMessage() for r in caplog.records) == 2


def test_one_table_that_fails_to_load_does_not_hide_the_others() -> None:
    broken = FakeProbe(
        "ns.gone", [], failures={"facts": TableNotFoundError("table 'ns.gone' does not exist")}
    )
    page = catalog_health([broken, scenario().probe], now_ms=NOW)
    assert page["generated_at_ms"] == NOW
    assert [t["table"] for t in page["tables"]] == ["ns.gone", "ns.orders"]
    assert page["tables"][0]["errors"] == {"table": "TableNotFoundError: table 'ns.gone' does not exist"}
    assert page["tables"][1]["errors"] == {} and page["tables"][1]["generated_at_ms"] == NOW


def test_tables_are_read_side_by_side_and_listed_in_their_order() -> None:
    """A slow table (a broker that does not answer) holds the page up once, not once per table."""
    import threading

    together = threading.Barrier(3, timeout=10)  # all three reads must be in flight at once

    class Waiting(FakeProbe):
        def log_bounds(self, config: LogStoreConfig) -> dict[int, tuple[int, int]]:
            together.wait()
            return super().log_bounds(config)

    probes = []
    for n in range(3):
        probe = scenario().probe
        probes.append(
            Waiting(f"ns.t{n}", probe.facts_list, probe.bounds, probe.state, probe.log, probe.history)
        )
    page = catalog_health(probes, now_ms=NOW, workers=3)
    assert [t["table"] for t in page["tables"]] == ["ns.t0", "ns.t1", "ns.t2"]
    assert all(t["errors"] == {} for t in page["tables"])


def test_a_table_without_a_log_shows_its_snapshots_only() -> None:
    plain = parse_table_properties({})
    probe = FakeProbe("ns.plain", [facts([snapshot(1, None, 5 * S)], plain)])
    health = table_health(probe, now_ms=NOW)
    assert health["log_enabled"] is False and probe.calls == ["facts", "file_stats"]
    assert health["snapshot"]["current"]["logstore_operation"] is None
    assert health["snapshot"]["last_commit"] is None


@pytest.mark.parametrize("hours", [0.5, 6.0])
def test_the_json_is_plain(hours: float) -> None:
    import json

    health = table_health(scenario().probe, now_ms=NOW, hours=hours)
    assert json.loads(json.dumps(health)) == health


@pytest.mark.parametrize(
    ("first", "end", "limit"),
    [(0, 43_200, 5000), (100, 5101, 5000), (7, 1_000_007, 5000), (0, 10, 3), (0, 100, 1), (5, 30, 12)],
)
def test_a_long_window_is_read_in_evenly_spaced_slices_that_span_it(first: int, end: int, limit: int) -> None:
    """A lag chart's window with more control records than a page load reads (a writer publishing every
    second writes about 43,000 in 6 hours): slices from its start to its end, never more than the limit,
    never overlapping, so that the chart spans the window instead of showing its newest part."""
    ranges = history_ranges(first, end, limit)
    assert ranges[-1][1] == end  # the newest records are read
    assert len(ranges) == 1 or ranges[0][0] < first + (end - first) // 10  # ... and the oldest part too
    assert all(first <= a < b <= end for a, b in ranges)
    assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(ranges))  # ascending, apart
    assert sum(b - a for a, b in ranges) <= limit and len(ranges) == min(HISTORY_SLICES, limit)
    sizes = {b - a for a, b in ranges}
    assert len(sizes) == 1 and sizes.pop() == max(1, limit // min(HISTORY_SLICES, limit))


def test_a_window_within_the_limit_is_read_whole() -> None:
    assert history_ranges(10, 5010, 5000) == [(10, 5010)]
    assert history_ranges(10, 10, 5000) == []
