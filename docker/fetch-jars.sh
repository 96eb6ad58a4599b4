#!/bin/sh
# Download the jars Spark needs for LogStore tables (Iceberg runtime + AWS bundle, Kafka source) into $1.
# The list comes from airflow_logstore/versions.py, the one place versions are pinned.
set -eu
target=$1
mkdir -p "$target"
python3 /opt/airflow-logstore/airflow_logstore/versions.py | while read -r url; do
  curl -fsSL --retry 3 -o "$target/$(basename "$url")" "$url"
done
