# Spark master/worker image: the Iceberg / Kafka jars, and what LogStore's executors import. That list is
# airflow_logstore/spark/executors.py (pinned by constraints.txt); LogStore's own code is not installed
# here: every job brings the installed package as --py-files (see the same module).
FROM apache/spark:4.1.1-scala2.13-java17-python3-ubuntu
USER root
RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
COPY airflow_logstore /opt/airflow-logstore/airflow_logstore
COPY constraints.txt /opt/airflow-logstore/constraints.txt
COPY docker/fetch-jars.sh /opt/airflow-logstore/docker/fetch-jars.sh
RUN /opt/airflow-logstore/docker/fetch-jars.sh /opt/spark/jars
RUN cd /opt/airflow-logstore \
 && pip install --no-cache-dir -c constraints.txt $(python3 -m airflow_logstore.spark.executors)
USER spark
