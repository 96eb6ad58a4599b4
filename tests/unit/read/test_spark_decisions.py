"""The Spark read job's decision table gives every offset the answer ``ReadFilter.decide`` gives it."""

from __future__ import annotations

import random

import pytest

from airflow_logstore.core.codec import decode_headers
from airflow_logstore.exceptions import RecordDecodeError
from airflow_logstore.read.read_job import decision_rows
from tests.unit.read.test_bulk_decode import random_chunk, random_filter, random_state


@pytest.mark.parametrize("seed", range(40))
def test_decision_table_covers_each_offset_with_its_own_decision(seed: int) -> None:
    rng = random.Random(seed)
    messages = random_chunk(rng, 200)
    read_filter = random_filter(rng, random_state(rng, 80))
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
    table = list(decision_rows(rows, read_filter))
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
        assert (row[4], row[5]) == (keep, decision.value if decision else None)
        assert (row[7], row[8], row[9]) == (meta.writer_id, meta.epoch, meta.batch_id)
