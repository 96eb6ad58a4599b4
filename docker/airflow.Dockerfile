# Airflow 3 image with the airflow-logstore provider, a JDK (the driver compiles the log producer with javac) and Spark's client (spark-submit in client mode).
FROM apache/airflow:3.3.2-python3.11
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jdk-headless curl \
 && rm -rf /var/lib/apt/lists/*
COPY airflow_logstore /opt/airflow-logstore/airflow_logstore
COPY pyproject.toml README.md /opt/airflow-logstore/
COPY docker/fetch-jars.sh /opt/airflow-logstore/docker/fetch-jars.sh
RUN /opt/airflow-logstore/docker/fetch-jars.sh /opt/logstore/jars && chown -R airflow /opt/airflow-logstore
USER airflow
# as users add a provider: the image's Airflow stays what it is (AIRFLOW_VERSION is set by the base image)
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" /opt/airflow-logstore
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
