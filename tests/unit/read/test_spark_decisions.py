"""The Spark read job's decision table gives every offset the answer ``ReadFilter.decide`` gives it."""

from __future__ import annotations

import random

import pytest

from airflow_logstore.core.codec import RecordMeta, RecordType, decode_headers, encode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.visibility import ReadFilter
from airflow_logstore.exceptions import RecordDecodeError
from airflow_logstore.read.read_job import decision_rows
from tests.unit.read.test_bulk_decode import Message, random_chunk, random_filter, random_state


def _decision_table_matches_decide(messages: list[Message], read_filter: ReadFilter) -> None:
    groups = {}
    for m in messages:  # what the JVM's groupBy(header set, partition) computes
        key = (repr(m.h), m.p)
        low, high, _ = groups.get(key, (m.o, m.o, None))
        groups[key] = (min(low, m.o), max(high, m.o), m.h)
    rows = [
        {
            "_hkey": hkey,
            "partition": p,
            "low": low,
            "high": high,
            "headers": [
                {"key": k, "value": bytearray(v) if v is not None else None} for k, v in headers or []
            ],
        }
        for (hkey, p), (low, high, headers) in groups.items()
    ]

    def next_offset(hkey: str, partition: int, after: int) -> int | None:  # the job's Spark query
        later = [m.o for m in messages if repr(m.h) == hkey and m.p == partition and m.o > after]
        return min(later, default=None)

    table = list(decision_rows(rows, read_filter, next_offset))
    for m in messages:
        hits = [r for r in table if r[0] == repr(m.h) and r[1] == m.p and r[2] <= m.o <= r[3]]
        assert len(hits) == 1, (m.p, m.o)
        row = hits[0]
        try:
            meta = decode_headers(m.h)
        except RecordDecodeError as exc:
            assert row[6] == str(exc) and row[4] is False
            continue
        keep, decision = read_filter.decide(meta, m.p, m.o)
        assert (row[4], row[5]) == (keep, decision.value if decision else None), (m.p, m.o)
        assert (row[7], row[8], row[9]) == (meta.writer_id, meta.epoch, meta.batch_id)


@pytest.mark.parametrize("seed", range(40))
def test_decision_table_covers_each_offset_with_its_own_decision(seed: int) -> None:
    rng = random.Random(seed)
    messages = random_chunk(rng, 200)
    _decision_table_matches_decide(messages, random_filter(rng, random_state(rng, 80)))


def _half(lease: int, half: int, source: int) -> list[tuple[str, bytes | None]]:
    meta = RecordMeta(
        "logstore-reconciler",
        lease,
        1,
        record_type=RecordType.REASSERT,
        pair_half=half,
        reasserts=(0, source, 1),
    )
    return encode_headers(meta)


def test_an_eventual_hybrid_read_job_counts_a_closing_half_only_after_its_opening_half() -> None:
    """Simulation seed 359: a late copy of a closing half right after the positions (offset 3) is dropped,
    as ``ReadFilter.decide`` drops it. A lease's copies of one half share a header set, so one header
    set can straddle the opening half (lease 9's closing half at 4 and 7 around lease 29's opening half
    at 5): the job asks where it goes on after the opening half."""
    layout = [(3, _half(29, 2, 0)), (4, _half(9, 2, 1)), (5, _half(29, 1, 1)), (6, _half(29, 2, 1))]
    layout += [(7, _half(9, 2, 1)), (8, _half(9, 1, 2)), (9, _half(9, 2, 2)), (10, _half(29, 2, 2))]
    for dropped, kept in ((None, [5, 6, 8, 9]), (6, [5, 7, 8, 9])):
        messages = [Message(0, offset, b"{}", headers) for offset, headers in layout if offset != dropped]
        _decision_table_matches_decide(messages, ReadFilter(ControlState(), False, 1, {0: 3}))
        check = ReadFilter(ControlState(), consistent=False, snapshot_sequence=1, start={0: 3})
        answers = {m.o: check.decide(decode_headers(m.h), 0, m.o)[0] for m in messages}
        assert [offset for offset, keep in answers.items() if keep] == kept
