# Spark master/worker image with airflow-logstore's job code and the Iceberg / Kafka jars.
FROM apache/spark:4.1.1-scala2.13-java17-python3-ubuntu
USER root
RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
COPY airflow_logstore /opt/airflow-logstore/airflow_logstore
COPY pyproject.toml README.md /opt/airflow-logstore/
COPY docker/fetch-jars.sh /opt/airflow-logstore/docker/fetch-jars.sh
RUN /opt/airflow-logstore/docker/fetch-jars.sh /opt/spark/jars
# Executors need the LogStore core (codec, producer) but not Airflow.
RUN pip install --no-cache-dir "pyiceberg[pyarrow]==0.12.0" "confluent-kafka==2.16.1" "pendulum>=3" \
 && pip install --no-cache-dir --no-deps /opt/airflow-logstore
USER spark
