"""The Kafka side: clients and topics, the control topic, control-state checkpoints, dead letters.

- ``kafka_client``: one librdkafka configuration for every client; topic admin, producers, consumers,
  the log scan and the control topic (writer epochs, ledger entries, the visibility watermark).
- ``control_topic``: a table's control topic (writer epochs, ledger entries, the visibility watermark,
  leases) and the checkpoints of its folded state, kept beside it.
- ``deadletter``: where records that cannot be decoded go (``<log topic>.logstore-dlq``).

Nothing here knows Iceberg, Spark or Airflow.
"""
