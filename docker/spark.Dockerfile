# Spark master/worker image: the Iceberg / Kafka jars, and what LogStore's executors import. That list is
# airflow_logstore/spark/executors.py (pinned by constraints.txt); LogStore's own code is not installed
# here: every job brings the installed package as --py-files (see the same module).
#
# Executors run /opt/logstore-executors/bin/python, a Python 3.11 environment: PySpark refuses to run when
# the executors' Python has another minor version than the driver's, which is the Airflow image's (3.11,
# client deploy mode); the base image's python3 is Ubuntu jammy's 3.10. uv downloads a managed CPython
# 3.11 for it, as tests/environments.py builds the `executors` environment the cluster tests run on: the
# same list, the same constraints, pyspark from Spark itself (SPARK_HOME/python). Airflow's tasks name
# this interpreter with every job (PYSPARK_PYTHON, from logstore_dev/services/topology.py); PATH makes
# it the workers' python3 too, for a driver that names none.
FROM apache/spark:4.1.1-scala2.13-java17-python3-ubuntu
USER root
RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
COPY airflow_logstore /opt/airflow-logstore/airflow_logstore
COPY constraints.txt /opt/airflow-logstore/constraints.txt
COPY docker/fetch-jars.sh /opt/airflow-logstore/docker/fetch-jars.sh
RUN /opt/airflow-logstore/docker/fetch-jars.sh /opt/spark/jars
# outside /root, so that the spark user can run the interpreter the environment links to
ENV UV_PYTHON_INSTALL_DIR=/opt/uv-python
RUN cd /opt/airflow-logstore \
 && pip install --no-cache-dir -c constraints.txt uv \
 && uv venv --no-cache --managed-python --python 3.11 /opt/logstore-executors \
 && uv pip install --no-cache --compile-bytecode --python /opt/logstore-executors/bin/python -c constraints.txt \
      $(/opt/logstore-executors/bin/python -m airflow_logstore.spark.executors)
ENV PYSPARK_PYTHON=/opt/logstore-executors/bin/python PATH=/opt/logstore-executors/bin:$PATH
USER spark
