"""Lease claims in the control topic (the reconciler's), as the control state holds them.

Apart from :mod:`airflow_logstore.core.control` so that checkpoints (:mod:`.checkpoint`), which
control imports, can decode them without importing control back.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The reconciler's lease: its id is the fencing token of every progress and gap record a run writes.
RECONCILER_LEASE = "reconciler"


@dataclass(frozen=True)
class Lease:
    """A lease claim, judged by the log's own time, never by a reader's clock.

    The holder is the first claim in log order that is not released and not expired. A claim or
    renewal lasts ``ttl_ms`` from its record's Kafka timestamp (the broker's clock: the control topic
    uses ``LogAppendTime``), and it has expired once a later record of the control topic carries a
    timestamp at or beyond that. Every reader of the same log prefix therefore names the same holder,
    whatever the clocks of the hosts that read or wrote it; a renewal that arrives after expiry
    revives nothing. A holder stops acting ``ttl_ms`` minus a skew margin after it *sent* the record
    its expiry comes from, measured with its own monotonic clock (see ``ReconcilerLease``).

    Remaining assumption: the clocks of the brokers that lead the control partition over the
    lease's life agree within that margin (one broker: exact) and do not jump. On a topic still
    stamped with ``CreateTime`` the timestamps are the writers' clocks, and the margin must bound
    the skew between the writers' hosts instead.

    :param expires_at_ms: in log time: the basis record's timestamp + ``ttl_ms``
    :param basis_offset: offset of the claim or renewal that set ``expires_at_ms``
    """

    name: str
    lease_id: int
    owner: str
    expires_at_ms: int
    released: bool = False
    basis_offset: int = -1
    ttl_ms: int = 0

    def live(self, log_time_ms: int) -> bool:
        return not self.released and self.expires_at_ms > log_time_ms
